"""pgjobq's side of the Node.js peers workload (node_peers.py): the handlers ``pgjobq worker`` runs, and
the clients that enqueue.

The worker side is the ``pgjobq worker`` command as users run it, given a handler of this module::

    PYTHONPATH=bench pgjobq worker contenders._peer_handler:count --queue bench --batch 50 --concurrency 1

Imported that way (BENCH_REPORT_FD set), the module speaks node_peers.py's line protocol (the same as
bench/node/protocol.mjs): the Worker passes a start barrier right after its first connect, before its
first claim (it reports ``ready`` and waits for ``go`` on standard input: the wrap of the Worker's
``_connect`` that contenders/pgjobq_worker.py makes, applied to the class the command instantiates),
so that the process start and the connect stay out of the timed run as they do for the Node peers.
``count`` counts each job (``n <count> <first> <last>`` every 10 ms while it changes); ``started``
reports each job's start (``s <i> <t>``).  The command stops on SIGTERM, finishing the jobs in hand.

Run as a script, it is the client side: single-row ``pgjobq.enqueue`` calls, or the latency's
producer (``c <i> <t>`` once each enqueue has committed)::

    python bench/contenders/_peer_handler.py enqueue --dsn DSN --count N
    python bench/contenders/_peer_handler.py produce --dsn DSN --count N --gap LOW,HIGH --seed S

Times are ``time.monotonic()``: CLOCK_MONOTONIC, which Node's process.hrtime reads too.
"""

from __future__ import annotations

import argparse
import atexit
import os
import random
import sys
import threading
import time
from typing import Any

import pgjobq

__all__ = ["count", "started"]

QUEUE = "bench"  # pgjobq_sql.QUEUE (not imported: run as a script, this module has no package)
REPORT_EVERY = 0.01  # seconds between two progress lines
WARM_UP = 3  # the producer's jobs -3..-1, WARM_UP_PAUSE apart, before the measured ones
WARM_UP_PAUSE = 0.3

_fd = int(os.environ.get("BENCH_REPORT_FD", "1"))
_lock = threading.Lock()


def report(line: str) -> None:
    """Write one protocol line to the report descriptor."""
    data = f"{line}\n".encode()
    with _lock:
        os.write(_fd, data)


class _Counter:
    """Jobs counted, with the clock of the first and of the last; reported by a daemon thread."""

    def __init__(self) -> None:
        self.count = 0
        self.first = 0.0
        self.last = 0.0
        self._reported = 0

    def hit(self, jobs: int = 1) -> None:
        now = time.monotonic()
        if self.count == 0:
            self.first = now
        self.last = now
        self.count += jobs

    def flush(self) -> None:
        count, first, last = self.count, self.first, self.last
        if count != self._reported:
            self._reported = count
            report(f"n {count} {first} {last}")

    def start(self) -> None:
        def loop() -> None:
            while True:
                time.sleep(REPORT_EVERY)
                self.flush()

        threading.Thread(target=loop, name="bench-report", daemon=True).start()
        atexit.register(self.flush)


_counter = _Counter()


def _wait_for_go() -> None:
    report("ready")
    for line in sys.stdin:
        if line.strip() == "go":
            return
    raise SystemExit("standard input ended before go")


def count(job: pgjobq.Job) -> None:
    """The zero-work handler: count the job."""
    _counter.hit()


def started(job: pgjobq.Job) -> None:
    """The latency's handler: report when job i started."""
    report(f"s {job.payload['i']} {time.monotonic()}")


def _gate_worker() -> None:
    """Make pgjobq.Worker pass the start barrier after its first connect (see the module docstring)."""
    worker_class: Any = pgjobq.Worker
    connect = worker_class._connect
    gate = [_wait_for_go]

    def gated_connect(self: Any) -> None:
        connect(self)
        if gate:
            gate.pop()()

    worker_class._connect = gated_connect


def _enqueue(dsn: str, jobs: int) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        _counter.start()
        _wait_for_go()
        for i in range(jobs):
            pgjobq.enqueue(conn, QUEUE, {"i": i})
            _counter.hit()
        _counter.flush()


def _produce(dsn: str, jobs: int, gap: tuple[float, float], seed: int) -> None:
    import psycopg

    rng = random.Random(seed)
    with psycopg.connect(dsn, autocommit=True) as conn:
        _wait_for_go()
        for i in range(-WARM_UP, jobs):
            time.sleep(WARM_UP_PAUSE if i < 0 else rng.uniform(*gap))
            pgjobq.enqueue(conn, QUEUE, {"i": i})
            report(f"c {i} {time.monotonic()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="pgjobq's clients in the Node.js peers workload")
    parser.add_argument("mode", choices=["enqueue", "produce"])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--gap", default="0.005,0.025", help="the producer's pauses, LOW,HIGH seconds")
    parser.add_argument("--seed", type=int, default=4)
    args = parser.parse_args(argv)
    try:
        if args.mode == "enqueue":
            _enqueue(args.dsn, args.count)
        else:
            low, high = (float(part) for part in args.gap.split(","))
            _produce(args.dsn, args.count, (low, high), args.seed)
    except Exception as exc:
        report(f"error {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
elif "BENCH_REPORT_FD" in os.environ:  # imported by `pgjobq worker` in the benchmark
    _gate_worker()
    _counter.start()
