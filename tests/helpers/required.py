"""Groups of tests that a machine may be unable to run, and whether this run may do without them.

A group's tests skip, saying what is missing, where the machine cannot run them (a developer's laptop
without the other PostgreSQL majors, say).  ``PGJOBQ_REQUIRE`` (or ``pytest --require``) names the
groups this run must not skip, comma-separated, or ``all``: ``.ci/run`` sets ``all``, so that a green CI
run means every claimed layer ran, and a group that cannot run there fails instead of skipping.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["ENVIRONMENT", "GROUPS", "parse", "required", "skip_or_fail"]

ENVIRONMENT = "PGJOBQ_REQUIRE"

GROUPS = {
    "majors": "PostgreSQL 13 to 18 besides the machine's own (tools/pg_versions.py fetches them)",
    "browser": "the dashboard in headless Chromium (Debian's /usr/bin/chromium)",
    "netns": "the network chaos run (root, network namespaces, iproute2, nftables, /dev/net/tun)",
    "pythons": "the client and worker tests again on every other supported Python, 3.10 to 3.13",
}


def parse(value: str) -> frozenset[str]:
    """The groups a PGJOBQ_REQUIRE value names; raises ValueError naming an unknown one."""
    names = {name.strip() for name in value.split(",") if name.strip()}
    if "all" in names:
        return frozenset(GROUPS)
    unknown = sorted(names - set(GROUPS))
    if unknown:
        raise ValueError(
            f"{ENVIRONMENT}: unknown group {', '.join(unknown)} (known: all, {', '.join(GROUPS)})"
        )
    return frozenset(names)


def required() -> frozenset[str]:
    """The groups this run must not skip (PGJOBQ_REQUIRE; pytest --require sets it)."""
    return parse(os.environ.get(ENVIRONMENT, ""))


def skip_or_fail(group: str, reason: str) -> NoReturn:
    """Skip the test, saying why; fail it instead where this run requires its group."""
    __tracebackhide__ = True  # pytest reports the skip at its caller
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}")
    if group in required():
        pytest.fail(f"{reason} ({ENVIRONMENT} requires {group}: {GROUPS[group]})", pytrace=False)
    pytest.skip(reason)
