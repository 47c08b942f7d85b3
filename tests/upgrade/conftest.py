"""The rolling-upgrade tests' fixtures: the previous release of pgjobq-py, and a venv with it installed."""

from __future__ import annotations

import subprocess

import pytest
from upgrade.releases import (
    PreviousRelease,
    PreviousReleaseMissing,
    ReleaseVenv,
    previous_release,
    release_venv,
)


@pytest.fixture(scope="session")
def previous() -> PreviousRelease:
    """The previous release, found in git history (upgrade/releases.py).

    Where it cannot be found (a shallow clone, no git), the tests that need it fail, saying why: they are
    part of every run, and a run that could not test an upgrade from the previous release must not pass.
    """
    try:
        return previous_release()
    except PreviousReleaseMissing as exc:
        pytest.fail(f"the previous release of pgjobq-py is needed for the upgrade tests: {exc}")


@pytest.fixture(scope="session")
def previous_venv(previous: PreviousRelease) -> ReleaseVenv:
    """A venv with the previous release installed (built once, cached); fails as previous does where it
    cannot be built (no network for pip, say)."""
    try:
        venv = release_venv(previous)
    except PreviousReleaseMissing as exc:
        pytest.fail(f"the previous release of pgjobq-py could not be installed: {exc}")
    said = subprocess.run([str(venv.pgjobq), "--version"], capture_output=True, text=True, check=False)
    assert said.stdout.split() == ["pgjobq,", "version", previous.version], (
        f"{venv.pgjobq} --version: {said.stdout}{said.stderr}"
    )
    return venv
