"""Task: a named job type, a function the worker calls with its job's payload as keyword arguments.

A Task is made by ``@tasks.task`` (pgjobq._tasks.registry).  It checks its
function once, when it is decorated: its parameters must take keyword
arguments (the payload's keys), and the one annotated :class:`pgjobq.Job`,
if any, receives the job itself.  Then it enqueues jobs of itself, checked
against the function's signature before anything is written, and runs them
(pgjobq._tasks.running).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import functools
import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, ParamSpec, TypeVar

import psycopg

from pgjobq import aio
from pgjobq._client import proto
from pgjobq._client import sync as client
from pgjobq._client.proto import OnParentFailure
from pgjobq._errors import ConfigurationError, InvalidArgument
from pgjobq._job import Job
from pgjobq._tasks import running

__all__ = ["EnqueueOptions", "Task", "seconds"]

P = ParamSpec("P")
R = TypeVar("R")

Conn = psycopg.Connection[Any]
AsyncConn = psycopg.AsyncConnection[Any]

OnConflict = Literal["return", "raise", "replace"]
"""The on_conflict a task's enqueue takes: each gives a job id ("skip", which gives None, is
pgjobq.enqueue's alone)."""


class _Keep(enum.Enum):
    """with_options' default: the option keeps the value it has."""

    KEEP = enum.auto()


KEEP = _Keep.KEEP


@dataclasses.dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """The options a task's jobs are enqueued with: pgjobq.enqueue's keywords (queue and payload aside).

    priority and max_attempts start as the task's; the others as
    pgjobq.enqueue's defaults.  :meth:`Task.with_options` replaces some.
    """

    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    unique_scope: str = "active"
    on_conflict: OnConflict = "return"
    headers: Mapping[str, Any] | None = None
    concurrency_key: str | None = None
    depends_on: Sequence[int] | None = None
    on_parent_failure: OnParentFailure = "cancel"
    hold: bool = False  # extension 0.11.0


# The options of one job that enqueue_many cannot apply to many (it takes unique_keys and
# concurrency_keys aligned with its arguments instead), with the value that means "not given".
_ONE_JOB_ONLY = {
    "unique_key": None,
    "concurrency_key": None,
    "depends_on": None,
    "on_parent_failure": "cancel",
    "hold": False,
}


