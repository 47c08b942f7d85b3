"""pgjobq-py's distributions built as a release would build them (tests/packaging).

``build_distributions`` builds the sdist and the wheel with ``python -m build`` (the wheel from the
sdist, in an isolated environment, as the package index's users get them) from a copy of the repository's
files that the package uses, in the state a developer's tree is in after ``make build`` and an editable
install: the current version's built script in sql/ (which pgjobq/sql links to) and an egg-info whose
SOURCES.txt names it.  tests/packaging/conftest.py makes it a session fixture.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.fixtures import REPO_ROOT
from helpers.working_tree import current_version

__all__ = ["BUILD_TIMEOUT", "Distributions", "build_distributions", "built_script_name", "run"]

BUILD_TIMEOUT = 600.0  # an isolated build fetches setuptools when pip's cache lacks it
BUILDER = Path("python") / "pgjobq" / "_install" / "build.py"


@dataclass(frozen=True)
class Distributions:
    """The built sdist and wheel of pgjobq-py, and the copy of the tree they were built from."""

    sdist: Path
    wheel: Path
    tree: Path


def built_script_name() -> str:
    """The name of the script `make build` leaves in sql/ (pgjobq--X.Y.Z.sql)."""
    return f"pgjobq--{current_version()}.sql"


def run(argv: list[str], *, cwd: Path, what: str, timeout: float = BUILD_TIMEOUT) -> str:
    """Run argv; its output, or a failure saying what did not work, with the output."""
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        pytest.fail(
            f"{what} failed (exit status {result.returncode}): {' '.join(argv)}\n"
            f"{result.stdout[-4000:]}{result.stderr[-4000:]}",
            pytrace=False,
        )
    return result.stdout


def _copy_tree(tree: Path) -> None:
    """What building pgjobq-py reads, copied to tree, with `make build`'s script and a stale egg-info."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "dist", "*.egg-info")
    shutil.copy2(REPO_ROOT / "LICENSE", tree / "LICENSE")
    shutil.copytree(REPO_ROOT / "python", tree / "python", symlinks=True, ignore=ignore)
    (tree / "sql").mkdir()
    for folder in ("src", "updates"):
        shutil.copytree(REPO_ROOT / "sql" / folder, tree / "sql" / folder)
    script = tree / "sql" / built_script_name()
    run(
        [sys.executable, str(BUILDER), "--version", current_version(), "--output", str(script), "sql/src"],
        cwd=tree,
        what="building the current version's script as `make build` does",
    )
    # what an editable install run after `make build` leaves: setuptools reads it back into the sdist
    egg_info = tree / "python" / "pgjobq_py.egg-info"
    egg_info.mkdir()
    (egg_info / "SOURCES.txt").write_text(f"pyproject.toml\npgjobq/sql/{script.name}\n", encoding="utf-8")


@contextmanager
def build_distributions() -> Iterator[Distributions]:
    """pgjobq-py's sdist and wheel, built from a tree where `make build` ran; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="pgjobq-dist-") as folder:
        tree = Path(folder) / "tree"
        tree.mkdir()
        _copy_tree(tree)
        out = Path(folder) / "dist"
        run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(tree / "python")],
            cwd=tree,
            what="python -m build",
        )
        (sdist,) = out.glob("*.tar.gz")
        (wheel,) = out.glob("*.whl")
        yield Distributions(sdist=sdist, wheel=wheel, tree=tree)
