"""The registry of tasks, without a database: names, collisions, signatures, options, handlers, loading.

A task's name is what every producer enqueues it by (``task => 'send_welcome'``), so it is checked when
the function is decorated, as are the parameters a payload's keyword arguments must fill; a mistake is a
ConfigurationError at import time, not a failed job later.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import pgjobq
from pgjobq import ConfigurationError, Discard, InvalidArgument, Job, Task, Tasks
from pgjobq._errors import UnknownTask
from pgjobq._tasks import load_tasks


def a_job(task: str | None, payload: dict[str, Any] | None = None) -> Job:
    return Job(1, "default", payload or {}, 0, 1, 3, 1, task=task)


# -- names --------------------------------------------------------------------------------


def test_a_task_is_named_after_its_function() -> None:
    tasks = Tasks()

    @tasks.task
    def send_welcome(user_id: int) -> None: ...

    assert send_welcome.name == "send_welcome"
    assert "send_welcome" in tasks


def test_name_overrides_the_functions_name() -> None:
    tasks = Tasks()

    @tasks.task(name="billing.invoice:v2")
    def invoice(order_id: int) -> None: ...

    assert invoice.name == "billing.invoice:v2"
    assert tasks["billing.invoice:v2"] is invoice


def test_a_name_registered_twice_raises_naming_both_functions() -> None:
    tasks = Tasks()

    @tasks.task(name="send")
    def send_email(to: str) -> None: ...

    with pytest.raises(ConfigurationError) as refused:

        @tasks.task(name="send")
        def send_sms(to: str) -> None: ...

    message = str(refused.value)
    assert "'send' is registered twice" in message
    assert "send_email" in message and "send_sms" in message


def test_the_same_name_in_two_registries_is_no_collision() -> None:
    first, second = Tasks(), Tasks()

    @first.task
    def send(to: str) -> None: ...

    @second.task(name="send")
    def other_send(to: str) -> None: ...

    assert first["send"] is send and second["send"] is other_send


@pytest.mark.parametrize("name", ["", "1st", "send welcome", "x" * 201, "naïve"])
def test_a_name_the_database_would_refuse_is_refused_at_decoration(name: str) -> None:
    tasks = Tasks()

    with pytest.raises(ConfigurationError, match="name must be 1 to 200 characters"):

        @tasks.task(name=name)
        def job(x: int) -> None: ...


def test_a_lambda_needs_a_name() -> None:
    tasks = Tasks()

    with pytest.raises(ConfigurationError, match="name must be"):
        tasks.task(lambda x: x)

    assert tasks.task(name="double")(lambda x: 2 * x).name == "double"


# -- parameters ---------------------------------------------------------------------------


def test_a_positional_only_parameter_is_refused_naming_it() -> None:
    tasks = Tasks()

    with pytest.raises(ConfigurationError, match="'user_id' is positional-only"):

        @tasks.task
        def send_welcome(user_id: int, /) -> None: ...


def test_star_args_are_refused() -> None:
    tasks = Tasks()

    with pytest.raises(ConfigurationError, match=r"\*ids can never be filled"):

        @tasks.task
        def send(*ids: int) -> None: ...


def test_the_parameter_annotated_job_receives_the_job_whatever_its_name() -> None:
    tasks = Tasks()

    @tasks.task
    def render(report_id: int, current: Job) -> tuple[int, int]:
        return report_id, current.id

    assert render.job_parameter == "current"
    assert render.run(a_job("render", {"report_id": 3})) == (3, 1)


def test_a_job_parameter_under_a_string_annotation_is_found() -> None:
    namespace: dict[str, Any] = {}
    exec(  # an annotation written as text, as under `from __future__ import annotations`
        "import pgjobq\ndef render(report_id: 'int', job: 'pgjobq.Job') -> None: ...", namespace
    )
    tasks = Tasks()

    assert tasks.task(namespace["render"]).job_parameter == "job"


def test_two_job_parameters_are_refused() -> None:
    tasks = Tasks()

    with pytest.raises(ConfigurationError, match="'a', 'b' are all annotated Job"):

        @tasks.task
        def twice(a: Job, b: Job) -> None: ...


# -- options ------------------------------------------------------------------------------


def test_the_registrys_queue_is_the_default_and_a_task_may_name_its_own() -> None:
    tasks = Tasks(queue="emails")

    @tasks.task
    def send_welcome(user_id: int) -> None: ...

    @tasks.task(queue="reports")
    def render(report_id: int) -> None: ...

    assert (send_welcome.queue, render.queue) == ("emails", "reports")
    assert tasks.queues == ("emails", "reports")


def test_a_task_keeps_its_options() -> None:
    tasks = Tasks()

    @tasks.task(priority=5, max_attempts=7, lease_timeout=timedelta(minutes=2), timeout=30)
    def render(report_id: int) -> None: ...

    assert (render.priority, render.max_attempts, render.lease_timeout, render.timeout) == (5, 7, 120.0, 30.0)
    assert (render.options.priority, render.options.max_attempts) == (5, 7)


def test_the_registrys_lease_timeout_is_the_longest_its_tasks_name() -> None:
    tasks = Tasks()
    assert tasks.lease_timeout is None

    @tasks.task(lease_timeout=30)
    def short(x: int) -> None: ...

    @tasks.task(lease_timeout=300)
    def long(x: int) -> None: ...

    @tasks.task
    def unnamed(x: int) -> None: ...

    assert tasks.lease_timeout == 300.0


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("timeout", 0, "timeout must be above 0 seconds"),
        ("timeout", "5s", "timeout must be a number of seconds or a timedelta"),
        ("lease_timeout", -1, "lease_timeout must be above 0 seconds"),
        ("max_attempts", 0, "max_attempts must be an integer of 1 or more"),
        ("priority", 1.5, "priority must be an integer"),
        ("retry_on", (ValueError, "KeyError"), "retry_on must hold exception classes"),
        ("queue", "", "queue must be a non-empty string"),
    ],
)
def test_a_bad_option_is_refused_naming_it(option: str, value: Any, message: str) -> None:
    tasks = Tasks()

    def job(x: int) -> None: ...

    with pytest.raises(ConfigurationError, match=message):
        tasks.task(**{option: value})(job)


def test_with_options_gives_a_copy_and_leaves_the_task_unchanged() -> None:
    tasks = Tasks()

    @tasks.task(priority=1)
    def send_welcome(user_id: int) -> None: ...

    urgent = send_welcome.with_options(priority=9, unique_key="user-7")
    later = urgent.with_options(max_attempts=2)

    assert (urgent.options.priority, urgent.options.unique_key) == (9, "user-7")
    assert (later.options.priority, later.options.unique_key, later.options.max_attempts) == (9, "user-7", 2)
    assert (send_welcome.options.priority, send_welcome.options.unique_key) == (1, None)
    assert tasks["send_welcome"] is send_welcome


def test_with_options_refuses_on_conflict_skip() -> None:
    tasks = Tasks()

    @tasks.task
    def send_welcome(user_id: int) -> None: ...

    with pytest.raises(InvalidArgument, match="on_conflict must be 'return', 'raise' or 'replace'"):
        send_welcome.with_options(on_conflict="skip")  # type: ignore[arg-type]


# -- binding, before anything is sent -----------------------------------------------------


def make_send_welcome() -> Task[..., None]:
    tasks = Tasks()

    @tasks.task
    def send_welcome(user_id: int, language: str = "en") -> None: ...

    return send_welcome


def test_the_payload_is_the_arguments_given_defaults_left_to_run_time() -> None:
    assert make_send_welcome().payload({"user_id": 7}) == {"user_id": 7}


def test_a_missing_argument_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="send_welcome\\(\\): missing a required argument: 'user_id'"):
        make_send_welcome().payload({"language": "fr"})


def test_an_unknown_argument_is_a_type_error_naming_it() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'user'"):
        make_send_welcome().payload({"user_id": 7, "user": 8})


def test_the_job_parameter_is_not_an_argument_to_enqueue() -> None:
    tasks = Tasks()

    @tasks.task
    def render(report_id: int, job: Job) -> None: ...

    with pytest.raises(TypeError, match="'job' receives the job when the task runs"):
        render.payload({"report_id": 1, "job": None})


def test_calling_a_task_calls_its_function() -> None:
    tasks = Tasks()

    @tasks.task
    def add(a: int, b: int) -> int:
        return a + b

    assert add(a=2, b=3) == 5


# -- what a worker runs -------------------------------------------------------------------


def test_the_sync_handler_runs_each_jobs_task_with_its_payload() -> None:
    tasks = Tasks()

    @tasks.task
    def add(a: int, b: int = 10) -> int:
        return a + b

    assert tasks.sync_handler()(a_job("add", {"a": 1})) == 11


def test_the_async_handler_awaits_async_tasks_and_runs_sync_ones() -> None:
    tasks = Tasks()

    @tasks.task
    async def double(n: int) -> int:
        return 2 * n

    @tasks.task
    def triple(n: int) -> int:
        return 3 * n

    handler = tasks.async_handler()

    async def both() -> tuple[object, object]:
        return await handler(a_job("double", {"n": 2})), await handler(a_job("triple", {"n": 2}))

    assert asyncio.run(both()) == (4, 6)


def test_a_registry_with_an_async_task_has_no_sync_handler() -> None:
    tasks = Tasks()

    @tasks.task
    async def render(report_id: int) -> None: ...

    assert tasks.is_async
    with pytest.raises(ConfigurationError, match="render are async: run this registry with AsyncWorker"):
        tasks.sync_handler()


@pytest.mark.parametrize("task", ["not_here", None], ids=["unknown", "plain-job"])
def test_a_job_whose_task_is_not_registered_raises_unknown_task(task: str | None) -> None:
    tasks = Tasks(unknown_task_retry=5, unknown_task_grace=timedelta(minutes=10))

    with pytest.raises(UnknownTask) as unknown:
        tasks.sync_handler()(a_job(task))

    assert (unknown.value.task, unknown.value.retry_in, unknown.value.grace) == (task, 5.0, 600.0)


def test_a_payload_that_no_longer_fits_the_task_is_discarded_naming_the_argument() -> None:
    tasks = Tasks()

    @tasks.task  # once send_welcome(user), enqueued so by a producer not yet redeployed
    def send_welcome(user_id: int) -> None: ...

    with pytest.raises(Discard, match="missing a required argument: 'user_id'"):
        tasks.sync_handler()(a_job("send_welcome", {"user": 7}))


# -- loading ------------------------------------------------------------------------------


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path to write modules into; they are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]


def write(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source))


def test_load_tasks_finds_the_modules_one_registry(modules: Path) -> None:
    write(modules, "app_one", "import pgjobq\ntasks = pgjobq.Tasks()\nsame = tasks\n")

    loaded = load_tasks("app_one")

    assert loaded is sys.modules["app_one"].tasks


def test_load_tasks_takes_module_colon_attribute(modules: Path) -> None:
    write(modules, "app_two", "import pgjobq\nemails = pgjobq.Tasks()\nreports = pgjobq.Tasks()\n")

    assert load_tasks("app_two:reports") is sys.modules["app_two"].reports


@pytest.mark.parametrize(
    ("source", "spec", "message"),
    [
        ("import pgjobq\n", "app_none", "has no pgjobq.Tasks at module level"),
        (
            "import pgjobq\na = pgjobq.Tasks()\nb = pgjobq.Tasks()\n",
            "app_many",
            r"several pgjobq.Tasks \(a, b\)",
        ),
        ("x = 1\n", "app_attr:tasks", "has no attribute 'tasks'"),
        ("x = 1\n", "app_kind:x", "app_kind:x is a int, not a pgjobq.Tasks"),
    ],
)
def test_load_tasks_says_what_is_wrong(modules: Path, source: str, spec: str, message: str) -> None:
    write(modules, spec.partition(":")[0], source)

    with pytest.raises(ConfigurationError, match=message):
        load_tasks(spec)


def test_load_tasks_names_a_module_that_cannot_be_imported() -> None:
    with pytest.raises(ConfigurationError, match="cannot import the tasks' module 'no_such_app'"):
        load_tasks("no_such_app")


def test_a_collision_in_the_loaded_module_is_raised_as_it_is(modules: Path) -> None:
    write(
        modules,
        "app_clash",
        """
        import pgjobq
        tasks = pgjobq.Tasks()

        @tasks.task
        def send(to: str) -> None: ...

        @tasks.task(name="send")
        def send_again(to: str) -> None: ...
        """,
    )

    with pytest.raises(ConfigurationError, match="'send' is registered twice"):
        load_tasks("app_clash")


def test_tasks_and_task_are_exported() -> None:
    assert {"Tasks", "Task"} <= set(pgjobq.__all__)
