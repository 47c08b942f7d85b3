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
  not counted (``jobq.snooze``), one raising ``Retry(after)`` fails the
  attempt and has it retried after that long (``jobq.fail(retry_in =>
  ...)``), one raising ``Discard(reason)`` fails its job for good at once
  (``jobq.fail(retry => false)``, extension 0.9.0; on 0.8.0 a plain
  failure, said once), and a task registry's ``UnknownTask`` hands the job
  back for a worker that knows its task (``jobq.hand_back``, 0.9.0;
  ``jobq.snooze`` on 0.8.0), warned about once a minute per task;
- sets ``pgjobq._job.CURRENT_JOB`` to the job around each handler call (on
  the thread that runs it), so that a log line written there knows its
  job; the worker's own lines about one job carry its fields
  (``log_fields``: job_id, task, queue, attempt);
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
  (``jobq.register_waiter``: enqueues notify the queue's channel only while a worker
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
- on a database whose pgjobq extension this package does not support, or
  that has none (IncompatibleExtension), says so in one line and tries
  again with its reconnect backoff, an upgrade may be under way; it picks
  its statements by the version it finds at each connect
  (pgjobq._worker.steps.FEATURES: on 0.9.0 its claims read each job's
  task); it refuses a coroutine function as handler (ConfigurationError):
  its jobs would be marked done without running (pgjobq.AsyncWorker runs
  those).

``Worker(connect=callable)`` opens every connection (the first ones and
each reconnect) with the callable, a new psycopg Connection each call, in
place of a conninfo: for applications that make their connections
themselves (rotating credentials, tokens); the worker still makes them
autocommit and names them (pgjobq._worker.connections.adopt).
``Worker(tasks=registry)`` runs a task registry's handler in place of
``handler``, on the registry's queues and lease_timeout where the settings
name none (pgjobq._worker.settings.TaskRegistry).

Every round trip to the database (claim, acknowledge, heartbeat, release,
register as waiting, reap and tick, the LISTEN probe) is a step of the
worker core, written once for both workers (pgjobq._worker.steps), which
also holds the jobs in hand (pgjobq._worker.in_hand, the one record of
them) and the other policy both share, each in a module of its own with no
I/O: WorkerSettings (pgjobq._worker.settings), acknowledgements and failure
reports (pgjobq._worker.acks), the heartbeat schedule (pgjobq._worker.leases),
LISTEN (pgjobq._worker.listen), reap and tick (pgjobq._worker.upkeep), the
reconnect backoff (pgjobq._worker.backoff), signals (pgjobq._worker.signals),
the workers' connections (pgjobq._worker.connections) and the observers
(pgjobq._worker.observing).  This module holds what is the sync Worker's
own: the caller's thread doing the talking and serving the steps' requests
(steps.drive), handlers inline with the keeper thread, or on a pool of
threads.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any, TypeVar

import psycopg

from pgjobq import _tracing
from pgjobq._client import sync as client
from pgjobq._client.proto import Call
from pgjobq._errors import ConfigurationError, first_line
from pgjobq._install.check import check_extension
from pgjobq._job import CURRENT_JOB, Job
from pgjobq._worker import acks, connections, durable, signals
from pgjobq._worker.backoff import Backoff
from pgjobq._worker.listen import CANCEL_CHECK, cancel_ids, listen_statement, unlisten_statement
from pgjobq._worker.settings import TaskRegistry, WorkerSettings, check_worker_arguments
from pgjobq._worker.steps import Core, DropWakeUps, Heard, Listen, Request, Sleep, Step, Unlisten, drive

__all__ = ["Connect", "Handler", "Worker", "WorkerSettings"]

logger = logging.getLogger("pgjobq.worker")

R = TypeVar("R")

Handler = Callable[[Job], object]
# A callable that returns a new connection, for every connection the worker opens (Worker(connect=...)).
Connect = Callable[[], psycopg.Connection[Any]]


def _call(handler: Handler, job: Job, worker: str, runs: durable.Durable) -> str | None:
    """Run handler on job, CURRENT_JOB set to it; return its result as JSON text (None: it returned None,
    no result).

    One that hands back something to await fails the job instead of
    completing it: start-up refuses coroutine functions, but a wrapper (a
    lambda, a partial) can still return a coroutine, and its job must not
    count as done.  A result JSON cannot encode, or jsonb cannot store
    (NaN, U+0000, keys that are not strings: as ``pgjobq.complete`` refuses
    them), fails the job with InvalidArgument naming its type, rather than
    completing it without its result (pgjobq._worker.acks.encode_result).
    """
    object.__setattr__(job, "_durable", runs)  # frozen: the durable calls (job.step, ...) go through runs
    token = CURRENT_JOB.set(job)
    try:
        with _tracing.process(job, worker):
            result = handler(job)
    finally:
        CURRENT_JOB.reset(token)
    if result is None:  # most handlers: no ABC check, no encoding
        return None
    return acks.encode_result(handler, result)


class _GiveUp(BaseException):
    """Raised by a second SIGTERM/SIGINT into a handler running on the worker's own thread."""


class Worker:
    """Runs ``handler`` on the jobs of one queue or several.  See the module docstring.

    ``conninfo`` is a libpq connection string ("" uses the PG* environment);
    or ``connect``, a callable returning a new psycopg Connection, makes
    every connection the worker opens (exactly one of the two).  A handler
    returns normally to complete its job, and what it returns (any JSON
    value; None for no result) is stored as the job's result.  Any
    exception (even SystemExit) fails it with ``"<ExceptionType>:
    <message>"``, except ``Snooze`` (the job waits, the attempt is given
    back), ``Retry`` (a failure retried after the time it names) and
    ``Discard`` (failed for good at once).  A job whose cancel was requested
    (``job.cancel_requested``) ends cancelled when its handler raises, done
    when it returns.  ``tasks`` (a task registry) in place of ``handler``
    runs each job's task (exactly one of the two).
    """

    def __init__(
        self,
        conninfo: str | None = None,
        handler: Handler | None = None,
        settings: WorkerSettings | None = None,
        *,
        connect: Connect | None = None,
        tasks: TaskRegistry | None = None,
    ) -> None:
        settings = check_worker_arguments("Worker", conninfo, connect, handler, tasks, settings)
        if tasks is not None:
            handler = tasks.sync_handler()  # ConfigurationError when a task is a coroutine function
        assert handler is not None
        if acks.is_coroutine_function(handler):
            raise ConfigurationError(
                f"handler {acks.handler_name(handler)} is a coroutine function (async def): this Worker "
                "calls its handler and would mark each job done without awaiting it; give it a plain "
                "function (one that calls asyncio.run, for instance), or run it with pgjobq.AsyncWorker"
            )
        self.conninfo = conninfo
        self.handler = handler
        self.settings = settings
        self._make_connection = connect
        self._name = settings.name
        self._reconnecting = False  # the connections were lost: tell the observers once made again
        self.abandoned = 0  # jobs left in hand by a forced stop (a second stop())
        self._stop = threading.Event()
        self._stop_requests = 0
        self._conn: psycopg.Connection[Any] | None = None
        self._listen_conn: psycopg.Connection[Any] | None = None
        # Held by whoever reads the listening connection: the loop, or the keeper while a handler runs.
        self._listen_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None  # handler threads (concurrency > 1)
        # The core's state (the jobs in hand, the heartbeat schedule, processed) changes under _lock:
        # the keeper thread (concurrency 1) and the handler threads (above 1) change it too, as do
        # _next_listen_check and _keeper_due.  Everything else belongs to the loop's thread.
        self._lock = threading.Lock()
        self._core = Core(
            settings, lock=self._lock, stopping=self._stop.is_set, start_handlers=self._start_handlers
        )
        self._keeper_wake = threading.Condition(self._lock)
        self._keeper: threading.Thread | None = None
        # When the keeper wakes next (monotonic; inf: when notified).  A handler
        # start notifies it only when something falls due before that.
        self._keeper_due = math.inf
        self._closing = False  # tells the keeper to end
        self._in_handler = False  # a second signal may interrupt the handler now
        self._returned = threading.Event()  # a handler thread recorded an outcome (concurrency > 1)
        self._next_listen_check = 0.0  # when to look for cancel notifications next, while handlers run
        self._poll_only = False  # the LISTEN probe failed on this connection: poll until reconnected
        # The handlers' durable calls (job.step, ...), on connections of their own, opened when first needed.
        self._shelf = durable.Shelf(lambda: self._open("steps"))
        self._durable = durable.Durable(self._shelf.run)

    # -- public API -----------------------------------------------------------

    @property
    def processed(self) -> int:
        """How many jobs the worker has reported the outcome of (done, failed, snoozed, ...)."""
        return self._core.processed

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
            self.abandoned = len(self._core.hand)
            if self.abandoned:
                logger.warning("abandoning %d job(s) in hand; the reaper will recover them", self.abandoned)
            self._stop_keeper()
            if self._pool is not None:
                self._pool.shutdown(wait=not self.abandoned, cancel_futures=True)
            self._disconnect()
            self._shelf.close()
            if restore_signals is not None:
                restore_signals()
        logger.info("worker %s stopped after %d jobs", self.settings.name, self.processed)

    # -- the loop -------------------------------------------------------------

    def _drive(self, step: Step[R]) -> R:
        """Run a step of the core on this worker's connections (on the loop's thread or the keeper's)."""
        conn = self._conn
        assert conn is not None
        run, serve_other = client._run, self._serve

        def serve(request: Request) -> Any:
            if type(request) is Call:
                return run(conn, request)
            return serve_other(request)

        return drive(step, serve)

    def _serve(self, request: Request) -> Any:
        """Serve a step's request about waiting or the listening connection."""
        if isinstance(request, Sleep):
            return self._listen_until(request.deadline, self._listen_conn)
        listen = self._listen_conn
        if isinstance(request, DropWakeUps):
            if listen is not None:
                with self._listen_lock:
                    self._read_notifications(listen, 0)
            return None
        assert listen is not None
        with self._listen_lock:
            if isinstance(request, Listen):
                listen.execute(listen_statement(request.channel))
                return None
            if isinstance(request, Unlisten):
                listen.execute(unlisten_statement(request.channel))
                return None
            if isinstance(request, Heard):
                with contextlib.closing(listen.notifies(timeout=request.timeout)) as notifies:
                    return any(n.channel == request.channel for n in notifies)
        raise TypeError(f"a step asked for {request!r}")

    def _work(self) -> None:
        backoff = Backoff(self.settings.reconnect_delay_max)
        core = self._core
        while self._stop_requests < 2 and (core.hand or not (self.stopping or core.drained)):
            try:
                self._connect()
                if self._reconnecting:
                    self._reconnecting = False
                    if core.observing:
                        core.observers.reconnected()
                self._step()
                backoff.reset()  # only a step that worked ends the backoff, not a connection alone
            except connections.RETRIED as exc:
                self._disconnect()
                self._reconnecting = core.started  # a reconnect once it had connected
                pause = backoff.next()  # doubling up to reconnect_delay_max, with jitter
                logger.warning("%s", connections.retrying(exc, pause))
                core.presume_lost()
                self._sleep(pause)

    def _step(self) -> None:
        core = self._core
        hand = core.hand
        if self._returned.is_set():  # handler threads recorded outcomes since the last step
            self._returned.clear()
            if core.observing:
                core.observers.pending(hand.pending)
        batch_over = not hand.running and not hand.backlog
        if not self.stopping:
            self._start_handlers()  # idle handler threads first: the acknowledgement can wait for them
        if self._claiming() and batch_over:
            # the successes ride on the next claim (jobq.complete_and_claim)
            if hand.failed:
                self._drive(core.report_failures())
        elif core.ack_due(self.stopping or batch_over):
            self._drive(core.acknowledge())
        if self.stopping and hand.backlog:
            self._drive(core.release_backlog())
        now = time.monotonic()
        if now >= core.leases.next_due:
            self._drive(core.heartbeat())
        if hand.running and self._listen_conn is not None and now >= self._next_listen_check:
            self._look_for_cancels_if_due(keeper=False)  # handler threads run: the keeper's job in effect
        if now >= core.upkeep.next_due:
            self._drive(core.reap_and_tick())
        self._start_handlers()
        if self._claiming() and self._drive(core.claim()):
            return
        if hand.running:
            self._wait_for_handlers()
        elif not self.stopping and not core.drained:
            self._drive(core.wait_for_work())

    def _claiming(self) -> bool:
        """Whether to claim now: a handler thread is idle, and the worker is neither stopping nor drained."""
        core = self._core
        return not self.stopping and not core.drained and len(core.hand.running) < self.settings.concurrency

    def _start_handlers(self) -> None:
        """Give backlog jobs to idle handler threads (never more: the rest stays ours to hand back).

        With concurrency 1, run them here instead, one after another, until
        the backlog is empty or stop().  A job whose cancel was requested
        before it started is not run: it goes back to the database (which
        cancels it).  The core calls this too, once a claim's jobs are in hand.
        """
        pool = self._pool
        if pool is None:
            self._run_backlog()
            return
        core = self._core
        hand = core.hand
        while hand.backlog and len(hand.running) < self.settings.concurrency:
            with self._lock:
                job = hand.backlog.popleft()
                if job._cancel_is_set():
                    core.record(job, acks.CancelledUnstarted(), None)
                    continue
                hand.start(job)
            if core.observing:
                core.observers.started(job, core.timing.start(job, time.perf_counter()))
            pool.submit(self._run_handler, job)

    def _run_backlog(self) -> None:
        """Run the backlog's handlers on this thread (concurrency 1); the keeper watches meanwhile."""
        core = self._core
        hand = core.hand
        while hand.backlog and not self._stop.is_set():
            with self._lock:
                job = hand.backlog.popleft()
                if job._cancel is not None and job._cancel.is_set():  # (inline: this runs for every job)
                    core.record(job, acks.CancelledUnstarted(), None)
                    continue
                hand.start(job)
                due = core.leases.next_due
                if hand.ok:
                    due = min(due, hand.oldest_unacked + self.settings.ack_interval)
                if self._listen_conn is not None and self._next_listen_check < due:
                    due = self._next_listen_check
                if due < self._keeper_due:  # the keeper would sleep through it: wake it to rearm
                    self._keeper_due = due  # once: it may take a while to run, and recomputes anyway
                    self._keeper_wake.notify()
            if core.observing:
                core.observers.started(job, core.timing.start(job, time.perf_counter()))
            self._in_handler = True
            try:
                result = _call(self.handler, job, self._name, self._durable)
            except _GiveUp:
                raise  # a second signal: the job stays in hand, running, to be abandoned
            except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
                error: BaseException | None = exc
                result = None
            else:
                error = None
            finally:
                self._in_handler = False
                if core.observing:
                    core.timing.end(job, time.perf_counter())
            with self._lock:
                core.record(job, error, result)

    def _run_handler(self, job: Job) -> None:
        """Runs on a handler thread: records the handler's outcome in hand, and wakes the loop."""
        try:
            result = _call(self.handler, job, self._name, self._durable)
        except BaseException as exc:  # a handler's SystemExit fails its job, not the worker
            error: BaseException | None = exc
            result = None
        else:
            error = None
        core = self._core
        if core.observing:
            core.timing.end(job, time.perf_counter())
        with self._lock:
            core.hand.record(job, error, result, time.monotonic())  # the loop tells the observers
        self._returned.set()

    def _wait_for_handlers(self) -> None:
        """Sleep until a handler finishes, a heartbeat or an acknowledgement is due, it is time to look for
        cancel notifications, or a poll interval."""
        core = self._core
        hand = core.hand
        deadline = min(core.leases.next_due, time.monotonic() + self.settings.poll_interval)
        if hand.ok or hand.failed:
            deadline = min(deadline, hand.oldest_unacked + self.settings.ack_interval)
        if self._listen_conn is not None:
            deadline = min(deadline, self._next_listen_check)
        self._returned.wait(max(0.0, deadline - time.monotonic()))

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
                self._core.request_cancel(ids, "by notification")
        return woken

    def _sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    # -- cancel requests ------------------------------------------------------

    def _look_for_cancels_if_due(self, *, keeper: bool) -> None:
        """Every CANCEL_CHECK seconds while handlers run: read, without waiting, the notifications the
        listening connection holds, for cancel requests.

        The wake-ups read meanwhile are stale (see steps.Core.wait_for_work).
        The keeper (concurrency 1) reads only while a handler runs on the
        loop's thread, and never waits for the connection: between handlers
        it is the loop's.
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
            if listen is None or listen.closed or (keeper and not self._core.hand.running):
                return
            self._read_notifications(listen, 0)
        except psycopg.OperationalError as exc:
            if not keeper:
                raise  # the loop reconnects
            # the loop reconnects it once the handler is over; heartbeats bring cancel requests meanwhile
            logger.debug("keeper: the listening connection failed (%s)", first_line(exc))
        finally:
            self._listen_lock.release()

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
        core = self._core
        hand = core.hand
        while True:
            with self._lock:
                while True:
                    if self._closing:
                        return
                    now = time.monotonic()
                    due = core.leases.next_due
                    if self._listen_conn is not None:
                        if not hand.running and self._next_listen_check <= now:
                            self._next_listen_check = now + CANCEL_CHECK  # no handler runs: none to stop
                        due = min(due, self._next_listen_check)
                    if not hand.running:
                        # between handlers: the loop's; until the next heartbeat at most, or notified
                        self._keeper_due = due if due > now else math.inf
                    else:
                        if hand.ok:
                            due = min(due, hand.oldest_unacked + self.settings.ack_interval)
                        if now >= due:
                            break
                        self._keeper_due = due
                    timeout = None if self._keeper_due == math.inf else self._keeper_due - now
                    self._keeper_wake.wait(timeout)
                self._keeper_due = math.inf  # busy: a handler start may notify, unheard and harmless
                acknowledge = bool(hand.ok) and now >= hand.oldest_unacked + self.settings.ack_interval
            conn = self._conn
            failed = "the connection is closed" if conn is None or conn.closed else None
            if failed is None:
                try:
                    if acknowledge:
                        self._drive(core.complete_many())
                    self._drive(core.heartbeat())
                    if self._listen_conn is not None:
                        self._look_for_cancels_if_due(keeper=True)
                except Exception as exc:  # the loop's next statement meets the same error and handles it
                    failed = first_line(exc)
            if failed is not None:
                # what fell due stays due: wait, or this would spin until the loop reconnects
                logger.debug("keeper: %s; left to the worker's loop", failed)
                core.presume_lost()  # the loop may be in a handler a long while yet
                with self._lock:
                    if not self._closing:
                        self._keeper_wake.wait(min(1.0, core.leases.every))

    def _stop_keeper(self) -> None:
        if self._keeper is not None:
            with self._lock:
                self._closing = True
                self._keeper_wake.notify()
            self._keeper.join()
            self._keeper = None

    # -- connections --------------------------------------------------------

    def _connect(self) -> None:
        core = self._core
        if self._conn is None or self._conn.closed:
            self._conn = self._open("worker")
            version = check_extension(self._conn)  # IncompatibleExtension: _work tries again later
            # Behind a transaction-pooling PgBouncer a LISTEN left on a shared
            # server connection can deliver notifications here; drop them
            # (psycopg would otherwise keep them for a notifies() never called).
            self._conn.add_notify_handler(connections.ignore_notify)
            core.connected(version)
        if (
            self.settings.listen
            and not self._poll_only
            and (self._listen_conn is None or self._listen_conn.closed)
        ):
            with self._listen_lock:
                self._listen_conn = self._open("listen")
            if not self._drive(core.listen()):
                with self._listen_lock:
                    self._listen_conn.close()
                    self._listen_conn = None
                self._poll_only = True

    def _open(self, role: str) -> psycopg.Connection[Any]:
        """A new connection for role ("worker" or "listen"): from the conninfo, or the connect callable."""
        if self._make_connection is not None:
            try:
                conn = self._make_connection()
            except OSError as exc:
                raise connections.connect_failed(exc) from exc
            connections.adopt(conn, role, self.settings)
            return conn
        assert self.conninfo is not None
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
        self._core.listening = False

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
