"""Fixtures of the packaging tests: pgjobq-py's sdist and wheel, built once per pytest-xdist worker.

The tests that use them are in the xdist group "pgjobq-py", so that one worker builds them once.  No
``__init__.py`` in this folder: a package named ``packaging`` in tests/ would hide the library of that name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from helpers.distributions import Distributions, build_distributions

__all__: list[str] = []


@pytest.fixture(scope="session")
def distributions() -> Iterator[Distributions]:
    """pgjobq-py's sdist and wheel, built from a tree where `make build` ran (helpers.distributions)."""
    with build_distributions() as built:
        yield built
