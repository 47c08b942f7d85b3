"""WorkerSettings: how a worker (Worker or AsyncWorker) claims, waits and recovers, checked once; and what
else a worker is given (a connection string or a connect callable, a handler or a task registry), checked
by check_worker_arguments for both workers."""

from __future__ import annotations

import dataclasses
import math
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol, TypeGuard

from pgjobq._errors import ConfigurationError
from pgjobq._job import Job
from pgjobq._worker.observe import WorkerObserver

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "DEFAULT_QUEUE",
    "TaskRegistry",
    "WorkerSettings",
    "check_worker_arguments",
    "default_worker_name",
]

# The queue of a worker whose settings name none and that runs a handler (a task registry names its own).
DEFAULT_QUEUE = "default"


def default_worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


_DAY = 86400  # upper bound of every interval setting
# The lease claim gives when neither the worker nor the queue names one.
DEFAULT_LEASE_SECONDS = 60.0  # jobq.claim's own default (pgjobq._client.sync.DEFAULT_LEASE_TIMEOUT)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker claims, waits and recovers.  Times are in seconds.

    ``lease_timeout`` is the length of the leases the worker claims under:
    the database stores each lease's expiry on its job, every heartbeat
    extends it by that length, and ``jobq.reap`` (run by any worker)
    recovers a job only once its own lease has expired, so workers with
    different lease lengths share a queue safely.  None (the default) claims
    under the queue's lease_timeout (``jobq.configure_queue``), else 60 s.
    ``heartbeat_interval`` defaults to a quarter of the shortest lease in
    hand, as the claims returned them (also a lease the queue's timeout cut
    short: the worker cannot tell it apart, and heartbeats the job until
    the database says its deadline has passed).  An explicit heartbeat_interval
    must be shorter than an explicit lease_timeout; when it is not shorter
    than a lease the queue gave, the worker says so once and heartbeats
    such jobs at a quarter of their lease.

    ``queue`` is a queue name, or a list of several: the worker then claims
    from all of them at once (``jobq.claim_any``), listens on each one's
    channel and registers as waiting on each.  None (the default): the
    queues of the worker's task registry (``tasks=``), else "default".

    ``prepared_statements=False`` stops psycopg from preparing the statements
    it runs often (``prepare_threshold=None``).  Turn it off behind PgBouncer
    in transaction pooling mode before version 1.21: a statement prepared on
    one server connection is missing on the next one a transaction gets.

    ``network_timeout`` bounds how long a silent network goes unnoticed:
    a worker cut off from the database (packets dropped, a firewall, a
    half-open connection whose server side is gone) gives its connections
    up after about that many seconds, logs ``database unavailable`` and
    reconnects with backoff, instead of waiting on TCP's own timeouts (two
    hours for an idle connection, fifteen minutes for unacknowledged data).
    Each connection the worker opens gets, unless the conninfo sets them
    itself, TCP keepalives that probe a silent connection (``keepalives_idle``
    a third of it, then ``keepalives_count`` 3 probes ``keepalives_interval``
    apart), ``tcp_user_timeout`` (sent data unacknowledged that long drops
    the connection) and ``connect_timeout``, both network_timeout (see
    pgjobq._worker.connections).  Nothing is lost when it fires: leases live on the
    jobs, not on connections, so the worker carries on with the jobs in
    hand after reconnecting, and sends the acknowledgements it owes.

    ``observers`` are told what the worker does (``pgjobq.WorkerObserver``:
    claims, handler starts, outcomes, acknowledgements pending, reconnects),
    from the worker's own thread or event loop; one that raises is logged
    once and dropped.

    Nonsense (a count below 1, a non-finite or non-positive interval, a
    heartbeat no shorter than the lease) raises ConfigurationError here,
    before the database is touched.
    """

    queue: str | Sequence[str] | None = None  # the task registry's queues, else DEFAULT_QUEUE
    batch: int = 10
    concurrency: int = 1
    poll_interval: float = 1.0
    lease_timeout: float | None = None  # the queue's (jobq.configure_queue), else the extension's 60 s
    heartbeat_interval: float | None = None
    reap_interval: float = 10.0
    listen: bool = True
    burst: bool = False
    name: str = field(default_factory=default_worker_name)
    reconnect_delay_max: float = 10.0
    network_timeout: float = 10.0
    ack_interval: float = 0.005
    prepared_statements: bool = True
    observers: Sequence[WorkerObserver] = ()

    def __post_init__(self) -> None:
        def require(ok: bool, message: str) -> None:
            if not ok:
                raise ConfigurationError(message)

        def count(name: str, high: int) -> None:
            value = getattr(self, name)
            require(_is_int(value), f"{name} must be an integer, got {value!r}")
            require(1 <= value <= high, f"{name} must be between 1 and {high}, got {value}")

        def seconds(name: str, value: object, *, zero: bool = False) -> None:
            number = float(value) if _is_number(value) else math.nan
            low_ok = number >= 0 if zero else number > 0
            require(
                low_ok and number <= _DAY,  # NaN fails both comparisons
                f"{name} must be {'at least 0' if zero else 'positive'} and at most {_DAY} seconds, "
                f"got {value!r}",
            )

        if self.queue is not None and not isinstance(self.queue, str):
            names = self.queue
            require(
                isinstance(names, Sequence) and all(isinstance(q, str) for q in names),
                f"queue must be a string or a list of strings, got {names!r}",
            )
            require(len(names) > 0, "queue must name at least one queue, got an empty list")
            repeated = sorted({q for q in names if list(names).count(q) > 1})
            require(not repeated, f"queue names each queue once, got {', '.join(repeated)} more than once")
            # frozen: one name stays a str (as settings.queue always was), several become a tuple
            object.__setattr__(self, "queue", names[0] if len(names) == 1 else tuple(names))
        count("batch", 1000)
        count("concurrency", 1000)
        for name in ("poll_interval", "reap_interval", "reconnect_delay_max"):
            seconds(name, getattr(self, name))
        network = self.network_timeout
        require(
            _is_number(network) and 2 <= float(network) <= 3600,  # NaN fails the comparisons
            f"network_timeout must be between 2 and 3600 seconds, got {network!r}",
        )
        for name in ("lease_timeout", "heartbeat_interval"):
            if getattr(self, name) is not None:  # None: decided by the leases the queue hands out
                seconds(name, getattr(self, name))
        heartbeat = self.heartbeat_seconds
        if heartbeat is not None and self.lease_timeout is not None:
            require(
                heartbeat < self.lease_timeout,
                f"heartbeat_interval ({heartbeat}) must be shorter than lease_timeout ({self.lease_timeout})",
            )
        seconds("ack_interval", self.ack_interval, zero=True)
        if heartbeat is not None:
            require(self.ack_interval < heartbeat, "ack_interval must be shorter than a heartbeat")
        require(isinstance(self.name, str) and 0 < len(self.name) <= 200, "name must be 1 to 200 characters")
        observers = self.observers
        require(
            isinstance(observers, Sequence)
            and not isinstance(observers, str)
            and all(isinstance(o, WorkerObserver) for o in observers),
            f"observers must be a list of pgjobq.WorkerObserver, got {observers!r}",
        )
        object.__setattr__(self, "observers", tuple(observers))

    @property
    def queues(self) -> tuple[str, ...]:
        """The queues the worker claims from: queue, as a tuple of one name or several (None: "default")."""
        if self.queue is None:
            return (DEFAULT_QUEUE,)
        return (self.queue,) if isinstance(self.queue, str) else tuple(self.queue)

    def claim_params(self) -> dict[str, Any]:
        """The parameters of the worker's claim statements (claim, claim_any, complete_and_claim), checked
        once here rather than at every claim: the queue or queues, batch, name and lease_timeout."""
        lease = None if self.lease_timeout is None else timedelta(seconds=self.lease_timeout)
        return {**self._where(), "n": self.batch, "worker": self.name, "lease_timeout": lease}

    def wait_params(self) -> dict[str, Any]:
        """The parameters of the worker's registration as waiting (jobq.register_waiter): the queue or
        queues, name, poll_interval."""
        return {**self._where(), "worker": self.name, "up_to": timedelta(seconds=self.poll_interval)}

    def _where(self) -> dict[str, Any]:
        queues = self.queues
        return {"queues": list(queues)} if len(queues) > 1 else {"queue": queues[0]}

    @property
    def heartbeat_seconds(self) -> float | None:
        """heartbeat_interval, or a quarter of lease_timeout; None when both are the queue's to decide."""
        if self.heartbeat_interval is not None:
            return self.heartbeat_interval
        return None if self.lease_timeout is None else self.lease_timeout / 4


