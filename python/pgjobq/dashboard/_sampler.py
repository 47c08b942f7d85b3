"""The dashboard's short memory: queue counts and finished jobs, sampled every few seconds.

The database keeps no history of throughput, and counting finished jobs by
time would read the whole table (finished_at has no index, and should not:
every completion would pay for it).  So each dashboard process samples, every
``interval`` seconds, the counts of unfinished jobs (walking the partial
indexes only) and the jobs that finished since its previous sample, and keeps
the last ``keep`` samples in memory, on the app (never module state): a
restarted dashboard starts with an empty history, two dashboards each keep
their own.

Counting what finished since the previous sample reads a range of the
primary key: from the lowest id that could finish meanwhile (the running
jobs, the queued ones due before the next sample; minus a small slack for
enqueues in flight) to the newest id.  That range holds the jobs worked
since, whatever their age, and is bounded by ``max_scan`` ids: when a job
older than that finishes (it ran or waited for longer than ``max_scan``
newer jobs took), it is not counted, and the sample is marked ``partial``.
A job finished by a transaction that commits after the sample is taken is
counted by neither sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from pgjobq.dashboard._queries import query

__all__ = ["QueueCounts", "Sample", "Sampler"]

log = logging.getLogger("pgjobq.dashboard")

SLACK_IDS = 1000  # ids below the newest that an enqueue in flight may still commit


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """One queue's unfinished jobs, and what finished in the sample's interval (None: not counted)."""

    runnable: int
    scheduled: int
    running: int
    waiting: int
    failed: int
    oldest_runnable_age: timedelta | None
    done_since: int | None = None
    failed_since: int | None = None
    cancelled_since: int | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    at: datetime  # the database's clock
    seconds: float | None  # since the previous sample; None for the first
    queues: dict[str, QueueCounts]
    partial: bool = False


@dataclass
class _Cursor:
    """Where the next sample's count of finished jobs starts."""

    at: datetime
    low: int


