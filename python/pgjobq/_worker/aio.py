"""AsyncWorker: claims jobs and runs coroutine handlers on them, as tasks of one event loop.

It does what :class:`pgjobq.Worker` does (see pgjobq._worker.sync's docstring),
with the same WorkerSettings and built on the same parts: the jobs in hand
(pgjobq._worker.in_hand), batched acknowledgements and failure reports
(pgjobq._worker.acks), the heartbeat schedule (pgjobq._worker.leases), LISTEN and its
probe (pgjobq._worker.listen), reap and tick (pgjobq._worker.upkeep), the reconnect
backoff (pgjobq._worker.backoff) and signals (pgjobq._worker.signals).  What differs is
how handlers run:

- each job in hand runs as a task of the worker's event loop, at most
  ``concurrency`` at once (the setting counts tasks here, not threads);
  a claim asks for up to ``batch`` jobs whenever fewer tasks run;
- one coroutine, the worker's loop, does all the talking on the work
  connection (claim, acknowledge, heartbeat, reap, tick, release) between
  handlers' awaits; handlers never touch the worker's connections;
- the listening connection is read by a task of its own, which sets the
  ``cancel_requested`` of the jobs a ``cancel:`` notification names at once
  and wakes the loop for the others (await ``job.wait_for_cancel(timeout)``
  in a handler to wait for a cancel request without blocking the loop);
- SIGTERM and SIGINT (under ``run()``, on the main thread) are handled with
  ``loop.add_signal_handler``: the first stops claiming, hands back the jobs
  not started, lets the running tasks finish and acknowledges them; a
  second cancels the running tasks and gives up the jobs in hand (the
  reaper recovers them).

Handlers: a coroutine function (``async def``, or an object whose
``__call__`` is one) is awaited on the loop.  Any other callable (a plain
function) runs on a thread of the worker's own pool of ``concurrency``
threads (``loop.run_in_executor``, with the task's context, so that a trace
span is current there too), so that it never blocks the loop; if what it
returns is awaitable (a lambda or partial wrapping a coroutine function), that
is awaited on the loop.  Run ``asyncio.run(worker.run())``, or
``pgjobq worker MODULE:COROUTINE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import signal
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from pgjobq import _tracing, aio
from pgjobq._client import proto
from pgjobq._errors import Error, InvalidArgument, JobNotFound, LeaseLost, PermissionDenied, first_line
from pgjobq._job import Job
from pgjobq._queries import query
from pgjobq._worker import acks, connections, signals
from pgjobq._worker.backoff import Backoff
from pgjobq._worker.in_hand import InHand
from pgjobq._worker.leases import Leases, report_lost
from pgjobq._worker.listen import (
    PROBE_TIMEOUT,
    cancel_ids,
    listen_statement,
    probe_channel,
    unlisten_statement,
    warn_not_delivered,
    warn_wait_refused,
)
from pgjobq._worker.observe import Outcome
from pgjobq._worker.observing import Observers, Timing
from pgjobq._worker.settings import WorkerSettings
from pgjobq._worker.upkeep import Upkeep

__all__ = ["AsyncHandler", "AsyncWorker", "is_coroutine_function"]

is_coroutine_function = acks.is_coroutine_function

logger = logging.getLogger("pgjobq.worker")

# A coroutine function (what it returns is awaited), or a plain function (run on a thread)
AsyncHandler = Callable[[Job], Any]

AsyncConn = psycopg.AsyncConnection[Any]

# As in pgjobq._worker.sync: listen this long before claiming again when jobq.wait could not register,
# and wake this long after the next job's run_at.
REGISTER_RETRY = 0.015
RUN_AT_MARGIN = 0.002


class AsyncWorker:
    """Runs ``handler`` (a coroutine function) on the jobs of one queue or several, as asyncio tasks.

    See the module docstring.  ``conninfo`` is a libpq connection string.
    Outcomes are the Worker's: returning completes the job with the value
    returned as its result; ``Snooze`` and ``Retry`` as there; any other
    exception fails the job.
    """

    def __init__(self, conninfo: str, handler: AsyncHandler, settings: WorkerSettings | None = None) -> None:
        self.conninfo = conninfo
        self.handler = handler
        self.settings = settings or WorkerSettings()
        self._coroutine_handler = acks.is_coroutine_function(handler)
        queues = self.settings.queues
        self._several = len(queues) > 1
        self._queue_names = ", ".join(queues)
        self._claim_params = self.settings.claim_params()
        self._wait_params = self.settings.wait_params()
        self.processed = 0
        self.abandoned = 0
        self._stop_requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped: asyncio.Event | None = None  # made in run(), on the loop; set by the first stop
        self._stop_changed: asyncio.Event | None = None  # set by each stop: wakes the wait for handlers
        self._woken: asyncio.Event | None = None  # a wake-up notification arrived
        self._conn: AsyncConn | None = None
        self._listen_conn: AsyncConn | None = None
        self._listener: asyncio.Task[None] | None = None
        self._pool: ThreadPoolExecutor | None = None  # for handlers that are not coroutine functions
        self._hand = InHand()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._leases = Leases(self.settings, self._queue_names)
        self._upkeep = Upkeep()
        self._observers = Observers(self.settings.observers)
        self._observing = bool(self.settings.observers)  # a plain bool: tested on the hot path
        self._timing = Timing()
        self._reconnecting = False
        self._drained = False
        self._poll_only = False
        self._may_wait = True
        self._started = False

    # -- public API -----------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop gracefully (from the loop, a signal, or any thread).

        A second call gives up on the jobs in hand: their tasks are cancelled and the reaper recovers them.
        """
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is not loop:
                loop.call_soon_threadsafe(self._stop_now)
                return
        self._stop_now()

    def _stop_now(self) -> None:
        self._stop_requests += 1
        if self._stopped is not None and self._stop_changed is not None:
            self._stopped.set()
            self._stop_changed.set()
        if self._woken is not None:
            self._woken.set()

    @property
    def stopping(self) -> bool:
        return self._stop_requests > 0

    async def run(self, *, install_signal_handlers: bool = True) -> None:
        """Work until stop() (or SIGTERM/SIGINT), or in burst mode until the queues have no runnable job."""
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._stop_changed = asyncio.Event()
        self._woken = asyncio.Event()
        if self._stop_requests:
            self._stopped.set()
        restore = signals.install_on_loop(self._loop, self._on_signal) if install_signal_handlers else None
        if not self._coroutine_handler:
            self._pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="pgjobq-handler")
        try:
            await self._work()
        finally:
            self.abandoned = len(self._hand)
            if self.abandoned:
                logger.warning("abandoning %d job(s) in hand; the reaper will recover them", self.abandoned)
            for task in self._tasks.values():
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await self._disconnect()
            if self._pool is not None:
                self._pool.shutdown(wait=not self.abandoned, cancel_futures=True)
            if restore is not None:
                restore()
        logger.info("worker %s stopped after %d jobs", self.settings.name, self.processed)

    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self.stopping:
            logger.warning("second %s: giving up the jobs in hand", name)
        else:
            logger.info("received %s: finishing jobs in hand", name)
        self._stop_now()

    # -- the loop -------------------------------------------------------------

    async def _work(self) -> None:
        backoff = Backoff(self.settings.reconnect_delay_max)
        while self._stop_requests < 2 and (self._hand or not (self.stopping or self._drained)):
            try:
                await self._connect()
                if self._reconnecting:
                    self._reconnecting = False
                    if self._observing:
                        self._observers.reconnected()
                await self._step()
                backoff.reset()
            except connections.UNAVAILABLE as exc:
                await self._disconnect()
                self._reconnecting = self._started  # a reconnect once it had connected
                pause = backoff.next()
                logger.warning("%s; retrying in %.1f s", connections.unavailable(exc), pause)
                # the database cannot be reached: jobs whose lease ran out by our clock are to stop
                for job in self._leases.presumed_lost(self._hand.unfinished(), time.monotonic()):
                    job._presume_lost()
                await self._sleep(pause)

    async def _step(self) -> None:
        self._start_handlers()
        batch_over = not self._tasks and not self._hand.backlog
        if self._claiming() and batch_over:
            await self._report_failures()  # the successes ride on the next claim
        else:
            await self._acknowledge(now=self.stopping or batch_over)
        if self.stopping:
            await self._release_backlog()
        await self._heartbeat()
        now = time.monotonic()
        if now >= self._upkeep.next_due:
            await self._reap()
            await self._tick()
            self._upkeep.next_due = now + self.settings.reap_interval
        if self._claiming() and await self._claim():
            return
        if self._tasks:
            await self._wait_for_handlers()
        elif not self.stopping and not self._drained:
            await self._wait_for_work()

    def _claiming(self) -> bool:
        return not self.stopping and not self._drained and len(self._tasks) < self.settings.concurrency

    async def _claim(self) -> bool:
        """Claim a batch into the backlog (successes ride along: jobq.complete_and_claim); False when the
        queues had nothing runnable for this claim."""
        conn = self._conn
        assert conn is not None
        if self._several:
            await self._complete_many()
            began = time.perf_counter()
            jobs = await aio._run(conn, proto.Call("claim_any", self._claim_params, proto.jobs), prepare=True)
            return self._claimed(jobs, began)
        successes, results = self._hand.take_successes()
        settled = not successes
        began = time.perf_counter()
        try:
            if successes:
                params = {
                    **self._claim_params,
                    "ids": [job.id for job in successes],
                    "leases": [job.lease for job in successes],
                    "results": results,
                }
                try:
                    accepted, jobs = await aio._run(
                        conn, proto.complete_and_claim_unchecked(params), prepare=True
                    )
                except InvalidArgument:
                    if results is None:
                        raise
                    settled = True
                    await self._complete_singly(conn, successes, results)
                    began = time.perf_counter()
                    jobs = await self._claim_only(conn)
                else:
                    settled = True
                    self._acknowledged(successes, accepted)
            else:
                jobs = await self._claim_only(conn)
        except BaseException:
            if not settled:
                self._hand.restore_successes(successes, results, time.monotonic())
            raise
        return self._claimed(jobs, began)

    async def _claim_only(self, conn: AsyncConn) -> list[Job]:
        return await aio._run(conn, proto.Call("claim", self._claim_params, proto.jobs), prepare=True)

    def _claimed(self, jobs: list[Job], began: float) -> bool:
        if self._observing:
            now = time.perf_counter()
            self._observers.claimed(self.settings.queues, jobs, now - began)
            self._timing.held(jobs, now)
        if jobs:
            alone = not (self._hand.backlog or self._tasks)
            self._leases.held(jobs, time.monotonic(), alone=alone)
            self._hand.hold(jobs)
            self._start_handlers()
        if not jobs and self.settings.burst and not self._hand:
            noun = "queues" if self._several else "queue"
            logger.info("%s %s has no runnable job: burst done", noun, self._queue_names)
            self._drained = True
        return bool(jobs)

    def _start_handlers(self) -> None:
        """Start a task for each backlog job while fewer than concurrency run (none once stopping)."""
        while not self.stopping and self._hand.backlog and len(self._tasks) < self.settings.concurrency:
            job = self._hand.backlog.popleft()
            if job._cancel_is_set():
                self._record(job, acks.CancelledUnstarted(), None)
                continue
            self._hand.start(job)
            if self._observing:
                self._observers.started(job, self._timing.start(job, time.perf_counter()))
            task = asyncio.ensure_future(self._run_handler(job))
            self._tasks[job.id] = task

    async def _run_handler(self, job: Job) -> None:
        """One job's task: run its handler, then record its outcome in hand."""
        try:
            with _tracing.process(job, self.settings.name):
                if self._coroutine_handler:
                    result = await self.handler(job)
                else:
                    assert self._loop is not None
                    context = contextvars.copy_context()
                    result = await self._loop.run_in_executor(self._pool, context.run, self.handler, job)
                    if inspect.isawaitable(result):
                        result = await result
            text = acks.encode_result(self.handler, result)
        except asyncio.CancelledError:
            if self._stop_requests >= 2:
                raise  # given up: the job stays in hand, abandoned
            error: BaseException | None = asyncio.CancelledError("the handler was cancelled")
            text = None
        except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
            error = exc
            text = None
        else:
            error = None
        finally:
            if self._observing:
                self._timing.end(job, time.perf_counter())
        self._tasks.pop(job.id, None)
        self._record(job, error, text)

    def _record(self, job: Job, error: BaseException | None, result: str | None) -> None:
        self._hand.record(job, error, result, time.monotonic())
        if self._observing:
            self._observers.pending(self._hand.pending)

    async def _wait_for_handlers(self) -> None:
        """Sleep until a handler finishes, a heartbeat or an acknowledgement is due, or a poll interval."""
        deadline = min(self._leases.next_due, time.monotonic() + self.settings.poll_interval)
        if self._hand.ok or self._hand.failed:
            deadline = min(deadline, self._hand.oldest_unacked + self.settings.ack_interval)
        timeout = max(0.0, deadline - time.monotonic())
        assert self._stop_changed is not None
        self._stop_changed.clear()  # the stops so far are handled: wait for the next one (a second)
        stopped = asyncio.ensure_future(self._stop_changed.wait())
        try:
            await asyncio.wait(
                [*self._tasks.values(), stopped], timeout=timeout, return_when="FIRST_COMPLETED"
            )
        finally:
            stopped.cancel()

    async def _wait_for_work(self) -> None:
        """The claim found nothing: register as waiting (jobq.wait), claim once more, then sleep until a
        wake-up, the poll interval, the next job's run_at, the next reap and tick, or stop()."""
        deadline = min(time.monotonic() + self.settings.poll_interval, self._upkeep.next_due)
        conn = self._conn
        assert conn is not None and self._woken is not None
        if self._listener is None or not self._may_wait:
            await self._sleep(deadline - time.monotonic())
            return
        await self._acknowledge(now=True)
        self._woken.clear()  # earlier wake-ups are stale: the claim after registering finds their jobs
        before = time.monotonic()
        call = proto.wait_any_unchecked if self._several else proto.wait_unchecked
        try:
            registered, _, next_run_in = await aio._run(conn, call(self._wait_params), prepare=True)
        except PermissionDenied as exc:
            self._may_wait = False
            warn_wait_refused(first_line(exc), self.settings.poll_interval)
            return
        if not registered:
            if await self._woken_before(time.monotonic() + REGISTER_RETRY):
                await self._claim()
            return
        if next_run_in is not None:
            deadline = min(deadline, before + next_run_in.total_seconds() + RUN_AT_MARGIN)
        if self.stopping or await self._claim():
            return
        if await self._woken_before(deadline):
            await self._claim()

    async def _woken_before(self, deadline: float) -> bool:
        """Wait for a wake-up notification until deadline (monotonic); whether one came (not a stop)."""
        assert self._woken is not None
        remaining = deadline - time.monotonic()
        if remaining > 0 and not self._woken.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._woken.wait(), remaining)
        woken = self._woken.is_set() and not self.stopping
        self._woken.clear()
        return woken

    async def _sleep(self, seconds: float) -> None:
        """Sleep that long, or until stop()."""
        assert self._stopped is not None
        if seconds > 0 and not self._stopped.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopped.wait(), seconds)

    # -- cancel requests and the listening connection -------------------------------

    async def _listen(self, conn: AsyncConn) -> None:
        """The listener task: wake-ups wake the loop, cancel requests set the jobs' cancel_requested."""
        assert self._woken is not None
        try:
            async for notify in conn.notifies():
                ids = cancel_ids(notify.payload)
                if ids is None:
                    self._woken.set()
                else:
                    self._request_cancel(ids, "by notification")
        except psycopg.Error as exc:
            # the loop reopens it at its next connect; heartbeats bring cancel requests meanwhile
            logger.debug("the listening connection failed (%s)", first_line(exc))
            self._woken.set()

    def _request_cancel(self, ids: Collection[int], how: str) -> None:
        for job in self._hand.unfinished():
            if job.id in ids and not job._cancel_is_set():
                job._request_cancel()
                logger.info("job %d: cancel requested (heard %s)", job.id, how)

    # -- acknowledging --------------------------------------------------------

    async def _acknowledge(self, *, now: bool) -> None:
        if not (self._hand.ok or self._hand.failed) or not (
            now or self._hand.ack_due(time.monotonic(), self.settings.ack_interval)
        ):
            return
        await self._complete_many()
        await self._report_failures()

    async def _complete_many(self) -> None:
        conn = self._conn
        assert conn is not None
        successes, results = self._hand.take_successes()
        if not successes:
            return
        call = proto.complete_many_unchecked(
            [job.id for job in successes], [job.lease for job in successes], results
        )
        try:
            accepted = await aio._run(conn, call, prepare=True)
        except InvalidArgument:
            if results is None:
                self._hand.restore_successes(successes, results, time.monotonic())
                raise
            await self._complete_singly(conn, successes, results)
            return
        except BaseException:
            self._hand.restore_successes(successes, results, time.monotonic())
            raise
        self._acknowledged(successes, accepted)

    async def _complete_singly(
        self, conn: AsyncConn, successes: list[Job], results: list[str | None]
    ) -> None:
        """The database refused a batch of results: acknowledge its jobs one by one (a job whose own result
        is refused fails with the database's reason)."""
        done: list[Job] = []
        accepted: set[int] = set()
        sent = 0
        try:
            for job, result in zip(successes, results, strict=True):
                try:
                    call = proto.complete_many_unchecked([job.id], [job.lease], [result])
                    got: set[int] = await aio._run(conn, call)
                    accepted |= got
                except InvalidArgument as refused:
                    self._record(job, refused, None)
                else:
                    done.append(job)
                sent += 1
        except BaseException:
            self._hand.restore_successes(successes[sent:], results[sent:], time.monotonic())
            raise
        finally:
            self._acknowledged(done, accepted)

    def _acknowledged(self, successes: list[Job], accepted: set[int]) -> None:
        outcomes = acks.acknowledged(successes, accepted)
        self.processed += len(successes)
        if self._observing:
            for job, outcome in outcomes:
                self._observers.finished(job, outcome, self._timing.settled(job))
            self._observers.pending(self._hand.pending)

    async def _report_failures(self) -> None:
        conn = self._conn
        assert conn is not None
        while self._hand.failed:
            job, error = self._hand.failed[0]
            outcome = await self._drive(conn, acks.report(job, error))
            self._hand.failed.pop(0)
            self.processed += 1
            if self._observing:
                self._observers.finished(job, outcome, self._timing.settled(job))
                self._observers.pending(self._hand.pending)

    @staticmethod
    async def _drive(conn: AsyncConn, steps: acks.Report) -> Outcome:
        """acks.drive on the async connection."""
        try:
            call = next(steps)
            while True:
                try:
                    value = await aio._run(conn, call)
                except Exception as exc:
                    call = steps.throw(exc)
                else:
                    call = steps.send(value)
        except StopIteration as stop:
            outcome: Outcome = stop.value
            return outcome

    async def _release_backlog(self) -> None:
        conn = self._conn
        assert conn is not None
        while self._hand.backlog:
            job = self._hand.backlog[0]
            outcome: Outcome
            try:
                await aio._run(conn, proto.release(job.id, job.lease))
                logger.info("job %d handed back unstarted", job.id)
                outcome = "released"
            except (LeaseLost, JobNotFound):
                acks.lost(job, "not handed back")
                outcome = "lost"
            self._hand.backlog.popleft()
            if self._observing:
                self._observers.finished(job, outcome, self._timing.settled(job))

    # -- leases, reap and tick --------------------------------------------------------

    async def _heartbeat(self) -> None:
        """When a heartbeat is due, extend in one jobq.heartbeat_status the leases of the jobs in hand
        whose handler has not returned (see pgjobq._worker.leases)."""
        conn = self._conn
        assert conn is not None
        now = time.monotonic()
        if now < self._leases.next_due:  # most calls: before listing the jobs in hand
            return
        due = self._leases.due(self._hand.unfinished(), now)
        if not due:
            return
        call = proto.heartbeat_status_unchecked([job.id for job in due], [job.lease for job in due])
        rows = await aio._run(conn, call, prepare=True)
        beat = self._leases.beat(rows, now)
        still = {job.id for job in self._hand.unfinished()}
        for job in report_lost(due, beat, still):
            job._request_cancel()
        self._request_cancel(beat.cancels, "at a heartbeat")

    async def _reap(self) -> None:
        assert self._conn is not None
        if not self._upkeep.may_reap:
            return
        try:
            reaped = await aio.reap(self._conn)
        except PermissionDenied as exc:
            self._upkeep.reap_refused(exc)
            return
        self._upkeep.reaped(reaped)

    async def _tick(self) -> None:
        assert self._conn is not None
        if not self._upkeep.may_tick:
            return
        try:
            enqueued = await aio.tick(self._conn)
        except PermissionDenied as exc:
            self._upkeep.tick_refused(exc)
            return
        except Error as exc:
            self._upkeep.tick_failed(exc)
            return
        self._upkeep.ticked(enqueued)

    # -- connections --------------------------------------------------------

    async def _open(self, role: str) -> AsyncConn:
        conn = await psycopg.AsyncConnection.connect(
            self.conninfo,
            autocommit=True,
            application_name=connections.app_name(role, self.settings),
            **connections.network_options(self.conninfo, self.settings),
        )
        connections.configure(conn, self.settings)
        return conn

    async def _connect(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = await self._open("worker")
            version = await aio.check_extension(self._conn)
            if not self._started:
                self._started = True
                logger.info(
                    "worker %s started on %s %s (pgjobq %s, asyncio)",
                    self.settings.name,
                    "queues" if self._several else "queue",
                    self._queue_names,
                    version,
                )
            self._conn.add_notify_handler(connections.ignore_notify)
            self._leases.next_due = 0.0
        listening = (
            self._listen_conn is not None
            and not self._listen_conn.closed
            and self._listener is not None
            and not self._listener.done()
        )
        if self.settings.listen and not self._poll_only and not listening:
            await self._stop_listener()
            if self._listen_conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await self._listen_conn.close()
            listen = self._listen_conn = await self._open("listen")
            channels = [await aio.channel(listen, queue) for queue in self.settings.queues]
            if await self._notifications_arrive(listen):
                for channel in channels:
                    await listen.execute(listen_statement(channel))
                self._listener = asyncio.ensure_future(self._listen(listen))
            else:
                warn_not_delivered(channels, self.settings.poll_interval)
                await listen.close()
                self._listen_conn = None
                self._poll_only = True

    async def _notifications_arrive(self, listen: AsyncConn) -> bool:
        """Whether a probe notification sent from the work connection reaches the listening one."""
        assert self._conn is not None
        probe = probe_channel()
        await listen.execute(listen_statement(probe))
        await self._conn.execute(query("probe_notify"), {"channel": probe})
        arrived = False
        notifies = listen.notifies(timeout=PROBE_TIMEOUT)
        try:
            async for notify in notifies:
                if notify.channel == probe:
                    arrived = True
                    break
        finally:
            await notifies.aclose()
        await listen.execute(unlisten_statement(probe))
        if arrived:
            logger.debug("LISTEN works here: the probe notification arrived")
        return arrived

    async def _stop_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await listener

    async def _disconnect(self) -> None:
        await self._stop_listener()
        for conn in (self._conn, self._listen_conn):
            if conn is not None:
                with contextlib.suppress(psycopg.Error):
                    await conn.close()
        self._conn = self._listen_conn = None
        self._poll_only = False
