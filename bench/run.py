"""pgjobq's benchmark: every contender side by side in one run, reported as ratios.

    .venv/bin/python bench/run.py --quick     # make bench-quick: under 2 minutes, everything scaled down
    .venv/bin/python bench/run.py --full      # make bench: at most 15 minutes
    .venv/bin/python bench/run.py --quick --workloads versions   # current SQL against the previous version
    .venv/bin/python bench/run.py --quick --workloads limits,rate_limit --out /tmp/lim   # limits
    .venv/bin/python bench/run.py --quick --workloads node --out /tmp/node   # Graphile Worker, pg-boss

It starts a throwaway PostgreSQL (and Redis when a contender needs it), gives
every contender a fresh database on that same server, runs the workloads
(workloads.py) with their repeats interleaved, and writes results.json,
report.md and PNG plots to the output folder (bench/results/latest for
--full, bench/results/quick for --quick).  See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from contenders import load_catalog  # noqa: E402
from driver import Servers, WorkerPool, timer  # noqa: E402
from report import write_report  # noqa: E402
from workloads import COMPARE_WITH_ENV, FULL, QUICK, Bench, Results  # noqa: E402

WORKLOADS = (
    "throughput",
    "work",
    "enqueue",
    "versions",
    "limits",
    "rate_limit",
    "latency",
    "scheduled",
    "claim_cost",
    "soak",
    "asyncio",
    "node",
)
FULL_ONLY = ("node",)  # left out of --quick unless --workloads names them (the Node.js peers: ~3 min)
CONTENDER_WORKLOADS = ("throughput", "work")  # the others make databases of their own
POOL_WORKLOADS = (
    "throughput",
    "work",
    "enqueue",
    "rate_limit",
    "latency",
    "scheduled",
    "soak",
    "asyncio",
)  # those run in worker processes
PACKAGES = (
    "pgjobq-py",
    "psycopg",
    "pgqueuer",
    "procrastinate",
    "tembo-pgmq-python",
    "redis",
    "rq",
    "matplotlib",
)

SERVER_FACTS = """
SELECT current_setting('server_version') AS server_version,
       current_setting('fsync') AS fsync,
       current_setting('synchronous_commit') AS synchronous_commit,
       current_setting('full_page_writes') AS full_page_writes,
       current_setting('shared_buffers') AS shared_buffers,
       current_setting('max_wal_size') AS max_wal_size,
       current_setting('autovacuum') AS autovacuum,
       current_setting('autovacuum_naptime') AS autovacuum_naptime
"""


def _csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_true", help="everything scaled down (under 2 minutes)")
    mode.add_argument("--full", action="store_true", help="the full benchmark (at most 15 minutes)")
    parser.add_argument("--only", type=_csv, metavar="NAMES", help="comma-separated contenders to measure")
    parser.add_argument(
        "--workloads", type=_csv, metavar="NAMES",
        help=f"comma-separated workloads to run (default: all of {', '.join(WORKLOADS)}; with --quick, "
        f"all but {', '.join(FULL_ONLY)})",
    )  # fmt: skip
    parser.add_argument(
        "--repeats", type=int, default=3, help="interleaved repeats of each figure (default 3)"
    )
    parser.add_argument("--out", type=Path, help="output folder (default bench/results/latest or .../quick)")
    parser.add_argument(
        "--compare-with", metavar="VERSION", default=os.environ.get(COMPARE_WITH_ENV) or None,
        help="the pgjobq version the versions workload compares the current one with (default: the one "
        f"before the extension's default_version among those installed; env {COMPARE_WITH_ENV})",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.workloads is None:
        args.workloads = [w for w in WORKLOADS if not (args.quick and w in FULL_ONLY)]
    unknown = sorted(set(args.workloads) - set(WORKLOADS))
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def _describe(cls: type) -> str:
    """The first paragraph of a contender's docstring (its class's, else its module's), on one line."""
    doc = (cls.__doc__ or "").strip() or (sys.modules[cls.__module__].__doc__ or "").strip()
    return " ".join(doc.split("\n\n")[0].split())


def _versions() -> dict[str, str]:
    found: dict[str, str] = {}
    for package in PACKAGES:
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _git() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=BENCH, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=BENCH, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{' (with uncommitted changes)' if dirty else ''}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scale = QUICK if args.quick else FULL
    out: Path = args.out or BENCH / "results" / ("quick" if args.quick else "latest")
    out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f}s] {message}", file=sys.stderr, flush=True)

    catalog = load_catalog()
    results = Results()
    results.skipped.update(catalog.unavailable)
    names = list(catalog.contenders)
    if args.only:
        unknown = [n for n in args.only if n not in catalog.contenders]
        for name in unknown:
            results.skipped[name] = "asked for with --only, but not available"
        names = [n for n in names if n in args.only]
    contenders = {name: catalog.contenders[name]() for name in names}
    for module, reason in catalog.unavailable.items():
        log(f"skipping {module}: {reason}")
    results.meta = {
        "mode": scale.name,
        "scale": scale.__dict__,
        "repeats": args.repeats,
        "command": "bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_start": list(os.getloadavg()),
        "git": _git(),
        "packages": _versions(),
        "labels": {name: type(c).label for name, c in contenders.items()},
        "docs": {name: _describe(type(c)) for name, c in contenders.items()},
        "workloads": args.workloads,
    }
    with_contenders = any(workload in args.workloads for workload in CONTENDER_WORKLOADS)
    needs_redis = with_contenders and any(c.needs_redis for c in contenders.values())
    log(f"{scale.name} run: {len(contenders)} contenders ({', '.join(contenders)}), {args.repeats} repeats")
    # no worker processes when no workload runs in them: their start-up would overlap the first runs
    pool_size = scale.pool_size if any(workload in args.workloads for workload in POOL_WORKLOADS) else 0
    with Servers(redis=needs_redis) as servers, WorkerPool(pool_size) as pool:
        pool.preload(["workloads", *sorted({type(c).__module__ for c in contenders.values()})])
        with servers.admin() as conn, conn.cursor() as cur:
            cur.execute(SERVER_FACTS)
            row = cur.fetchone()
            columns = [d.name for d in cur.description or []]
        facts: dict[str, Any] = dict(zip(columns, row or (), strict=False))
        results.meta["server"] = facts
        results.meta["redis"] = servers.redis_note
        log(
            f"PostgreSQL {facts.get('server_version')} on port {servers.pg.port}; "
            f"{servers.redis_note or 'no Redis'}"
        )
        bench = Bench(scale, args.repeats, servers, pool, contenders, results, log, args.compare_with)
        if with_contenders:
            with timer() as elapsed:
                bench.prepare_contenders()
            results.timings["setup"] = elapsed()
        for workload in WORKLOADS:
            if workload not in args.workloads:
                continue
            log(f"== {workload}")
            with timer() as elapsed:
                if workload in ("throughput", "work"):
                    bench.throughput(work=workload == "work")
                else:
                    getattr(bench, workload)()
            results.timings[workload] = elapsed()
            results.save(out / "results.json")
        for name, reason in bench.broken.items():
            results.skipped[name] = f"failed during the run: {reason}"
    results.meta["load_average_end"] = list(os.getloadavg())
    results.timings["total"] = time.perf_counter() - began
    results.save(out / "results.json")
    summary = write_report(results, out)
    print(summary)
    log(f"report: {out / 'report.md'}; wall time {results.timings['total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
