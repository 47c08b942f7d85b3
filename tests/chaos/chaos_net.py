"""Chaos across a network: workers on three test hosts, the database on a fourth, and the network failing.

    PYTHONPATH=tests .venv/bin/python -m chaos.chaos_net          # short: one round of faults (make test)
    PYTHONPATH=tests .venv/bin/python -m chaos.chaos_net --full   # full: three rounds (make chaos-net)

Needs root: the hosts are Linux network namespaces made by tests/chaos/netns.py
(a switch namespace routing between one link per host; veth pairs, and for
the host that gets latency a TUN pair pumped by tests/chaos/delay_line.py),
all removed at the end, whatever happened.  A throwaway PostgreSQL runs in
host ``db`` (as its unprivileged account, listening on db's address only),
with the extension and chaos_handlers.py's evidence tables; three real
``pgjobq worker chaos.chaos_handlers:run`` processes run in hosts ``h1``,
``h2`` and ``h3``, logging in over the network as a role with the worker
level only, with short leases (5 s in the short run), an explicit
``--network-timeout`` (4 s) and ``--reconnect-delay-max``.  The producer
(chaos.py's: the same mix of jobs, unique keys, failures and snoozes) and the
evidence queries reach the server through its unix socket, which no fault
touches.

Faults, made with the namespaces' own tools while jobs flow (times in the
short run; the full run repeats the round three times, rotating the hosts,
with 12 s leases and the worker's default network_timeout of 10 s):

- **a host cut off**: once its worker holds running jobs, every packet to or
  from h1 is dropped in the switch (nftables, both ways: no RST, no ICMP)
  for three lease lengths.  Measured: when the worker logs ``database
  unavailable`` (it must within network_timeout plus slack), when the
  server's backends of that host are gone from pg_stat_activity (the
  server's tcp_keepalives_* and tcp_user_timeout must end them within what
  those settings give, plus slack), and how soon after the heal the worker
  claims again.  Checked in the transition log: no claim by it once it must
  have noticed, until the heal; every lease it held at the cut ended by a
  reap after its expiry, before the heal (so by the others); no change
  under those leases after the cut but their reap (its late completes and
  heartbeats refused), and its log saying ``lease L lost`` for some of them;
- **latency**: meanwhile h3's delay line holds each packet leaving h3 for
  200 ± 50 ms (a TCP connect from h3 measures the round trip).  h3 must go
  on claiming, without a ``database unavailable``; its throughput against
  the others' is reported;
- **packet loss**: then each packet to or from h2 is dropped with
  probability 10% (nftables ``numgen random``), for two lease lengths; h2
  must go on claiming (reconnects are allowed, and counted); the share
  dropped is measured by the rules' counters;
- **a half-open connection**: h3 is cut off for a moment, its backends are
  terminated (their FINs are lost) and the server's kernel forgets the
  sockets (``ss -K``: their RSTs are lost too), while h3's kernel still
  holds its connections established, to nothing (counted with ``ss``);
  then the cut heals.  Measured: how soon after the heal the worker notices
  (its ``database unavailable``) and claims again.

The handler's own connections (chaos_handlers.py opens them from
PGJOBQ_DSN) take keepalives, tcp_user_timeout and connect_timeout from a
libpq service file (PGSERVICEFILE, PGSERVICE), so that they too give a dead
path up; the worker's own connections set theirs from --network-timeout,
and settings given in a conninfo win over a service file's, so the worker
is measured on its own.

Then the producer stops, the workers drain the queue and get SIGTERM, and
SQL over the evidence (chaos.py's evidence(): nothing lost, no overlapping
leases, no stale or second completion, duplicates explained by reaps, no
early reap, one effect per done job) and the queries below check the
invariants, printed as a table; the exit status is 1 when one fails (2 when
namespaces cannot be made here).  tests/chaos/test_chaos_net.py runs the
short version and asserts each.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg.rows import dict_row
from rich.console import Console
from rich.table import Table

from chaos.chaos import (
    CORE_INVARIANTS,
    REFUSED,
    WORKER_ROLE,
    ChaosConfig,
    Fleet,
    Invariant,
    Judged,
    Producer,
    WorkerProc,
    core_invariants,
    evidence,
    keep_evidence,
    prepare,
    print_tables,
    say,
)
from chaos.netns import Counters, NamespacedPostgres, Network, Unsupported
from helpers.processes import wait_until
from helpers.sqlhelpers import Db
from helpers.working_tree import servers_run_the_working_tree

__all__ = [
    "INVARIANTS",
    "CutFinding",
    "Episode",
    "EpisodeRecord",
    "Findings",
    "Kind",
    "LogLine",
    "NetConfig",
    "NetReport",
    "OpenFinding",
    "WindowFinding",
    "claims_between",
    "count_between",
    "find_cut",
    "find_open",
    "find_window",
    "first_after",
    "first_claim",
    "judge",
    "main",
    "partition_evidence",
    "read_log",
    "refused_leases",
    "render",
    "run_chaos_net",
]

DB = "db"
HOSTS = ("h1", "h2", "h3")  # the worker hosts: slot k of the fleet runs in HOSTS[k]
PORT = 5432
HANDLER_SERVICE = "pgjobq_chaos_net_handler"  # the libpq service of the handlers' own connections
UNAVAILABLE = "database unavailable"

CUT_ATTEMPTS = 5  # cuts tried until one finds its worker holding a job (its jobs can end in between)

# The keys of every invariant a network chaos run judges (judge()), in the order of its table.
# tests/chaos/test_chaos_net.py asserts each of them, and that a run's report has exactly these.
INVARIANTS = (
    *CORE_INVARIANTS, "lease_lengths", "cut_real", "cut_noticed", "cut_stops_claiming", "cut_server_cleared",
    "cut_recovered", "cut_late_refused", "cut_rejoined", "half_open_real", "half_open_noticed",
    "half_open_rejoined", "latency_real", "latency_works", "loss_real", "loss_works", "drained", "clean_exit",
    "no_crashes",
)  # fmt: skip

Kind = Literal["cut", "latency", "loss", "half_open"]


@dataclass(frozen=True)
class Episode:
    """One fault: kind, on the worker host HOSTS[host], from at seconds after the producer starts (at the
    earliest: a cut waits for its worker to hold running jobs, and later episodes shift with it) for
    length seconds."""

    kind: Kind
    host: int
    at: float
    length: float


@dataclass(frozen=True)
class NetConfig:
    """The load (chaos.py's ChaosConfig: producer and fleet), the workers' network settings, the
    server's, and the faults.  Times are in seconds."""

    name: str
    load: ChaosConfig
    network_timeout: float  # the workers' --network-timeout
    reconnect_delay_max: float  # the workers' --reconnect-delay-max
    episodes: tuple[Episode, ...]
    latency_ms: tuple[float, float] = (200.0, 50.0)  # a delayed packet's delay: mean, jitter (uniform)
    loss_percent: int = 10
    # the server's TCP settings: tcp_keepalives_idle, _interval (s), _count, tcp_user_timeout (ms), and
    # client_connection_check_interval (ms, PostgreSQL 14 and later)
    keepalives: tuple[int, int, int] = (2, 1, 2)
    user_timeout_ms: int = 4000
    check_interval_ms: int = 1000
    slack: float = 5.0  # added to every bound: a loaded machine of two shared cores
    settle: float = 1.0  # after a cut, statements the host sent before it may still commit this long

    @classmethod
    def short(cls) -> NetConfig:
        lease = 5.0
        cut = 3 * lease
        return cls(
            name="short",
            load=_load("net-short", jobs=1_200, handler_ms=(10, 100), produce_seconds=31, concurrency=4,
                       drain_timeout=45, lease=lease),
            network_timeout=4.0,
            reconnect_delay_max=2.0,
            episodes=(
                Episode("cut", 0, at=2, length=cut),
                Episode("latency", 2, at=2, length=cut),
                Episode("loss", 1, at=3 + cut, length=2 * lease),
                Episode("half_open", 2, at=5 + cut, length=1.5),
            ),
        )  # fmt: skip

    @classmethod
    def full(cls) -> NetConfig:
        lease = 12.0
        cut = 3 * lease
        # the hosts of each round's cut, latency, loss and half-open: each host gets each fault but latency
        # (h3's link alone is a delay line), and no host two at once
        rounds = ((0, 2, 1, 2), (1, 2, 2, 0), (2, None, 0, 1))
        episodes: list[Episode] = []
        for k, (cut_host, latency_host, loss_host, open_host) in enumerate(rounds):
            base = 5 + 100 * k
            episodes.append(Episode("cut", cut_host, at=base, length=cut))
            if latency_host is not None:
                episodes.append(Episode("latency", latency_host, at=base, length=cut))
            episodes.append(Episode("loss", loss_host, at=base + cut + 4, length=40))
            episodes.append(Episode("half_open", open_host, at=base + cut + 10, length=2))
        return cls(
            name="full",
            load=_load("net-full", jobs=30_000, handler_ms=(10, 200), produce_seconds=285, concurrency=8,
                       drain_timeout=300, lease=lease),
            network_timeout=10.0,
            reconnect_delay_max=10.0,
            episodes=tuple(episodes),
        )  # fmt: skip

    def __post_init__(self) -> None:
        """Refuse a schedule with two faults on one host at once: healing one would end the other."""
        for a in self.episodes:
            for b in self.episodes:
                if a is not b and a.host == b.host and a.at <= b.at < a.at + a.length:
                    raise ValueError(
                        f"{b.kind} on {HOSTS[b.host]} at {b.at:g} s overlaps {a.kind} at {a.at:g} s"
                    )

    @property
    def lease(self) -> float:
        return self.load.leases[0]

    @property
    def notice_bound(self) -> float:
        """A cut-off worker says ``database unavailable`` within this long: its network_timeout (its
        tcp_user_timeout, keepalives and connect_timeout), plus slack."""
        return self.network_timeout + self.slack

    @property
    def server_bound(self) -> float:
        """The server ends a cut-off host's backends within this long: keepalive probing (idle, then count
        probes interval apart) or tcp_user_timeout for data in flight, whichever is longer, plus slack."""
        idle, interval, count = self.keepalives
        return max(idle + interval * count, self.user_timeout_ms / 1000) + self.slack

    @property
    def rejoin_bound(self) -> float:
        """A worker claims again within this long of the heal: one connection attempt in flight
        (connect_timeout, network_timeout), one backoff pause at most, plus slack."""
        return self.network_timeout + self.reconnect_delay_max + self.slack

    @property
    def latency_hosts(self) -> set[int]:
        return {e.host for e in self.episodes if e.kind == "latency"}


def _load(
    name: str, *, jobs: int, handler_ms: tuple[int, int], produce_seconds: float, concurrency: int,
    drain_timeout: float, lease: float,
) -> ChaosConfig:  # fmt: skip
    """The producer's and the fleet's part: three workers of one lease length, all with handler threads."""
    return ChaosConfig(
        name=name, jobs=jobs, handler_ms=handler_ms, produce_seconds=produce_seconds, concurrency=concurrency,
        drain_timeout=drain_timeout, workers=len(HOSTS), inline_slots=0, leases=(lease,),
    )  # fmt: skip


@dataclass
class EpisodeRecord:
    """What happened in one episode: when (epoch seconds), and what was measured meanwhile."""

    episode: Episode
    host: str
    worker: str
    address: str
    began: float = math.nan  # when the fault was in place
    ended: float = math.nan  # when it began to go (a heal: just before the rules went)
    shifted: float = 0.0  # how much later than scheduled it began
    held: int = 0  # running jobs its worker held when it began (pg_stat: the jobs table)
    backends: int = 0  # the host's backends when it began
    cleared_after: float | None = None  # cut: seconds until the server had none of them
    counters: Counters | None = None  # cut, loss: the rules' counters at the heal
    delayed: dict[str, Any] = field(default_factory=dict)  # latency: the delay line's report
    rtt: float | None = None  # latency: a TCP connect's time from the host during it
    terminated: int = 0  # half-open: backends terminated during the cut
    destroyed: int = 0  # half-open: server sockets forgotten (ss -K)
    server_left: int = 0  # half-open: the server's sockets with the host left after that
    half_open: int = 0  # half-open: connections the host held established then, before the heal
    open_after: int = 0  # half-open: of those, still established right after the heal


@dataclass
class NetReport(Judged):
    config: NetConfig
    invariants: list[Invariant]
    counts: dict[str, str]
    episodes: list[EpisodeRecord]
    started: float  # epoch seconds: when the producer and the faults began
    wall: float
    workdir: Path


def _at(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, timezone.utc)


# -- the worker processes, in their hosts ---------------------------------------------


class NetFleet(Fleet):
    """chaos.py's Fleet, its slot k in host HOSTS[k], with the network settings of config."""

    def __init__(self, dsn: str, config: NetConfig, log_dir: Path, network: Network, service: Path) -> None:
        super().__init__(dsn, config.load, log_dir)
        self.net_config = config
        self.network = network
        self.service = service

    def command(self, slot: int, name: str) -> tuple[list[str], dict[str, str]]:
        argv, env = super().command(slot, name)
        argv += [
            "--network-timeout", f"{self.net_config.network_timeout:g}",
            "--reconnect-delay-max", f"{self.net_config.reconnect_delay_max:g}",
        ]  # fmt: skip
        env.update(PGSERVICEFILE=str(self.service), PGSERVICE=HANDLER_SERVICE)
        return self.network.command(HOSTS[slot], argv), env

    def in_host(self, slot: int) -> WorkerProc:
        return self.slots[slot]


def write_service(path: Path, config: NetConfig) -> Path:
    """The libpq service file of the handlers' own connections: the worker's formula (pgjobq's
    network_options) for config's network_timeout, so that a handler on a dead path gives up as soon."""
    timeout = config.network_timeout
    idle = max(1, int(timeout // 3))
    path.write_text(
        f"[{HANDLER_SERVICE}]\n"
        f"connect_timeout={math.ceil(timeout)}\n"
        "keepalives=1\n"
        f"keepalives_idle={idle}\n"
        f"keepalives_interval={max(1, int((timeout - idle) // 3))}\n"
        "keepalives_count=3\n"
        f"tcp_user_timeout={int(timeout * 1000)}\n"
    )
    return path


# -- the faults -----------------------------------------------------------------------


class Faults(threading.Thread):
    """Injects the episodes of config on schedule (from start()), measuring as it goes."""

    def __init__(self, config: NetConfig, network: Network, dsn: str, fleet: NetFleet) -> None:
        super().__init__(name="faults", daemon=True)
        self.config = config
        self.network = network
        self.dsn = dsn
        self.fleet = fleet
        self.db_address = network.hosts[DB].address
        self.records: list[EpisodeRecord] = []
        self.started = math.nan  # epoch seconds: when the schedule began (with the producer)
        self.error: BaseException | None = None
        self._conn: Db | None = None
        self._rtt_probes: dict[int, subprocess.Popen[str]] = {}

    def run(self) -> None:
        try:
            self._script()
        except BaseException as exc:
            self.error = exc
        finally:
            if self._conn is not None:
                self._conn.close()

    def _db(self) -> Db:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self.dsn, autocommit=True, row_factory=dict_row, application_name="chaos-net harness"
            )
        return self._conn

    def _value(self, query: str, params: Mapping[str, Any]) -> Any:
        row = self._db().execute(query, params).fetchone()
        assert row is not None
        return next(iter(row.values()))

    def _backends(self, address: str) -> int:
        return int(
            self._value(
                "SELECT count(*) FROM pg_stat_activity WHERE client_addr = %(address)s::inet",
                {"address": address},
            )
        )

    def _holding(self, worker: str) -> int:
        return int(
            self._value(
                "SELECT count(*) FROM jobq.jobs WHERE status = 'running' AND locked_by = %(worker)s",
                {"worker": worker},
            )
        )

    # -- the schedule ------------------------------------------------------------

    def _script(self) -> None:
        t0 = time.monotonic()
        self.started = time.time()
        offset = 0.0  # later episodes shift with the lateness of earlier ones
        events: list[tuple[float, int, EpisodeRecord, bool]] = []  # (when, order, record, start?)
        for order, episode in enumerate(sorted(self.config.episodes, key=lambda e: e.at)):
            slot = episode.host
            worker = self.fleet.in_host(slot)
            record = EpisodeRecord(episode, HOSTS[slot], worker.name, self.network.hosts[HOSTS[slot]].address)
            self.records.append(record)
            events.append((episode.at, 2 * order + 1, record, True))
        while events:
            events.sort(key=lambda e: (e[0], e[1]))
            when, order, record, starting = events[0]
            if time.monotonic() < t0 + offset + when:
                self._watch()
                time.sleep(0.05)
                continue
            events.pop(0)
            if starting:
                late = self._begin(record)
                record.shifted = offset + late
                offset += late
                events.append((when + record.episode.length, order + 1, record, False))
            else:
                self._end(record)
        say("faults over")

    def _watch(self) -> None:
        """Between events: how soon the server clears the backends of a host cut off; workers that died."""
        self.fleet.replace_dead()
        for record in self.records:
            cut_now = (
                record.episode.kind == "cut" and not math.isnan(record.began) and math.isnan(record.ended)
            )
            if cut_now and record.cleared_after is None and self._backends(record.address) == 0:
                record.cleared_after = time.time() - record.began

    def _begin(self, record: EpisodeRecord) -> float:
        """Start record's fault; how many seconds later than planned (waiting for the worker to be busy)."""
        kind, host = record.episode.kind, record.host
        waited = time.monotonic()
        if kind == "cut":
            # while its worker holds running jobs (several, if it soon does): their leases are what the
            # others must recover
            busy = max(2, self.config.load.concurrency // 2)
            for _ in range(CUT_ATTEMPTS):
                if not wait_until(lambda: self._holding(record.worker) >= busy, timeout=3, interval=0.02):
                    wait_until(lambda: self._holding(record.worker) > 0, timeout=10, interval=0.02)
                self.network.cut(host)
                record.began = time.time()
                record.held = self._holding(record.worker)
                if record.held > 0:
                    break
                # its jobs (10-100 ms each) ended between the look and the cut: a cut with nothing for the
                # others to recover proves nothing, so heal at once (TCP retransmits across it) and try again
                self.network.heal(host)
                say(f"cut {host} ({record.worker}) found it holding no job: healed, trying again")
            record.backends = self._backends(record.address)
            say(f"cut {host} ({record.worker}, holding {record.held} job(s), {record.backends} backend(s))")
        elif kind == "latency":
            self.network.delay(host, True)
            record.began = time.time()
            self._rtt_probes[id(record)] = self._start_rtt_probe(host)
            say(f"latency on {host} ({record.worker})")
        elif kind == "loss":
            self.network.lose(host, self.config.loss_percent)
            record.began = time.time()
            say(f"{self.config.loss_percent}% packet loss on {host} ({record.worker})")
        else:
            self._half_open(record)
        return time.monotonic() - waited

    def _end(self, record: EpisodeRecord) -> None:
        kind, host = record.episode.kind, record.host
        if kind in ("cut", "loss"):
            record.counters, record.ended = self.network.heal(host)
        elif kind == "latency":
            probe = self._rtt_probes.pop(id(record))
            out, err = probe.communicate(timeout=60)
            if probe.returncode != 0:
                raise RuntimeError(f"the round-trip probe of {host} failed: {err.strip()}")
            record.rtt = float(out)
            record.ended = time.time()
            record.delayed = self.network.delay(host, False)
        else:  # half-open: healed in _half_open, which ran the whole episode
            return
        say(f"{kind} on {host} over after {record.ended - record.began:.1f} s")

    def _start_rtt_probe(self, host: str) -> subprocess.Popen[str]:
        """A TCP connect from host to the server, five times, in the background: the median (seconds)."""
        script = (
            "import socket, statistics, time\n"
            "time.sleep(1)\n"
            "times = []\n"
            "for _ in range(5):\n"
            "    began = time.perf_counter()\n"
            f"    with socket.create_connection(({self.db_address!r}, {PORT}), timeout=10):\n"
            "        times.append(time.perf_counter() - began)\n"
            "print(statistics.median(times))\n"
        )
        return subprocess.Popen(
            self.network.command(host, [sys.executable, "-c", script]),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def _half_open(self, record: EpisodeRecord) -> None:
        """Cut host off, end its backends and make the server's kernel forget them, heal: its connections
        are left half-open (established on its side, nothing on the other)."""
        host, worker = record.host, record.worker
        wait_until(
            lambda: bool(
                self._value(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %(name)s"
                    " AND client_addr = %(address)s::inet",
                    {"name": f"pgjobq worker {worker}", "address": record.address},
                )
            ),
            timeout=30,
            interval=0.1,
        )
        self.network.cut(host)
        record.began = time.time()
        record.held = self._holding(worker)
        record.backends = self._backends(record.address)
        record.terminated = int(
            self._value(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE client_addr = %(address)s::inet",
                {"address": record.address},
            )
        )
        wait_until(lambda: self._backends(record.address) == 0, timeout=10, interval=0.05)
        record.destroyed = self.network.destroy_sockets(DB, record.address)
        record.server_left = self.network.sockets(DB, record.address)
        record.half_open = self.network.established(host, self.db_address, PORT)
        time.sleep(max(0.0, record.began + record.episode.length - time.time()))
        record.counters, record.ended = self.network.heal(host)
        record.open_after = self.network.established(host, self.db_address, PORT)
        say(
            f"half-open {host} ({worker}): {record.terminated} backend(s) terminated, {record.destroyed}"
            f" server socket(s) forgotten ({record.server_left} left), {record.half_open} connection(s)"
            f" established on {host} ({record.open_after} still right after the heal)"
        )

    def finish(self) -> None:
        """End the probes still running (the thread failed midway)."""
        for probe in self._rtt_probes.values():
            if probe.poll() is None:
                probe.kill()
                probe.wait()


# -- the evidence -------------------------------------------------------------------

# The leases a worker held when its host was cut off (claimed by it before
# the cut, not ended by `settled`, when no statement of the host can still
# be committing), and how each ended: the first change taking the job out of
# running under that lease.  recovered: ended by a reap after the lease's
# expiry and before the heal (during the cut only the other hosts reach the
# database: a reap by then is theirs).  late_changes: after `settled`, the
# job taken out of running under such a lease other than by its reap, or
# that lease extended (an accepted late complete, fail, snooze or heartbeat
# of the cut-off worker).  Not counted: the next claim, of the job queued
# again (no change under the lease), nor a cancel request (the producer's
# replace making a running holder give up its key: the lease untouched).
# rerun_elsewhere: jobs whose next lease went to another worker.
PARTITION = """
WITH held AS (
    SELECT c.job_id, c.new_lease AS lease
      FROM chaos.transitions AS c
     WHERE c.new_lease <> c.old_lease AND c.locked_by = %(worker)s AND c.at < %(cut)s
       AND NOT EXISTS (SELECT FROM chaos.transitions AS e
                        WHERE e.job_id = c.job_id AND e.old_lease = c.new_lease AND e.old_status = 'running'
                          AND e.new_status <> 'running' AND e.at < %(settled)s)
), ended AS (
    SELECT DISTINCT ON (h.job_id, h.lease) h.job_id, h.lease, e.reaped, e.at, e.old_lease_expires_at
      FROM held AS h
      JOIN chaos.transitions AS e
        ON e.job_id = h.job_id AND e.old_lease = h.lease AND e.old_status = 'running'
       AND e.new_status <> 'running'
     ORDER BY h.job_id, h.lease, e.seq
)
SELECT (SELECT count(*) FROM held) AS held,
       (SELECT count(*) FROM ended) AS ended,
       count(*) FILTER (WHERE reaped AND at > old_lease_expires_at AND at < %(heal)s) AS recovered,
       count(*) FILTER (WHERE NOT reaped) AS ended_otherwise,
       (SELECT count(*) FROM held AS h
          JOIN chaos.transitions AS t
            ON t.job_id = h.job_id AND t.old_lease = h.lease AND t.old_status = 'running'
         WHERE t.at > %(settled)s AND NOT t.reaped
           AND (t.new_status <> 'running'
                OR t.new_lease_expires_at IS DISTINCT FROM t.old_lease_expires_at)) AS late_changes,
       (SELECT count(*) FROM held AS h
         WHERE EXISTS (SELECT FROM chaos.transitions AS n
                        WHERE n.job_id = h.job_id AND n.new_lease = h.lease + 1
                          AND n.locked_by IS DISTINCT FROM %(worker)s)) AS rerun_elsewhere,
       (SELECT coalesce(array_agg(ARRAY[h.job_id, h.lease] ORDER BY h.job_id), '{}') FROM held AS h) AS leases
  FROM ended
"""

CLAIMS_BETWEEN = """
SELECT count(*) AS claims
  FROM chaos.transitions
 WHERE locked_by = %(worker)s AND new_lease <> old_lease AND at >= %(since)s AND at < %(until)s
"""

FIRST_CLAIM = """
SELECT extract(epoch FROM min(at))::float8 AS at
  FROM chaos.transitions
 WHERE locked_by = %(worker)s AND new_lease <> old_lease AND at > %(since)s
"""


def _row(conn: Db, query: str, params: Mapping[str, Any]) -> dict[str, Any]:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row


def partition_evidence(conn: Db, worker: str, cut: float, settled: float, heal: float) -> dict[str, Any]:
    """PARTITION for worker, cut off from cut to heal (epoch seconds); leases: [[job id, lease], ...]."""
    return _row(
        conn, PARTITION, {"worker": worker, "cut": _at(cut), "settled": _at(settled), "heal": _at(heal)}
    )


def claims_between(conn: Db, worker: str, since: float, until: float) -> int:
    """How many claims worker made from since to until (epoch seconds), by the transition log."""
    return int(
        _row(conn, CLAIMS_BETWEEN, {"worker": worker, "since": _at(since), "until": _at(until)})["claims"]
    )


def first_claim(conn: Db, worker: str, since: float) -> float | None:
    """When (epoch seconds) worker first claimed after since, by the transition log (None: never)."""
    at = _row(conn, FIRST_CLAIM, {"worker": worker, "since": _at(since)})["at"]
    return None if at is None else float(at)


# -- the workers' logs ------------------------------------------------------------------

# "2024-06-01 12:00:00,123 WARNING pgjobq.worker: database unavailable (...); retrying in 0.5 s"
_LOG_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) (\w+) ([\w.]+): (.*)")
# a heartbeat that found the lease gone: the database's word, like REFUSED's
LOST_IN_HAND = re.compile(r"job (\d+): lease (\d+) lost while in hand")


@dataclass(frozen=True)
class LogLine:
    at: float  # epoch seconds (the log's local time, to the millisecond)
    level: str
    message: str


def read_log(text: str) -> list[LogLine]:
    """The lines of a worker's log (the CLI's format); other lines (tracebacks) are left out."""
    lines = []
    for raw in text.splitlines():
        found = _LOG_LINE.fullmatch(raw)
        if found is not None:
            stamp = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            lines.append(LogLine(stamp, found.group(2), found.group(4)))
    return lines


def first_after(lines: list[LogLine], since: float, needle: str) -> float | None:
    """When (epoch seconds) the first line at or after since holding needle was logged (None: none)."""
    return next((line.at for line in lines if line.at >= since and needle in line.message), None)


def count_between(lines: list[LogLine], since: float, until: float, needle: str) -> int:
    return sum(1 for line in lines if since <= line.at < until and needle in line.message)


def refused_leases(lines: list[LogLine], since: float) -> set[tuple[int, int]]:
    """The (job, lease) pairs the database refused to the worker from since on, by its log: late results,
    failures or snoozes discarded (REFUSED), and heartbeats that found the lease gone."""
    found: set[tuple[int, int]] = set()
    for line in lines:
        if line.at >= since:
            for pattern in (REFUSED, LOST_IN_HAND):
                found.update((int(job), int(lease)) for job, lease in pattern.findall(line.message))
    return found


# -- checks ---------------------------------------------------------------------------


def _secs(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f} s"


def _rate(claims: int, seconds: float) -> float:
    return claims / seconds if seconds > 0 else 0.0


@dataclass(frozen=True)
class CutFinding:
    """What the evidence says of one cut."""

    record: EpisodeRecord
    held: int  # leases the worker held at the cut (PARTITION)
    recovered: int
    rerun_elsewhere: int
    late: int  # late_changes + ended_otherwise: changes under those leases that were not their reap
    noticed: float | None  # seconds from the cut to the worker's 'database unavailable' (during the cut)
    blackout_claims: int  # claims by the worker from the cut + notice bound to the heal
    rejoined: float | None  # seconds from the heal to its next claim
    refused: int  # of the leases held, those the worker's log says were refused after the heal

    @property
    def dropped(self) -> int:
        return self.record.counters.dropped if self.record.counters is not None else 0


@dataclass(frozen=True)
class WindowFinding:
    """What the evidence says of one latency or loss window: the host's claims, the others', its log."""

    record: EpisodeRecord
    claims: int
    others: dict[str, int]
    unavailable: int  # its 'database unavailable' lines (for loss: until a notice bound after the window)

    @property
    def seconds(self) -> float:
        return self.record.ended - self.record.began

    @property
    def counters(self) -> Counters:
        return self.record.counters or Counters(0, 0)

    def rates(self) -> str:
        return f"claims/s {_rate(self.claims, self.seconds):.1f} vs " + ", ".join(
            f"{_rate(n, self.seconds):.1f} ({name})" for name, n in self.others.items()
        )


@dataclass(frozen=True)
class OpenFinding:
    """What the evidence says of one half-open episode."""

    record: EpisodeRecord
    noticed: float | None  # seconds from the heal to the worker's 'database unavailable'
    rejoined: float | None  # seconds from the heal to its next claim


def _since(at: float | None, origin: float) -> float | None:
    return None if at is None else at - origin


def find_cut(conn: Db, config: NetConfig, r: EpisodeRecord, lines: list[LogLine]) -> CutFinding:
    part = partition_evidence(conn, r.worker, r.began, r.began + config.settle, r.ended)
    noticed_at = first_after(lines, r.began, UNAVAILABLE)
    held = {(int(job), int(lease)) for job, lease in part["leases"]}
    return CutFinding(
        record=r,
        held=part["held"],
        recovered=part["recovered"],
        rerun_elsewhere=part["rerun_elsewhere"],
        late=part["late_changes"] + part["ended_otherwise"],
        noticed=None if noticed_at is None or noticed_at > r.ended else noticed_at - r.began,
        blackout_claims=claims_between(conn, r.worker, r.began + config.notice_bound, r.ended),
        rejoined=_since(first_claim(conn, r.worker, r.ended), r.ended),
        refused=len(refused_leases(lines, r.ended) & held),
    )


def find_open(conn: Db, r: EpisodeRecord, lines: list[LogLine]) -> OpenFinding:
    """What the evidence (the transition log, the worker's log lines) says of the half-open episode r."""
    return OpenFinding(
        record=r,
        noticed=_since(first_after(lines, r.ended, UNAVAILABLE), r.ended),
        rejoined=_since(first_claim(conn, r.worker, r.ended), r.ended),
    )


def find_window(
    conn: Db, r: EpisodeRecord, workers: list[str], lines: list[LogLine], tail: float
) -> WindowFinding:
    return WindowFinding(
        record=r,
        claims=claims_between(conn, r.worker, r.began, r.ended),
        others={name: claims_between(conn, name, r.began, r.ended) for name in workers if name != r.worker},
        unavailable=count_between(lines, r.began, r.ended + tail, UNAVAILABLE),
    )


@dataclass(frozen=True)
class Findings:
    """What the evidence says of each episode of a run, by kind."""

    cuts: list[CutFinding]
    latencies: list[WindowFinding]
    losses: list[WindowFinding]
    opens: list[OpenFinding]


def _within(value: float | None, bound: float) -> bool:
    return value is not None and value <= bound


def _listed(findings: list[Any], show: Callable[[Any], str]) -> str:
    return "; ".join(f"{f.record.host}: {show(f)}" for f in findings) or "no episode"


def _every(findings: list[Any], ok: Callable[[Any], bool]) -> bool:
    """ok holds for every finding, and there is one at least: a kind of fault never injected proves
    nothing."""
    return bool(findings) and all(ok(f) for f in findings)


def judge(
    found: Mapping[str, Mapping[str, Any]],
    config: NetConfig,
    acked: int,
    findings: Findings,
    exits: dict[str, int | None],
    unexpected: list[tuple[str, int | None]],
) -> list[Invariant]:
    """Every invariant of a network chaos run (INVARIANTS): from its evidence() (acked: the ids the
    producer was given, each once), what the evidence says of each episode, and the workers' exit statuses
    after SIGTERM (None: still running) and exits on their own."""
    core = core_invariants(found, acked)
    leases, counts = found["leases"], found["counts"]
    cuts, latencies, losses, opens = findings.cuts, findings.latencies, findings.losses, findings.opens
    c = config
    unclean = {name: status for name, status in exits.items() if status != 0}
    least_rtt = c.latency_ms[0] - c.latency_ms[1]
    return [
        core["lost"],
        core["double_claims"],
        core["stale_completions"],
        core["second_completions"],
        core["duplicates_explained"],
        core["reaped_valid_lease"],
        core["effects_exactly_once"],
        Invariant(
            "lease_lengths", "claims and heartbeats not under the workers' --lease-timeout",
            f"{leases['wrong']} of {leases['claims']} claims + {leases['heartbeats']} heartbeats",
            "0", leases["wrong"] == 0 and leases["claims"] > 0,
        ),
        Invariant(
            "cut_real", "cuts: packets dropped (both ways); running jobs the worker cut off held",
            _listed(cuts, lambda f: f"{f.dropped:,}; {f.held}"), "> 0; > 0",
            _every(cuts, lambda f: f.dropped > 0 and f.held > 0),
        ),
        Invariant(
            "cut_noticed", "cuts: seconds until the worker cut off logs 'database unavailable'",
            _listed(cuts, lambda f: _secs(f.noticed)), f"<= {c.notice_bound:g} s",
            _every(cuts, lambda f: _within(f.noticed, c.notice_bound)),
        ),
        Invariant(
            "cut_stops_claiming", "cuts: claims by the worker cut off, from the notice bound to the heal",
            _listed(cuts, lambda f: str(f.blackout_claims)), "0",
            _every(cuts, lambda f: f.blackout_claims == 0),
        ),
        Invariant(
            "cut_server_cleared", "cuts: seconds until the server has none of the host's backends left",
            _listed(cuts, lambda f: f"{f.record.backends} in {_secs(f.record.cleared_after)}"),
            f"<= {c.server_bound:g} s",
            _every(cuts, lambda f: f.record.backends > 0 and _within(f.record.cleared_after, c.server_bound)),
        ),
        Invariant(
            "cut_recovered", "cuts: leases held at the cut reaped after their expiry, before the heal",
            _listed(cuts, lambda f: f"{f.recovered} of {f.held} ({f.rerun_elsewhere} rerun elsewhere)"),
            "all",
            _every(cuts, lambda f: 0 < f.held == f.recovered),
        ),
        Invariant(
            "cut_late_refused",
            "cuts: changes under those leases after the cut but their reap; late acknowledgements refused"
            " (the worker's log)",
            _listed(cuts, lambda f: f"{f.late}; {f.refused}"), "0; >= 1",
            _every(cuts, lambda f: f.late == 0 and f.refused >= 1),
        ),
        Invariant(
            "cut_rejoined", "cuts: seconds from the heal to the worker's next claim",
            _listed(cuts, lambda f: _secs(f.rejoined)), f"<= {c.rejoin_bound:g} s",
            _every(cuts, lambda f: _within(f.rejoined, c.rejoin_bound)),
        ),
        Invariant(
            "half_open_real",
            "half-open: connections the host holds established; the server's sockets with it left",
            _listed(opens, lambda f: f"{f.record.half_open}; {f.record.server_left}"
                   f" ({f.record.destroyed} forgotten)"),
            ">= 1; 0",
            _every(opens, lambda f: f.record.half_open >= 1 and f.record.destroyed >= 1
                  and f.record.server_left == 0),
        ),
        Invariant(
            "half_open_noticed", "half-open: seconds from the heal to the worker's 'database unavailable'",
            _listed(opens, lambda f: _secs(f.noticed)), f"<= {c.notice_bound:g} s",
            _every(opens, lambda f: _within(f.noticed, c.notice_bound)),
        ),
        Invariant(
            "half_open_rejoined", "half-open: seconds from the heal to the worker's next claim",
            _listed(opens, lambda f: _secs(f.rejoined)), f"<= {c.rejoin_bound:g} s",
            _every(opens, lambda f: _within(f.rejoined, c.rejoin_bound)),
        ),
        Invariant(
            "latency_real", "latency: a TCP connect's time from the delayed host during it",
            _listed(latencies, lambda f: f"{1000 * (f.record.rtt or 0):.0f} ms"), f">= {least_rtt:g} ms",
            _every(latencies, lambda f: f.record.rtt is not None and 1000 * f.record.rtt >= least_rtt),
        ),
        Invariant(
            "latency_works", "latency: the delayed host's claims; its 'database unavailable' lines",
            _listed(latencies, lambda f: f"{f.claims}; {f.unavailable}"), "> 0; 0",
            _every(latencies, lambda f: f.claims > 0 and f.unavailable == 0),
        ),
        Invariant(
            "loss_real", "loss: share of the lossy host's packets dropped",
            _listed(losses, lambda f: f"{100 * f.counters.share:.1f}% of {f.counters.seen:,}"),
            f"{c.loss_percent / 2:g}-{2 * c.loss_percent:g}%",
            _every(losses, lambda f: f.counters.seen >= 100
                  and c.loss_percent / 2 <= 100 * f.counters.share <= 2 * c.loss_percent),
        ),
        Invariant(
            "loss_works", "loss: the lossy host's claims (its 'database unavailable' lines: allowed)",
            _listed(losses, lambda f: f"{f.claims} ({f.unavailable})"), "> 0",
            _every(losses, lambda f: f.claims > 0),
        ),
        Invariant(
            "drained", "jobs left queued or running after the drain",
            str(counts["unfinished"]), "0", counts["unfinished"] == 0,
        ),
        Invariant(
            "clean_exit", "workers not exiting 0 within 30 s of SIGTERM",
            f"{len(unclean)} of {len(exits)}" + (f" {unclean}" if unclean else ""), "0",
            not unclean and len(exits) > 0,
        ),
        Invariant(
            "no_crashes", "workers that exited on their own",
            str(len(unexpected)), "0", not unexpected,
        ),
    ]  # fmt: skip


def check(
    conn: Db,
    config: NetConfig,
    faults: Faults,
    fleet: NetFleet,
    exits: dict[str, int | None],
    baseline_rtt: dict[str, float],
    acked: int,
) -> tuple[list[Invariant], dict[str, str]]:
    """The invariants and the counts, from the evidence tables (acked: the ids the producer was given,
    each once), the workers' logs and the records."""
    found = evidence(conn, fleet.leases(), WORKER_ROLE, None, conn.info.user)
    counts, dups = found["counts"], found["dups"]
    unexpected = list(fleet.unexpected_exits)
    logs = {w.name: read_log(w.log_text()) for w in fleet.every}
    workers = [w.name for w in fleet.every]
    c = config

    def records(kind: Kind) -> list[EpisodeRecord]:
        return [r for r in faults.records if r.episode.kind == kind]

    cuts = [find_cut(conn, c, r, logs[r.worker]) for r in records("cut")]
    latencies = [find_window(conn, r, workers, logs[r.worker], 0.0) for r in records("latency")]
    losses = [find_window(conn, r, workers, logs[r.worker], c.notice_bound) for r in records("loss")]
    opens = [find_open(conn, r, logs[r.worker]) for r in records("half_open")]

    summary: dict[str, str] = {}
    for cut in cuts:
        r = cut.record
        summary[f"cut {r.host} ({r.worker}) at +{r.began - faults.started:.1f} s"] = (
            f"{r.ended - r.began:.1f} s, {cut.dropped:,} packets dropped; held {cut.held} ({cut.recovered}"
            f" reaped after expiry, {cut.rerun_elsewhere} rerun elsewhere);"
            f" noticed after {_secs(cut.noticed)},"
            f" its {r.backends} backends gone after {_secs(r.cleared_after)};"
            f" {count_between(logs[r.worker], r.began, r.ended, UNAVAILABLE)} '{UNAVAILABLE}' lines;"
            f" {cut.refused} late acknowledgement(s) refused;"
            f" claims again {_secs(cut.rejoined)} after the heal"
        )
    for window in latencies:
        r = window.record
        summary[f"latency {r.host} ({r.worker}) at +{r.began - faults.started:.1f} s"] = (
            f"{window.seconds:.1f} s; TCP connect {1000 * baseline_rtt.get(r.host, math.nan):.1f} ms before,"
            f" {1000 * (r.rtt or math.nan):.0f} ms during; {r.delayed.get('delayed', 0):,} packets held"
            f" (mean {r.delayed.get('mean_ms', 0)} ms, max {r.delayed.get('max_ms', 0)} ms); {window.rates()}"
        )
    for window in losses:
        r = window.record
        counters = window.counters
        summary[f"loss {r.host} ({r.worker}) at +{r.began - faults.started:.1f} s"] = (
            f"{window.seconds:.1f} s; {100 * counters.share:.1f}% of {counters.seen:,} packets dropped;"
            f" {window.unavailable} '{UNAVAILABLE}' lines; {window.rates()}"
        )
    for half in opens:
        r = half.record
        summary[f"half-open {r.host} ({r.worker}) at +{r.began - faults.started:.1f} s"] = (
            f"{r.terminated} backend(s) terminated, {r.destroyed} server socket(s) forgotten during a"
            f" {r.ended - r.began:.1f} s cut ({r.server_left} left); {r.half_open} connection(s) established"
            f" on {r.host} then ({r.open_after} still right after the heal); noticed {_secs(half.noticed)}"
            f" and claims again {_secs(half.rejoined)} after the heal"
        )

    invariants = judge(found, config, acked, Findings(cuts, latencies, losses, opens), exits, unexpected)

    totals = {
        "jobs acknowledged to the producer": f"{counts['acked']:,}",
        "jobs in the table": f"{counts['jobs']:,}",
        "done / failed / cancelled": f"{counts['done']:,} / {counts['failed']:,} / {counts['cancelled']:,}",
        "executions (duplicates)": f"{dups['executions']:,} ({dups['duplicates']:,})",
        "reaps": f"{counts['reaps']:,}",
        "claims per worker": ", ".join(
            f"{w.name} ({HOSTS[slot]}): {claims_between(conn, w.name, 0, time.time()):,}"
            for slot, w in sorted(fleet.slots.items())
        ),
        f"'{UNAVAILABLE}' lines per worker": ", ".join(
            f"{name}: {sum(UNAVAILABLE in line.message for line in lines)}" for name, lines in logs.items()
        ),
    }
    return invariants, {**totals, **summary}


# -- the run -----------------------------------------------------------------------------


def _server_settings(config: NetConfig) -> dict[str, str]:
    idle, interval, count = config.keepalives
    return {
        "max_connections": "100",
        "tcp_keepalives_idle": str(idle),
        "tcp_keepalives_interval": str(interval),
        "tcp_keepalives_count": str(count),
        "tcp_user_timeout": str(config.user_timeout_ms),
    }


def _connected(conn: Db, fleet: NetFleet) -> bool:
    names = [f"pgjobq worker {w.name}" for w in fleet.live()]
    row = conn.execute(
        "SELECT count(DISTINCT application_name) AS n FROM pg_stat_activity WHERE application_name = ANY(%s)",
        (names,),
    ).fetchone()
    return row is not None and row["n"] == len(names) == len(HOSTS)


def run_chaos_net(config: NetConfig, workdir: Path) -> NetReport:
    """One run; the workers' logs, the producer's id log and the server's log go to workdir.

    Raises chaos.netns.Unsupported when network namespaces cannot be made here.
    """
    began = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    with Network() as network:
        network.add_host(DB)
        for slot, host in enumerate(HOSTS):
            delay = config.latency_ms if slot in config.latency_hosts else None
            network.add_host(host, delay=delay, seed=config.load.seed + slot)
        server = NamespacedPostgres(network, DB, settings=_server_settings(config))
        if server.major >= 14:
            server.settings["client_connection_check_interval"] = str(config.check_interval_ms)
        with server:
            try:
                report = _run(config, workdir, network, server)
            finally:
                shutil.copy(server.log_file, workdir / "server.log")
    report.wall = time.monotonic() - began
    report.counts["wall time"] = f"{report.wall:.0f} s"
    return report


def _run(config: NetConfig, workdir: Path, network: Network, server: NamespacedPostgres) -> NetReport:
    dsn = server.dsn()  # the superuser's, through the unix socket: the producer's and the harness's
    prepare(dsn)
    service = write_service(workdir / "pg_service.conf", config)
    fleet = NetFleet(server.tcp_dsn(WORKER_ROLE), config, workdir, network, service)
    producer = Producer(dsn, config.load, workdir / "acked-ids.txt")
    faults = Faults(config, network, dsn, fleet)
    db_address = network.hosts[DB].address
    baseline = {
        HOSTS[slot]: network.connect_time(HOSTS[slot], db_address, PORT) for slot in config.latency_hosts
    }
    say(
        f"{config.name} network chaos run: {config.load.jobs:,} jobs, {len(HOSTS)} worker hosts,"
        f" database at {db_address}; logs in {workdir}"
    )
    try:
        fleet.start()
        with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
            if not wait_until(lambda: _connected(conn, fleet), timeout=60, interval=0.1):
                raise RuntimeError(f"the workers did not all connect within 60 s: see {workdir}")
            producer.start()
            faults.start()
            faults.join()
            if faults.error is not None:
                producer.abort()
            producer.join()
            for failed in (faults, producer):
                if failed.error is not None:
                    raise RuntimeError(f"the {failed.name} thread failed") from failed.error

            def drained() -> bool:
                fleet.replace_dead()
                row = conn.execute(
                    "SELECT count(*) AS n FROM jobq.jobs WHERE status IN ('queued', 'running')"
                ).fetchone()
                return row is not None and row["n"] == 0

            say("draining")
            wait_until(drained, config.load.drain_timeout, interval=0.5)
            exits = fleet.terminate_all(timeout=30)
            with conn.cursor() as cur, cur.copy("COPY chaos.acked (id) FROM STDIN") as copy:
                for job_id in sorted(set(producer.acked)):
                    copy.write_row((job_id,))
            with conn.cursor() as cur, cur.copy("COPY chaos.replaced (n, job_id) FROM STDIN") as copy:
                for row in producer.replaced:
                    copy.write_row(row)
            say("checking")
            invariants, counts = check(conn, config, faults, fleet, exits, baseline, len(set(producer.acked)))
            if not all(invariant.ok for invariant in invariants):
                say(f"invariants violated: the evidence tables are in {keep_evidence(conn, workdir)}")
    finally:
        producer.abort()
        faults.finish()
        fleet.kill_all()
    return NetReport(config, invariants, counts, faults.records, faults.started, 0.0, workdir)


def render(report: NetReport, console: Console | None = None) -> None:
    console = console or Console()
    c = report.config
    title = (
        f"pgjobq network chaos run ({c.name}): {c.load.jobs:,} jobs of {c.load.handler_ms[0]}-"
        f"{c.load.handler_ms[1]} ms, workers on {len(HOSTS)} hosts x {c.load.concurrency} threads,"
        f" lease {c.lease:g} s, --network-timeout {c.network_timeout:g} s"
    )
    print_tables(console, title, report.invariants, report.counts)
    episodes = Table(title="episodes (seconds after the producer started)")
    for column in ("fault", "host", "worker", "began", "lasted"):
        episodes.add_column(column, justify="right")
    for r in report.episodes:
        episodes.add_row(
            r.episode.kind, r.host, r.worker, f"{r.began - report.started:.1f}", f"{r.ended - r.began:.1f}"
        )
    console.print(episodes)
    console.print("[green]all invariants hold[/]" if report.ok else "[red]invariants violated[/]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--full", action="store_true", default=os.environ.get("PGJOBQ_CHAOS_NET_FULL", "") not in ("", "0"),
        help="the full run (three rounds of faults) instead of the short one [env PGJOBQ_CHAOS_NET_FULL]",
    )  # fmt: skip
    parser.add_argument(
        "--workdir", type=Path, default=os.environ.get("PGJOBQ_CHAOS_NET_WORKDIR") or None,
        help="folder for the logs (default: a new temporary folder) [env PGJOBQ_CHAOS_NET_WORKDIR]",
    )  # fmt: skip
    args = parser.parse_args(argv)
    config = NetConfig.full() if args.full else NetConfig.short()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=f"pgjobq-chaos-net-{config.name}-"))
    try:
        report = run_chaos_net(config, workdir)
    except Unsupported as exc:
        print(f"chaos-net cannot run here: {exc}", file=sys.stderr)
        return 2
    render(report, Console(width=150))
    return 0 if report.ok else 1


if __name__ == "__main__":
    with servers_run_the_working_tree():  # its servers run the working tree's SQL, as the tests' do
        sys.exit(main())