class TaskRegistry(Protocol):
    """What a worker needs of a task registry (``Worker(tasks=...)``; pgjobq's Tasks is one).

    queues: the queues its tasks go to (the worker's, when its settings name
    none; a queue setting narrows them).  lease_timeout: the lease the
    worker claims under when its settings name none (None: the queue's).
    sync_handler: the handler a Worker runs, which dispatches each job to its
    task (ConfigurationError when a task is a coroutine function: run those
    with AsyncWorker); async_handler: the same for AsyncWorker.
    """

    @property
    def queues(self) -> tuple[str, ...]: ...

    @property
    def lease_timeout(self) -> float | None: ...

    def sync_handler(self) -> Callable[[Job], object]: ...

    def async_handler(self) -> Callable[[Job], Awaitable[object]]: ...


def check_worker_arguments(
    worker: str,
    conninfo: object,
    connect: object,
    handler: object,
    tasks: TaskRegistry | None,
    settings: WorkerSettings | None,
) -> WorkerSettings:
    """Refuse what a worker (named worker, for the messages) cannot run with; its settings, with a task
    registry's queues and lease_timeout where the settings name none (checked as any settings are).

    Exactly one of conninfo (a libpq connection string) and connect (a
    callable returning a new connection), and exactly one of handler (a
    callable) and tasks; ConfigurationError otherwise, naming the argument.
    """

    def exactly_one(first: str, second: str, given: tuple[object, object]) -> None:
        if (given[0] is None) == (given[1] is None):
            both = "both" if given[0] is not None else "neither"
            raise ConfigurationError(f"{worker} takes exactly one of {first} and {second}, got {both}")

    exactly_one("conninfo", "connect", (conninfo, connect))
    if conninfo is not None and not isinstance(conninfo, str):
        raise ConfigurationError(f"conninfo must be a libpq connection string, got {type(conninfo).__name__}")
    if connect is not None and not callable(connect):
        raise ConfigurationError(
            f"connect must be a callable returning a new connection, got {type(connect).__name__}"
        )
    exactly_one("handler", "tasks", (handler, tasks))
    if handler is not None and not callable(handler):
        raise ConfigurationError(f"handler must be a callable taking a Job, got {type(handler).__name__}")
    if settings is None:
        settings = WorkerSettings()
    elif not isinstance(settings, WorkerSettings):
        raise ConfigurationError(f"settings must be a pgjobq.WorkerSettings, got {type(settings).__name__}")
    if tasks is None:
        return settings
    changes: dict[str, Any] = {}
    if settings.queue is None:
        changes["queue"] = list(tasks.queues)
    if settings.lease_timeout is None and tasks.lease_timeout is not None:
        changes["lease_timeout"] = tasks.lease_timeout
    return dataclasses.replace(settings, **changes) if changes else settings
