"""Tasks: a registry of tasks, and the handlers a worker runs them with.

The workers take it as ``Worker(dsn, tasks=tasks)`` and
``AsyncWorker(dsn, tasks=tasks)``, through exactly this interface:
``queues``, ``lease_timeout``, ``is_async``, ``sync_handler()`` and
``async_handler()``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar, overload

from pgjobq._errors import ConfigurationError, UnknownTask
from pgjobq._job import Job
from pgjobq._tasks.task import Task, seconds

__all__ = ["Tasks"]

P = ParamSpec("P")
R = TypeVar("R")

UNKNOWN_TASK_RETRY = 60.0
UNKNOWN_TASK_GRACE = 3600.0


class Tasks:
    """A registry of tasks, the named job types one worker runs: ``pgjobq worker --tasks myapp.tasks``.

    ::

        tasks = pgjobq.Tasks(queue="emails")

        @tasks.task(max_attempts=5)
        def send_welcome(user_id: int) -> None: ...

        send_welcome.enqueue(conn, user_id=7)

    ``queue`` is the queue of its tasks that name none.  A task's name (its
    function's ``__name__`` unless ``name=`` says otherwise) is unique in
    its registry: registering a second task of one name raises
    ConfigurationError at decoration, that is when the module is imported,
    naming both functions.  Two modules that each define a ``send`` task
    give one of them a ``name=`` (``"billing.send"``), since a name is what
    producers in every language enqueue the task by.

    A worker given the registry claims from every queue its tasks use
    (:attr:`queues`) and runs each job's task (:meth:`sync_handler`,
    :meth:`async_handler`).  A job whose task it does not know (a producer
    already sends a task that this worker's code lacks, during a rolling
    deploy), or a plain job without a task, is neither lost nor done: the
    worker hands it back to its queue without spending an attempt, to run
    again after ``unknown_task_retry`` seconds (default 60), with a warning
    naming the task, for a worker that knows it; once the job is older than
    ``unknown_task_grace`` seconds (default 3600, an hour) it fails for good
    with an error naming the task instead.  Both are seconds or timedeltas.
    """

    def __init__(
        self,
        *,
        queue: str = "default",
        unknown_task_retry: float | timedelta = UNKNOWN_TASK_RETRY,
        unknown_task_grace: float | timedelta = UNKNOWN_TASK_GRACE,
    ) -> None:
        if not isinstance(queue, str) or not queue:
            raise ConfigurationError(f"Tasks: queue must be a non-empty string, got {queue!r}")
        self.queue = queue
        retry = seconds("unknown_task_retry", unknown_task_retry, owner="Tasks")
        grace = seconds("unknown_task_grace", unknown_task_grace, owner="Tasks")
        assert retry is not None and grace is not None
        self.unknown_task_retry = retry
        self.unknown_task_grace = grace
        self._tasks: dict[str, Task[..., Any]] = {}

    def __repr__(self) -> str:
        return f"<Tasks {sorted(self._tasks)}>"

    # -- registering ---------------------------------------------------------------------

    @overload
    def task(self, function: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        /,
        *,
        name: str | None = ...,
        queue: str | None = ...,
        priority: int = ...,
        max_attempts: int | None = ...,
        lease_timeout: float | timedelta | None = ...,
        timeout: float | timedelta | None = ...,
        retry_on: Iterable[type[BaseException]] | None = ...,
    ) -> Callable[[Callable[P, R]], Task[P, R]]: ...
    def task(
        self,
        function: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        queue: str | None = None,
        priority: int = 0,
        max_attempts: int | None = None,
        lease_timeout: float | timedelta | None = None,
        timeout: float | timedelta | None = None,
        retry_on: Iterable[type[BaseException]] | None = None,
    ) -> Task[..., Any] | Callable[[Callable[..., Any]], Task[..., Any]]:
        """Register a function (``def`` or ``async def``) as a task: ``@tasks.task`` or
        ``@tasks.task(...)``; the :class:`pgjobq.Task` it becomes.

        name: the task's name (default: the function's ``__name__``), 1 to
        200 characters of A-Z, a-z, 0-9, ``_``, ``.``, ``:`` and ``-``,
        starting with a letter or ``_``.  queue: its jobs' queue (default:
        the registry's).  priority and max_attempts: its jobs' (max_attempts
        None: the queue's setting).  lease_timeout: the lease its worker
        claims with (the longest of the registry's is the worker's; None:
        the queue's).  timeout: seconds after which an attempt fails with
        TimeoutError (see pgjobq._tasks.running).  retry_on: exception
        classes; when given, an attempt that raises any other exception
        fails the job for good at once, as ``raise pgjobq.Discard(...)``
        would (Snooze, Retry and Discard keep their meaning).

        ConfigurationError, at decoration, for a name already registered, a
        bad name or option, or parameters a payload cannot fill (see
        :class:`pgjobq.Task`).
        """

        def register(fn: Callable[..., Any]) -> Task[..., Any]:
            made = Task(
                fn,
                name=name,
                queue=self.queue if queue is None else queue,
                priority=priority,
                max_attempts=max_attempts,
                lease_timeout=lease_timeout,
                timeout=timeout,
                retry_on=retry_on,
            )
            self.add(made)
            return made

        return register if function is None else register(function)

    def add(self, task: Task[..., Any]) -> None:
        """Register a task made elsewhere (another registry's, say); ConfigurationError if its name is
        taken."""
        if not isinstance(task, Task):
            raise ConfigurationError(f"Tasks.add takes a pgjobq.Task, got {type(task).__name__}")
        held = self._tasks.get(task.name)
        if held is not None:
            raise ConfigurationError(
                f"task name {task.name!r} is registered twice: by {_where(held.function)} and by "
                f"{_where(task.function)} (give one of them another name=...)"
            )
        self._tasks[task.name] = task

    # -- reading -------------------------------------------------------------------------

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __getitem__(self, name: str) -> Task[..., Any]:
        """The task of that name; KeyError when there is none."""
        return self._tasks[name]

    def __iter__(self) -> Iterator[Task[..., Any]]:
        """The tasks, by name."""
        return iter([self._tasks[name] for name in sorted(self._tasks)])

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues its tasks use, sorted (what a worker of the registry claims from)."""
        return tuple(sorted({task.queue for task in self._tasks.values()}))

    @property
    def lease_timeout(self) -> float | None:
        """The longest lease_timeout its tasks name, in seconds (None: none names one)."""
        named = [task.lease_timeout for task in self._tasks.values() if task.lease_timeout is not None]
        return max(named) if named else None

    @property
    def is_async(self) -> bool:
        """Whether any of its tasks is async (``pgjobq worker --tasks`` then runs an AsyncWorker)."""
        return any(task.is_async for task in self._tasks.values())

    # -- running -------------------------------------------------------------------------

    def task_of(self, job: Job) -> Task[..., Any]:
        """The task that runs job; UnknownTask (with the registry's retry_in and grace) when job's task is
        not registered here, or job has none."""
        task = self._tasks.get(job.task) if job.task is not None else None
        if task is None:
            raise UnknownTask(job.task, self.unknown_task_retry, self.unknown_task_grace)
        return task

    def sync_handler(self) -> Callable[[Job], object]:
        """The handler a :class:`pgjobq.Worker` runs the registry with: each job's task, in the calling
        thread (UnknownTask when the registry has none of the job's task).

        ConfigurationError when the registry has an async task: the
        AsyncWorker runs it (and its sync tasks on threads), so that a
        registry mixing both is served by an AsyncWorker.
        """
        coroutines = sorted(task.name for task in self._tasks.values() if task.is_async)
        if coroutines:
            raise ConfigurationError(
                f"the tasks {', '.join(coroutines)} are async: run this registry with AsyncWorker "
                "(pgjobq worker --tasks picks it), which runs its sync tasks on threads"
            )

        def handle(job: Job) -> object:
            return self.task_of(job).run(job)

        handle.__qualname__ = f"Tasks({', '.join(sorted(self._tasks))})"
        return handle

    def async_handler(self) -> Callable[[Job], Awaitable[object]]:
        """The handler a :class:`pgjobq.AsyncWorker` runs the registry with: each job's task, an async one
        awaited on the loop, a sync one on a thread (asyncio.to_thread); UnknownTask as for
        sync_handler."""

        async def handle(job: Job) -> object:
            return await self.task_of(job).run_async(job)

        handle.__qualname__ = f"Tasks({', '.join(sorted(self._tasks))})"
        return handle


def _where(function: Callable[..., Any]) -> str:
    """A function as a message names it: module.qualname."""
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", None) or repr(function)
    return f"{module}.{name}" if module else str(name)
