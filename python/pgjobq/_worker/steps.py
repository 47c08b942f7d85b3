"""The worker core: each database round trip of a worker, written once, as a step that yields calls.

A step is a generator.  It yields the requests it needs served (a
:class:`pgjobq._client.proto.Call` to run on the work connection, or one of
the few requests below about the listening connection and waiting), is sent
each one's answer (or has its error thrown in, to handle or let through),
and returns its value.  It does no I/O itself: the worker's driver serves the
requests, the Worker blocking on its connections (:func:`drive`), the
AsyncWorker awaiting them on its event loop (:func:`adrive`).  This is
psycopg's own pattern (its generators.py, made to wait by waiting.py).

The steps (methods of :class:`Core`):

- ``claim``: claim a batch; successes waiting to be acknowledged ride on it
  (jobq.complete_and_claim), or go one by one when the database refuses
  their results, then the claim alone (with several queues they go first, in
  one jobq.complete_many, then jobq.claim_any);
- ``acknowledge``, ``complete_many``, ``report_failures``: the outcomes
  collected, successes in one statement, every other outcome on its own
  (pgjobq._worker.acks.report);
- ``release_backlog``: hand back the jobs claimed but not started (on stop);
- ``heartbeat``: extend the leases in hand when due (pgjobq._worker.leases);
- ``reap_and_tick``: jobq.reap, then jobq.tick (pgjobq._worker.upkeep);
- ``wait_for_work``: register as waiting (jobq.register_waiter), claim once more, sleep
  until a wake-up, the poll interval or the next job's run_at, claim again;
- ``listen``: the listening connection's probe, then LISTEN on the queues'
  channels (pgjobq._worker.listen).

The Core also holds what both workers keep of their work: the jobs in hand
(:class:`InHand`, the one record of them), the heartbeat schedule, reap and
tick, the observers, the count of jobs processed, and what the extension
version the worker connected to offers (:data:`FEATURES`).  Its state
changes under ``lock``: the Worker's threading lock, which its keeper and
handler threads share; nothing for the AsyncWorker, all of whose changes
happen on its event loop.  No step holds the lock across a yield.  What is
not here is each worker's own: threads and the keeper, or tasks and the
listener task; signals; opening connections.

tests/unit/test_worker_steps.py drives the steps against scripted rows,
without a database.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Generator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from pgjobq._client import proto
from pgjobq._client.proto import Call
from pgjobq._errors import (
    Discard,
    Error,
    InvalidArgument,
    JobNotFound,
    LeaseLost,
    PermissionDenied,
    UnknownTask,
    first_line,
)
from pgjobq._job import Job, log_fields
from pgjobq._version import PACKAGE_VERSION, SUPPORTED_EXTENSION_VERSIONS
from pgjobq._worker import acks
from pgjobq._worker.in_hand import InHand
from pgjobq._worker.leases import Leases, report_lost
from pgjobq._worker.listen import PROBE_TIMEOUT, probe_channel, warn_not_delivered, warn_wait_refused
from pgjobq._worker.observe import Outcome
from pgjobq._worker.observing import Observers, Timing
from pgjobq._worker.settings import WorkerSettings
from pgjobq._worker.upkeep import Upkeep

__all__ = [
    "DROP_WAKE_UPS",
    "FEATURES",
    "REGISTER_RETRY",
    "RUN_AT_MARGIN",
    "UNKNOWN_TASK_WARNING_EVERY",
    "Core",
    "DropWakeUps",
    "Features",
    "Heard",
    "Listen",
    "Request",
    "Sleep",
    "Step",
    "Unlisten",
    "adrive",
    "drive",
]

logger = logging.getLogger("pgjobq.worker")

R = TypeVar("R")
Q = TypeVar("Q")  # what a step asks for: a Request (acks.report yields Calls only)

# When jobq.register_waiter could not register (a producer's transaction was in flight),
# listen this long before claiming again.
REGISTER_RETRY = 0.015
# Wake this long after the next job's run_at, so that its claim, whose clock
# is the database's, finds it runnable.
RUN_AT_MARGIN = 0.002
# A worker warns about a task it does not know at most this often (seconds) for each task name: the
# other jobs of that task are handed back meanwhile with a line at info level.
UNKNOWN_TASK_WARNING_EVERY = 60.0


# -- what a step asks its driver for, besides a Call on the work connection -----------------------------


@dataclass(frozen=True, slots=True)
class Listen:
    """LISTEN on channel, on the listening connection."""

    channel: str


@dataclass(frozen=True, slots=True)
class Unlisten:
    """UNLISTEN channel, on the listening connection."""

    channel: str


@dataclass(frozen=True, slots=True)
class Heard:
    """Read the listening connection's notifications for up to timeout seconds: answered True as soon
    as one on channel arrives, False at the timeout."""

    channel: str
    timeout: float


@dataclass(frozen=True, slots=True)
class Sleep:
    """Sleep until deadline (time.monotonic()), stop(), or a wake-up notification: answered True when a
    wake-up ended it (the notifications' cancel requests are heard meanwhile, as always)."""

    deadline: float


class DropWakeUps:
    """Forget the wake-ups heard so far: they are stale, as the claim that follows finds their jobs
    (left pending, they would end the next Sleep at once).  Answered None."""

    __slots__ = ()


DROP_WAKE_UPS = DropWakeUps()

Request = Call[Any] | Listen | Unlisten | Heard | Sleep | DropWakeUps
Step = Generator[Request, Any, R]


def drive(step: Generator[Q, Any, R], serve: Callable[[Q], Any]) -> R:
    """Run step to its end, each request served by serve (blocking); step's value.

    An error serving a request is thrown into the step, which handles it or
    lets it through (then it is raised here).
    """
    try:
        request = next(step)
        while True:
            try:
                answer = serve(request)
            except BaseException as exc:  # thrown in: a step puts back what it took before it lets go
                request = step.throw(exc)
            else:
                request = step.send(answer)
    except StopIteration as stop:
        value: R = stop.value
        return value


async def adrive(step: Generator[Q, Any, R], serve: Callable[[Q], Awaitable[Any]]) -> R:
    """As drive, each request's answer awaited (the AsyncWorker's driver)."""
    try:
        request = next(step)
        while True:
            try:
                answer = await serve(request)
            except BaseException as exc:  # asyncio.CancelledError too: the step cleans up, then it goes on
                request = step.throw(exc)
            else:
                request = step.send(answer)
    except StopIteration as stop:
        value: R = stop.value
        return value


# -- what each supported extension version offers the worker ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Features:
    """What one extension version offers the worker: its claim statements (queries.sql) and the
    decoders of their rows, whether jobq.fail takes retry => false and jobq.hand_back exists, the
    statements that register the worker as waiting on one queue and on several, and its reap
    (reap_spaced: a fleet reaps about once per reap_interval, not once per worker)."""

    version: str
    claim: str
    claim_any: str
    complete_and_claim: str
    jobs: Callable[[list[tuple[Any, ...]]], list[Job]]
    acknowledged_and_claimed: Callable[[list[tuple[Any, ...]]], tuple[set[int], list[Job]]]
    fail_for_good: bool
    hand_back: bool
    register_waiter: str = "register_waiter"
    register_waiter_any: str = "register_waiter_any"
    reap: str = "reap_spaced"


FEATURES: dict[str, Features] = {
    "0.10.0": Features(
        "0.10.0",
        "claim",
        "claim_any",
        "complete_and_claim",
        proto.jobs,
        proto.acknowledged_and_claimed,
        fail_for_good=True,
        hand_back=True,
    ),
    "0.11.0": Features(
        "0.11.0",
        "claim",
        "claim_any",
        "complete_and_claim",
        proto.jobs,
        proto.acknowledged_and_claimed,
        fail_for_good=True,
        hand_back=True,
    ),
}
"""The Features of each supported extension version (pgjobq._version.SUPPORTED_EXTENSION_VERSIONS)."""


def _id_set(rows: list[tuple[Any, ...]]) -> set[int]:
    return {r[0] for r in rows}


def _nothing(rows: list[Any]) -> None:
    return None


def _first_value(rows: list[tuple[Any, ...]]) -> Any:
    return rows[0][0] if rows else None


class Core:
    """One worker's jobs in hand, leases, reap and tick, and the steps that talk to the database about
    them (see the module docstring).

    lock: held around changes to this state (the Worker's threading.Lock; a
    no-op context for the AsyncWorker).  stopping: whether the worker was
    asked to stop.  start_handlers: the worker's own, called once a claim's
    jobs are in hand (the Worker's runs them there and then on its thread,
    with concurrency 1).  flavour: how the start line names the worker's kind
    ("" or ", asyncio").
    """

    def __init__(
        self,
        settings: WorkerSettings,
        *,
        lock: AbstractContextManager[Any],
        stopping: Callable[[], bool],
        start_handlers: Callable[[], None],
        flavour: str = "",
    ) -> None:
        self.settings = settings
        self.queues = settings.queues
        # Several queues: jobq.claim_any (after complete_many: there is no complete_and_claim_any), and
        # jobq.register_waiter on each queue, in one statement.
        self.several = len(self.queues) > 1
        self.queue_names = ", ".join(self.queues)  # for logs
        # The hot statements' parameters, checked once (by WorkerSettings) rather than at every claim.
        self.claim_params = settings.claim_params()
        self._wait_params = settings.wait_params()
        self.lock = lock
        self.stopping = stopping
        self.start_handlers = start_handlers
        self._flavour = flavour
        self.hand = InHand()
        self.leases = Leases(settings, self.queue_names)
        self.upkeep = Upkeep()  # reap and tick: when next, and whether this role may
        # Observers (settings.observers): falsy when none, so that the hot path tests one truth value.
        self.observers = Observers(settings.observers)
        self.observing = bool(settings.observers)  # a plain bool: tested on the hot path
        self.timing = Timing()
        self.processed = 0
        self.started = False  # said so, once connected to a database it supports
        self.drained = False  # burst mode: the queues had no runnable job
        self.listening = False  # the listening connection's probe passed: wake-ups arrive
        self.may_wait = True  # False once jobq.register_waiter (or wait) was refused to this role
        self._use(FEATURES[SUPPORTED_EXTENSION_VERSIONS[-1]])  # until connected: the latest version's
        self._discard_warned = False  # said once that this extension cannot fail a job for good
        self._unknown_warned: dict[str, float] = {}  # when each unknown task was last warned about
        self._unsupported_seen: object = None  # an unsupported version read while running, logged once

    def _use(self, features: Features) -> None:
        """Take the statements of an extension version: the claim's, and complete_and_claim's, each made
        once (a Call takes a microsecond to make); each claim with acknowledgements fills in the ids,
        leases and results of complete_and_claim's parameters (claims never overlap: the worker's loop
        alone sends them)."""
        self.features = features
        claim = features.claim_any if self.several else features.claim
        self._claim_call = Call(claim, self.claim_params, features.jobs, prepare=True)
        register = features.register_waiter_any if self.several else features.register_waiter
        self._wait_call = Call(register, self._wait_params, proto.waited, prepare=True)
        self._acks_params: dict[str, Any] = {**self.claim_params, "ids": [], "leases": [], "results": None}
        self._complete_and_claim = Call(
            features.complete_and_claim, self._acks_params, features.acknowledged_and_claimed, prepare=True
        )

    # -- connecting ------------------------------------------------------------------------------------

    def connected(self, version: str) -> None:
        """The work connection was (re)made, to a database of this extension version (check_extension's):
        its statements from now on, a heartbeat at once, and the start line the first time."""
        self._use(FEATURES[version])
        self.leases.next_due = 0.0
        if not self.started:
            self.started = True
            logger.info(
                "worker %s started on %s %s (pgjobq %s%s)",
                self.settings.name,
                "queues" if self.several else "queue",
                self.queue_names,
                version,
                self._flavour,
            )

    def listen(self) -> Step[bool]:
        """Probe the listening connection, then LISTEN on every queue's channel; whether it listens.

        The probe goes to a channel of its own, so no other listener sees it,
        and only a notification on that channel counts: LISTEN on the queues'
        channels comes after the probe, but behind a transaction-pooling
        PgBouncer another client's LISTEN can deliver the queues' wake-ups and
        cancel requests here, and they prove nothing.  When the probe does
        not arrive, it says so and the worker polls.  Wake-ups sent before
        this LISTEN are not missed: a claim follows every connect; nor are
        cancel requests: the next heartbeat brings them.
        """
        channels: list[str] = []
        for queue in self.queues:
            channels.append((yield proto.channel(queue)))
        probe = probe_channel()
        yield Listen(probe)
        yield Call("probe_notify", {"channel": probe}, _nothing)
        arrived = yield Heard(probe, PROBE_TIMEOUT)
        # Also when it did not arrive: behind a transaction-pooling PgBouncer the LISTEN stays on a
        # server connection other clients share, and this UNLISTEN may reach it (it is best effort).
        yield Unlisten(probe)
        if not arrived:
            warn_not_delivered(channels, self.settings.poll_interval)
            self.listening = False
            return False
        logger.debug("LISTEN works here: the probe notification arrived")
        for channel in channels:
            yield Listen(channel)
        self.listening = True
        return True

    # -- claiming -------------------------------------------------------------------------------------

    def claim(self) -> Step[bool]:
        """Claim a batch into the backlog; False when the queues had nothing runnable (or nothing their
        limits let this claim take).

        Successes waiting to be acknowledged go with the claim: one statement,
        one round trip and one commit for both (jobq.complete_and_claim), with
        their results when any has one.  When the database refuses the
        results (one over its 1 MiB limit, say), nothing is acknowledged or
        claimed: the jobs are acknowledged one by one (complete_singly), then
        the claim goes alone.  With several queues the successes go first,
        in one jobq.complete_many (so that the limits no longer count them as
        running), then the claim (jobq.claim_any).
        """
        if self.several:
            yield from self.complete_many()
            began = time.perf_counter()
            jobs = yield self._claim_call
            return self._claimed(jobs, began)
        with self.lock:
            successes, results = self.hand.take_successes()
        began = time.perf_counter()
        settled = not successes  # once true, a failure below leaves the successes alone
        try:
            if successes:
                params = self._acks_params
                params["ids"] = proto.Bigints([job.id for job in successes])
                params["leases"] = proto.Bigints([job.lease for job in successes])
                params["results"] = results
                try:
                    accepted, jobs = yield self._complete_and_claim
                except InvalidArgument:
                    if results is None:
                        raise
                    settled = True
                    yield from self._complete_singly(successes, results)
                    began = time.perf_counter()
                    jobs = yield self._claim_call
                else:
                    settled = True
                    self._acknowledged(successes, accepted)
            else:
                jobs = yield self._claim_call
        except BaseException:
            if not settled:
                self._restore_successes(successes, results)
            raise
        return self._claimed(jobs, began)

    def _claimed(self, jobs: list[Job], began: float) -> bool:
        """Take the jobs a claim (sent at perf_counter began) returned in hand, and have the worker start
        their handlers; whether there were any."""
        if self.observing:
            now = time.perf_counter()
            self.observers.claimed(self.queues, jobs, now - began)
            self.timing.held(jobs, now)
        hand = self.hand
        if jobs:
            now = time.monotonic()
            with self.lock:
                alone = not (hand.backlog or hand.running)
                self.leases.held(jobs, now, alone=alone)
                hand.hold(jobs)
            self.start_handlers()
        elif self.settings.burst and not hand:
            noun = "queues" if self.several else "queue"
            logger.info("%s %s has no runnable job: burst done", noun, self.queue_names)
            self.drained = True
        return bool(jobs)

    def wait_for_work(self) -> Step[None]:
        """The claim found nothing: register as waiting, claim once more, then sleep until there is work.

        Sleeps until a wake-up notification for one of the queues arrives (then
        claims at once), the poll interval passes, the queues' next job in the
        future is due, the next reap and tick, or stop().  Without a listening
        connection (listen=False, or its probe failed), or once the registration was
        refused, it only sleeps: registering would make producers notify for
        nobody.  When the registration is refused for the moment (a producer
        has a transaction in flight), it claims again after REGISTER_RETRY.
        """
        settings = self.settings
        # also woken for the next reap and tick: schedules advance every reap_interval
        deadline = min(time.monotonic() + settings.poll_interval, self.upkeep.next_due)
        if not self.listening or not self.may_wait:
            yield Sleep(deadline)
            return
        yield from self.acknowledge()  # nothing in hand is worth holding back while we sleep
        # Wake-ups that came while the worker was busy are stale: the claim after registering
        # finds their jobs.  Left pending, they would end the sleep below at once.
        yield DROP_WAKE_UPS
        before = time.monotonic()
        try:
            registered, _, next_run_in = yield self._wait_call
        except PermissionDenied as exc:
            self.may_wait = False
            warn_wait_refused(first_line(exc), settings.poll_interval)
            return
        if not registered:  # a producer is in flight: claim again soon (or when another waiter is notified)
            if (yield Sleep(time.monotonic() + REGISTER_RETRY)):
                yield from self.claim()
            return
        if next_run_in is not None:
            deadline = min(deadline, before + next_run_in.total_seconds() + RUN_AT_MARGIN)
        # Registered: jobs committed from now on notify us; those committed before, this claim finds.
        if self.stopping() or (yield from self.claim()):
            return
        if (yield Sleep(deadline)):
            # At once, before the loop's bookkeeping.  (On the work connection: claiming on the
            # listening one, whose backend has just run, measured no faster.)
            yield from self.claim()

    # -- acknowledging --------------------------------------------------------------------------------

    def record(self, job: Job, error: BaseException | None, result: str | None) -> None:
        """Add a handler's outcome (and result, as JSON text) to the outcomes to report (call under the
        lock, on the worker's own thread or loop: the observers hear of it)."""
        self.hand.record(job, error, result, time.monotonic())
        if self.observing:
            self.observers.pending(self.hand.pending)

    def ack_due(self, now: bool) -> bool:
        """Whether to acknowledge the outcomes collected: any, and now, or the oldest has waited
        ack_interval (so that one statement and one commit acknowledge many jobs)."""
        hand = self.hand
        return bool(hand.ok or hand.failed) and (
            now or hand.ack_due(time.monotonic(), self.settings.ack_interval)
        )

    def acknowledge(self) -> Step[None]:
        """Report the outcomes collected: successes in one statement, the others one by one.  If the
        connection drops meanwhile, what was not reported is sent after reconnecting."""
        if self.hand.ok:
            yield from self.complete_many()
        if self.hand.failed:
            yield from self.report_failures()

    def complete_many(self) -> Step[None]:
        """Acknowledge the successes collected in one jobq.complete_many."""
        with self.lock:
            successes, results = self.hand.take_successes()
        if not successes:
            return
        params = {"ids": [job.id for job in successes], "leases": [job.lease for job in successes]}
        try:
            accepted = yield Call("complete_many", {**params, "results": results}, _id_set, prepare=True)
        except InvalidArgument:
            if results is None:
                self._restore_successes(successes, results)
                raise
            yield from self._complete_singly(successes, results)
            return
        except BaseException:
            self._restore_successes(successes, results)
            raise
        self._acknowledged(successes, accepted)

    def _complete_singly(self, successes: list[Job], results: list[str | None]) -> Step[None]:
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
                params = {"ids": [job.id], "leases": [job.lease], "results": [result]}
                try:
                    accepted |= yield Call("complete_many", params, _id_set)
                except InvalidArgument as refused:
                    with self.lock:
                        self.record(job, refused, None)
                else:
                    done.append(job)
                sent += 1
        except BaseException:
            self._restore_successes(successes[sent:], results[sent:])
            raise
        finally:
            self._acknowledged(done, accepted)

    def _restore_successes(self, successes: list[Job], results: list[str | None] | None) -> None:
        """Put back successes whose acknowledgement failed, to send again."""
        if successes:
            with self.lock:
                self.hand.restore_successes(successes, results, time.monotonic())

    def _acknowledged(self, successes: list[Job], accepted: set[int]) -> None:
        """Log the outcome of acknowledging successes: accepted, or refused as stale."""
        if len(accepted) < len(successes) or self.observing or logger.isEnabledFor(logging.DEBUG):
            outcomes = acks.acknowledged(successes, accepted)
        else:
            outcomes = []
        with self.lock:
            self.processed += len(successes)
            pending = self.hand.pending
        if self.observing:
            for job, outcome in outcomes:
                self.observers.finished(job, outcome, self.timing.settled(job))
            self.observers.pending(pending)

    def report_failures(self) -> Step[None]:
        """Report the failures collected, one statement each (they are rare; each needs its own row)."""
        hand = self.hand
        if not hand.failed:
            return
        with self.lock:
            failures = list(hand.failed)
        for job, error in failures:
            outcome = yield from self.report(job, error)
            with self.lock:
                self.processed += 1
                hand.failed.remove((job, error))
                pending = hand.pending
            if self.observing:
                self.observers.finished(job, outcome, self.timing.settled(job))
                self.observers.pending(pending)

    def report(self, job: Job, error: BaseException) -> Step[Outcome]:
        """Report one outcome other than success, as this extension version can (pgjobq._worker.acks.report).

        A task this worker does not know is warned about once a minute per task
        name (UNKNOWN_TASK_WARNING_EVERY), its other jobs at info level; a
        Discard on an extension that cannot fail a job for good (0.8.0) is a
        plain failure, said once.
        """
        features = self.features
        if isinstance(error, UnknownTask):
            self._unknown_task(job, error)
        elif isinstance(error, Discard) and not features.fail_for_good and not self._discard_warned:
            self._discard_warned = True
            logger.warning(
                "job %d: its handler discarded it (%s), but the pgjobq extension %s cannot fail a job for "
                "good (0.9.0 can): failed as any failure, retried while it has attempts left",
                job.id, error.reason, features.version, extra=log_fields(job),
            )  # fmt: skip
        return (
            yield from acks.report(
                job, error, fail_for_good=features.fail_for_good, hand_back=features.hand_back
            )
        )

    def _unknown_task(self, job: Job, error: UnknownTask) -> None:
        now = time.monotonic()
        task = str(error.task)
        last = self._unknown_warned.get(task)
        log = logger.info
        if last is None or now - last >= UNKNOWN_TASK_WARNING_EVERY:
            self._unknown_warned[task] = now
            log = logger.warning
        log(
            "job %d of queue %s: task %r is not registered with this worker; handing it back for a worker "
            "that has it (it fails for good once older than %g s)",
            job.id, job.queue, error.task, error.grace, extra=log_fields(job),
        )  # fmt: skip

    def release_backlog(self) -> Step[None]:
        """Hand back the jobs claimed but not started: their attempt does not count."""
        hand = self.hand
        while hand.backlog:
            job = hand.backlog[0]
            outcome: Outcome
            try:
                yield proto.release(job.id, job.lease)
            except (LeaseLost, JobNotFound):
                acks.lost(job, "not handed back")
                outcome = "lost"
            else:
                logger.info("job %d handed back unstarted", job.id, extra=log_fields(job))
                outcome = "released"
            if self.observing:
                self.observers.finished(job, outcome, self.timing.settled(job))
            with self.lock:
                hand.backlog.popleft()

    # -- leases, cancel requests, reap and tick ----------------------------------------------------------

    def heartbeat(self) -> Step[None]:
        """When a heartbeat is due, extend in one statement the lease of every job in hand not finished.

        One jobq.heartbeat_status: it also says which jobs were asked to stop
        (their cancel_requested is set) and which are past their deadline
        (the database left their lease unextended: it expires no later than
        the statement's clock, compared in the database).  A job past its
        deadline gets no more heartbeats, said once in a warning: its lease
        cannot be extended, the reaper recovers the job when the lease runs
        out.  A lease this worker took or extended less than a heartbeat ago
        is left alone when two heartbeat intervals fit in it: by the next
        sweep it is still at most two intervals old.  The interval is
        recomputed from the leases in hand (pgjobq._worker.leases).
        """
        with self.lock:
            now = time.monotonic()
            if now < self.leases.next_due:  # most calls: before listing the jobs in hand
                return
            due = self.leases.due(self.hand.unfinished(), now)
        if not due:
            return
        params = {"ids": [job.id for job in due], "leases": [job.lease for job in due]}
        rows = yield Call("heartbeat_status", params, proto.heartbeat_statuses, prepare=True)
        with self.lock:
            beat = self.leases.beat(rows, now)
            # A job whose handler returned meanwhile (perhaps after completing it in its
            # own transaction) is not lost yet: the acknowledgement tells whether the lease held.
            still = {job.id for job in self.hand.unfinished()}
        for job in report_lost(due, beat, still):
            job._request_cancel()  # its handler may as well stop
        self.request_cancel(beat.cancels, "at a heartbeat")

    def request_cancel(self, ids: Collection[int], how: str) -> None:
        """Set cancel_requested on the jobs in hand, not finished, whose id is in ids."""
        if not ids:
            return
        with self.lock:
            jobs = [job for job in self.hand.unfinished() if job.id in ids and not job._cancel_is_set()]
        for job in jobs:
            job._request_cancel()
            logger.info("job %d: cancel requested (heard %s)", job.id, how, extra=log_fields(job))

    def presume_lost(self) -> None:
        """The database cannot be reached: ask the handlers of the jobs in hand whose lease has run out by
        this worker's clock to stop (pgjobq._worker.leases.Leases.presumed_lost)."""
        with self.lock:
            lost = self.leases.presumed_lost(self.hand.unfinished(), time.monotonic())
        for job in lost:
            job._presume_lost()

    def reap_and_tick(self) -> Step[None]:
        """Every reap_interval: recover the jobs whose lease expired (jobq.reap), then enqueue the
        occurrences of the schedules that are due (jobq.tick), each unless refused to this role.

        Every level that may claim may reap (jobq.grant_worker and
        grant_admin); a role given less is told so once, and other workers, or
        a scheduled ``SELECT jobq.reap()``, must then reap.  Every worker
        ticks, whatever its queues: a schedule's jobs go to its own queue, and
        ticks by many workers enqueue each occurrence once.  A tick that fails
        is a warning, once until one succeeds again; a role refused it leaves
        ticking to others (another worker, or pg_cron).  Either way the worker
        carries on (pgjobq._worker.upkeep).
        """
        now = time.monotonic()
        upkeep = self.upkeep
        if upkeep.may_reap:
            try:
                # at least a microsecond: a positive reap_interval that timedelta would round to 0
                every = max(timedelta(seconds=self.settings.reap_interval), timedelta(microseconds=1))
                reaped = yield proto.worker_reap(self.features.reap, every)
            except PermissionDenied as exc:
                upkeep.reap_refused(exc)
            else:
                upkeep.reaped(reaped)
        if upkeep.may_tick:
            try:
                enqueued = yield proto.tick()
            except PermissionDenied as exc:
                upkeep.tick_refused(exc)
            except Error as exc:
                upkeep.tick_failed(exc)
            else:
                upkeep.ticked(enqueued)
        try:
            version = yield Call("running_version", {}, _first_value)
        except Error:
            pass  # the version is news, not a duty: the next turn asks again
        else:
            self.extension_is(version)
        upkeep.next_due = now + self.settings.reap_interval

    def extension_is(self, version: object) -> None:
        """The extension's version as read while the worker runs: an ALTER EXTENSION pgjobq UPDATE made
        since it connected gives it the new version's statements (a task's name in claimed jobs, failing
        for good, handing back) from its next claim on, without a reconnect; a version this package does
        not support is logged once, and the worker carries on with the statements it has (those of an
        older version keep working on the newer one, which is how both orders of a rolling deploy work)."""
        if version == self.features.version:
            return
        features = FEATURES.get(str(version))
        if features is None:
            if version != self._unsupported_seen:
                self._unsupported_seen = version
                logger.warning(
                    "worker %s: the database's pgjobq is now %s, which pgjobq-py %s does not support (%s);"
                    " carrying on with %s's statements: upgrade the workers",
                    self.settings.name,
                    version,
                    PACKAGE_VERSION,
                    ", ".join(SUPPORTED_EXTENSION_VERSIONS),
                    self.features.version,
                )
            return
        logger.info(
            "worker %s: the database's pgjobq went from %s to %s: using its statements",
            self.settings.name,
            self.features.version,
            version,
        )
        self._use(features)
