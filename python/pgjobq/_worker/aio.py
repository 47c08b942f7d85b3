"""AsyncWorker: claims jobs and runs coroutine handlers on them, as tasks of one event loop.

It does what :class:`pgjobq.Worker` does (see pgjobq._worker.sync's docstring),
with the same WorkerSettings, and its round trips to the database are the
same steps of the worker core (pgjobq._worker.steps: claim, acknowledge,
heartbeat, release, register as waiting, reap and tick, the LISTEN probe),
whose requests it serves by awaiting them (steps.adrive); it shares the
jobs in hand (pgjobq._worker.in_hand) and the rest of the policy with it,
as well as ``connect=`` (an async callable returning a new
AsyncConnection) and ``tasks=`` (a task registry's async handler).  What
differs is how handlers run:

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
is awaited on the loop.  Each handler runs with ``pgjobq._job.CURRENT_JOB``
set to its job (in its task, and so on its thread).  Run
``asyncio.run(worker.run())``, or ``pgjobq worker MODULE:COROUTINE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import psycopg

from pgjobq import _tracing, aio
from pgjobq._client.proto import Call
from pgjobq._errors import first_line
from pgjobq._job import CURRENT_JOB, Job
from pgjobq._worker import acks, connections, durable, signals
from pgjobq._worker.backoff import Backoff
from pgjobq._worker.listen import cancel_ids, listen_statement, unlisten_statement
from pgjobq._worker.settings import TaskRegistry, WorkerSettings, check_worker_arguments
from pgjobq._worker.steps import Core, DropWakeUps, Heard, Listen, Request, Sleep, Step, Unlisten, adrive

__all__ = ["AsyncConnect", "AsyncHandler", "AsyncWorker", "is_coroutine_function"]

is_coroutine_function = acks.is_coroutine_function

logger = logging.getLogger("pgjobq.worker")

R = TypeVar("R")

# A coroutine function (what it returns is awaited), or a plain function (run on a thread)
AsyncHandler = Callable[[Job], Any]

AsyncConn = psycopg.AsyncConnection[Any]
# An async callable that returns a new connection, for every connection the worker opens.
AsyncConnect = Callable[[], Awaitable[AsyncConn]]


class AsyncWorker:
    """Runs ``handler`` (a coroutine function) on the jobs of one queue or several, as asyncio tasks.

    See the module docstring.  ``conninfo`` is a libpq connection string, or
    ``connect`` an async callable returning a new psycopg AsyncConnection
    (exactly one of the two).  Outcomes are the Worker's: returning
    completes the job with the value returned as its result; ``Snooze``,
    ``Retry`` and ``Discard`` as there; any other exception fails the job.
    ``tasks`` (a task registry) in place of ``handler`` runs each job's task.
    """

    def __init__(
        self,
        conninfo: str | None = None,
        handler: AsyncHandler | None = None,
        settings: WorkerSettings | None = None,
        *,
        connect: AsyncConnect | None = None,
        tasks: TaskRegistry | None = None,
    ) -> None:
        settings = check_worker_arguments("AsyncWorker", conninfo, connect, handler, tasks, settings)
        if tasks is not None:
            handler = tasks.async_handler()
            self._coroutine_handler = True  # what it returns is awaited on the loop
        else:
            self._coroutine_handler = acks.is_coroutine_function(handler)
        self.conninfo = conninfo
        self.handler = handler
        self.settings = settings
        self._make_connection = connect
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
        # every change to the core's state happens on the event loop: no lock
        self._core = Core(
            settings,
            lock=contextlib.nullcontext(),
            stopping=lambda: self.stopping,
            start_handlers=self._start_handlers,
            flavour=", asyncio",
        )
        self._tasks: dict[int, asyncio.Task[None]] = {}  # the running jobs' tasks
        self._reconnecting = False
        self._poll_only = False
        # The handlers' durable calls (job.step, ...), on connections of their own (made in run(): the loop).
        self._shelf = durable.AsyncShelf(lambda: self._open("steps"), aio._run)
        self._durable: durable.OnLoop | None = None

    # -- public API -----------------------------------------------------------

    @property
    def processed(self) -> int:
        """How many jobs the worker has reported the outcome of (done, failed, snoozed, ...)."""
        return self._core.processed

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
        self._durable = durable.OnLoop(self._shelf.run, self._loop)
        if self._stop_requests:
            self._stopped.set()
        restore = signals.install_on_loop(self._loop, self._on_signal) if install_signal_handlers else None
        if not self._coroutine_handler:
            self._pool = ThreadPoolExecutor(self.settings.concurrency, thread_name_prefix="pgjobq-handler")
        try:
            await self._work()
        finally:
            self.abandoned = len(self._core.hand)
            if self.abandoned:
                logger.warning("abandoning %d job(s) in hand; the reaper will recover them", self.abandoned)
            for task in self._tasks.values():
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await self._disconnect()
            await self._shelf.close()
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

    async def _drive(self, step: Step[R]) -> R:
        """Run a step of the core on this worker's connections."""
        conn = self._conn
        assert conn is not None
        run, serve_other = aio._run, self._serve

        async def serve(request: Request) -> Any:
            if type(request) is Call:
                return await run(conn, request)
            return await serve_other(request)

        return await adrive(step, serve)

    async def _serve(self, request: Request) -> Any:
        """Serve a step's request about waiting or the listening connection."""
        if isinstance(request, Sleep):
            if self._listener is None:
                await self._sleep(request.deadline - time.monotonic())
                return False
            return await self._woken_before(request.deadline)
        if isinstance(request, DropWakeUps):
            assert self._woken is not None
            self._woken.clear()  # the cancel requests among them were heard by the listener task
            return None
        listen = self._listen_conn
        assert listen is not None
        if isinstance(request, Listen):
            await listen.execute(listen_statement(request.channel))
            return None
        if isinstance(request, Unlisten):
            await listen.execute(unlisten_statement(request.channel))
            return None
        if isinstance(request, Heard):
            arrived = False
            notifies = listen.notifies(timeout=request.timeout)
            try:
                async for notify in notifies:
                    if notify.channel == request.channel:
                        arrived = True
                        break
            finally:
                await notifies.aclose()
            return arrived
        raise TypeError(f"a step asked for {request!r}")

    async def _work(self) -> None:
        backoff = Backoff(self.settings.reconnect_delay_max)
        core = self._core
        while self._stop_requests < 2 and (core.hand or not (self.stopping or core.drained)):
            try:
                await self._connect()
                if self._reconnecting:
                    self._reconnecting = False
                    if core.observing:
                        core.observers.reconnected()
                await self._step()
                backoff.reset()
            except connections.RETRIED as exc:
                await self._disconnect()
                self._reconnecting = core.started  # a reconnect once it had connected
                pause = backoff.next()
                logger.warning("%s", connections.retrying(exc, pause))
                # the database cannot be reached: jobs whose lease ran out by our clock are to stop
                core.presume_lost()
                await self._sleep(pause)

    async def _step(self) -> None:
        core = self._core
        hand = core.hand
        self._start_handlers()
        batch_over = not self._tasks and not hand.backlog
        if self._claiming() and batch_over:
            if hand.failed:
                await self._drive(core.report_failures())  # the successes ride on the next claim
        elif core.ack_due(self.stopping or batch_over):
            await self._drive(core.acknowledge())
        if self.stopping and hand.backlog:
            await self._drive(core.release_backlog())
        if time.monotonic() >= core.leases.next_due:
            await self._drive(core.heartbeat())
        if time.monotonic() >= core.upkeep.next_due:
            await self._drive(core.reap_and_tick())
        if self._claiming() and await self._drive(core.claim()):
            return
        if self._tasks:
            await self._wait_for_handlers()
        elif not self.stopping and not core.drained:
            await self._drive(core.wait_for_work())

    def _claiming(self) -> bool:
        return not self.stopping and not self._core.drained and len(self._tasks) < self.settings.concurrency

    def _start_handlers(self) -> None:
        """Start a task for each backlog job while fewer than concurrency run (none once stopping)."""
        core = self._core
        hand = core.hand
        while not self.stopping and hand.backlog and len(self._tasks) < self.settings.concurrency:
            job = hand.backlog.popleft()
            if job._cancel_is_set():
                core.record(job, acks.CancelledUnstarted(), None)
                continue
            hand.start(job)
            if core.observing:
                core.observers.started(job, core.timing.start(job, time.perf_counter()))
            task = asyncio.ensure_future(self._run_handler(job))
            self._tasks[job.id] = task

    async def _run_handler(self, job: Job) -> None:
        """One job's task: run its handler (CURRENT_JOB set to the job in the task's own context), then
        record its outcome in hand."""
        core = self._core
        object.__setattr__(job, "_durable", self._durable)  # frozen: the durable calls (job.step, ...)
        token = CURRENT_JOB.set(job)
        try:
            with _tracing.process(job, self.settings.name):
                handler = self.handler
                assert handler is not None
                if self._coroutine_handler:
                    result = await handler(job)
                else:
                    assert self._loop is not None
                    context = contextvars.copy_context()  # the trace span and CURRENT_JOB, on the thread
                    result = await self._loop.run_in_executor(self._pool, context.run, handler, job)
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
            CURRENT_JOB.reset(token)
            if core.observing:
                core.timing.end(job, time.perf_counter())
        self._tasks.pop(job.id, None)
        core.record(job, error, text)

    async def _wait_for_handlers(self) -> None:
        """Sleep until a handler finishes, a heartbeat or an acknowledgement is due, or a poll interval."""
        core = self._core
        hand = core.hand
        deadline = min(core.leases.next_due, time.monotonic() + self.settings.poll_interval)
        if hand.ok or hand.failed:
            deadline = min(deadline, hand.oldest_unacked + self.settings.ack_interval)
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
                    self._core.request_cancel(ids, "by notification")
        except psycopg.Error as exc:
            # the loop reopens it at its next connect; heartbeats bring cancel requests meanwhile
            logger.debug("the listening connection failed (%s)", first_line(exc))
            self._woken.set()

    # -- connections --------------------------------------------------------

    async def _open(self, role: str) -> AsyncConn:
        """A new connection for role ("worker" or "listen"): from the conninfo, or the connect callable."""
        if self._make_connection is not None:
            try:
                conn = await self._make_connection()
            except OSError as exc:
                raise connections.connect_failed(exc) from exc
            await connections.adopt_async(conn, role, self.settings)
            return conn
        assert self.conninfo is not None
        conn = await psycopg.AsyncConnection.connect(
            self.conninfo,
            autocommit=True,
            application_name=connections.app_name(role, self.settings),
            **connections.network_options(self.conninfo, self.settings),
        )
        connections.configure(conn, self.settings)
        return conn

    async def _connect(self) -> None:
        core = self._core
        if self._conn is None or self._conn.closed:
            self._conn = await self._open("worker")
            version = await aio.check_extension(self._conn)  # IncompatibleExtension: _work tries again later
            self._conn.add_notify_handler(connections.ignore_notify)
            core.connected(version)
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
            if await self._drive(core.listen()):
                self._listener = asyncio.ensure_future(self._listen(listen))
            else:
                await listen.close()
                self._listen_conn = None
                self._poll_only = True

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
        self._core.listening = False
