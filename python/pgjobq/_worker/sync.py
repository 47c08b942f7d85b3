"""Worker: claims jobs of one queue or several, runs a handler on each, reports the outcome.

The caller's thread owns both database connections and does the talking to
PostgreSQL: claim, acknowledge, heartbeat, reap, release.  Handlers never
touch the worker's connections.  With ``concurrency`` 1 (the default) they run
on the caller's thread itself, one job after another, with no hand-off
between threads; a keeper thread sends, while a handler runs, the
acknowledgements and heartbeats that fall due meanwhile (psycopg serialises
the two threads' use of the connection).  With ``concurrency`` above 1 they
run on a pool of that many threads.  The loop:

- claims up to ``batch`` jobs whenever a handler (thread) is idle; with
  several queues (``WorkerSettings(queue=["a", "b"])``), in one
  ``jobq.claim_any`` over them all, by priority, run_at and id across them.
  A queue with limits (``jobq.configure_queue(concurrency => ...,
  key_concurrency => ..., rate_limit => ...)``) hands out fewer jobs while
  a limit is reached: when a claim finds nothing it may take, the worker
  waits as it does for an empty queue (a notification, or poll_interval);
- acknowledges finished jobs together: successes in one statement, failures
  one ``jobq.fail`` each (with the lease).  Successes go with the next claim
  (``jobq.complete_and_claim``: one round trip and one commit for both), or,
  while handlers are busy, in one ``jobq.complete_many`` once the batch in
  hand is over or the oldest result has waited ``ack_interval``.  With
  several queues, successes go in one ``jobq.complete_many`` just before
  the next ``jobq.claim_any``;
- claims each job under a lease of ``lease_timeout`` (by default the
  queue's, set by ``jobq.configure_queue``, else 60 s), which the database
  stores on the job; heartbeats the jobs in hand every
  ``heartbeat_interval`` (by default a quarter of the shortest lease in
  hand, as the claims returned them), which extends each lease by its own
  length, so the reaper leaves long jobs alone.  When the queue has a
  timeout (``jobq.configure_queue(timeout => ...)``), the database keeps
  each claimed job's deadline to itself and never extends its lease past
  it; the worker learns from a heartbeat (``jobq.heartbeat_status``) that
  the deadline has passed, says so once, and heartbeats that job no more:
  the reaper recovers it once the lease runs out;
- stores a handler's return value as its job's result (a value JSON
  cannot encode fails the job instead, as an exception would); a handler
  raising ``Snooze(delay)`` puts its job back for that long, the attempt
  not counted (``jobq.snooze``), and one raising ``Retry(after)`` fails the
  attempt and has it retried after that long (``jobq.fail(retry_in =>
  ...)``);
- sets ``job.cancel_requested`` when ``jobq.cancel`` asks the job to stop:
  it hears the request at once on its listening connection (the
  notification ``cancel:<id>,...`` on the queue's channel, looked for every
  ``CANCEL_CHECK`` seconds while handlers run), and in any case at the next
  heartbeat (``jobq.heartbeat_status``), so also when LISTEN is off or
  does not work.  A job asked to stop before its handler started is
  handed back unstarted, and the database cancels it;
- runs ``jobq.reap`` every ``reap_interval``, which recovers the jobs whose
  lease expired, whoever held them (the worker level may reap; a role that
  may not is told so once and leaves reaping to others), and right after it
  ``jobq.tick``, which enqueues the jobs of the schedules that are due
  (``jobq.schedule``), so schedules advance with no other process (a role
  refused it leaves ticking to others, such as pg_cron);
- with nothing to do, registers as waiting on each of its queues
  (``jobq.wait``: enqueues notify the queue's channel only while a worker
  waits), claims once more, and sleeps on LISTEN (on every queue's channel)
  until a notification, ``poll_interval``, the run_at of the queues' next
  job in the future, or the next reap and tick, whichever comes first: a lost
  notification costs at most one poll interval, a job due later starts at
  its run_at.  When the registration is refused for the moment (a producer
  of the queue has a transaction in flight), it claims again after a few
  milliseconds.  After a notification it claims at once, before any other
  bookkeeping.  LISTEN is not trusted blindly: after each
  (re)connect the worker sends itself a probe notification and, when it does
  not arrive (a transaction-pooling PgBouncer hands LISTEN to a server
  connection this client never sees again), says so once and only polls
  (and, like a worker with ``listen=False``, does not register: nobody
  would hear the notifications);
- on ``stop()`` (SIGTERM/SIGINT under ``run``): claims nothing more, hands
  claimed-but-unstarted jobs back (``jobq.release``), lets the running ones
  finish, acknowledges them, and returns; a second stop gives up the jobs in
  hand at once (a second signal interrupts a handler running on the
  caller's thread);
- when the database goes away, reconnects with capped exponential backoff
  and carries on; acknowledgements pending meanwhile are sent afterwards
  (the database refuses any whose lease was reaped in between).  A network
  gone silent is noticed within ``network_timeout`` (TCP keepalives and
  timeouts on its connections: pgjobq._worker.connections); a server that turns
  out read-only (a standby) counts as unavailable too, and a multi-host
  conninfo reconnects to whichever server is the primary now.  While it
  cannot reach the database, a job whose lease has run out by the worker's
  own clock gets its ``cancel_requested`` set: another worker may be
  running it already (a handler that then stops has its job handed back,
  the attempt not counted: pgjobq._worker.acks.report);
- refuses to start on a database whose pgjobq extension this package does
  not support (IncompatibleExtension), and refuses a coroutine function as
  handler (ConfigurationError): its jobs would be marked done without running
  (pgjobq.AsyncWorker runs those).

The policy lives in modules both workers share, each one concern, with no
I/O of its own: WorkerSettings (pgjobq._worker.settings), the jobs in hand
(pgjobq._worker.in_hand), acknowledgements and failure reports (pgjobq._worker.acks), the
heartbeat schedule (pgjobq._worker.leases), LISTEN and its probe (pgjobq._worker.listen),
reap and tick (pgjobq._worker.upkeep), the reconnect backoff (pgjobq._worker.backoff),
signals (pgjobq._worker.signals), the workers' connections (pgjobq._worker.connections)
and the observers (pgjobq._worker.observing).  This module holds what is the sync
Worker's own: the caller's thread doing the talking, handlers inline with
the keeper thread, or on a pool of threads.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Collection
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from types import FrameType
from typing import Any

import psycopg

from pgjobq import _tracing
from pgjobq._client import sync as client
from pgjobq._errors import (
    ConfigurationError,
    Error,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    PermissionDenied,
    first_line,
)
from pgjobq._install.check import check_extension
from pgjobq._job import Job
from pgjobq._queries import query
from pgjobq._worker import acks, connections, signals
from pgjobq._worker.backoff import Backoff
from pgjobq._worker.in_hand import InHand
from pgjobq._worker.leases import Leases, report_lost
from pgjobq._worker.listen import (
    CANCEL_CHECK,
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

__all__ = ["Handler", "Worker", "WorkerSettings"]

logger = logging.getLogger("pgjobq.worker")

Handler = Callable[[Job], object]

# When jobq.wait could not register (a producer's transaction was in flight),
# listen this long before claiming again.
REGISTER_RETRY = 0.015
# Wake this long after the next job's run_at, so that its claim, whose clock
# is the database's, finds it runnable.
RUN_AT_MARGIN = 0.002


@dataclass
class _Running:
    """A job handed to a handler thread, not yet acknowledged."""

    job: Job
    future: Future[None]


def _call(handler: Handler, job: Job, worker: str) -> str | None:
    """Run handler on job; return its result as JSON text (None: it returned None, no result).

    One that hands back something to await fails the job instead of
    completing it: start-up refuses coroutine functions, but a wrapper (a
    lambda, a partial) can still return a coroutine, and its job must not
    count as done.  A result JSON cannot encode, or jsonb cannot store
    (NaN, U+0000, keys that are not strings: as ``pgjobq.complete`` refuses
    them), fails the job with InvalidArgument naming its type, rather than
    completing it without its result (pgjobq._worker.acks.encode_result).
    """
    with _tracing.process(job, worker):
        result = handler(job)
    if result is None:  # most handlers: no ABC check, no encoding
        return None
    return acks.encode_result(handler, result)


class _GiveUp(BaseException):
    """Raised by a second SIGTERM/SIGINT into a handler running on the worker's own thread."""


