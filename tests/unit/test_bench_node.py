"""The pure parts of the benchmark's Node.js peers workload (bench/contenders/node_peers.py, bench/report.py).

No Node.js and no server: the line protocol the peers' processes speak, the Node.js version check,
the DSN handed to node-postgres, and how the report pairs pgjobq with the better peer and says when the
peers were skipped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.append(str(BENCH))  # after the standard library: bench/ holds a profile.py

from contenders.node_peers import parse_line, uri, version_ok  # noqa: E402
from report import View, _node_section, checks, node_best_peer, node_rates  # noqa: E402
from workloads import Results  # noqa: E402


@pytest.mark.parametrize(
    ("line", "parsed"),
    [
        ("ready\n", ("ready", ())),
        ("n 120 5.25 6.5\n", ("n", (120, 5.25, 6.5))),
        ("s 7 12.000125\n", ("s", (7, 12.000125))),
        ("c -3 1.5", ("c", (-3, 1.5))),
        ("error TypeError: x is undefined\n", ("error", ("TypeError: x is undefined",))),
    ],
)
def test_protocol_lines_are_read_into_kind_and_values(line: str, parsed: tuple[str, tuple[Any, ...]]) -> None:
    assert parse_line(line) == parsed


@pytest.mark.parametrize("line", ["n 1 2", "s x 1.0", "ready now", "[core] INFO: Worker connected", ""])
def test_malformed_protocol_lines_are_junk_not_counts(line: str) -> None:
    assert parse_line(line)[0] == "junk"


def test_node_22_or_later_is_accepted() -> None:
    assert version_ok("v22.23.3") == ("v22.23.3", "")
    assert version_ok("v24.1.0")[0] == "v24.1.0"


def test_an_older_node_is_refused_with_the_reason() -> None:
    version, why = version_ok("v20.20.2")
    assert version is None
    assert "v20.20.2" in why and "22" in why


def test_the_dsn_for_node_postgres_is_a_uri_with_quoted_parts() -> None:
    dsn = "host=127.0.0.1 port=5433 user=postgres password='p@ss word' dbname=bench_node_pg_boss"
    assert uri(dsn) == "postgresql://postgres:p%40ss%20word@127.0.0.1:5433/bench_node_pg_boss"


def _drain(peer: str, repeat: int, rate: float, error: str | None = None) -> dict[str, Any]:
    return {"peer": peer, "workers": 4, "batch": 50, "repeat": repeat, "rate": rate, "capped": False,
            "error": error, "jobs": 20_000, "first_job": 0.02}  # fmt: skip


def _results(node: dict[str, Any]) -> Results:
    return Results(meta={"mode": "full", "workloads": ["node"], "labels": {}}, node=node)


def test_pgjobq_is_paired_with_the_better_peer_of_each_repeat() -> None:
    results = _results(
        {
            "drain": [
                _drain("pgjobq_cli", 0, 12_000),
                _drain("graphile_worker", 0, 10_000),
                _drain("pg_boss", 0, 8_000),
                _drain("pgjobq_cli", 1, 9_000),
                _drain("graphile_worker", 1, 6_000),
                _drain("pg_boss", 1, 7_500),
            ]
        }
    )
    assert node_best_peer(results, "drain", workers=4, batch=50) == {0: 10_000, 1: 7_500}
    [check] = [c for c in checks(View(results)) if c.target.startswith("Drain")]
    assert check.measured is not None
    assert check.measured.low == pytest.approx(1.2) and check.measured.high == pytest.approx(1.2)
    assert check.status() == "**met**"


def test_a_repeat_where_a_peer_failed_is_left_out_of_the_ratio() -> None:
    results = _results(
        {
            "drain": [
                _drain("pgjobq_cli", 0, 12_000),
                _drain("graphile_worker", 0, 0, error="exited with status 1"),
                _drain("pg_boss", 0, 8_000),
            ]
        }
    )
    assert node_rates(results, "drain", "graphile_worker", workers=4, batch=50) == {}
    assert node_best_peer(results, "drain", workers=4, batch=50) == {}


def test_skipped_peers_are_said_in_the_section_and_the_targets() -> None:
    why = "bench/node/node_modules/.bin/node is missing: run `make bench-node` (needs npm)"
    results = _results({"skipped": why})
    results.meta["scale"] = {"node_workers": [1, 4], "node_batches": [1, 50]}
    section = "\n".join(_node_section(results))
    assert "SKIPPED" in section and why in section
    drains = [c for c in checks(View(results)) if c.target.startswith("Drain")]
    assert len(drains) == 4
    assert all(c.status().startswith("not measured (SKIPPED: ") for c in drains)