@dataclass
class Sampler:
    pool: AsyncConnectionPool[Any]
    interval: float = 5.0
    keep: int = 180  # 15 minutes at 5 s
    max_scan: int = 200_000
    history: deque[Sample] = field(init=False)
    _cursor: _Cursor | None = field(default=None, init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.history = deque(maxlen=self.keep)

    async def sample(self) -> Sample:
        """Take one sample (in one read-only REPEATABLE READ transaction) and add it to the history."""
        horizon = timedelta(seconds=self.interval * 2)
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(query("snapshot"))
            cur = conn.cursor(row_factory=dict_row)
            top_row = await (await cur.execute(query("top_id"))).fetchone()
            assert top_row is not None
            at: datetime = top_row["at"]
            top: int = top_row["top"] or 0
            counts = await (await cur.execute(query("queue_counts"), {"horizon": horizon})).fetchall()
            finished: dict[str, dict[str, Any]] = {}
            partial = False
            previous = self._cursor
            if previous is not None:
                low = previous.low
                if top - low > self.max_scan:
                    low, partial = top - self.max_scan, True
                rows = await (
                    await cur.execute(query("finished_since"), {"low": low, "since": previous.at})
                ).fetchall()
                finished = {row["queue"]: row for row in rows}
        lows = [row["low"] for row in counts if row["low"] is not None]
        self._cursor = _Cursor(at=at, low=min([*lows, top + 1 - SLACK_IDS]))
        queues: dict[str, QueueCounts] = {}
        names = sorted({row["queue"] for row in counts} | set(finished))
        by_queue = {row["queue"]: row for row in counts}
        for name in names:
            row = by_queue.get(name, {})
            done = finished.get(name, {})
            queues[name] = QueueCounts(
                runnable=int(row.get("runnable") or 0),
                scheduled=int(row.get("scheduled") or 0),
                running=int(row.get("running") or 0),
                waiting=int(row.get("waiting") or 0),
                failed=int(row.get("failed") or 0),
                oldest_runnable_age=row.get("oldest_runnable_age"),
                done_since=None if previous is None else int(done.get("done") or 0),
                failed_since=None if previous is None else int(done.get("failed") or 0),
                cancelled_since=None if previous is None else int(done.get("cancelled") or 0),
            )
        seconds = None if previous is None else (at - previous.at).total_seconds()
        result = Sample(at=at, seconds=seconds, queues=queues, partial=partial)
        self.history.append(result)
        return result

    async def _run(self) -> None:
        """Sample every interval seconds (the first sample is taken by the app's start)."""
        failing = False
        began = time.monotonic()
        while True:
            await asyncio.sleep(max(0.1, self.interval - (time.monotonic() - began)))
            began = time.monotonic()
            try:
                await self.sample()
                failing = False
            except (psycopg.Error, OSError) as exc:  # the database went away: try again next time
                if not failing:
                    log.warning(
                        "dashboard: sampling failed: %s",
                        (str(exc).strip().splitlines() or [type(exc).__name__])[0],
                    )
                failing = True

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="pgjobq-dashboard-sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def series(self) -> dict[str, Any]:
        """The history as columns for the charts: times, and per queue depth, done and failed per minute
        and the failure rate (None where a sample has no value)."""
        samples: Sequence[Sample] = list(self.history)
        names = sorted({name for sample in samples for name in sample.queues})
        times = [sample.at.timestamp() for sample in samples]
        depth: dict[str, list[int | None]] = {name: [] for name in names}
        done: dict[str, list[float | None]] = {name: [] for name in names}
        failed: dict[str, list[float | None]] = {name: [] for name in names}
        rate: dict[str, list[float | None]] = {name: [] for name in names}
        for sample in samples:
            for name in names:
                # a queue missing from a sample had no unfinished job and finished none: zeros
                counts = sample.queues.get(name) or QueueCounts(0, 0, 0, 0, 0, None, 0, 0, 0)
                depth[name].append(counts.runnable + counts.scheduled)
                if sample.seconds is None or sample.seconds <= 0:
                    done[name].append(None)
                    failed[name].append(None)
                    rate[name].append(None)
                    continue
                per_minute = 60.0 / sample.seconds
                done_since, failed_since = counts.done_since or 0, counts.failed_since or 0
                done[name].append(round(done_since * per_minute, 2))
                failed[name].append(round(failed_since * per_minute, 2))
                ended = done_since + failed_since
                rate[name].append(None if ended == 0 else round(100.0 * failed_since / ended, 2))
        return {
            "interval": self.interval,
            "times": times,
            "queues": names,
            "depth": depth,
            "done_per_minute": done,
            "failed_per_minute": failed,
            "failure_rate": rate,
            "partial": any(sample.partial for sample in samples),
        }

    def known(self) -> set[str]:
        """The queues of the samples kept (so that a drained queue stays on the page while it is charted)."""
        return {name for sample in self.history for name in sample.queues}

    def recent(self, name: str, window: float = 60.0) -> tuple[float | None, float | None]:
        """Queue name's done jobs per minute and failure rate (%) over the last window seconds of
        samples (None: no sample counted any)."""
        seconds = 0.0
        done = failed = 0
        newest = self.history[-1].at if self.history else None
        for sample in reversed(self.history):
            if sample.seconds is None or newest is None or (newest - sample.at).total_seconds() >= window:
                break
            counts = sample.queues.get(name)
            seconds += sample.seconds
            if counts is not None:
                done += counts.done_since or 0
                failed += counts.failed_since or 0
        if seconds <= 0:
            return None, None
        ended = done + failed
        per_minute = done * 60.0 / seconds
        return (
            float(round(per_minute)) if per_minute >= 100 else round(per_minute, 1),
            None if ended == 0 else round(100.0 * failed / ended, 1),
        )