def seconds(name: str, value: object, *, owner: str) -> float | None:
    """value (seconds, or a timedelta) as seconds above 0, None staying None; ConfigurationError naming
    name (an argument of owner) otherwise."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        number = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise ConfigurationError(
            f"{owner}: {name} must be a number of seconds or a timedelta, got {type(value).__name__}"
        )
    if not (number > 0 and math.isfinite(number)):
        raise ConfigurationError(f"{owner}: {name} must be above 0 seconds, got {value!r}")
    return number


class Task(Generic[P, R]):
    """A named job type: a function (``def`` or ``async def``) run by a worker for each job of its task.

    Made by ``@tasks.task(...)`` on a :class:`pgjobq.Tasks`.  The job's
    payload, a JSON object, holds the function's keyword arguments; a
    parameter annotated :class:`pgjobq.Job` (any name) receives the job
    itself (for its id, attempts, headers, ``cancel_requested``) and is not
    part of the payload.  Positional-only parameters and ``*args`` are
    refused at decoration: a payload's keys are keywords.

    ``name`` is what a job records in ``jobq.jobs.task`` and what a worker
    dispatches on, so a producer in any language enqueues the task by it:
    ``SELECT jobq.enqueue('emails', '{"user_id": 7}', task => 'send_welcome')``.
    It defaults to the function's ``__name__``.

    Enqueue with :meth:`enqueue` (in the caller's transaction, like
    :func:`pgjobq.enqueue`), :meth:`enqueue_many`, and their ``_async``
    twins on an AsyncConnection.  The arguments are bound against the
    function's signature first: a missing or unknown one raises TypeError
    naming it, and a value JSON cannot hold raises InvalidArgument, before
    anything is written.  Only the arguments given are stored: defaults
    apply when the task runs.  :meth:`with_options` gives a copy that
    enqueues with other options (run_at, priority, unique_key, ...).

    Calling the task (``send_welcome(user_id=7)``) calls the function, here
    and now.

    Attributes: ``function``, ``name``, ``queue``, ``priority``,
    ``max_attempts`` (None: the queue's), ``lease_timeout`` and ``timeout``
    (seconds, or None), ``retry_on`` (a tuple of exception classes, or None:
    every exception is retried), ``is_async``, ``job_parameter`` (the name
    of the parameter that receives the job, or None).
    """

    function: Callable[P, R]
    name: str
    queue: str
    priority: int
    max_attempts: int | None
    lease_timeout: float | None
    timeout: float | None
    retry_on: tuple[type[BaseException], ...] | None
    is_async: bool
    job_parameter: str | None

    def __init__(
        self,
        function: Callable[P, R],
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_attempts: int | None = None,
        lease_timeout: float | timedelta | None = None,
        timeout: float | timedelta | None = None,
        retry_on: Iterable[type[BaseException]] | None = None,
    ) -> None:
        if not callable(function):
            raise ConfigurationError(f"a task must be a function, got {type(function).__name__}")
        owner = f"task {getattr(function, '__qualname__', None) or function!r}"
        if name is None:
            name = getattr(function, "__name__", None)
            if not isinstance(name, str):
                raise ConfigurationError(f"{owner} has no __name__: give it a name (name=...)")
        try:
            self.name = proto.check_task(name, "name")
        except InvalidArgument as exc:
            raise ConfigurationError(f"{owner}: {exc}") from None
        owner = f"task {self.name!r}"
        if not isinstance(queue, str) or not queue:
            raise ConfigurationError(f"{owner}: queue must be a non-empty string, got {queue!r}")
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ConfigurationError(f"{owner}: priority must be an integer, got {type(priority).__name__}")
        if max_attempts is not None and (
            not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1
        ):
            raise ConfigurationError(
                f"{owner}: max_attempts must be an integer of 1 or more, got {max_attempts!r}"
            )
        self.function = function
        self.queue = queue
        self.priority = priority
        self.max_attempts = max_attempts
        self.lease_timeout = seconds("lease_timeout", lease_timeout, owner=owner)
        self.timeout = seconds("timeout", timeout, owner=owner)
        self.retry_on = _exception_classes(retry_on, owner)
        self.is_async = _is_coroutine_function(function)
        self._signature, self.job_parameter = _parameters(function, owner)
        # the signature the arguments to enqueue bind against: the job's parameter left out
        self._enqueued = self._signature.replace(
            parameters=[p for p in self._signature.parameters.values() if p.name != self.job_parameter]
        )
        self._options = EnqueueOptions(priority=priority, max_attempts=max_attempts)
        # __name__, __doc__, __module__ and __wrapped__ (inspect.signature(task) is the function's)
        functools.update_wrapper(self, function, updated=())

    def __repr__(self) -> str:
        kind = "async task" if self.is_async else "task"
        return f"<{kind} {self.name!r} of queue {self.queue!r}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the function, here and now (no job: for the application's own code and its unit tests)."""
        return self.function(*args, **kwargs)

    @property
    def options(self) -> EnqueueOptions:
        """The options this task's jobs are enqueued with (see with_options)."""
        return self._options

    def with_options(
        self,
        *,
        priority: int | _Keep = KEEP,
        run_at: datetime | _Keep | None = KEEP,
        max_attempts: int | _Keep | None = KEEP,
        unique_key: str | _Keep | None = KEEP,
        unique_scope: str | _Keep = KEEP,
        on_conflict: OnConflict | _Keep = KEEP,
        headers: Mapping[str, Any] | _Keep | None = KEEP,
        concurrency_key: str | _Keep | None = KEEP,
        depends_on: Sequence[int] | _Keep | None = KEEP,
        on_parent_failure: OnParentFailure | _Keep = KEEP,
        hold: bool | _Keep = KEEP,
    ) -> Task[P, R]:
        """A copy of this task that enqueues with these options (the others kept); this one is unchanged.

        The options are :func:`pgjobq.enqueue`'s, and mean what they mean
        there (``run_at`` timezone-aware, ``max_attempts`` None for the
        queue's, ...); they are checked when a job is enqueued.  The queue
        is the task's own.  on_conflict may be "return" (the default: the
        holder's id), "raise" or "replace", each of which gives a job id;
        "skip" is refused (InvalidArgument): enqueue the task with
        ``pgjobq.enqueue(conn, queue, payload, task=name, on_conflict="skip")``,
        which may return None.  hold=True enqueues the jobs held until
        :func:`pgjobq.unhold` (extension 0.11.0).  The copy runs as the task it came from::

            send_welcome.with_options(run_at=tomorrow, unique_key="user-7").enqueue(conn, user_id=7)
        """
        given: dict[str, Any] = {
            name: value
            for name, value in (
                ("priority", priority),
                ("run_at", run_at),
                ("max_attempts", max_attempts),
                ("unique_key", unique_key),
                ("unique_scope", unique_scope),
                ("on_conflict", on_conflict),
                ("headers", headers),
                ("concurrency_key", concurrency_key),
                ("depends_on", depends_on),
                ("on_parent_failure", on_parent_failure),
                ("hold", hold),
            )
            if value is not KEEP
        }
        if given.get("on_conflict", "return") not in ("return", "raise", "replace"):
            raise InvalidArgument(
                "on_conflict must be 'return', 'raise' or 'replace' for a task, got "
                f"{given['on_conflict']!r} (pgjobq.enqueue(..., task=..., on_conflict='skip') skips, "
                "returning None)"
            )
        bound = copy.copy(self)
        bound._options = dataclasses.replace(self._options, **given)
        return bound

    # -- the payload -----------------------------------------------------------------

    def payload(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The payload of a job of this task called with these keyword arguments, bound against the
        function's signature first: TypeError naming a missing or unknown argument (or the job's
        parameter, which is not the caller's to give)."""
        if self.job_parameter is not None and self.job_parameter in arguments:
            raise TypeError(
                f"{self.name}(): {self.job_parameter!r} receives the job when the task runs, "
                "it is not an argument to enqueue"
            )
        try:
            self._enqueued.bind(**arguments)
        except TypeError as exc:
            raise TypeError(f"{self.name}(): {exc}") from None
        return dict(arguments)

    def _payloads(self, arguments: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Each element's payload, bound and checked as JSON; the error names arguments[i] (from 0)."""
        if isinstance(arguments, (Mapping, str, bytes)):
            raise InvalidArgument(
                f"arguments must be a list of mappings (keyword arguments), got {type(arguments).__name__}"
            )
        payloads = []
        for i, each in enumerate(arguments):
            if not isinstance(each, Mapping):
                raise InvalidArgument(f"arguments[{i}] must be a mapping, got {type(each).__name__}")
            try:
                payload = self.payload(each)
            except TypeError as exc:
                raise TypeError(f"arguments[{i}]: {exc}") from None
            proto.dump_payload(payload, f"arguments[{i}]")
            payloads.append(payload)
        return payloads

    def _many_options(self) -> EnqueueOptions:
        """The options, refused when one applies to a single job (InvalidArgument naming it)."""
        for name, unset in _ONE_JOB_ONLY.items():
            if getattr(self._options, name) != unset:
                raise InvalidArgument(
                    f"{name} (with_options) applies to one job: enqueue_many takes unique_keys and "
                    "concurrency_keys aligned with its arguments, and enqueues no job with parents "
                    "and no held job"
                )
        return self._options

    # -- enqueue ---------------------------------------------------------------------

    def enqueue(self, conn: Conn, /, **arguments: Any) -> int:
        """Enqueue one job of this task in conn's current transaction; return its id.

        The keyword arguments are the function's (the job's parameter
        aside), checked before anything is written (see the class
        docstring); the options are the task's, or with_options'.
        """
        o = self._options
        job_id = client.enqueue(
            conn,
            self.queue,
            self.payload(arguments),
            priority=o.priority,
            run_at=o.run_at,
            max_attempts=o.max_attempts,
            unique_key=o.unique_key,
            unique_scope=o.unique_scope,
            on_conflict=o.on_conflict,
            headers=o.headers,
            concurrency_key=o.concurrency_key,
            depends_on=o.depends_on,
            on_parent_failure=o.on_parent_failure,
            task=self.name,
            hold=o.hold,
        )
        return job_id

    async def enqueue_async(self, conn: AsyncConn, /, **arguments: Any) -> int:
        """As :meth:`enqueue`, on an AsyncConnection."""
        o = self._options
        job_id = await aio.enqueue(
            conn,
            self.queue,
            self.payload(arguments),
            priority=o.priority,
            run_at=o.run_at,
            max_attempts=o.max_attempts,
            unique_key=o.unique_key,
            unique_scope=o.unique_scope,
            on_conflict=o.on_conflict,
            headers=o.headers,
            concurrency_key=o.concurrency_key,
            depends_on=o.depends_on,
            on_parent_failure=o.on_parent_failure,
            task=self.name,
            hold=o.hold,
        )
        return job_id

    def enqueue_many(
        self,
        conn: Conn,
        arguments: Iterable[Mapping[str, Any]],
        /,
        *,
        unique_keys: Sequence[str | None] | None = None,
        concurrency_keys: Sequence[str | None] | None = None,
    ) -> list[int]:
        """Enqueue one job of this task per element of arguments (each a mapping of keyword arguments),
        in one statement and conn's current transaction; return their ids in order.

        All or nothing: each element is bound and checked first, and the
        first that fails raises (TypeError or InvalidArgument naming
        ``arguments[i]``, counting from 0) with nothing enqueued.
        unique_keys and concurrency_keys, when given, are aligned with
        arguments, as with :func:`pgjobq.enqueue_many`; the other options
        are the task's (or with_options'), for every job.
        """
        payloads = self._payloads(arguments)
        o = self._many_options()
        return client.enqueue_many(
            conn,
            self.queue,
            payloads,
            priority=o.priority,
            run_at=o.run_at,
            max_attempts=o.max_attempts,
            unique_keys=unique_keys,
            unique_scope=o.unique_scope,
            on_conflict=o.on_conflict,
            headers=o.headers,
            concurrency_keys=concurrency_keys,
            task=self.name,
        )

    async def enqueue_many_async(
        self,
        conn: AsyncConn,
        arguments: Iterable[Mapping[str, Any]],
        /,
        *,
        unique_keys: Sequence[str | None] | None = None,
        concurrency_keys: Sequence[str | None] | None = None,
    ) -> list[int]:
        """As :meth:`enqueue_many`, on an AsyncConnection."""
        payloads = self._payloads(arguments)
        o = self._many_options()
        return await aio.enqueue_many(
            conn,
            self.queue,
            payloads,
            priority=o.priority,
            run_at=o.run_at,
            max_attempts=o.max_attempts,
            unique_keys=unique_keys,
            unique_scope=o.unique_scope,
            on_conflict=o.on_conflict,
            headers=o.headers,
            concurrency_keys=concurrency_keys,
            task=self.name,
        )

    # -- running ---------------------------------------------------------------------

    def run(self, job: Job) -> object:
        """Run this task on job, in this thread (see pgjobq._tasks.running.run): its result.

        For a sync task; an async task's run_async.
        """
        return running.run(self, job)

    async def run_async(self, job: Job) -> object:
        """Run this task on job: awaited on the running loop if it is async, on a thread otherwise
        (see pgjobq._tasks.running.run_async)."""
        return await running.run_async(self, job)

    def arguments(self, job: Job) -> dict[str, Any]:
        """The keyword arguments of the call that runs job: its payload, and the job itself for the job's
        parameter; Discard when they do not bind (the task's signature changed since the job was
        enqueued: no retry can help)."""
        return running.arguments(self, job)

    @property
    def signature(self) -> inspect.Signature:
        """The function's signature (with the job's parameter)."""
        return self._signature


def _exception_classes(
    retry_on: Iterable[type[BaseException]] | None, owner: str
) -> tuple[type[BaseException], ...] | None:
    if retry_on is None:
        return None
    classes: tuple[object, ...] = (retry_on,) if isinstance(retry_on, type) else tuple(retry_on)
    for each in classes:
        if not (isinstance(each, type) and issubclass(each, BaseException)):
            raise ConfigurationError(f"{owner}: retry_on must hold exception classes, got {each!r}")
    return classes  # type: ignore[return-value]  # each checked above


def _is_coroutine_function(function: object) -> bool:
    """Whether function is an async def, or an object whose __call__ is one."""
    if inspect.iscoroutinefunction(function):
        return True
    if inspect.isroutine(function):
        return False
    return inspect.iscoroutinefunction(type(function).__call__)


def _is_job(annotation: object) -> bool:
    if isinstance(annotation, str):  # annotations that could not be evaluated: by their text
        return annotation in ("Job", "pgjobq.Job")
    return isinstance(annotation, type) and issubclass(annotation, Job)


def _parameters(function: Callable[..., Any], owner: str) -> tuple[inspect.Signature, str | None]:
    """function's signature, with its annotations evaluated where they can be, and the name of its
    parameter annotated Job (None: it has none); ConfigurationError for a parameter a payload's
    keyword arguments could not fill."""
    try:
        signature = inspect.signature(function, eval_str=True)
    except (NameError, TypeError, SyntaxError, AttributeError):  # an annotation naming what is not there
        try:
            signature = inspect.signature(function)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{owner}: its signature cannot be read ({exc})") from None
    except ValueError as exc:
        raise ConfigurationError(f"{owner}: its signature cannot be read ({exc})") from None
    job_parameters = []
    for parameter in signature.parameters.values():
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise ConfigurationError(
                f"{owner}: parameter {parameter.name!r} is positional-only, and a task takes keyword "
                "arguments (its payload's keys)"
            )
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise ConfigurationError(
                f"{owner}: *{parameter.name} can never be filled: a task takes keyword arguments "
                "(its payload's keys)"
            )
        if _is_job(parameter.annotation):
            job_parameters.append(parameter.name)
    if len(job_parameters) > 1:
        raise ConfigurationError(
            f"{owner}: parameters {', '.join(map(repr, job_parameters))} are all annotated Job; one receives "
            "the job"
        )
    return signature, (job_parameters[0] if job_parameters else None)
