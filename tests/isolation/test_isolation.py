"""Concurrency proofs: the isolation specs in tests/isolation, run by pg_isolation_regress.

`make installcheck` (PGXS ISOLATION) runs every spec in tests/isolation/specs
against the test server and compares what isolationtester prints with
tests/isolation/expected.  What each spec proves is written at its top.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from throwaway_pg import ThrowawayPostgres, find_bindir

REPO_ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted(spec.stem for spec in (REPO_ROOT / "tests" / "isolation" / "specs").glob("*.spec"))

# A spec reported as passed: "test claim_vs_claim ... ok 144 ms" (pg_isolation_regress of PostgreSQL 15
# and older; in a parallel group without "test"), "ok 3 - claim_vs_claim 144 ms" (16 and later, TAP;
# "+" in a parallel group).
PASSED = re.compile(
    r"^\s*(?:test\s+)?(?P<old>\w+)\s+\.\.\.\s+ok\b|^ok\s+\d+\s+[-+]\s+(?P<tap>\w+)", re.MULTILINE
)


def passed_specs(output: str) -> list[str]:
    """The specs pg_isolation_regress's output reports as passed, sorted."""
    return sorted(match["old"] or match["tap"] for match in PASSED.finditer(output))


def _isolation_regress(pg_config: Path) -> Path | None:
    """Where PGXS expects pg_isolation_regress for this pg_config, if it is there."""
    if not pg_config.exists():
        return None
    pgxs = subprocess.run(
        [str(pg_config), "--pgxs"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # .../lib/pgxs/src/makefiles/pgxs.mk -> .../lib/pgxs/src/test/isolation/
    program = Path(pgxs).parents[1] / "test" / "isolation" / "pg_isolation_regress"
    return program if program.exists() else None


def test_isolation_specs_match_their_expected_output(pg_server: ThrowawayPostgres, tmp_path: Path) -> None:
    # The machine's own PostgreSQL's (Debian's postgresql-server-dev): pg_isolation_regress is a
    # client, and drives the servers of every other major as well.
    pg_config = find_bindir() / "pg_config"
    if _isolation_regress(pg_config) is None:
        pytest.fail(
            f"pg_isolation_regress not found for {pg_config} "
            "(Debian: install postgresql-server-dev-15, or run make deps)"
        )
    env = {
        **os.environ,
        "PGHOST": pg_server.host,
        "PGPORT": str(pg_server.port),
        "PGUSER": pg_server.user,
    }
    result = subprocess.run(
        ["make", "-s", "installcheck", f"PG_CONFIG={pg_config}", f"ISOLATION_OUTDIR={tmp_path}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    diffs = tmp_path / "regression.diffs"
    assert result.returncode == 0, (
        f"make installcheck exited with {result.returncode}\n"
        f"{result.stdout}{result.stderr}\n"
        f"--- regression.diffs ---\n{diffs.read_text() if diffs.exists() else '(none written)'}"
    )
    # every spec ran: an ISOLATION that expanded to fewer (or none) would exit 0 as well
    assert SPECS, "no spec in tests/isolation/specs"
    assert passed_specs(result.stdout) == SPECS, result.stdout


def test_the_output_reader_takes_a_spec_as_passed_only_when_it_passed() -> None:
    # lines as pg_isolation_regress prints them: PostgreSQL 15's, then 18's (TAP)
    older = (
        "test claim_vs_claim              ... ok          144 ms\n"
        "test two_reapers                 ... FAILED      192 ms\n"
    )
    tap = (
        "ok 1         - claim_vs_claim                            201 ms\n"
        "not ok 2     - two_reapers                                38 ms\n"
    )

    assert passed_specs(older) == passed_specs(tap) == ["claim_vs_claim"]
