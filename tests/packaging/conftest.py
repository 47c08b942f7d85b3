"""Fixtures of the packaging tests: pgjobq-py's sdist and wheel, built once per pytest-xdist worker; the
scripts of tools/ importable (tools/pypi_readme.py).

The tests that use the distributions are in the xdist group "pgjobq-py", so that one worker builds them
once.  No ``__init__.py`` in this folder: a package named ``packaging`` in tests/ would hide the library of
that name.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from helpers.distributions import Distributions, build_distributions
from helpers.fixtures import REPO_ROOT

__all__: list[str] = []

# tools/: pypi_readme.py is a script of the Makefile, not one of the modules the venv installs from there
sys.path.insert(0, str(REPO_ROOT / "tools"))


@pytest.fixture(scope="session")
def distributions() -> Iterator[Distributions]:
    """pgjobq-py's sdist and wheel, built from a tree where `make build` ran (helpers.distributions)."""
    with build_distributions() as built:
        yield built
