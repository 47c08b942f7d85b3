"""The one builder of the install script (python/pgjobq/_install/build.py), as make build runs it: with the
system's python3, before any virtualenv exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pgjobq._install import build

from helpers.working_tree import REPO_ROOT

BUILDER = REPO_ROOT / "python" / "pgjobq" / "_install" / "build.py"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")


def run_builder(*args: str) -> subprocess.CompletedProcess[str]:
    if SYSTEM_PYTHON is None:
        pytest.fail("no python3 on /usr/local/bin:/usr/bin:/bin, which make build runs the builder with")
    return subprocess.run(
        [SYSTEM_PYTHON, str(BUILDER), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_system_python_builds_the_script_the_package_builds(tmp_path: Path) -> None:
    output = tmp_path / "pgjobq--9.8.7.sql"

    result = run_builder("--version", "9.8.7", "--output", str(output), str(REPO_ROOT / "sql" / "src"))

    assert result.returncode == 0, result.stderr
    assert output.read_text() == build.script("9.8.7", build.read_sources(REPO_ROOT / "sql" / "src"))


def test_a_version_that_is_not_three_numbers_is_refused_by_name(tmp_path: Path) -> None:
    result = run_builder(
        "--version", "0.9", "--output", str(tmp_path / "out.sql"), str(REPO_ROOT / "sql" / "src")
    )

    assert (result.returncode, result.stderr) == (
        1,
        "build.py: version must be three numbers such as 0.9.0, got '0.9'\n",
    )
    assert not (tmp_path / "out.sql").exists()


def test_a_folder_without_sources_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()

    result = run_builder("--version", "0.9.0", "--output", str(tmp_path / "out.sql"), str(tmp_path / "src"))

    assert (result.returncode, result.stderr) == (1, f"build.py: no .sql files in {tmp_path / 'src'}\n")
    assert not (tmp_path / "out.sql").exists()
