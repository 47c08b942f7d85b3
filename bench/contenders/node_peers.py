"""The Node.js peers, Graphile Worker and pg-boss, beside pgjobq's own command: each run as its users run
it, in OS processes of its own; not a catalog contender (workloads.Bench.node drives them).

Three peers, one database each on the benchmark's server:

- pgjobq: ``pgjobq worker contenders._peer_handler:count --batch B --concurrency 1`` processes (the
  command as users start it, its defaults otherwise: LISTEN/NOTIFY with a 1 s poll underneath,
  heartbeats, reaping and ``jobq.tick``, INFO logs on stderr); its clients call ``pgjobq.enqueue``
  (contenders/_peer_handler.py).
- Graphile Worker and pg-boss: bench/node/graphile_worker.mjs and bench/node/pg_boss.mjs under the
  Node.js 22 that ``make bench-node`` installs into bench/node/node_modules (the registry's ``node``
  package), with the versions bench/node/package-lock.json pins.  Their settings are in those files'
  headers and in ``SETTINGS`` below, which the report repeats.

Every process speaks one line protocol (bench/node/protocol.mjs): it reports ``ready`` on the pipe named
by BENCH_REPORT_FD once connected and set up, waits for ``go`` on standard input, then reports its count
(``n <count> <first> <last>``) or, for latency, each job's start (``s``) or commit (``c``), with
CLOCK_MONOTONIC times (``time.monotonic()`` here).  The driver releases the processes by writing ``go``;
a drain is timed from the first job any process counted to the handler call that brings the count over
every process to the goal (the time from the release to the first job is reported apart: Graphile
Worker's ``run()``, say, starts after the release); an enqueue run is timed from the release.  The driver
stops a process with SIGTERM.  ``parse_line`` and ``node_status`` are pure, for the unit tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

import pgjobq

from ._util import payloads
from .base import Target
from .pgjobq_sql import QUEUE, pgjobq_reset, pgjobq_setup

__all__ = [
    "NODE_DIR",
    "NODE_MAJOR",
    "PEERS",
    "SETTINGS",
    "Peer",
    "PeerProcess",
    "Run",
    "drain",
    "enqueue_clients",
    "latency",
    "node_status",
    "package_versions",
    "parse_line",
    "uri",
]

BENCH = Path(__file__).resolve().parent.parent
NODE_DIR = BENCH / "node"
NODE_MAJOR = 22  # what graphile-worker 0.18 and pg-boss 12 ask for
PACKAGES = ("graphile-worker", "pg-boss")
READY_TIMEOUT = 60.0  # seconds for every process of a run to report ready
STOP_TIMEOUT = 15.0  # seconds for a process to exit after SIGTERM before it is killed
POLL = 0.005  # seconds between two looks at the counts

PGJOBQ, GRAPHILE, PGBOSS = "pgjobq_cli", "graphile_worker", "pg_boss"
LABELS = {PGJOBQ: "pgjobq worker (CLI)", GRAPHILE: "Graphile Worker", PGBOSS: "pg-boss"}
PEERS = (PGJOBQ, GRAPHILE, PGBOSS)

# What each peer's processes run with (the report's table of settings).
SETTINGS: dict[str, dict[str, str]] = {
    PGJOBQ: {
        "runs as": "`pgjobq worker MODULE:FUNCTION` (the CLI), one process per worker",
        "connections per process": "2 (claims and settlements; LISTEN)",
        "jobs at once per process": "1 (`--concurrency 1`)",
        "batch B": "`--batch B`: one claim takes up to B jobs; their successes are acknowledged with the "
        "next claim (`jobq.complete_and_claim`) or within 5 ms",
        "idle wake-up": "LISTEN/NOTIFY, polling every 1 s underneath (its defaults)",
        "finished jobs": "kept in `jobq.jobs` (status done) until retention removes them",
        "logs": "INFO (a line per job) to stderr, into a file",
    },
    GRAPHILE: {
        "runs as": "`run({ taskList, concurrency: 1, ... })` of graphile-worker, one process per worker",
        "connections per process": "a pg.Pool of at most 10 (its default)",
        "jobs at once per process": "1 (`concurrency: 1`, its default)",
        "batch B": "batch 1: its default (one `get_job` and one `complete_job` per job); batch B > 1: "
        "`localQueue.size` B (B jobs fetched and locked per query) and `completeJobBatchDelay` 0",
        "idle wake-up": "LISTEN/NOTIFY (always on), `pollInterval` 2 s (its default)",
        "finished jobs": "deleted at completion",
        "logs": "its console logger (a line per job at info) to stdout, into a file",
    },
    PGBOSS: {
        "runs as": "`new PgBoss(...)`, `start()`, `work(queue, options, handler)`, one process per worker",
        "connections per process": "a pool of at most 10 (its default), and one for LISTEN",
        "jobs at once per process": "1 worker (`localConcurrency` 1, its default) handling one array",
        "batch B": "`batchSize` B: one fetch claims up to B jobs, one statement completes them; "
        "`burstWhenReadyExceeds` 1 (and `burstWhenBatchFull` above batch 1) so that it fetches again at "
        "once while a backlog lasts instead of waiting a polling interval",
        "idle wake-up": "LISTEN/NOTIFY (`useListenNotify`, queue `notify: true`), polling every 0.5 s "
        "underneath (`pollingIntervalSeconds` and `notifyPollingIntervalSeconds` at their minimum)",
        "finished jobs": "kept (state completed) until its maintenance deletes them (7 days by default)",
        "logs": "none by default",
    },
}


# -- the line protocol ------------------------------------------------------------------------

LINE = re.compile(r"^(ready|n|s|c|error)(?: (.*))?$")


def parse_line(line: str) -> tuple[str, tuple[Any, ...]]:
    """One protocol line as (kind, values): ("ready", ()), ("n", (count, first, last)), ("s", (i, t)),
    ("c", (i, t)), ("error", (message,)); ("junk", (line,)) for anything else."""
    text = line.rstrip("\n")
    match = LINE.match(text)
    if match is None:
        return "junk", (text,)
    kind, rest = match.group(1), match.group(2) or ""
    try:
        if kind == "ready" and not rest:
            return kind, ()
        if kind == "n":
            count, first, last = rest.split()
            return kind, (int(count), float(first), float(last))
        if kind in ("s", "c"):
            number, at = rest.split()
            return kind, (int(number), float(at))
        if kind == "error":
            return kind, (rest,)
    except ValueError:
        pass
    return "junk", (text,)


def node_status(node: Path | None = None) -> tuple[str | None, str]:
    """(Node's version, "") when bench/node holds Node.js 22 or later and both peers; else (None, why)."""
    modules = NODE_DIR / "node_modules"
    node = node or modules / ".bin" / "node"
    if not node.exists():
        return None, f"{node.relative_to(BENCH.parent)} is missing: run `make bench-node` (needs npm)"
    missing = [name for name in PACKAGES if not (modules / name / "package.json").exists()]
    if missing:
        return None, f"{', '.join(missing)} not installed in bench/node: run `make bench-node`"
    try:
        found = subprocess.run(
            [str(node), "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{node} --version failed: {exc}"
    version = found.stdout.strip()
    return version_ok(version)


def version_ok(version: str) -> tuple[str | None, str]:
    """(version, "") when version (``v22.23.3``) is Node.js NODE_MAJOR or later, else (None, why)."""
    match = re.match(r"v?(\d+)\.", version)
    if match is None:
        return None, f"cannot read Node.js's version from {version!r}"
    if int(match.group(1)) < NODE_MAJOR:
        return None, f"Node.js {version} is older than {NODE_MAJOR}, which the peers need"
    return version, ""


def package_versions() -> dict[str, str]:
    """The versions of the peers installed in bench/node (from their package.json)."""
    found: dict[str, str] = {}
    for name in (*PACKAGES, "pg"):
        path = NODE_DIR / "node_modules" / name / "package.json"
        with contextlib.suppress(OSError, ValueError):
            found[name] = str(json.loads(path.read_text())["version"])
    return found


def uri(dsn: str) -> str:
    """A libpq keyword DSN as the postgresql:// URI node-postgres takes."""
    parts = conninfo_to_dict(dsn)
    user = quote(str(parts.get("user", "")), safe="")
    password = parts.get("password")
    auth = f"{user}:{quote(str(password), safe='')}@" if password else (f"{user}@" if user else "")
    host = parts.get("host", "localhost")
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{auth}{host}{port}/{quote(str(parts.get('dbname', '')), safe='')}"


# -- processes ---------------------------------------------------------------------------------


@dataclass
class PeerProcess:
    """One process of a run: started with a report pipe, read by a thread."""

    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    count: int = 0
    first: float = 0.0
    last: float = 0.0
    starts: dict[int, float] = field(default_factory=dict)
    commits: dict[int, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    _process: subprocess.Popen[bytes] | None = None
    _reader: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        env = {**os.environ, **self.env, "BENCH_REPORT_FD": str(write_fd)}
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=log, stderr=log, env=env, pass_fds=(write_fd,),
                cwd=NODE_DIR, start_new_session=True,
            )  # fmt: skip
        os.close(write_fd)
        reading = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
        self._reader = threading.Thread(target=self._read, args=(reading,), daemon=True, name="peer-report")
        self._reader.start()

    def _read(self, reading: IO[str]) -> None:
        with reading:
            for line in reading:
                kind, values = parse_line(line)
                with self._lock:
                    if kind == "ready":
                        self.ready.set()
                    elif kind == "n":
                        self.count, self.first, self.last = values
                    elif kind == "s":
                        self.starts.setdefault(values[0], values[1])
                    elif kind == "c":
                        self.commits[values[0]] = values[1]
                    elif kind == "error":
                        self.errors.append(values[0])

    def progress(self) -> tuple[int, float, float]:
        with self._lock:
            return self.count, self.first, self.last

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def go(self) -> None:
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(b"go\n")
        self._process.stdin.flush()

    def stop(self) -> None:
        """SIGTERM, then kill after STOP_TIMEOUT; wait for the reader to drain the pipe."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                self.errors.append(f"did not exit within {STOP_TIMEOUT:.0f} s of SIGTERM; killed")
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        if self._reader is not None:
            self._reader.join(5)

    def wait(self, timeout: float) -> int | None:
        """Wait for the process to exit by itself; its return code (None: still running)."""
        assert self._process is not None
        try:
            return self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def failure(self) -> str | None:
        """What went wrong, if anything: an error it reported, or an exit before its end, with its log's
        last line."""
        code = self.returncode
        if self.errors:
            return self.errors[0]
        if code not in (None, 0) and code != -signal.SIGTERM:
            tail = [line for line in self.log.read_text(errors="replace").splitlines() if line.strip()]
            return f"exited with status {code}" + (f": {tail[-1].strip()[:300]}" if tail else "")
        return None


@contextlib.contextmanager
def started(processes: Sequence[PeerProcess]) -> Iterator[float]:
    """Start the processes, wait until every one is ready, release them; yield the clock at the release.

    Raises RuntimeError when one fails or is not ready in time.  Every process is stopped on exit.
    """
    try:
        for process in processes:
            process.start()
        deadline = time.monotonic() + READY_TIMEOUT
        for process in processes:
            while not process.ready.wait(0.02):
                failure = process.failure() or (
                    f"exited with status {process.returncode} before it was ready"
                    if process.returncode is not None
                    else None
                )
                if failure:
                    raise RuntimeError(failure)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not ready after {READY_TIMEOUT:.0f} s")
        released = time.monotonic()
        for process in processes:
            process.go()
        yield released
    finally:
        for process in processes:
            process.stop()


# -- the peers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Peer:
    """How to set up, load and start one peer's processes."""

    name: str
    logs: Path  # the folder of the processes' logs

    @property
    def label(self) -> str:
        return LABELS[self.name]

    def _node(self, mode: str, target: Target, **options: object) -> list[str]:
        script = NODE_DIR / f"{self.name}.mjs"
        argv = [str(NODE_DIR / "node_modules" / ".bin" / "node"), str(script), mode, "--dsn", uri(target.dsn)]
        for name, value in options.items():
            argv += [f"--{name}", str(value)]
        return argv

    def _run_once(self, argv: list[str], what: str) -> None:
        """Run a set-up step to its end (no protocol: no go), raising RuntimeError with its output."""
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300, check=False,
            cwd=NODE_DIR, env={**os.environ, "BENCH_REPORT_FD": "1"},
        )  # fmt: skip
        if done.returncode != 0:
            lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
            raise RuntimeError(f"{self.label} {what} failed: {lines[-1] if lines else done.returncode}")

    def setup(self, target: Target) -> None:
        if self.name == PGJOBQ:
            pgjobq_setup(target)
        else:
            self._run_once(self._node("setup", target), "setup")

    def load(self, target: Target, count: int) -> None:
        """Every job removed, then count queued ones, each peer through its own bulk call."""
        if self.name == PGJOBQ:
            pgjobq_reset(target)
            if count:
                with psycopg.connect(target.dsn, autocommit=True) as conn:
                    pgjobq.enqueue_many(conn, QUEUE, payloads(range(count)))
        else:
            self._run_once(self._node("load", target, count=count), "load")

    def worker(self, target: Target, batch: int, *, latency: bool = False) -> PeerProcess:
        log = self._log("worker")
        if self.name == PGJOBQ:
            handler = "contenders._peer_handler:" + ("started" if latency else "count")
            argv = [*_pgjobq_command(), "worker", handler, "--dsn", target.dsn, "--queue", QUEUE]
            argv += ["--batch", str(batch), "--concurrency", "1"]
            return PeerProcess(argv, log, env={"PYTHONPATH": _pythonpath()})
        return PeerProcess(self._node("work", target, batch=batch, latency=int(latency)), log)

    def client(self, target: Target, count: int) -> PeerProcess:
        """A process making count single-row enqueues, one commit each."""
        log = self._log("client")
        if self.name == PGJOBQ:
            script = Path(__file__).with_name("_peer_handler.py")
            return PeerProcess([sys.executable, str(script), "enqueue", "--dsn", target.dsn, "--count",
                                str(count)], log)  # fmt: skip
        return PeerProcess(self._node("enqueue", target, count=count), log)

    def producer(self, target: Target, count: int, gap: tuple[float, float], seed: int) -> PeerProcess:
        """The latency's producer: 3 warm-up jobs (-3..-1), then count jobs, one every gap seconds."""
        log = self._log("producer")
        options = {"count": count, "gap": f"{gap[0]},{gap[1]}", "seed": seed}
        if self.name == PGJOBQ:
            script = Path(__file__).with_name("_peer_handler.py")
            argv = [sys.executable, str(script), "produce", "--dsn", target.dsn]
            for name, value in options.items():
                argv += [f"--{name}", str(value)]
            return PeerProcess(argv, log)
        return PeerProcess(self._node("produce", target, **options), log)

    def _log(self, role: str) -> Path:
        self.logs.mkdir(parents=True, exist_ok=True)
        return self.logs / f"{self.name}-{role}.log"


def _pgjobq_command() -> list[str]:
    """The `pgjobq` command of this Python (its console script), else `python -m pgjobq`."""
    script = Path(sys.executable).with_name("pgjobq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "pgjobq"]


def _pythonpath() -> str:
    """bench/ first on the path, so that `pgjobq worker` finds contenders._peer_handler."""
    return os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH", "")]))


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Run:
    """One measured run: jobs counted over seconds (from the release, or from the first job counted: see
    _counted), capped or not, or an error."""

    processed: int = 0
    seconds: float = 0.0
    capped: bool = False
    error: str | None = None
    first_job: float | None = None  # seconds from the release to the first job counted
    samples_ms: list[float] = field(default_factory=list)  # latency only
    missing: int = 0  # latency only: jobs committed whose handler never started

    @property
    def rate(self) -> float:
        return self.processed / self.seconds if self.seconds > 0 else 0.0


def _counted(processes: Sequence[PeerProcess], goal: int, limit: float, *, from_first: bool = False) -> Run:
    """Run started processes until their counts reach goal (or the limit, or a failure).

    The seconds run from the release to the last job counted, or with from_first from the first job
    counted (by any process) to the last: a drain's rate leaves out what a peer does between the
    release and its first job (Graphile Worker's run() starts there), which first_job reports.
    """
    with started(processes) as released:
        while True:
            time.sleep(POLL)
            progress = [process.progress() for process in processes]
            total = sum(count for count, _first, _last in progress)
            counted = [p for p in progress if p[0] > 0]
            firsts = [first for _count, first, _last in counted]
            first_job = min(firsts) - released if firsts else None
            start = released + first_job if from_first and first_job is not None else released
            if total >= goal:
                end = max(last for _count, _first, last in counted)
                return Run(total, max(end - start, 1e-9), first_job=first_job)
            failed = next((f for process in processes if (f := process.failure())), None)
            if failed:
                return Run(total, time.monotonic() - released, error=failed, first_job=first_job)
            if time.monotonic() - released >= limit:
                end = max((last for _count, _first, last in counted), default=time.monotonic())
                return Run(total, max(end - start, 1e-9), capped=True, first_job=first_job)


def drain(peer: Peer, target: Target, workers: int, batch: int, jobs: int, limit: float) -> Run:
    """A backlog of jobs, loaded beforehand (Peer.load), drained by workers processes; timed from the
    first job counted to the last."""
    return _counted([peer.worker(target, batch) for _ in range(workers)], jobs, limit, from_first=True)


def enqueue_clients(peer: Peer, target: Target, clients: int, per_client: int, limit: float) -> Run:
    """clients processes making per_client single-row enqueues each into an emptied queue (Peer.load with
    0 jobs beforehand), with no worker running."""
    return _counted([peer.client(target, per_client) for _ in range(clients)], clients * per_client, limit)


def latency(peer: Peer, target: Target, jobs: int, gap: tuple[float, float], seed: int, limit: float) -> Run:
    """One idle worker (batch 1) on an emptied queue and one producer: the handler's start minus the
    add's commit, in ms."""
    worker = peer.worker(target, 1, latency=True)
    producer = peer.producer(target, jobs, gap, seed)
    with started([worker, producer]) as released:
        deadline = released + limit
        while time.monotonic() < deadline:
            time.sleep(0.02)
            failed = worker.failure() or producer.failure()
            if failed:
                return Run(error=failed)
            with producer._lock:
                committed = dict(producer.commits)
            with worker._lock:
                began = dict(worker.starts)
            if producer.returncode is not None and all(i in began for i in committed):
                break
        measured = [i for i in committed if i >= 0]
        samples = [(began[i] - committed[i]) * 1000 for i in sorted(measured) if i in began]
    return Run(
        len(samples), time.monotonic() - released, samples_ms=samples, missing=len(measured) - len(samples)
    )


def log_folder() -> Path:
    """A fresh folder for the processes' logs (kept until the machine's temp folder is cleaned)."""
    return Path(tempfile.mkdtemp(prefix="pgjobq-bench-node-"))


def remove_logs(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
