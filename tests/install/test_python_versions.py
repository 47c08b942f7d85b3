"""The client and worker tests pass on every Python pgjobq supports (3.10 to 3.13), if the machine has it.

The suite itself runs on the Python of the project's virtualenv (make venv).  This test runs the
worker tests and the core of the client tests (ON_EVERY_PYTHON) once more (on the machine's own
PostgreSQL, without the harnesses of their own servers) under each other supported Python, each in a
virtualenv of its own (.venv-py3.10, ..., made on first use and refreshed when python/pyproject.toml
or tools/pyproject.toml changes), and fails with their output if they fail.  An interpreter the
machine lacks (not on PATH as python3.X, nor under pyenv) is skipped with a message saying so (a
failure where PGJOBQ_REQUIRE names pythons); the suite's own is skipped as already tested.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import required
from helpers.fixtures import REPO_ROOT
from helpers.pythons import SUPPORTED, interpreter

# What runs again on each: the workers whole (threads, signals, asyncio: what differs between Pythons),
# the workers' parts, and of the client the calls (sync and async, their surfaces), the CLI's core and the
# extension check, so that every module of the package is imported and run there.  The rest of
# tests/client (the bad-input table, the job- and flow-control commands) runs the same _proto code with
# other arguments; it runs on the suite's own Python only.
ON_EVERY_PYTHON = (
    "tests/unit",
    "tests/worker",
    "tests/client/test_client.py",
    "tests/client/test_aio.py",
    "tests/client/test_surface.py",
    "tests/client/test_client_adapters.py",
    "tests/cli/test_cli.py",
    "tests/cli/test_cli_watch.py",
    "tests/client/test_extension_version.py",
)
NOT_AGAIN = (
    "tests/worker/test_router_servers.py",
)  # once per make test is enough: servers of its own, whose Python side the others cover (as tests/chaos)
# every supported Python but the suite's own, which runs the whole suite
OTHER_PYTHONS = tuple(
    version for version in SUPPORTED if version != f"{sys.version_info[0]}.{sys.version_info[1]}"
)
INSTALL_TIMEOUT = 600.0
RUN_TIMEOUT = 900.0  # those tests on 2 workers: about 2 minutes alone, more on a busy machine


def virtualenv(version: str, python: Path) -> Path:
    """.venv-pyX.Y with the package (editable), its test dependency group, and the development tools
    (tools/, editable), made or refreshed as needed; its python.

    The group (PEP 735) needs pip >= 25.1, newer than the pip that `python -m venv` puts in on 3.10 to
    3.12, so pip is upgraded first, as make venv does."""
    venv = REPO_ROOT / f".venv-py{version}"
    stamp = venv / ".installed"
    pyproject = REPO_ROOT / "python" / "pyproject.toml"
    projects = (pyproject, REPO_ROOT / "tools" / "pyproject.toml")
    if not stamp.exists() or any(stamp.stat().st_mtime < project.stat().st_mtime for project in projects):
        subprocess.run([str(python), "-m", "venv", "--clear", str(venv)], check=True, timeout=INSTALL_TIMEOUT)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        for arguments in (
            ["--upgrade", "pip>=25.1"],
            ["-e", str(REPO_ROOT / "python"), "--group", f"{pyproject}:test", "-e", str(REPO_ROOT / "tools")],
        ):
            result = subprocess.run(
                [*pip, *arguments], timeout=INSTALL_TIMEOUT, capture_output=True, text=True, check=False
            )
            assert result.returncode == 0, (
                f"pip install {' '.join(arguments)} on Python {version}:\n{result.stdout[-3000:]}"
                f"{result.stderr[-3000:]}"
            )
        stamp.touch()
    return venv / "bin" / "python"


@pytest.mark.slow
@pytest.mark.parametrize("version", OTHER_PYTHONS)
@pytest.mark.timeout(INSTALL_TIMEOUT + RUN_TIMEOUT)  # the run below is longer than a test's usual 300 s
def test_the_client_and_worker_tests_pass_on(version: str) -> None:
    python = interpreter(version)
    if python is None:
        required.skip_or_fail(
            "pythons", f"Python {version} is not on this machine (python{version} on PATH, or under pyenv)"
        )
    venv_python = virtualenv(version, python)

    tests = [*ON_EVERY_PYTHON, *(f"--ignore={path}" for path in NOT_AGAIN)]
    parallel = ["-n", "2", "--dist", "loadgroup"]  # as make test runs them, on fewer workers
    result = subprocess.run(
        [str(venv_python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *parallel, *tests],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )

    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, (
        f"on Python {version}: {summary}\n{result.stdout[-6000:]}{result.stderr[-3000:]}"
    )
    assert " passed" in summary and "skipped" not in summary, summary
