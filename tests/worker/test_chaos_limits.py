"""The flow-control chaos run (short version): queue limits and a 1-second schedule under faults.

tests/helpers/chaos_limits.py: 4,000 jobs on two limited queues (concurrency 50 and key_concurrency 2
over 100 keys, a few of them hot; concurrency 30 and key_concurrency 1, round robin), a 1-second
schedule ticked by the workers, 8 real worker processes of 8 handler threads, SIGKILL, SIGSTOP and two
PostgreSQL restarts.  One test asserts every invariant of its table (limits swept from the status log,
overlapping executions explained by reaps, no job lost or done twice, one occurrence per second).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from helpers.chaos_limits import LimitsConfig, render, run_limits

# a run of its own: under pytest-xdist it stays on one worker, apart from the other chaos run's
pytestmark = pytest.mark.xdist_group("chaos_limits")


@pytest.mark.slow
def test_limits_chaos_run_keeps_every_invariant(tmp_path: Path) -> None:
    report = run_limits(LimitsConfig.short(), tmp_path / "chaos-limits")
    render(report, Console(width=140))
    failed = [
        f"{inv.name}: {inv.observed} (expected {inv.expected})" for inv in report.invariants if not inv.ok
    ]
    assert not failed, "\n".join(failed)
