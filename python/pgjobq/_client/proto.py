"""The sans-I/O core of the client: argument checks, statement choice and row decoding.

Each public call of the client is built here as a :class:`Call`: the name
of its statement in queries.sql, its parameters (checked: a bad argument
raises InvalidArgument here, before any SQL), the row factory to read its
rows with, and a decoder that turns the rows into the call's value.  The
sync client (pgjobq._client.sync) and the asyncio one (pgjobq.aio) only send a
Call on their connection and decode what comes back, so the two cannot
differ in what they check, send or return.

JSON columns (payloads, headers, results) are decoded by the client
whatever the connection's adapters: a connection that loads jsonb as text
(Django's psycopg backend registers such a loader on its connections) gets
JSON loaders on the statement's own cursor (see :func:`json_loaders_needed`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

import psycopg
from psycopg.adapt import AdaptersMap, Dumper
from psycopg.pq import Format, TransactionStatus
from psycopg.rows import class_row, tuple_row
from psycopg.types.json import JsonbLoader, JsonLoader

from pgjobq._errors import IncompatibleExtension, InvalidArgument, translate
from pgjobq._job import Job, ParentResult

__all__ = [
    "DEFAULT_LEASE_TIMEOUT",
    "DONE_CHANNEL",
    "DURABLE_VERSION",
    "FINISHED",
    "POLL_FIRST",
    "POLL_MAX",
    "QUEUE_SETTINGS",
    "RETENTION_SETTINGS",
    "RETENTION_VERSION",
    "Bigints",
    "Call",
    "Cancellation",
    "Health",
    "JobState",
    "KeyOrder",
    "OnConflict",
    "OnParentFailure",
    "QueueOverview",
    "QueueSettings",
    "QueueStats",
    "Schedule",
    "Step",
    "check_task",
    "dump_json",
    "dump_payload",
    "dump_payloads",
    "durable_needed",
    "extension_needed",
    "fail_for_good_needed",
    "json_loaders_needed",
    "retention_needed",
    "tasks_needed",
    "translated",
    "use_bigints_dumper",
]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Call(Generic[R]):
    """One statement to send and how to read its answer.

    name: the statement in queries.sql; params: its parameters, checked;
    row: the row factory (tuple_row, or class_row of a result type), which
    suits a sync and an async cursor alike; decode: from the fetched rows to
    the call's value; json: whether its rows hold JSON columns (so that a
    connection loading jsonb as text gets JSON loaders on the cursor);
    prepare: True prepares the statement at once (the workers' hot
    statements, unless the connection's prepare_threshold is None), None
    leaves it to the connection's prepare_threshold.
    """

    name: str
    params: Mapping[str, Any] | None
    decode: Callable[[list[Any]], R]
    row: Any = tuple_row
    json: bool = False
    prepare: bool | None = None


# -- JSON columns whatever the connection's adapters -----------------------------------

_JSON_OID = 114
_JSONB_OID = 3802


def json_loaders_needed(adapters: AdaptersMap) -> bool:
    """Whether a cursor of a connection with these adapters needs JSON loaders of its own.

    True when json or jsonb (in text format: what statements return) is not
    loaded by one of psycopg's JSON loaders (Django registers its TextLoader
    for jsonb, say).  Two dictionary look-ups: cheap enough for each call.
    """
    for oid, base in ((_JSONB_OID, JsonbLoader), (_JSON_OID, JsonLoader)):
        loader = adapters.get_loader(oid, Format.TEXT)
        if loader is None or not issubclass(loader, base):
            return True
    return False


# -- bigint[] parameters of the workers' hot statements -----------------------------------

_INT8_ARRAY_OID = 1016


class Bigints(list[int]):
    """Job ids or leases for a bigint[] parameter of a worker's hot statement (complete_and_claim).

    A plain list is dumped by psycopg's list dumper, which looks at the
    elements at every call to choose the array's type: for the ids and
    leases of one job, about 110,000 instructions in the Python process, a
    third of what a worker spent per job at batch 1 (callgrind, 0.9.0).  On
    a connection with use_bigints_dumper a Bigints is sent as an array
    literal, typed bigint[], at once; elsewhere it is a list like any other.
    Equal to the list of the same integers.
    """

    __slots__ = ()


class _BigintsDumper(Dumper):
    """A Bigints as the text of a bigint[] ('{1,2,3}'); its elements are ints (the database's ids)."""

    oid = _INT8_ARRAY_OID

    def dump(self, obj: Bigints) -> bytes:
        return ("{" + ",".join(map(str, obj)) + "}").encode()


def use_bigints_dumper(adapters: AdaptersMap) -> None:
    """Register the dumper that sends a Bigints as a bigint[] literal (a worker's connections)."""
    adapters.register_dumper(Bigints, _BigintsDumper)


def use_json_loaders(adapters: AdaptersMap) -> None:
    """Register psycopg's JSON loaders on a cursor's own adapters (the connection's are untouched)."""
    adapters.register_loader(_JSONB_OID, JsonbLoader)
    adapters.register_loader(_JSON_OID, JsonLoader)


class translated:  # lower case: it reads as a function, with translated(): ...
    """Re-raise the extension's deliberate errors as pgjobq exceptions.

    A class, not a @contextmanager generator: it wraps every statement the
    Worker sends, and a generator context costs microseconds per use.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, psycopg.Error):
            error = translate(exc)
            if error is not None:
                raise error from exc


# A task's name, as the extension's jobq._check_task has it (0.9.0): 1 to 200 characters.
_TASK_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,199}")


def check_task(value: object, argument: str = "task") -> str:
    """value as a task name; InvalidArgument naming argument, before any SQL, unless it is one.

    The rule is the extension's: 1 to 200 characters of A-Z, a-z, 0-9, ``_``,
    ``.``, ``:`` and ``-``, starting with a letter or ``_`` (send_welcome,
    billing.invoice:v2).
    """
    if not isinstance(value, str):
        raise InvalidArgument(f"{argument} must be a string, got {type(value).__name__}")
    if _TASK_NAME.fullmatch(value) is None:
        raise InvalidArgument(
            f"{argument} must be 1 to 200 characters of A-Z, a-z, 0-9, _, ., : and -, starting with a "
            f"letter or _, got {value[:80]!r}"
        )
    return value


TASKS_VERSION = "0.9.0"
"""The first extension version whose jobs have a task, and whose jobq.fail takes retry (fail for good)."""


class extension_needed:  # lower case: it reads as a function, with extension_needed(...): ...
    """Around a call that needs a function of extension ``version`` (default 0.9.0): the error of a
    database whose extension predates it (UndefinedFunction: an older one has no such signature) becomes
    IncompatibleExtension, saying what needs that version and what this database lacks.

    ``needed`` False (the call sends what every supported version takes) leaves every error as it is.
    ``what`` opens the message ("tasks need"); ``lacking`` says what the database's functions lack.
    """

    def __init__(self, needed: bool, what: str, lacking: str, version: str = TASKS_VERSION) -> None:
        self.needed = needed
        self.what = what
        self.lacking = lacking
        self.version = version

    def predates(self, exc: BaseException) -> bool:
        """Whether exc is the error an extension before ``version`` gives the call."""
        return isinstance(exc, psycopg.errors.UndefinedFunction)

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self.needed and exc is not None and self.predates(exc):
            raise IncompatibleExtension(
                f"{self.what} the pgjobq extension {self.version} or later: {self.lacking} (upgrade it "
                "with ALTER EXTENSION pgjobq UPDATE)"
            ) from exc


class tasks_needed(extension_needed):
    """Around a call given a task: the error of a database whose extension predates tasks (0.8.0 has no
    task parameter, and its enqueue_flow no "task" key) becomes IncompatibleExtension, saying so.

    ``needed`` False (no task given) leaves every error as it is.
    """

    def __init__(self, needed: bool) -> None:
        super().__init__(needed, "tasks need", "this database's functions take no task")

    def predates(self, exc: BaseException) -> bool:
        """UndefinedFunction, or enqueue_flow's refusal of a step's "task" key."""
        return super().predates(exc) or (
            isinstance(exc, InvalidArgument) and "unknown key 'task'" in str(exc)
        )


class fail_for_good_needed(extension_needed):
    """Around pgjobq.fail's call: with retry False, the error of a database whose jobq.fail takes no retry
    (0.8.0) becomes IncompatibleExtension, saying failing for good needs 0.9.0.

    ``retry`` True (the statement every supported version takes) leaves every error as it is.
    """

    def __init__(self, retry: bool) -> None:
        super().__init__(
            retry is False,
            "failing a job for good (retry=False) needs",
            "this database's jobq.fail takes no retry",
        )


RETENTION_VERSION = "0.10.0"
"""The first extension version with retention: jobq.configure_queue's retain_done, retain_failed,
retain_cancelled and keep_forever, and the columns retain_* of jobq.queues."""


class retention_needed(extension_needed):
    """Around configure_queue's call: when it sets or unsets retention (the statement
    configure_queue_retention), the error of a database whose jobq.configure_queue takes no retention
    (0.9.0) becomes IncompatibleExtension, saying retention needs 0.10.0.

    Any other configure_queue call (the statement every supported version takes) leaves every error as it is.
    """

    def __init__(self, call: Call[Any]) -> None:
        super().__init__(
            call.name == "configure_queue_retention",
            "retention settings need",
            "this database's jobq.configure_queue takes no retain_done, retain_failed, retain_cancelled "
            "or keep_forever",
            RETENTION_VERSION,
        )


DURABLE_VERSION = "0.11.0"
"""The first extension version with durable execution: steps, durable sleeps, signals, held jobs
(enqueue's hold, jobq.unhold) and progress."""


class durable_needed(extension_needed):
    """Around a call of durable execution (signal, unhold, steps, enqueue with hold): the error of a
    database whose extension predates it (0.10.0 has no jobq.signal, jobq.unhold or jobq.steps, and its
    jobq.enqueue no hold) becomes IncompatibleExtension, saying what needs 0.11.0.

    ``needed`` False (an enqueue without hold: the statement every supported version takes) leaves every
    error as it is.
    """

    def __init__(self, what: str, lacking: str, needed: bool = True) -> None:
        super().__init__(needed, what, lacking, DURABLE_VERSION)


def dump_payload(payload: Mapping[str, Any], argument: str = "payload") -> str:
    """payload as JSON text; InvalidArgument, before any SQL, unless jsonb can store it unchanged.

    Refused: anything but a mapping; values json cannot encode (datetime,
    bytes, sets, other objects, NaN and infinities, circular references);
    keys that are not strings (json would silently turn 1 into "1"); the
    character U+0000 and lone surrogates, which PostgreSQL's jsonb cannot
    store.  The size limit (1 MiB of jsonb) is the database's to judge: the
    JSON text's length does not tell it.
    """
    if not isinstance(payload, Mapping):
        raise InvalidArgument(f"{argument} must be a mapping (a JSON object), got {type(payload).__name__}")
    return dump_json(payload, argument)


def dump_json(value: object, argument: str) -> str:
    """Any JSON value (an object, array, string, number, boolean or None) as JSON text; refused,
    before any SQL, as dump_payload refuses, unless jsonb can store it unchanged."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidArgument(f"{argument} is not serialisable as JSON: {exc}") from exc
    # json escapes U+0000 as \u0000 and leaves lone surrogates as they are, so
    # the text says cheaply whether any string needs a closer look.
    suspicious = "\\u0000" in text or not _encodable(text)
    problem = _unstorable(value, argument, strings=suspicious)
    if problem is not None:
        raise InvalidArgument(problem)
    return text


def dump_payloads(payloads: Iterable[Mapping[str, Any]]) -> str:
    """payloads as the text of one JSON array, refused as dump_payload would refuse an element.

    The fast path encodes the whole list with one json.dumps and checks it
    by decoding it again: the result equals the list unless some element
    holds what JSON changes (a non-string key, a tuple) or cannot hold.
    Only then is each element checked on its own, to name it
    (``payloads[i]``, counting from 1, as the database does).
    """
    if isinstance(payloads, (Mapping, str, bytes)):
        raise InvalidArgument(f"payloads must be an iterable of mappings, got {type(payloads).__name__}")
    items = list(payloads)
    try:
        text = json.dumps(items, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
        exact = (
            all(isinstance(item, Mapping) for item in items)
            and "\\u0000" not in text
            and _encodable(text)
            and json.loads(text) == items
        )
    except (TypeError, ValueError, RecursionError):
        exact = False
    if exact:
        return text
    elements = [dump_payload(item, f"payloads[{i}]") for i, item in enumerate(items, start=1)]
    return f"[{','.join(elements)}]"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unstorable(value: object, path: str, *, strings: bool) -> str | None:
    """Why jsonb would not store value (found at path) as given, or None.

    Object keys are always checked; strings only when ``strings``.  Runs
    after json.dumps accepted value, so it is acyclic and of JSON types.
    """
    if isinstance(value, str):
        if not strings:
            return None
        if "\x00" in value:
            return f"{path} contains the character U+0000, which PostgreSQL's jsonb cannot store"
        if not _encodable(value):
            return f"{path} contains a lone surrogate, which is not valid Unicode"
        return None
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has a key that is not a string: {key!r} (JSON keys are strings)"
            problem = _unstorable(key, f"a key of {path}", strings=strings) or _unstorable(
                item, f"{path}[{key!r}]", strings=strings
            )
            if problem is not None:
                return problem
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problem = _unstorable(item, f"{path}[{index}]", strings=strings)
            if problem is not None:
                return problem
    return None


# Argument checks made before any SQL: a value of the wrong Python type would
# otherwise reach PostgreSQL as a type no jobq function takes, and come back
# as an "function does not exist" error that names nothing.  The values'
# domains (queue names, ranges) are the database's to check.

_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def _integer(name: str, value: object, bounds: tuple[int, int] = _INT32) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name} must be an integer, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        bits = 32 if bounds == _INT32 else 64
        raise InvalidArgument(f"{name} must be a {bits}-bit integer, got {value}")
    return value


def _bigint(name: str, value: object) -> int:
    return _integer(name, value, _INT64)


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, got {type(value).__name__}")
    return value


def _moment(name: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidArgument(f"{name} must be a datetime or None, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise InvalidArgument(
            f"{name} must be timezone-aware, got the naive {value.isoformat()} "
            "(the database would read it in its own TimeZone)"
        )
    return value


def _when(name: str, value: object) -> datetime:
    """A timezone-aware datetime, as _moment checks it, not None."""
    if value is None:
        raise InvalidArgument(f"{name} must be a datetime, got None")
    moment = _moment(name, value)
    assert moment is not None
    return moment


def _timedelta(name: str, value: object) -> timedelta:
    if not isinstance(value, timedelta):
        raise InvalidArgument(f"{name} must be a timedelta, got {type(value).__name__}")
    return value


def _number(name: str, value: object) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidArgument(f"{name} must be a number, got {type(value).__name__}")
    return float(value)


def _flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be a bool, got {type(value).__name__}")
    return value


T = TypeVar("T")


def _optional(check: Callable[[str, object], T], name: str, value: object) -> T | None:
    """check(name, value), or None when value is None (the database's default then applies)."""
    return None if value is None else check(name, value)


def _many(name: str, values: object) -> list[Any]:
    """values as a list, refused unless it is a sequence or other iterable of several values (a str
    or a mapping would otherwise be taken apart silently)."""
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise InvalidArgument(f"{name} must be a list (or other iterable), got {type(values).__name__}")
    return list(values)


DEFAULT_LEASE_TIMEOUT = timedelta(seconds=60)  # jobq.claim's own default


def _held(job_id: object, lease: object) -> dict[str, int]:
    """The parameters naming one claim of a job."""
    return {"id": _bigint("id", job_id), "lease": _bigint("lease", lease)}


OnConflict = Literal["return", "skip", "raise", "replace"]
"""What an enqueue does when a job holding its unique key exists (see enqueue)."""

OnParentFailure = Literal["cancel", "run"]
"""What becomes of a job whose parent (depends_on) ends failed or cancelled (see enqueue)."""


def _ids(name: str, values: object) -> list[int] | None:
    """values (job ids) as a list of 64-bit integers; None stays None (no ids)."""
    if values is None:
        return None
    return [_bigint(f"{name}[]", value) for value in _many(name, values)]


def _keys(name: str, values: object) -> list[str | None] | None:
    """values (keys aligned with payloads: strings, or None for none) as a list; None stays None."""
    if values is None:
        return None
    return [_optional(_text, f"{name}[]", value) for value in _many(name, values)]


def _enqueue_options(
    *,
    priority: int,
    run_at: datetime | None,
    max_attempts: int | None,
    unique_scope: str,
    on_conflict: str,
    headers: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The options enqueue and enqueue_many share, checked."""
    return {
        "priority": _integer("priority", priority),
        "run_at": _moment("run_at", run_at),
        "max_attempts": _optional(_integer, "max_attempts", max_attempts),
        "unique_scope": _text("unique_scope", unique_scope),
        "on_conflict": _text("on_conflict", on_conflict),
        "headers": None if headers is None else dump_payload(headers, "headers"),
    }


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's counts, as jobq.stats() reports them (waiting: jobs whose parents are not all done)."""

    queue: str
    queued: int
    runnable: int
    running: int
    done: int
    failed: int
    oldest_queued_age: timedelta | None
    cancelled: int
    waiting: int = 0  # 0.7.0: a default, so that a QueueStats made as in 0.6.0 still is one


@dataclass(frozen=True, slots=True)
class Health:
    """The jobq.health view: what to watch to see backlog and bloat coming."""

    queued: int
    runnable: int
    running: int
    failed: int
    oldest_runnable_age: timedelta | None
    live_tuples: int
    dead_tuples: int
    total_bytes: int
    last_vacuum: datetime | None
    last_analyze: datetime | None
    oldest_transaction_age: timedelta | None
    oldest_xmin_age: int | None


@dataclass(frozen=True, slots=True)
class Cancellation:
    """What cancel() did to one job: its status after the call.

    cancelled (it was waiting or queued, or running and forced, or cancelled already),
    cancel_requested (it is running: its worker is asked to stop), done or
    failed (it had finished: unchanged).
    """

    id: int
    status: str


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """One row of the view jobq.queues: a queue's effective settings.

    configured: the queue has settings of its own (configure_queue or pause);
    otherwise every value is the default.  timeout: how long a job may run
    once claimed (its deadline: heartbeats do not extend its lease past it);
    None: no limit.  The limits (None: no limit): concurrency, the most
    running jobs of the queue; key_concurrency, the most running jobs of one
    concurrency_key; key_order, how claims pick among keys ("priority", by
    the jobs' priority, or "round_robin", key after key); rate_limit, the
    most claims per rate_interval.  Retention (extension 0.10.0): how long
    a job that finished done, failed or cancelled is kept before the tick
    deletes it (retain_done 1 day, retain_failed 14 days, retain_cancelled
    7 days by default); None: kept until purged (a state in keep_forever,
    and every state on extension 0.9.0, which has no retention).
    """

    queue: str
    paused: bool
    max_attempts: int
    backoff_base: timedelta
    backoff_max: timedelta
    backoff_jitter: float
    lease_timeout: timedelta
    timeout: timedelta | None
    configured: bool
    # 0.7.0's limits: with defaults (no limit), so that a QueueSettings made as in 0.6.0 still is one
    concurrency: int | None = None
    key_concurrency: int | None = None
    key_order: str = "priority"
    rate_limit: int | None = None
    rate_interval: timedelta | None = None
    # 0.10.0's retention: with defaults, so that a QueueSettings made as in 0.9.0 still is one
    retain_done: timedelta | None = None
    retain_failed: timedelta | None = None
    retain_cancelled: timedelta | None = None


QUEUE_SETTINGS = (
    "max_attempts",
    "backoff_base",
    "backoff_max",
    "backoff_jitter",
    "lease_timeout",
    "timeout",
    "concurrency",
    "key_concurrency",
    "key_order",
    "rate_limit",
    "rate_interval",
    "retain_done",
    "retain_failed",
    "retain_cancelled",
    "keep_forever",
)
"""The settings configure_queue's unset names (rate_limit clears rate_interval too; rate_interval alone
goes back to 1 second; keep_forever empties the list)."""

RETENTION_SETTINGS = ("retain_done", "retain_failed", "retain_cancelled", "keep_forever")
"""The settings of QUEUE_SETTINGS that need extension 0.10.0 (RETENTION_VERSION)."""

KeyOrder = Literal["priority", "round_robin"]
"""How a queue with key_concurrency picks among concurrency keys (see configure_queue)."""


@dataclass(frozen=True, slots=True)
class QueueOverview(QueueSettings):
    """A queue's settings and limits (QueueSettings), and how many of its jobs are queued, running and
    waiting (for their parents)."""

    _: KW_ONLY  # after QueueSettings' defaults: given by name
    queued: int
    running: int
    waiting: int


@dataclass(frozen=True, slots=True)
class JobState:
    """One job as jobq.job reports it (the type jobq.job_state).

    status is waiting (its parents, depends_on, are not all done: never
    claimed until they are), queued, running, done, failed or cancelled.
    result is the value the job was completed with (None: none); finished_at
    is set once the job is done, failed or cancelled; cancel_requested once
    cancel() asked its worker to stop.  depends_on: the ids of the job's
    parents (None: it has none).  task: the job's task (None: a plain job).

    Durable execution (extension 0.11.0; None on 0.10.0): steps, each
    recorded step's name and result (its sleeps and waits for a signal
    too), and step_attempts, the attempt that recorded each (None: the job
    recorded none; :func:`pgjobq.steps` lists them in order, with their
    kind); progress, the latest value the job reported (None: none);
    waiting_for, what a job that is neither running nor finished waits for:
    ``{"hold": True}`` (enqueued with hold, until unhold),
    ``{"signal": key, "timeout_at": ...}`` (until signal(key), or the
    timeout: an ISO 8601 text, None for none), ``{"parents": [ids]}`` (the
    parents not ended yet) or ``{"sleep": name, "until": ...}`` (a durable
    sleep); None for any other job.
    """

    id: int
    queue: str
    status: str
    attempts: int
    max_attempts: int  # the queue's (else 3) for a job enqueued without one
    result: Any
    last_error: str | None
    run_at: datetime
    created_at: datetime
    finished_at: datetime | None
    cancel_requested: bool
    depends_on: list[int] | None = None  # 0.7.0: a default, so that a JobState made as in 0.6.0 still is one
    task: str | None = None  # 0.9.0: the job's task (None: a plain job, or an extension before 0.9.0)
    # 0.11.0, durable execution (None on 0.10.0)
    steps: dict[str, Any] | None = None
    step_attempts: dict[str, int] | None = None
    progress: Any = None
    waiting_for: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        """Whether the job is done, failed or cancelled: it will not run again unless redriven."""
        return self.status in FINISHED


FINISHED = frozenset({"done", "failed", "cancelled"})
"""The statuses a job ends in."""


@dataclass(frozen=True, slots=True)
class Step:
    """One step a job recorded, as jobq.steps reports it (extension 0.11.0).

    kind is "step" (``job.step``: result is what the step returned), "sleep"
    (``job.sleep``: result ``{"until": ...}``, the sleep's end as ISO 8601
    text) or "signal" (``job.await_signal``: result ``{"payload": ...}``, or
    ``{"timed_out": True}``).  attempt: the attempt that recorded it.
    """

    name: str
    kind: str
    result: Any
    attempt: int
    recorded_at: datetime


@dataclass(frozen=True, slots=True)
class Schedule:
    """One row of the view jobq.schedules: jobs enqueued on a cron expression or every period.

    Exactly one of cron (five fields, read in timezone) and every (whole
    seconds; occurrences at its multiples since the Unix epoch) is set.
    next_run is the next occurrence after now; next_at the first occurrence
    not yet enqueued (in the past: missed, and caught up by the next tick as
    catch_up says: "latest", "all" or "skip").  task: the task of its jobs
    (None: plain jobs).
    """

    name: str
    queue: str
    payload: dict[str, Any]
    cron: str | None
    timezone: str
    every: timedelta | None
    priority: int
    max_attempts: int | None
    headers: dict[str, Any] | None
    catch_up: str
    next_at: datetime | None
    next_run: datetime | None
    created_at: datetime
    updated_at: datetime
    task: str | None = None  # 0.9.0: the task of its jobs (None: plain jobs, or an extension before 0.9.0)


# -- decoders -------------------------------------------------------------------------


def _all(rows: list[Any]) -> list[Any]:
    return rows


def _first(rows: list[Any]) -> Any:
    """The one row a function returns (it always returns one, or raises)."""
    assert rows, "the function returns one row"
    return rows[0]


def _nothing(rows: list[Any]) -> None:
    return None


def _scalar(rows: list[tuple[Any, ...]]) -> Any:
    return rows[0][0]


def _int(rows: list[tuple[Any, ...]]) -> int:
    return int(rows[0][0])


def _ids_of(rows: list[tuple[Any, ...]]) -> list[int]:
    return [int(i) for i in rows[0][0]]


def _maybe_ids_of(rows: list[tuple[Any, ...]]) -> list[int | None]:
    return [None if i is None else int(i) for i in rows[0][0]]


def _id_set(rows: list[tuple[Any, ...]]) -> set[int]:
    return {r[0] for r in rows}


# Claimed rows have Job's fields in order (queries.sql's claim): id, queue, payload, priority, attempts,
# max_attempts, lease, the lease's length, the time runnable, headers (NULL: {}), task (extension 0.9.0)
# and control (its bit 64: the job recorded steps, extension 0.11.0).  Each is read by its position, so
# that a column added or left out shows as a failing test, not as a value in the wrong field.


def jobs(rows: list[tuple[Any, ...]]) -> list[Job]:
    """Rows of claim or claim_any (extension 0.9.0: with task, the last column) as Jobs."""
    return [Job(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9] or {}, r[10], r[11]) for r in rows]


def acknowledged_and_claimed(rows: list[tuple[Any, ...]]) -> tuple[set[int], list[Job]]:
    """complete_and_claim's rows (extension 0.9.0, with task): the ids acknowledged (status done) and the
    jobs claimed (the columns after status are claim's)."""
    acknowledged: set[int] = set()
    claimed: list[Job] = []
    for r in rows:
        if r[0] == "done":
            acknowledged.add(r[1])
        else:
            claimed.append(
                Job(r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10] or {}, r[11], r[12])
            )
    return acknowledged, claimed


def heartbeat_statuses(rows: list[tuple[Any, ...]]) -> list[tuple[int, bool, bool]]:
    return [(r[0], bool(r[1]), bool(r[2])) for r in rows]


def waited(rows: list[tuple[Any, ...]]) -> tuple[bool, datetime | None, timedelta | None]:
    registered, next_run_at, next_run_in = rows[0]
    return bool(registered), next_run_at, next_run_in


def _failed(rows: list[tuple[Any, ...]]) -> tuple[str, datetime]:
    status, run_at = rows[0]
    return str(status), run_at


def _reaped(rows: list[tuple[Any, ...]]) -> list[tuple[int, str, str]]:
    return [(int(r[0]), str(r[1]), str(r[2])) for r in rows]


def _registered(rows: list[tuple[Any, ...]]) -> tuple[bool, datetime | None]:
    registered, next_run_at, _ = waited(rows)
    return registered, next_run_at


def _cancellations(rows: list[tuple[Any, ...]]) -> list[Cancellation]:
    return [Cancellation(int(r[0]), str(r[1])) for r in rows]


def _int_list(rows: list[tuple[Any, ...]]) -> list[int]:
    return [int(r[0]) for r in rows]


def _str(rows: list[tuple[Any, ...]]) -> str:
    return str(rows[0][0])


def _bool(rows: list[tuple[Any, ...]]) -> bool:
    return bool(rows[0][0])


# -- the calls ------------------------------------------------------------------------


def enqueue_checked(
    queue: str,
    payload: Mapping[str, Any],
    *,
    unique_key: str | None,
    concurrency_key: str | None,
    depends_on: Sequence[int] | None,
    on_parent_failure: str,
    task: str | None = None,
    hold: bool = False,
) -> dict[str, Any]:
    """enqueue's own arguments, checked (the options, with the headers to store, come in enqueue_call).

    A task is among the params only when given, so that a job without one is
    enqueued by the statement an extension before 0.9.0 takes; likewise hold
    (extension 0.11.0) only when True.
    """
    params: dict[str, Any] = {
        "queue": _text("queue", queue),
        "payload": dump_payload(payload),
        "unique_key": _optional(_text, "unique_key", unique_key),
        "concurrency_key": _optional(_text, "concurrency_key", concurrency_key),
        "depends_on": _ids("depends_on", depends_on),
        "on_parent_failure": _text("on_parent_failure", on_parent_failure),
    }
    if task is not None:
        params["task"] = check_task(task)
    if _flag("hold", hold):
        params["hold"] = True
    return params


def enqueue_call(params: Mapping[str, Any], **options: Any) -> Call[int | None]:
    """The enqueue of enqueue_checked's params with the options of _enqueue_options (headers: those to
    store, as the trace's Sending gave them); enqueue_task when params hold a task; enqueue_held when
    they hold hold (its task, when none, NULL)."""

    def decode(rows: list[tuple[Any, ...]]) -> int | None:
        job_id = rows[0][0]
        return None if job_id is None else int(job_id)

    if "hold" in params:
        return Call("enqueue_held", {"task": None, **params, **_enqueue_options(**options)}, decode)
    name = "enqueue_task" if "task" in params else "enqueue"
    return Call(name, {**params, **_enqueue_options(**options)}, decode)


def enqueue_many_checked(
    queue: str,
    payloads: Iterable[Mapping[str, Any]],
    *,
    unique_keys: Sequence[str | None] | None,
    concurrency_keys: Sequence[str | None] | None,
    task: str | None = None,
) -> tuple[dict[str, Any], int]:
    """enqueue_many's own arguments, checked, and how many payloads there are (a task among the params
    only when given, as with enqueue_checked)."""
    items = payloads if isinstance(payloads, (Mapping, str, bytes)) else list(payloads)
    params = {
        "queue": _text("queue", queue),
        "payloads": dump_payloads(items),
        "unique_keys": _keys("unique_keys", unique_keys),
        "concurrency_keys": _keys("concurrency_keys", concurrency_keys),
    }
    if task is not None:
        params["task"] = check_task(task)
    return params, len(items)


def enqueue_many_call(params: Mapping[str, Any], **options: Any) -> Call[list[int | None]]:
    """The enqueue_many of enqueue_many_checked's params; enqueue_many_task when they hold a task."""
    name = "enqueue_many_task" if "task" in params else "enqueue_many"
    return Call(name, {**params, **_enqueue_options(**options)}, _maybe_ids_of)


def flow_has_tasks(steps: object) -> bool:
    """Whether any step of an enqueue_flow names a task (its call then needs extension 0.9.0)."""
    return isinstance(steps, Sequence) and any(
        isinstance(step, Mapping) and step.get("task") is not None for step in steps
    )


def enqueue_flow(queue: str, steps: Sequence[Mapping[str, Any]]) -> Call[list[int]]:
    items = _many("steps", steps)
    prepared: list[Mapping[str, Any]] = []
    for i, step in enumerate(items):
        if not isinstance(step, Mapping):
            raise InvalidArgument(f"steps[{i}] must be a mapping (a JSON object), got {type(step).__name__}")
        run_at = step.get("run_at")
        if isinstance(run_at, datetime):
            checked = _moment(f"steps[{i}].run_at", run_at)
            assert checked is not None
            step = {**step, "run_at": checked.isoformat()}
        if step.get("task") is not None:
            check_task(step["task"], f"steps[{i}].task")
        prepared.append(step)
    params = {"queue": _text("queue", queue), "steps": dump_json(prepared, "steps")}
    return Call("enqueue_flow", params, _ids_of)


def claim(queue: str, n: int, worker: str, lease_timeout: timedelta | None) -> Call[list[Job]]:
    params = {
        "queue": _text("queue", queue),
        "n": _integer("n", n),
        "worker": _text("worker", worker),
        "lease_timeout": _optional(_timedelta, "lease_timeout", lease_timeout),
    }
    return Call("claim", params, jobs, json=True)


def claim_any(queues: Sequence[str], n: int, worker: str, lease_timeout: timedelta | None) -> Call[list[Job]]:
    names = [_text("queues[]", name) for name in _many("queues", queues)]
    if not names:
        raise InvalidArgument("queues must name at least one queue, got none")
    params = {
        "queues": names,
        "n": _integer("n", n),
        "worker": _text("worker", worker),
        "lease_timeout": _optional(_timedelta, "lease_timeout", lease_timeout),
    }
    return Call("claim_any", params, jobs, json=True)


def complete(job_id: int, lease: int, result: Any) -> Call[None]:
    params = {**_held(job_id, lease), "result": None if result is None else dump_json(result, "result")}
    return Call("complete", params, _nothing)


def complete_many_unchecked(
    ids: list[int], leases: list[int], results: list[str | None] | None = None
) -> Call[set[int]]:
    return Call("complete_many", {"ids": ids, "leases": leases, "results": results}, _id_set)


def complete_many(acks: Sequence[tuple[int, int]], results: Sequence[Any] | None) -> Call[set[int]]:
    pairs = [_held(job_id, lease) for job_id, lease in acks]
    return complete_many_unchecked(
        [p["id"] for p in pairs], [p["lease"] for p in pairs], _dump_results(results)
    )


def _dump_results(results: Sequence[Any] | None) -> list[str | None] | None:
    """Each result as JSON text (None: no result), refused as complete's result would be."""
    if results is None:
        return None
    return [
        None if r is None else dump_json(r, f"results[{i}]")
        for i, r in enumerate(_many("results", results), 1)
    ]


def complete_and_claim(
    acks: Sequence[tuple[int, int]],
    queue: str,
    n: int,
    worker: str,
    lease_timeout: timedelta | None,
    results: Sequence[Any] | None,
) -> Call[tuple[set[int], list[Job]]]:
    pairs = [_held(job_id, lease) for job_id, lease in acks]
    params = {
        "ids": [p["id"] for p in pairs],
        "leases": [p["lease"] for p in pairs],
        "queue": _text("queue", queue),
        "n": _integer("n", n),
        "worker": _text("worker", worker),
        "lease_timeout": _optional(_timedelta, "lease_timeout", lease_timeout),
        "results": _dump_results(results),
    }
    return Call("complete_and_claim", params, acknowledged_and_claimed, json=True)


def fail(
    job_id: int, error: str, lease: int, retry_in: timedelta | None, retry: bool = True
) -> Call[tuple[str, datetime]]:
    """jobq.fail; retry False (extension 0.9.0) fails the job for good at once, and takes no retry_in.

    retry True sends the statement every supported version takes (no retry argument).
    """
    params = {
        **_held(job_id, lease),
        "error": _text("error", error),
        "retry_in": _optional(_timedelta, "retry_in", retry_in),
    }
    if _flag("retry", retry):
        return Call("fail", params, _failed)
    if retry_in is not None:
        raise InvalidArgument("retry_in must be None when retry is False: the job is not retried")
    del params["retry_in"]
    return Call("fail_for_good", params, _failed)


def hand_back(job_id: int, lease: int, delay: timedelta, error: str, fail_after: timedelta) -> Call[str]:
    """jobq.hand_back (extension 0.9.0): the job's new status (queued; failed once older than fail_after)."""
    params = {
        **_held(job_id, lease),
        "delay": _timedelta("delay", delay),
        "error": _text("error", error),
        "fail_after": _timedelta("fail_after", fail_after),
    }
    return Call("hand_back", params, _str)


def snooze(job_id: int, lease: int, delay: timedelta) -> Call[datetime | None]:
    params = {**_held(job_id, lease), "delay": _timedelta("delay", delay)}
    return Call("snooze", params, _scalar)


# -- durable execution (extension 0.11.0) -------------------------------------------------


def _step_name(name: str, value: object) -> str:
    """A step's name or a signal's key: 1 to 200 characters, as the database takes them."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= 200:
        raise InvalidArgument(f"{name} must be 1 to 200 characters, got {len(value)}")
    return value


def checkpoint(job_id: int, lease: int, step: str, result: object) -> Call[Any]:
    """Record step's result (any JSON value); the result recorded (the first, when recorded before)."""
    params = {**_held(job_id, lease), "step": _step_name("step", step), "result": dump_json(result, "result")}
    return Call("checkpoint", params, _scalar, json=True)


def _steps(rows: list[tuple[Any, ...]]) -> dict[str, tuple[str, Any]]:
    return {r[0]: (r[1], r[2]) for r in rows}


def steps(job_id: int) -> Call[dict[str, tuple[str, Any]]]:
    """What job_id recorded: each name's kind (step, sleep, signal) and result."""
    return Call("job_steps", {"id": _bigint("id", job_id)}, _steps, json=True)


def sleep(job_id: int, lease: int, step: str, delay: timedelta) -> Call[bool]:
    """A durable sleep of delay (or of what the first call recorded): whether it is over."""
    params = {**_held(job_id, lease), "step": _step_name("name", step), "delay": _timedelta("delay", delay)}
    return Call("sleep", params, _scalar)


def sleep_until(job_id: int, lease: int, step: str, until: datetime) -> Call[bool]:
    """A durable sleep until until (or what the first call recorded): whether it is over."""
    params = {**_held(job_id, lease), "step": _step_name("name", step), "until": _when("until", until)}
    return Call("sleep_until", params, _scalar)


def _awaited(rows: list[tuple[Any, ...]]) -> tuple[bool, Any]:
    parked, payload = rows[0]
    return bool(parked), payload


def await_signal(job_id: int, lease: int, key: str, timeout: timedelta | None) -> Call[tuple[bool, Any]]:
    """Whether the job was parked to wait for key's signal, and the payload when it was not."""
    params = {
        **_held(job_id, lease),
        "key": _step_name("key", key),
        "timeout": _optional(_timedelta, "timeout", timeout),
    }
    return Call("await_signal", params, _awaited, json=True)


def progress(job_id: int, lease: int, value: object) -> Call[datetime]:
    """Store value (any JSON value) as the running job's latest progress; when."""
    params = {**_held(job_id, lease), "progress": dump_json(value, "progress")}
    return Call("progress", params, _scalar)


# -- durable execution, the client's side (extension 0.11.0): signals, held jobs, steps ----------------


def signal(key: str, payload: object, keep: timedelta) -> Call[int]:
    """jobq.signal: how many waiting jobs the signal key (payload: any JSON value) released."""
    params = {
        "key": _step_name("key", key),
        "payload": dump_json(payload, "payload"),
        "keep": _timedelta("keep", keep),
    }
    return Call("signal", params, _int)


def unhold(ids: Iterable[int]) -> Call[int]:
    """jobq.unhold: how many of the held jobs ids it released."""
    return Call("unhold", {"ids": [_bigint("ids[]", i) for i in _many("ids", ids)]}, _int)


def job_steps(job_id: int) -> Call[list[Step]]:
    """jobq.steps of job_id, for the client's steps() (the worker reads them with steps)."""
    return Call("job_steps", {"id": _bigint("id", job_id)}, _all, class_row(Step), json=True)


def fan_out(
    job_id: int, lease: int, step: str, children: Sequence[Mapping[str, Any]], then: Mapping[str, Any] | None
) -> Call[list[int]]:
    """The running job enqueues children and a continuation after them, recorded as step: their ids."""
    if isinstance(children, (str, bytes, Mapping)) or not isinstance(children, Sequence):
        raise InvalidArgument(f"children must be a list of mappings, got {type(children).__name__}")
    if then is not None and not isinstance(then, Mapping):
        raise InvalidArgument(f"then must be a mapping or None, got {type(then).__name__}")
    params = {
        **_held(job_id, lease),
        "step": _step_name("name", step),
        "children": dump_json(list(children), "children"),
        "continuation": None if then is None else dump_json(then, "then"),
    }
    return Call("fan_out", params, _scalar)


def _parents(rows: list[tuple[Any, ...]]) -> list[ParentResult]:
    return [ParentResult(r[0], r[1], r[2]) for r in rows]


def parent_results(job_id: int) -> Call[list[ParentResult]]:
    """The job's parents, in the order enqueued, with their status and result."""
    return Call("parent_results", {"id": _bigint("id", job_id)}, _parents, json=True)


def heartbeat(job_id: int, lease: int) -> Call[None]:
    return Call("heartbeat", _held(job_id, lease), _nothing)


def heartbeat_many_unchecked(ids: list[int], leases: list[int]) -> Call[set[int]]:
    return Call("heartbeat_many", {"ids": ids, "leases": leases}, _id_set)


def heartbeat_many(held: Sequence[tuple[int, int]]) -> Call[set[int]]:
    pairs = [_held(job_id, lease) for job_id, lease in held]
    return heartbeat_many_unchecked([p["id"] for p in pairs], [p["lease"] for p in pairs])


def release(job_id: int, lease: int) -> Call[None]:
    return Call("release", _held(job_id, lease), _nothing)


def reap(stale: timedelta | None) -> Call[list[tuple[int, str, str]]]:
    if stale is not None and (not isinstance(stale, timedelta) or stale <= timedelta(0)):
        raise InvalidArgument(f"stale must be a positive timedelta or None, got {stale!r}")
    return Call("reap", {"stale": stale}, _reaped)


def worker_reap(query: str, every: timedelta) -> Call[list[tuple[int, str, str]]]:
    """A Worker's reap every ``every`` (the query its extension version offers: reap_spaced, which a
    fleet runs about once per interval)."""
    return Call(query, {"every": every}, _reaped)


def retry_failed(queue: str | None, ids: Sequence[int] | None) -> Call[list[int]]:
    params = {
        "queue": None if queue is None else _text("queue", queue),
        "ids": None if ids is None else [_bigint("ids[]", i) for i in ids],
    }
    return Call("retry_failed", params, _int_list)


def register_waiter(queue: str, worker: str, up_to: timedelta) -> Call[tuple[bool, datetime | None]]:
    params = {
        "queue": _text("queue", queue),
        "worker": _text("worker", worker),
        "up_to": _timedelta("up_to", up_to),
    }
    return Call("register_waiter", params, _registered)


def channel(queue: str) -> Call[str]:
    return Call("channel", {"queue": _text("queue", queue)}, _str)


def stats() -> Call[list[QueueStats]]:
    return Call("stats", None, _all, class_row(QueueStats))


def purge(older_than: timedelta, max_rows: int, include_failed: bool) -> Call[int]:
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        raise InvalidArgument(f"older_than must be a non-negative timedelta, got {older_than!r}")
    if not isinstance(include_failed, bool):
        raise InvalidArgument(f"include_failed must be a bool, got {type(include_failed).__name__}")
    params = {
        "older_than": older_than,
        "max_rows": _integer("max_rows", max_rows),
        "include_failed": include_failed,
    }
    return Call("purge", params, _int)


def health() -> Call[Health]:
    return Call("health", None, _first, class_row(Health))


def cancel(ids: Iterable[int], force: bool) -> Call[list[Cancellation]]:
    params = {
        "ids": [_bigint("ids[]", i) for i in _many("ids", ids)],
        "force": _flag("force", force),
    }
    return Call("cancel", params, _cancellations)


def pause(queue: str) -> Call[None]:
    return Call("pause", {"queue": _text("queue", queue)}, _nothing)


def resume(queue: str) -> Call[None]:
    return Call("resume", {"queue": _text("queue", queue)}, _nothing)


def configure_queue(
    queue: str,
    *,
    max_attempts: int | None,
    backoff_base: timedelta | None,
    backoff_max: timedelta | None,
    backoff_jitter: float | None,
    lease_timeout: timedelta | None,
    timeout: timedelta | None,
    unset: Iterable[str],
    concurrency: int | None,
    key_concurrency: int | None,
    key_order: str | None,
    rate_limit: int | None,
    rate_interval: timedelta | None,
    retain_done: timedelta | None,
    retain_failed: timedelta | None,
    retain_cancelled: timedelta | None,
    keep_forever: Iterable[str] | None,
) -> Call[QueueSettings]:
    """jobq.configure_queue of these arguments, checked; configure_queue_retention (extension 0.10.0)
    when a retention is given, keep_forever is, or unset names one of RETENTION_SETTINGS, so that any
    other change is sent as extension 0.9.0 takes it (see retention_needed)."""
    params: dict[str, Any] = {
        "queue": _text("queue", queue),
        "max_attempts": _optional(_integer, "max_attempts", max_attempts),
        "backoff_base": _optional(_timedelta, "backoff_base", backoff_base),
        "backoff_max": _optional(_timedelta, "backoff_max", backoff_max),
        "backoff_jitter": _optional(_number, "backoff_jitter", backoff_jitter),
        "lease_timeout": _optional(_timedelta, "lease_timeout", lease_timeout),
        "timeout": _optional(_timedelta, "timeout", timeout),
        "unset": [_text("unset[]", name) for name in _many("unset", unset)],
        "concurrency": _optional(_integer, "concurrency", concurrency),
        "key_concurrency": _optional(_integer, "key_concurrency", key_concurrency),
        "key_order": _optional(_text, "key_order", key_order),
        "rate_limit": _optional(_integer, "rate_limit", rate_limit),
        "rate_interval": _optional(_timedelta, "rate_interval", rate_interval),
    }
    retention = {
        "retain_done": _optional(_timedelta, "retain_done", retain_done),
        "retain_failed": _optional(_timedelta, "retain_failed", retain_failed),
        "retain_cancelled": _optional(_timedelta, "retain_cancelled", retain_cancelled),
        "keep_forever": None
        if keep_forever is None
        else [_text("keep_forever[]", state) for state in _many("keep_forever", keep_forever)],
    }
    if any(value is not None for value in retention.values()) or any(
        name in RETENTION_SETTINGS for name in params["unset"]
    ):
        return Call("configure_queue_retention", {**params, **retention}, _first, class_row(QueueSettings))
    return Call("configure_queue", params, _first, class_row(QueueSettings))


def queues() -> Call[list[QueueSettings]]:
    return Call("queues", None, _all, class_row(QueueSettings))


def queue_overview() -> Call[list[QueueOverview]]:
    return Call("queue_overview", None, _all, class_row(QueueOverview))


def job_id_params(job_id: int) -> dict[str, int]:
    return {"id": _bigint("id", job_id)}


def job_state(name: str, params: Mapping[str, Any]) -> Call[JobState]:
    """jobq.job or jobq.watch (name) of params (job_id_params)."""
    return Call(name, params, _first, class_row(JobState), json=True)


DONE_CHANNEL = "jobq.done"
POLL_FIRST = 0.05  # seconds: wait() re-reads the job after this long without a notification,
POLL_MAX = 1.0  # then after twice as long each time, up to this

# (UNKNOWN, a closed or broken connection, is left to fail as psycopg makes it.)
_IN_TRANSACTION = (TransactionStatus.INTRANS, TransactionStatus.INERROR, TransactionStatus.ACTIVE)


def wait_checked(job_id: int, timeout: timedelta, status: TransactionStatus) -> tuple[dict[str, int], float]:
    """wait's arguments checked, with its connection's transaction status: (params, seconds)."""
    params = job_id_params(job_id)
    seconds = _timedelta("timeout", timeout).total_seconds()
    if seconds < 0:
        raise InvalidArgument(f"timeout must not be negative, got {timeout}")
    if status in _IN_TRANSACTION:
        raise InvalidArgument(
            f"wait needs a connection outside a transaction, got one {status.name.lower()} "
            "(notifications arrive only between transactions, and the job could not finish "
            "while this one held its row): commit first, or use an autocommit connection"
        )
    return params, seconds


def schedule(
    name: str,
    queue: str,
    payload: Mapping[str, Any] | None,
    *,
    cron: str | None,
    timezone: str,
    every: timedelta | None,
    priority: int,
    max_attempts: int | None,
    headers: Mapping[str, Any] | None,
    catch_up: str,
    task: str | None = None,
) -> Call[Schedule]:
    """jobq.schedule of these arguments, checked; schedule_task when a task is given (see
    enqueue_checked)."""
    params = {
        "name": _text("name", name),
        "queue": _text("queue", queue),
        "payload": dump_payload({} if payload is None else payload),
        "cron": _optional(_text, "cron", cron),
        "timezone": _text("timezone", timezone),
        "every": _optional(_timedelta, "every", every),
        "priority": _integer("priority", priority),
        "max_attempts": _optional(_integer, "max_attempts", max_attempts),
        "headers": None if headers is None else dump_payload(headers, "headers"),
        "catch_up": _text("catch_up", catch_up),
    }
    if task is not None:
        params["task"] = check_task(task)
    name = "schedule_task" if task is not None else "schedule"
    return Call(name, params, _first, class_row(Schedule), json=True)


def unschedule(name: str) -> Call[bool]:
    return Call("unschedule", {"name": _text("name", name)}, _bool)


def schedules() -> Call[list[Schedule]]:
    return Call("schedules", None, _all, class_row(Schedule), json=True)


def tick() -> Call[int]:
    return Call("tick", None, _int)
