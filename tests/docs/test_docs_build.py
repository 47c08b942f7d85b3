"""The documentation site builds with Sphinx, warnings as errors (what ``make docs`` runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.fixtures import REPO_ROOT

SPHINX_BUILD = Path(sys.executable).parent / "sphinx-build"


@pytest.mark.xdist_group("docs-build")
def test_the_docs_build_without_warnings(tmp_path: Path) -> None:
    # -n: every cross-reference must resolve; the SQL reference pages start a throwaway server of their own
    argv = [str(SPHINX_BUILD), "-W", "--keep-going", "-n", "-q", "-b", "html", "docs", str(tmp_path / "html")]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        command = " ".join(argv[:-1])
        output = done.stderr + done.stdout
        pytest.fail(f"{command} <tmp> failed (exit status {done.returncode}):\n{output}", pytrace=False)