class Worker:
    """Runs ``handler`` on the jobs of one queue or several.  See the module docstring.

    ``conninfo`` is a libpq connection string ("" uses the PG* environment).
    A handler returns normally to complete its job, and what it returns
    (any JSON value; None for no result) is stored as the job's result.  Any
    exception (even SystemExit) fails it with ``"<ExceptionType>:
    <message>"``, except ``Snooze`` (the job waits, the attempt is given
    back) and ``Retry`` (a failure retried after the time it names).  A job
    whose cancel was requested (``job.cancel_requested``) ends cancelled when
    its handler raises, done when it returns.
    """

    def __init__(self, conninfo: str, handler: Handler, settings: WorkerSettings | None = None) -> None:
        if acks.is_coroutine_function(handler):
            raise ConfigurationError(
                f"handler {acks.handler_name(handler)} is a coroutine function (async def): this Worker "
                "calls its handler and would mark each job done without awaiting it; give it a plain "
                "function (one that calls asyncio.run, for instance), or run it with pgjobq.AsyncWorker"
            )
        self.conninfo = conninfo
        self.handler = handler
        self.settings = settings or WorkerSettings()
        queues = self.settings.queues
        # Several queues: jobq.claim_any (after complete_many: there is no complete_and_claim_any), and
        # jobq.wait on each queue, in one statement.
        self._several = len(queues) > 1
        self._queue_names = ", ".join(queues)  # for logs
        # The hot statements' parameters, checked once (by WorkerSettings) rather than at every claim.
        self._claim_params = self.settings.claim_params()
        self._wait_params = self.settings.wait_params()
        self._name = self.settings.name
        # Observers (settings.observers): falsy when none, so that the hot path tests one truth value.
        self._observers = Observers(self.settings.observers)
        self._observing = bool(self.settings.observers)  # a plain bool: tested on the hot path
        self._timing = Timing()
        self._reconnecting = False  # the connections were lost: tell the observers once made again
        self.processed = 0
        self.abandoned = 0  # jobs left in hand by a forced stop (a second stop())
        self._stop = threading.Event()
        self._stop_requests = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._listen_conn: psycopg.Connection[Any] | None = None
        # Held by whoever reads the listening connection: the loop, or the keeper while a handler runs.
        self._listen_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # handler threads (concurrency > 1)
        # Jobs in hand.  Handler threads append to _finished (deque appends are
        # thread-safe).  The keeper thread (concurrency 1) shares _backlog,
        # _current, _hand (the backlog and the outcomes collected), _leases
        # (the heartbeat schedule),
        # _next_listen_check, _keeper_due and processed: they change under
        # _lock.  Everything else belongs to the loop's thread.
        self._lock = threading.Lock()
        self._keeper_wake = threading.Condition(self._lock)
        self._keeper: threading.Thread | None = None
        # When the keeper wakes next (monotonic; inf: when notified).  A handler
        # start notifies it only when something falls due before that.
        self._keeper_due = math.inf
        self._closing = False  # tells the keeper to end
        # claimed, not started (handed back on stop), and the outcomes collected, to acknowledge
        self._hand = InHand()
        self._current: Job | None = None  # its handler runs on the loop's thread now (concurrency 1)
        self._in_handler = False  # a second signal may interrupt the handler now
        self._running: dict[int, _Running] = {}  # given to a handler thread
        # handler returned: (job, exception or None, result as JSON text or None)
        self._finished: deque[tuple[Job, BaseException | None, str | None]] = deque()
        # Heartbeats: every _leases.every seconds, from the leases in hand.
        self._leases = Leases(self.settings, self._queue_names)
        self._next_listen_check = 0.0  # when to look for cancel notifications next, while handlers run
        self._upkeep = Upkeep()  # reap and tick: when next, and whether this role may
        self._drained = False  # burst mode: the queue had no runnable job
        self._poll_only = False  # the LISTEN probe failed on this connection: poll until reconnected
        self._may_wait = True  # False once jobq.wait was refused to this role
        self._started = False  # said so, once connected to a database it supports

    # -- public API -----------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to stop gracefully (thread- and signal-safe).

        A second call gives up on the jobs in hand (the reaper recovers them).
        """
        self._stop_requests += 1
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self, *, install_signal_handlers: bool = True) -> None:
        """Work until stop() (or SIGTERM/SIGINT), or in burst mode until the queue has no runnable job."""
        restore_signals = self._install_signal_handlers() if install_signal_handlers else None
        if self.settings.concurrency > 1:
            self._pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="pgjobq-handler")
        else:
            self._keeper = threading.Thread(target=self._keep, name="pgjobq-keeper", daemon=True)
            self._keeper.start()
        try:
            self._work()
        except _GiveUp:
            pass  # a second signal interrupted a handler: its job is abandoned below
        finally:
            self.abandoned = (
                len(self._hand.backlog) + len(self._running) + len(self._finished) + len(self._hand.ok)
                + len(self._hand.failed) + (self._current is not None)
            )  # fmt: skip
            if self.abandoned:
                logger.warning("abandoning %d job(s) in hand; the reaper will recover them", self.abandoned)
            self._stop_keeper()
            if self._pool is not None:
                self._pool.shutdown(wait=not self.abandoned, cancel_futures=True)
            self._disconnect()
            if restore_signals is not None:
                restore_signals()
        logger.info("worker %s stopped after %d jobs", self.settings.name, self.processed)

    # -- the loop -------------------------------------------------------------

    def _in_hand(self) -> bool:
        return bool(self._hand or self._current or self._running or self._finished)

    def _work(self) -> None:
        backoff = Backoff(self.settings.reconnect_delay_max)
        while self._stop_requests < 2 and (self._in_hand() or not (self.stopping or self._drained)):
            try:
                self._connect()
                if self._reconnecting:
                    self._reconnecting = False
                    if self._observing:
                        self._observers.reconnected()
                self._step()
                backoff.reset()  # only a step that worked ends the backoff, not a connection alone
            except connections.UNAVAILABLE as exc:
                self._disconnect()
                self._reconnecting = self._started  # a reconnect once it had connected
                pause = backoff.next()  # doubling up to reconnect_delay_max, with jitter
                logger.warning("%s; retrying in %.1f s", connections.unavailable(exc), pause)
                self._presume_lost()
                self._sleep(pause)

    def _step(self) -> None:
        self._collect()
        batch_over = not self._running and not self._hand.backlog
        if not self.stopping:
            self._start_handlers()  # idle handler threads first: the acknowledgement can wait for them
        if self._claiming() and batch_over:
            # the successes ride on the next claim (jobq.complete_and_claim)
            self._report_failures()
        else:
            self._acknowledge(now=self.stopping or batch_over)
        if self.stopping:
            self._release_backlog()
        self._heartbeat()
        now = time.monotonic()
        if self._running and self._listen_conn is not None and now >= self._next_listen_check:
            self._look_for_cancels_if_due(keeper=False)  # handler threads run: the keeper's job in effect
        if now >= self._upkeep.next_due:
            self._reap()
            self._tick()
            self._upkeep.next_due = now + self.settings.reap_interval
        self._start_handlers()
        if self._claiming() and self._claim():
            return
        if self._running:
            self._wait_for_handlers()
        elif not self.stopping and not self._drained:
            self._wait_for_work()

    def _claiming(self) -> bool:
        """Whether to claim now: a handler thread is idle, and the worker is neither stopping nor drained."""
        return not self.stopping and not self._drained and len(self._running) < self.settings.concurrency

    def _claim(self) -> bool:
        """Claim a batch into the backlog; False when the queue had nothing runnable (or nothing its limits
        let this claim take).

        Successes waiting to be acknowledged go with the claim: one statement,
        one round trip and one commit for both (jobq.complete_and_claim), with
        their results when any has one.  When the database refuses the
        results (one over its 1 MiB limit, say), nothing is acknowledged or
        claimed: the jobs are acknowledged one by one (_complete_singly), then
        the claim goes alone.  With several queues the successes go first,
        in one jobq.complete_many (so that the limits no longer count them as
        running), then the claim (jobq.claim_any).
        """
        conn = self._conn
        assert conn is not None
        if self._several:
            self._complete_many()
            began = time.perf_counter()
            jobs = client.claim_any_unchecked(conn, self._claim_params, prepare=True)
            return self._claimed(jobs, began)
        successes, results = self._take_successes()
        began = time.perf_counter()
        settled = not successes  # once true, a failure below leaves the successes alone
        try:
            if successes:
                params = {
                    **self._claim_params,
                    "ids": [job.id for job in successes],
                    "leases": [job.lease for job in successes],
                    "results": results,
                }
                try:
                    accepted, jobs = client.complete_and_claim_unchecked(conn, params, prepare=True)
                except InvalidArgument:
                    if results is None:
                        raise
                    settled = True
                    self._complete_singly(conn, successes, results)
                    began = time.perf_counter()
                    jobs = client.claim_unchecked(conn, self._claim_params, prepare=True)
                else:
                    settled = True
                    self._acknowledged(successes, accepted)
            else:
                jobs = client.claim_unchecked(conn, self._claim_params, prepare=True)
        except BaseException:
            if not settled:
                self._restore_successes(successes, results)
            raise
        return self._claimed(jobs, began)

    def _claimed(self, jobs: list[Job], began: float) -> bool:
        """Take the jobs a claim (sent at perf_counter began) returned in hand; whether there were any."""
        if self._observing:
            now = time.perf_counter()
            self._observers.claimed(self.settings.queues, jobs, now - began)
            self._timing.held(jobs, now)
        if jobs:
            self._hold(jobs)
            self._start_handlers()
        if not jobs and self.settings.burst and not self._in_hand():
            noun = "queues" if self._several else "queue"
            logger.info("%s %s has no runnable job: burst done", noun, self._queue_names)
            self._drained = True
        return bool(jobs)

    def _hold(self, jobs: list[Job]) -> None:
        """Take the jobs just claimed into the backlog, and schedule their heartbeats from their leases."""
        now = time.monotonic()
        with self._lock:
            alone = not (self._hand.backlog or self._running or self._current is not None)
            self._leases.held(jobs, now, alone=alone)
            self._hand.hold(jobs)

    def _start_handlers(self) -> None:
        """Give backlog jobs to idle handler threads (never more: the rest stays ours to hand back).

        With concurrency 1, run them here instead, one after another, until
        the backlog is empty or stop().  A job whose cancel was requested
        before it started is not run: it goes back to the database (which
        cancels it).
        """
        if self._pool is None:
            self._run_backlog()
            return
        while self._hand.backlog and len(self._running) < self.settings.concurrency:
            job = self._hand.backlog.popleft()
            if job._cancel_is_set():
                self._record(job, acks.CancelledUnstarted(), None)
                continue
            if self._observing:
                self._observers.started(job, self._timing.start(job, time.perf_counter()))
            future = self._pool.submit(self._run_handler, job)
            self._running[job.id] = _Running(job, future)

    def _run_backlog(self) -> None:
        """Run the backlog's handlers on this thread (concurrency 1); the keeper watches meanwhile."""
        while self._hand.backlog and not self.stopping:
            with self._lock:
                job = self._hand.backlog.popleft()
                if job._cancel is not None and job._cancel.is_set():  # (inline: this runs for every job)
                    self._record(job, acks.CancelledUnstarted(), None)
                    continue
                self._current = job
                due = self._leases.next_due
                if self._hand.ok:
                    due = min(due, self._hand.oldest_unacked + self.settings.ack_interval)
                if self._listen_conn is not None and self._next_listen_check < due:
                    due = self._next_listen_check
                if due < self._keeper_due:  # the keeper would sleep through it: wake it to rearm
                    self._keeper_due = due  # once: it may take a while to run, and recomputes anyway
                    self._keeper_wake.notify()
            if self._observing:
                self._observers.started(job, self._timing.start(job, time.perf_counter()))
            self._in_handler = True
            try:
                result = _call(self.handler, job, self._name)
            except _GiveUp:
                raise  # a second signal: the job stays _current, to be abandoned
            except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
                error: BaseException | None = exc
                result = None
            else:
                error = None
            finally:
                self._in_handler = False
                if self._observing:
                    self._timing.end(job, time.perf_counter())
            with self._lock:
                self._record(job, error, result)
                self._current = None

    def _run_handler(self, job: Job) -> None:
        """Runs on a handler thread: records the handler's exception (None on success) in _finished."""
        try:
            result = _call(self.handler, job, self._name)
        except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
            if self._observing:
                self._timing.end(job, time.perf_counter())
            self._finished.append((job, exc, None))
        else:
            if self._observing:
                self._timing.end(job, time.perf_counter())
            self._finished.append((job, None, result))

    def _wait_for_handlers(self) -> None:
        """Sleep until a handler finishes, a heartbeat or an acknowledgement is due, it is time to look for
        cancel notifications, or a poll interval."""
        deadline = min(self._leases.next_due, time.monotonic() + self.settings.poll_interval)
        if self._hand.ok or self._hand.failed:
            deadline = min(deadline, self._hand.oldest_unacked + self.settings.ack_interval)
        if self._listen_conn is not None:
            deadline = min(deadline, self._next_listen_check)
        timeout = max(0.0, deadline - time.monotonic())
        wait([r.future for r in self._running.values()], timeout=timeout, return_when=FIRST_COMPLETED)

    def _wait_for_work(self) -> None:
        """The claim found nothing: register as waiting, claim once more, then sleep until there is work.

        Sleeps until a notification for our queue arrives (then claims at
        once), the poll interval passes, the queue's next job in the future
        is due, or stop().  Without a listening connection (listen=False, or
        its probe failed) it only sleeps the poll interval: registering
        would make producers notify for nobody.  A cancel notification
        (``cancel:<ids>``) is no wake-up: it only concerns jobs in hand.
        """
        # also woken for the next reap and tick: schedules advance every reap_interval
        deadline = min(time.monotonic() + self.settings.poll_interval, self._upkeep.next_due)
        conn, listen = self._conn, self._listen_conn
        if listen is None or not self._may_wait:
            self._listen_until(deadline, listen)
            return
        assert conn is not None
        self._acknowledge(now=True)  # nothing in hand is worth holding back while we sleep
        # Wake-ups that came while the worker was busy are stale: the claim after registering
        # finds their jobs.  Left pending, they would end the sleep below at once.
        with self._listen_lock:
            self._read_notifications(listen, 0)
        before = time.monotonic()
        try:
            if self._several:
                registered, _, next_run_in = client.wait_any_unchecked(conn, self._wait_params, prepare=True)
            else:
                registered, _, next_run_in = client.wait_unchecked(conn, self._wait_params, prepare=True)
        except PermissionDenied as exc:
            self._may_wait = False
            warn_wait_refused(first_line(exc), self.settings.poll_interval)
            return
        if not registered:  # a producer is in flight: claim again soon (or when another waiter is notified)
            if self._listen_until(time.monotonic() + REGISTER_RETRY, listen):
                self._claim()
            return
        if next_run_in is not None:
            deadline = min(deadline, before + next_run_in.total_seconds() + RUN_AT_MARGIN)
        # Registered: jobs committed from now on notify us; those committed before, this claim finds.
        if self.stopping or self._claim():
            return
        if self._listen_until(deadline, listen):
            # At once, before the loop's bookkeeping.  (On the work connection: claiming on the
            # listening one, whose backend has just run, measured no faster.)
            self._claim()

    def _listen_until(self, deadline: float, listen: psycopg.Connection[Any] | None) -> bool:
        """Sleep until deadline (monotonic), stop(), or a wake-up notification on listen (then True).

        The wait is cut in slices of at most 0.1 s so that a stop is noticed promptly.
        """
        while not self.stopping and (remaining := deadline - time.monotonic()) > 0:
            if listen is None:
                self._sleep(remaining)
                return False
            with self._listen_lock:
                woken = self._read_notifications(listen, min(0.1, remaining), stop_after=1)
            if woken:
                return True
        return False

    def _read_notifications(
        self, listen: psycopg.Connection[Any], timeout: float, *, stop_after: int | None = None
    ) -> bool:
        """Read the notifications listen receives within timeout (or until stop_after of them came); True
        when a wake-up was among them.  Call with _listen_lock held.

        Cancel requests among them set the cancel_requested of the jobs in
        hand they name.  The generator is always run to its end: closing it
        early would drop the rest of a packet that holds several.
        """
        woken = False
        for notify in listen.notifies(timeout=timeout, stop_after=stop_after):
            ids = cancel_ids(notify.payload)
            if ids is None:
                woken = True
            else:
                self._request_cancel(ids, "by notification")
        return woken

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    # -- cancel requests ------------------------------------------------------

    def _look_for_cancels_if_due(self, *, keeper: bool) -> None:
        """Every CANCEL_CHECK seconds while handlers run: read, without waiting, the notifications the
        listening connection holds, for cancel requests.

        The wake-ups read meanwhile are stale (see _wait_for_work).  The
        keeper (concurrency 1) reads only while a handler runs on the loop's
        thread, and never waits for the connection: between handlers it is
        the loop's.
        """
        with self._lock:
            now = time.monotonic()
            if now < self._next_listen_check:
                return
            self._next_listen_check = now + CANCEL_CHECK
        if not self._listen_lock.acquire(blocking=not keeper):
            return
        try:
            listen = self._listen_conn
            if listen is None or listen.closed or (keeper and self._current is None):
                return
            self._read_notifications(listen, 0)
        except psycopg.OperationalError as exc:
            if not keeper:
                raise  # the loop reconnects
            # the loop reconnects it once the handler is over; heartbeats bring cancel requests meanwhile
            logger.debug("keeper: the listening connection failed (%s)", first_line(exc))
        finally:
            self._listen_lock.release()

    def _request_cancel(self, ids: Collection[int], how: str) -> None:
        """Set cancel_requested on the jobs in hand, not finished, whose id is in ids."""
        if not ids:
            return
        with self._lock:
            jobs = [job for job in self._unfinished() if job.id in ids and not job._cancel_is_set()]
        for job in jobs:
            job._request_cancel()
            logger.info("job %d: cancel requested (heard %s)", job.id, how)

    # -- acknowledging ------------------------------------------------------

    def _collect(self) -> None:
        """Move the jobs whose handler thread returned from _running to the results to report."""
        while self._finished:
            job, outcome, result = self._finished.popleft()
            self._running.pop(job.id, None)
            self._record(job, outcome, result)

    def _record(self, job: Job, outcome: BaseException | None, result: str | None) -> None:
        """Add a handler's outcome (and result, as JSON text) to the results to report (under the lock)."""
        self._hand.record(job, outcome, result, time.monotonic())
        if self._observing:
            self._observers.pending(self._hand.pending)

    def _take_successes(self) -> tuple[list[Job], list[str | None] | None]:
        """Take the successes collected, and their results aligned with them (None when none has one), to
        acknowledge (_restore_successes if that fails).

        Taken under the lock, so that the keeper and the loop never send the same one.
        """
        with self._lock:
            return self._hand.take_successes()

    def _restore_successes(self, successes: list[Job], results: list[str | None] | None) -> None:
        """Put back successes whose acknowledgement failed, to send again."""
        if successes:
            with self._lock:
                self._hand.restore_successes(successes, results, time.monotonic())

    def _acknowledge(self, *, now: bool) -> None:
        """Report the results collected: successes in one statement, failures one by one.

        Results wait (at most ack_interval) unless ``now``, so that one
        statement and one commit acknowledge many jobs.  If the connection
        drops meanwhile, what was not reported is sent after reconnecting.
        """
        if not (self._hand.ok or self._hand.failed) or not (
            now or self._hand.ack_due(time.monotonic(), self.settings.ack_interval)
        ):
            return
        self._complete_many()
        self._report_failures()

    def _complete_many(self) -> None:
        """Acknowledge the successes collected in one jobq.complete_many (loop or keeper thread)."""
        conn = self._conn
        assert conn is not None
        successes, results = self._take_successes()
        if not successes:
            return
        try:
            accepted = client.complete_many_unchecked(
                conn,
                [job.id for job in successes],
                [job.lease for job in successes],
                results=results,
                prepare=True,
            )
        except InvalidArgument:
            if results is None:
                self._restore_successes(successes, results)
                raise
            self._complete_singly(conn, successes, results)
            return
        except BaseException:
            self._restore_successes(successes, results)
            raise
        self._acknowledged(successes, accepted)

    def _complete_singly(
        self, conn: psycopg.Connection[Any], successes: list[Job], results: list[str | None]
    ) -> None:
        """The database refused a batch of results: acknowledge its jobs one by one.

        A job whose own result is refused (over 1 MiB of jsonb, say) fails
        with the database's reason, and is retried per its policy, rather
        than losing its result or stopping the batch.  If the connection
        breaks meanwhile, the jobs not sent yet are sent again later.
        """
        done: list[Job] = []
        accepted: set[int] = set()
        sent = 0
        try:
            for job, result in zip(successes, results, strict=True):
                try:
                    accepted |= client.complete_many_unchecked(conn, [job.id], [job.lease], results=[result])
                except InvalidArgument as refused:
                    with self._lock:
                        self._record(job, refused, None)
                else:
                    done.append(job)
                sent += 1
        except BaseException:
            self._restore_successes(successes[sent:], results[sent:])
            raise
        finally:
            self._acknowledged(done, accepted)

    def _acknowledged(self, successes: list[Job], accepted: set[int]) -> None:
        """Log the outcome of acknowledging successes: accepted, or refused as stale."""
        if len(accepted) < len(successes) or self._observing or logger.isEnabledFor(logging.INFO):
            outcomes = acks.acknowledged(successes, accepted)
        else:
            outcomes = []
        with self._lock:
            self.processed += len(successes)
            pending = self._hand.pending
        if self._observing:
            for job, outcome in outcomes:
                self._observers.finished(job, outcome, self._timing.settled(job))
            self._observers.pending(pending)

    def _report_failures(self) -> None:
        """Report the failures collected, one statement each (they are rare; each needs its own row)."""
        if not self._hand.failed:
            return
        with self._lock:
            failures = list(self._hand.failed)
        for job, error in failures:
            outcome = self._report_failure(job, error)
            with self._lock:
                self.processed += 1
                self._hand.failed.remove((job, error))
                pending = len(self._hand.ok) + len(self._hand.failed)
            if self._observing:
                self._observers.finished(job, outcome, self._timing.settled(job))
                self._observers.pending(pending)

    def _report_failure(self, job: Job, error: BaseException) -> Outcome:
        """Report one outcome other than success (pgjobq._worker.acks.report: release, snooze or fail)."""
        conn = self._conn
        assert conn is not None
        return acks.drive(acks.report(job, error), lambda call: client._run(conn, call))

    def _release_backlog(self) -> None:
        """Hand back the jobs claimed but not started: their attempt does not count."""
        assert self._conn is not None
        while self._hand.backlog:
            job = self._hand.backlog[0]
            try:
                client.release(self._conn, job.id, job.lease)
                logger.info("job %d handed back unstarted", job.id)
                outcome: Outcome = "released"
            except (LeaseLost, JobNotFound):
                acks.lost(job, "not handed back")
                outcome = "lost"
            if self._observing:
                self._observers.finished(job, outcome, self._timing.settled(job))
            with self._lock:
                self._hand.backlog.popleft()

    # -- keeping leases and recovering others' ------------------------------

    def _unfinished(self) -> list[Job]:
        """The jobs in hand whose handler has not returned (call under the lock)."""
        current = [self._current] if self._current is not None else []
        running = [r.job for r in self._running.values() if not r.future.done()]
        return current + running + list(self._hand.backlog)

    def _heartbeat(self) -> None:
        """When a heartbeat is due, extend in one statement the lease of every job in hand not finished.

        One jobq.heartbeat_status: it also says which jobs were asked to stop
        (their cancel_requested is set) and which are past their deadline
        (the database left their lease unextended: it expires no later than
        the statement's clock, compared in the database).  A job past its
        deadline gets no more heartbeats, said once in a warning: its lease
        cannot be extended, the reaper recovers the job when the lease runs
        out.  A lease this worker took or extended less than a
        heartbeat ago is left alone when two heartbeat intervals fit in it:
        by the next sweep it is still at most two intervals old.  The
        interval is recomputed from the leases in hand.  Runs on the loop's
        thread or the keeper's.
        """
        conn = self._conn
        assert conn is not None
        with self._lock:
            now = time.monotonic()
            if now < self._leases.next_due:  # most calls: before listing the jobs in hand
                return
            due = self._leases.due(self._unfinished(), now)
        if not due:
            return
        rows = client.heartbeat_status_unchecked(
            conn, [job.id for job in due], [job.lease for job in due], prepare=True
        )
        with self._lock:
            beat = self._leases.beat(rows, now)
            # A job whose handler returned meanwhile (perhaps after completing it in its
            # own transaction) is not lost yet: the acknowledgement tells whether the lease held.
            still = {job.id for job in self._unfinished()}
        for job in report_lost(due, beat, still):
            job._request_cancel()  # its handler may as well stop
        self._request_cancel(beat.cancels, "at a heartbeat")

    def _presume_lost(self) -> None:
        """The database cannot be reached: ask the handlers of the jobs in hand whose lease has run out by
        this worker's clock to stop (pgjobq._worker.leases.Leases.presumed_lost).  Loop or keeper thread."""
        with self._lock:
            lost = self._leases.presumed_lost(self._unfinished(), time.monotonic())
        for job in lost:
            job._presume_lost()

    # -- the keeper thread (concurrency 1) -------------------------------------

    def _keep(self) -> None:
        """While a handler runs on the loop's thread, send the acknowledgements and heartbeats that fall due,
        and look for cancel notifications.

        Between handlers the loop sends them itself.  It sleeps until the next
        heartbeat, acknowledgement or look at the listening connection
        (every CANCEL_CHECK seconds while listening: between handlers it
        only moves that time on) falls due; a handler start wakes it only
        when something falls due earlier than that (so a quick handler costs
        the keeper nothing).  A failed statement (the connection is gone:
        the loop reconnects) leaves its work to the loop.
        """
        while True:
            with self._lock:
                while True:
                    if self._closing:
                        return
                    now = time.monotonic()
                    due = self._leases.next_due
                    if self._listen_conn is not None:
                        if self._current is None and self._next_listen_check <= now:
                            self._next_listen_check = now + CANCEL_CHECK  # no handler runs: none to stop
                        due = min(due, self._next_listen_check)
                    if self._current is None:
                        # between handlers: the loop's; until the next heartbeat at most, or notified
                        self._keeper_due = due if due > now else math.inf
                    else:
                        if self._hand.ok:
                            due = min(due, self._hand.oldest_unacked + self.settings.ack_interval)
                        if now >= due:
                            break
                        self._keeper_due = due
                    timeout = None if self._keeper_due == math.inf else self._keeper_due - now
                    self._keeper_wake.wait(timeout)
                self._keeper_due = math.inf  # busy: a handler start may notify, unheard and harmless
            conn = self._conn
            failed = "the connection is closed" if conn is None or conn.closed else None
            if failed is None:
                try:
                    self._complete_many_due()
                    self._heartbeat()
                    if self._listen_conn is not None:
                        self._look_for_cancels_if_due(keeper=True)
                except Exception as exc:  # the loop's next statement meets the same error and handles it
                    failed = first_line(exc)
            if failed is not None:
                # what fell due stays due: wait, or this would spin until the loop reconnects
                logger.debug("keeper: %s; left to the worker's loop", failed)
                self._presume_lost()  # the loop may be in a handler a long while yet
                with self._lock:
                    if not self._closing:
                        self._keeper_wake.wait(min(1.0, self._leases.every))

    def _complete_many_due(self) -> None:
        """Acknowledge the successes collected, if the oldest has waited ack_interval."""
        with self._lock:
            due = time.monotonic() >= self._hand.oldest_unacked + self.settings.ack_interval
        if due:
            self._complete_many()

    def _stop_keeper(self) -> None:
        if self._keeper is not None:
            with self._lock:
                self._closing = True
                self._keeper_wake.notify()
            self._keeper.join()
            self._keeper = None

    def _reap(self) -> None:
        """Recover the jobs whose lease expired (jobq.reap), unless this worker's role was refused it.

        Every level that may claim may reap (jobq.grant_worker and
        grant_admin).  A role that was given less is told so once; other
        workers, or a scheduled ``SELECT jobq.reap()``, must then reap.
        """
        assert self._conn is not None
        if not self._upkeep.may_reap:
            return
        try:
            reaped = client.reap(self._conn)
        except PermissionDenied as exc:
            self._upkeep.reap_refused(exc)
            return
        self._upkeep.reaped(reaped)

    def _tick(self) -> None:
        """Enqueue the occurrences of the schedules that are due (jobq.tick), unless refused to this role.

        Every worker ticks, whatever its queues: a schedule's jobs go to its
        own queue, and ticks by many workers enqueue each occurrence once.
        It runs every reap_interval, so it logs at debug level, but for a
        tick that fails: a warning, once until a tick succeeds again (every
        schedule waits while one fails).  A role refused it leaves ticking to
        others (another worker, or pg_cron); the worker carries on either way.
        """
        assert self._conn is not None
        if not self._upkeep.may_tick:
            return
        try:
            enqueued = client.tick(self._conn)
        except PermissionDenied as exc:
            self._upkeep.tick_refused(exc)
            return
        except Error as exc:
            self._upkeep.tick_failed(exc)
            return
        self._upkeep.ticked(enqueued)

    # -- connections --------------------------------------------------------

    def _connect(self) -> None:
        if self._conn is None or self._conn.closed:
            self._conn = self._open("worker")
            version = check_extension(self._conn)
            if not self._started:
                self._started = True
                logger.info(
                    "worker %s started on %s %s (pgjobq %s)",
                    self.settings.name,
                    "queues" if self._several else "queue",
                    self._queue_names,
                    version,
                )
            # Behind a transaction-pooling PgBouncer a LISTEN left on a shared
            # server connection can deliver notifications here; drop them
            # (psycopg would otherwise keep them for a notifies() never called).
            self._conn.add_notify_handler(connections.ignore_notify)
            self._leases.next_due = 0.0
        if (
            self.settings.listen
            and not self._poll_only
            and (self._listen_conn is None or self._listen_conn.closed)
        ):
            with self._listen_lock:
                self._listen_conn = self._open("listen")
                channels = [client.channel(self._listen_conn, queue) for queue in self.settings.queues]
                arrive = self._notifications_arrive()
                if arrive:
                    # Wake-ups sent before this LISTEN are not missed: a claim follows every connect.
                    # Cancel requests are not either: the next heartbeat brings them.
                    for channel in channels:
                        self._listen_conn.execute(listen_statement(channel))
            if not arrive:
                warn_not_delivered(channels, self.settings.poll_interval)
                with self._listen_lock:
                    self._listen_conn.close()
                    self._listen_conn = None
                self._poll_only = True

    def _notifications_arrive(self) -> bool:
        """Whether a probe notification sent from the work connection reaches the listening one.

        The probe goes to a channel of its own, so no other listener sees it,
        and only a notification on that channel counts: LISTEN on the queue's
        channel comes after the probe, but behind a transaction-pooling
        PgBouncer another client's LISTEN can deliver the queue's wake-ups
        and cancel requests here, and they prove nothing.  Call with
        _listen_lock held.
        """
        assert self._conn is not None and self._listen_conn is not None
        probe = probe_channel()
        self._listen_conn.execute(listen_statement(probe))
        self._conn.execute(query("probe_notify"), {"channel": probe})
        with contextlib.closing(self._listen_conn.notifies(timeout=PROBE_TIMEOUT)) as notifies:
            arrived = any(n.channel == probe for n in notifies)
        # Also when it did not arrive: behind a transaction-pooling PgBouncer the LISTEN stays on a
        # server connection other clients share, and this UNLISTEN may reach it (it is best effort).
        self._listen_conn.execute(unlisten_statement(probe))
        if arrived:
            logger.debug("LISTEN works here: the probe notification arrived")
        return arrived

    def _open(self, role: str) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            self.conninfo,
            autocommit=True,
            application_name=connections.app_name(role, self.settings),
            **connections.network_options(self.conninfo, self.settings),
        )
        connections.configure(conn, self.settings)
        return conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
        with self._listen_lock:
            if self._listen_conn is not None:
                self._listen_conn.close()
        self._conn = self._listen_conn = None
        self._poll_only = False  # the next connection gets its own probe

    # -- signals ------------------------------------------------------------

    def _install_signal_handlers(self) -> Callable[[], None]:
        def on_signal(signum: int, frame: FrameType | None) -> None:
            if self.stopping:
                logger.warning("second %s: giving up the jobs in hand", signal.Signals(signum).name)
            else:
                logger.info("received %s: finishing jobs in hand", signal.Signals(signum).name)
            self.stop()
            if self._stop_requests >= 2 and self._in_handler:
                raise _GiveUp  # out of the handler running on this thread

        return signals.install(on_signal)
