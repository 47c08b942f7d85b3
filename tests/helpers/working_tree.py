"""The working tree's extension, in every PostgreSQL server the tests start.

A test runs the SQL of sql/src as it is now, never a script that ``make install`` put into the machine's
PostgreSQL earlier.  ``extension_files`` writes what ``make install`` would install (the control file,
the current version's script built from sql/src by the package's one builder, the released scripts of
sql/updates) into a folder.  ``servers_run_the_working_tree`` makes a private copy of the machine's
PostgreSQL with those files in place of its own pgjobq files (pg_versions.installed_copy) and points
PGJOBQ_PG_BINDIR at it while it lasts: throwaway_pg.find_bindir, and so every ThrowawayPostgres started
meanwhile, in this process or in one it starts (pytest-xdist workers, the nested Python-version runs,
worker processes), serves the working tree's extension.  The fixtures enter it for the whole pytest
session (fixtures.pytest_configure), the chaos harnesses for their run; the other majors get the same
files in their own copies (fixtures.pg_server).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pg_versions
from throwaway_pg import find_bindir

from pgjobq._install import build

__all__ = [
    "BINDIR",
    "COPY",
    "REPO_ROOT",
    "current_version",
    "extension_files",
    "servers_run_the_working_tree",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
BINDIR = "PGJOBQ_PG_BINDIR"  # throwaway_pg.find_bindir's choice of server
COPY = "PGJOBQ_TEST_SERVER_COPY"  # the copy's bin folder, set by the process that made it


def current_version() -> str:
    """The version the working tree installs: default_version in pgjobq.control."""
    control = (REPO_ROOT / "pgjobq.control").read_text(encoding="utf-8")
    found = re.search(r"^default_version = '([^']*)'$", control, re.MULTILINE)
    if found is None:
        raise ValueError(f"{REPO_ROOT / 'pgjobq.control'} has no default_version line")
    return found.group(1)


def extension_files(folder: Path) -> list[Path]:
    """The extension's files as ``make install`` installs them, the current script built now from sql/src
    into folder: the control file, that script, the released scripts and steps."""
    version = current_version()
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / build.script_name(version)
    script.write_text(build.script(version, build.read_sources(REPO_ROOT / "sql" / "src")), encoding="utf-8")
    released = sorted((REPO_ROOT / "sql" / "updates").glob("pgjobq--*.sql"))
    return [REPO_ROOT / "pgjobq.control", script, *released]


@contextlib.contextmanager
def servers_run_the_working_tree() -> Iterator[Path]:
    """A copy of the machine's PostgreSQL with the working tree's extension, named by PGJOBQ_PG_BINDIR
    until the block ends (then removed); its bin folder.

    In a process started inside such a block (the copy named by both variables) the copy is used as it
    is.  Raises RuntimeError where no PostgreSQL server is installed (throwaway_pg.find_bindir), and
    pg_versions.Unavailable where it has no pg_config.
    """
    inherited = os.environ.get(COPY)
    if inherited and inherited == os.environ.get(BINDIR) and Path(inherited).is_dir():
        yield Path(inherited)
        return
    source = find_bindir()
    folder = Path(tempfile.mkdtemp(prefix="pgjobq-server-"))
    saved = {name: os.environ.get(name) for name in (BINDIR, COPY)}
    try:
        folder.chmod(0o755)  # the server's account (throwaway_pg.server_user) reads it
        files = extension_files(folder / "extension")
        bindir = pg_versions.installed_copy(folder / "programs", files, bindir=source)
        os.environ[BINDIR] = os.environ[COPY] = str(bindir)
        yield bindir
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(folder, ignore_errors=True)
