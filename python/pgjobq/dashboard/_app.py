"""The dashboard's ASGI app: pages, the charts' data, and the actions."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
import psycopg
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from pgjobq._client.proto import DURABLE_VERSION, TASKS_VERSION
from pgjobq._errors import IncompatibleExtension
from pgjobq.dashboard._queries import query
from pgjobq.dashboard._sampler import Sampler
from pgjobq.dashboard._security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    BasicAuth,
    SecurityHeaders,
    csrf_refusal,
    is_loopback,
    new_token,
)

__all__ = ["create_app"]

log = logging.getLogger("pgjobq.dashboard")

PAGE_SIZE = 50
STATUSES = ("waiting", "queued", "running", "done", "failed", "cancelled")
QUEUE_NAME = re.compile(r"^[a-z0-9_]{1,58}$")
TASK_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,199}$")  # jobq._check_task's rule (0.9.0)
PURGE_AGES: Mapping[str, timedelta] = {
    "1 hour": timedelta(hours=1),
    "1 day": timedelta(days=1),
    "7 days": timedelta(days=7),
    "30 days": timedelta(days=30),
}
NOTICES: Mapping[str, str] = {
    "retried": "Redrove {n} failed job(s){of_queue}.",
    "cancelled": "Cancel: job {id} is now {status}.",
    "paused": "Paused queue {queue}: claims hand out none of its jobs until it is resumed.",
    "resumed": "Resumed queue {queue}.",
    "purged": "Purged {n} finished job(s).",
}


@dataclass
class Dashboard:
    """Everything the app holds: on app.state, never at module level."""

    dsn: str
    allow_actions: bool
    statement_timeout: float
    sample_seconds: float
    pool: AsyncConnectionPool[Any] = field(init=False)
    sampler: Sampler = field(init=False)
    role: str = ""
    version: str = ""


class HttpProblem(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _templates() -> Jinja2Templates:
    folder = Path(str(resources.files("pgjobq.dashboard").joinpath("templates")))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(folder),
        autoescape=True,  # every value is escaped: payloads, errors and names are untrusted
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.filters["ago"] = _ago
    env.filters["seconds"] = _seconds
    env.filters["pretty"] = _pretty
    env.filters["number"] = _number
    env.filters["last_line"] = _last_line
    env.filters["waits"] = _waits
    env.filters["compact"] = _compact
    return Jinja2Templates(env=env)


def _when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seconds(value: float | timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 60:
        return f"{sign}{seconds:.1f} s" if seconds < 10 else f"{sign}{seconds:.0f} s"
    if seconds < 3600:
        return f"{sign}{seconds / 60:.1f} min"
    if seconds < 86400:
        return f"{sign}{seconds / 3600:.1f} h"
    return f"{sign}{seconds / 86400:.1f} d"


def _last_line(value: str | None) -> str:
    lines = [line for line in (value or "").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _number(value: float | None, suffix: str = "") -> str:
    if value is None:
        return "—"
    return (str(int(value)) if float(value).is_integer() else str(value)) + suffix


def _ago(value: datetime | None) -> str:
    if value is None:
        return ""
    delta = (datetime.now(timezone.utc) - value).total_seconds()
    return f"{_seconds(delta)} ago" if delta >= 0 else f"in {_seconds(-delta)}"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _compact(value: Any, limit: int = 200) -> str:
    """value as JSON on one line, cut to limit characters."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_moment(value: Any) -> str:
    """A moment of jobq.job's waiting_for (ISO 8601 text) as the pages show moments; else the text."""
    try:
        return _when(datetime.fromisoformat(str(value)))
    except ValueError:
        return str(value)


def _waits(value: Mapping[str, Any] | None) -> str:
    """What a job waits for (jobq.job's waiting_for, extension 0.11.0) in words; "—" for nothing."""
    if not value:
        return "—"
    if value.get("hold"):
        return "held: until released (unhold)"
    if "signal" in value:
        timeout = value.get("timeout_at")
        until = f"until {_json_moment(timeout)}" if timeout is not None else "no timeout"
        return f"signal {value['signal']} ({until})"
    if "sleep" in value:
        return f"sleep {value['sleep']} until {_json_moment(value.get('until'))}"
    if "parents" in value:
        return "parents " + ", ".join(str(parent) for parent in value["parents"])
    return _compact(value)


def _state(request: Request) -> Dashboard:
    dashboard: Dashboard = request.app.state.dashboard
    return dashboard


async def _fetch(
    dashboard: Dashboard, name: str, params: Mapping[str, Any] | None = None
) -> list[dict[str, Any]]:
    async with dashboard.pool.connection() as conn:
        cur = conn.cursor(row_factory=dict_row)
        await cur.execute(query(name), params)
        return await cur.fetchall() if cur.description is not None else []


async def _who(dashboard: Dashboard) -> dict[str, Any]:
    rows = await _fetch(dashboard, "who")
    return rows[0]


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _has_tasks(version: str | None) -> bool:
    """Whether the jobs of an extension at version have a task (0.9.0 on); False for an unreadable one."""
    try:
        return version is not None and _numbers(version) >= _numbers(TASKS_VERSION)
    except ValueError:
        return False


def _has_durable(version: str | None) -> bool:
    """Whether an extension at version has durable execution: held jobs, sleeps, signals, steps and
    progress (0.11.0 on); False for an unreadable one."""
    try:
        return version is not None and _numbers(version) >= _numbers(DURABLE_VERSION)
    except ValueError:
        return False


def _token(request: Request) -> tuple[str, bool]:
    """The request's CSRF token, and whether it is new (to be set as the cookie)."""
    token = request.cookies.get(CSRF_COOKIE)
    if token and re.fullmatch(r"[A-Za-z0-9_-]{20,100}", token):
        return token, False
    return new_token(), True


async def _render(
    request: Request,
    name: str,
    context: dict[str, Any],
    status_code: int = 200,
    who: dict[str, Any] | None = None,
) -> Response:
    """The page of template name; who: the role and version the request already read (else read here)."""
    dashboard = _state(request)
    if who is None:
        who = await _who(dashboard)
    token, fresh = _token(request)
    notice = _notice(request)
    templates: Jinja2Templates = request.app.state.templates
    response = templates.TemplateResponse(
        request,
        name,
        {
            "role": who["role"],
            "version": who["version"],
            "tasks": _has_tasks(who["version"]),  # the jobs have a task: shown, and a filter
            "durable": _has_durable(who["version"]),  # held, sleeping and signal-waiting jobs, steps
            "admin": bool(who["admin"]),
            "allow_actions": dashboard.allow_actions,
            "actions": dashboard.allow_actions and bool(who["admin"]),
            "csrf_field": CSRF_FIELD,
            "csrf": token,
            "notice": notice,
            "page": name.removesuffix(".html"),
            **context,
        },
        status_code=status_code,
    )
    if fresh:
        response.set_cookie(CSRF_COOKIE, token, httponly=True, samesite="strict", path="/")
    return response


def _notice(request: Request) -> str | None:
    """The message an action's redirect asked for: a fixed sentence, its values checked (never free text)."""
    params = request.query_params
    code = params.get("notice", "")
    if code not in NOTICES:
        return None
    queue, status = params.get("queue", ""), params.get("status", "")
    named = QUEUE_NAME.fullmatch(queue) is not None
    values = {
        "n": params.get("n", "") if params.get("n", "").isdigit() else "?",
        "id": params.get("id", "") if params.get("id", "").isdigit() else "?",
        "status": status if status in (*STATUSES, "cancel_requested") else "?",
        "queue": queue if named else "?",
        "of_queue": f" of queue {queue}" if named else "",
    }
    return NOTICES[code].format(**values)


# -- pages ------------------------------------------------------------------------


async def _queue_rows(dashboard: Dashboard) -> list[dict[str, Any]]:
    counts = await _fetch(dashboard, "queue_counts", {"horizon": timedelta(0)})
    settings = {row["queue"]: row for row in await _fetch(dashboard, "queue_settings")}
    by_queue = {row["queue"]: row for row in counts}
    rows = []
    for name in sorted(set(by_queue) | set(settings) | dashboard.sampler.known()):
        count = by_queue.get(name, {})
        setting = settings.get(name, {})
        done_per_minute, failure_rate = dashboard.sampler.recent(name)
        rows.append(
            {
                "queue": name,
                "runnable": int(count.get("runnable") or 0),
                "scheduled": int(count.get("scheduled") or 0),
                "running": int(count.get("running") or 0),
                "waiting": int(count.get("waiting") or 0),
                "failed": int(count.get("failed") or 0),
                "oldest_runnable_age": count.get("oldest_runnable_age"),
                "paused": bool(setting.get("paused", False)),
                "concurrency": setting.get("concurrency"),
                "key_concurrency": setting.get("key_concurrency"),
                "key_order": setting.get("key_order"),
                "rate_limit": setting.get("rate_limit"),
                "rate_interval_seconds": setting.get("rate_interval_seconds"),
                "timeout_seconds": setting.get("timeout_seconds"),
                # None: kept until purged (a state of keep_forever; every state before extension 0.10.0)
                "retain_done_seconds": setting.get("retain_done_seconds"),
                "retain_failed_seconds": setting.get("retain_failed_seconds"),
                "retain_cancelled_seconds": setting.get("retain_cancelled_seconds"),
                "max_attempts": setting.get("max_attempts"),
                "done_per_minute": done_per_minute,
                "failure_rate": failure_rate,
            }
        )
    return rows


async def queues_page(request: Request) -> Response:
    dashboard = _state(request)
    rows = await _queue_rows(dashboard)
    return await _render(
        request,
        "queues.html",
        {"queues": rows, "purge_ages": list(PURGE_AGES), "sample_seconds": dashboard.sample_seconds},
    )


async def queues_json(request: Request) -> Response:
    rows = await _queue_rows(_state(request))
    for row in rows:
        age = row["oldest_runnable_age"]
        row["oldest_runnable_age"] = None if age is None else age.total_seconds()
    return JSONResponse({"queues": rows})


async def history_json(request: Request) -> Response:
    return JSONResponse(_state(request).sampler.series())


def _optional(request: Request, name: str, pattern: str, limit: int = 200) -> str | None:
    value = request.query_params.get(name, "").strip()
    if not value:
        return None
    if len(value) > limit or not re.fullmatch(pattern, value):
        raise HttpProblem(400, f"{name} is not valid: expected {_EXPECTED.get(name, 'a value')}")
    return value


_EXPECTED = {
    "id": "a job id (digits)",
    "before": "a job id (digits)",
    "queue": "a queue name (a-z, 0-9, _)",
    "task": "a task name (A-Z, a-z, 0-9, _, ., : and -, starting with a letter or _)",
    "status": "one of " + ", ".join(STATUSES),
}


async def jobs_page(request: Request) -> Response:
    dashboard = _state(request)
    status = _optional(request, "status", "|".join(STATUSES))
    queue = _optional(request, "queue", QUEUE_NAME.pattern.strip("^$"))
    task = _optional(request, "task", TASK_NAME.pattern.strip("^$"))
    id_text = _optional(request, "id", r"[0-9]{1,19}")
    before_text = _optional(request, "before", r"[0-9]{1,19}")
    key = _optional(request, "key", r"(?s).+", 512)
    error = _optional(request, "error", r"(?s).+", 200)
    if id_text is not None and not any((status, queue, task, before_text, key, error)):
        return RedirectResponse(f"/jobs/{int(id_text)}", status_code=303)  # the header's "job id" box
    # the version is read at each request (as the header shows it), so that an upgrade shows at once
    who = await _who(dashboard)
    tasks = _has_tasks(who["version"])
    if task is not None and not tasks:
        raise HttpProblem(
            400,
            f"task is not a filter of this database: jobs have a task from the pgjobq extension "
            f"{TASKS_VERSION} on, and it has {who['version']} (ALTER EXTENSION pgjobq UPDATE)",
        )
    params = {
        "status": status,
        "queue": queue,
        "task": task,
        "id": None if id_text is None else int(id_text),
        "before": None if before_text is None else int(before_text),
        "key": key,
        "error": error,
        "limit": PAGE_SIZE + 1,
    }
    rows = await _fetch(dashboard, "jobs_page" if tasks else "jobs_page_before_tasks", params)
    more = len(rows) > PAGE_SIZE
    rows = rows[:PAGE_SIZE]
    filters = {"status": status, "queue": queue, "task": task, "id": id_text, "key": key, "error": error}
    given = {name: value for name, value in filters.items() if value is not None}
    older = urlencode({**given, "before": rows[-1]["id"]}) if more and rows else None
    # what the status tabs keep: the queue and the task
    scope = urlencode([(name, given[name]) for name in ("queue", "task") if name in given])
    context = {"jobs": rows, "filters": filters, "statuses": STATUSES, "older": older, "scope": scope,
               "paged": before_text is not None, "first_page": urlencode(given)}  # fmt: skip
    return await _render(request, "jobs.html", context, who=who)


async def job_page(request: Request) -> Response:
    dashboard = _state(request)
    job_id = int(request.path_params["job_id"])
    who = await _who(dashboard)
    try:
        rows = await _fetch(dashboard, "job", {"id": job_id})
        # its steps (extension 0.11.0 on): none to ask an older one for
        steps = await _fetch(dashboard, "job_steps", {"id": job_id}) if _has_durable(who["version"]) else []
    except psycopg.Error as exc:
        if exc.sqlstate == "JQ002":
            raise HttpProblem(404, f"no job has id {job_id}") from None
        raise
    return await _render(request, "job.html", {"job": rows[0], "steps": steps}, who=who)


async def waiting_page(request: Request) -> Response:
    """The jobs that wait without a worker: held, waiting for a signal, sleeping (extension 0.11.0 on)."""
    dashboard = _state(request)
    who = await _who(dashboard)
    rows = (
        await _fetch(dashboard, "waiting_jobs", {"limit": PAGE_SIZE}) if _has_durable(who["version"]) else []
    )
    return await _render(request, "waiting.html", {"jobs": rows, "durable_since": DURABLE_VERSION}, who=who)


async def schedules_page(request: Request) -> Response:
    rows = await _fetch(_state(request), "schedules")
    return await _render(request, "schedules.html", {"schedules": rows})


# -- actions ----------------------------------------------------------------------


def _redirect(path: str, **notice: Any) -> Response:
    target = f"{path}?{urlencode(notice)}" if notice else path
    return RedirectResponse(target, status_code=303)


def _form_queue(form: Mapping[str, Any]) -> str:
    queue = str(form.get("queue", ""))
    if not QUEUE_NAME.fullmatch(queue):
        raise HttpProblem(400, "queue is not valid: expected a queue name (a-z, 0-9, _)")
    return queue


def _form_id(form: Mapping[str, Any]) -> int:
    text = str(form.get("id", ""))
    if not re.fullmatch(r"[0-9]{1,19}", text):
        raise HttpProblem(400, "id is not valid: expected a job id (digits)")
    return int(text)


async def action(request: Request) -> Response:
    dashboard = _state(request)
    form = await request.form()
    refusal = csrf_refusal(request, str(form.get(CSRF_FIELD) or "") or None)
    if refusal is not None:
        raise HttpProblem(403, refusal)
    if not dashboard.allow_actions:
        raise HttpProblem(403, "actions are disabled: start the dashboard with --allow-actions")
    if not (await _who(dashboard))["admin"]:
        raise HttpProblem(
            403, "actions are disabled: the database role lacks the admin level (jobq.grant_admin)"
        )
    name = request.path_params["name"]
    if name == "retry":
        if form.get("id"):
            job_id = _form_id(form)
            rows = await _fetch(dashboard, "retry_failed", {"queue": None, "ids": [job_id]})
            return _redirect(f"/jobs/{job_id}", notice="retried", n=rows[0]["n"])
        queue = _form_queue(form)
        rows = await _fetch(dashboard, "retry_failed", {"queue": queue, "ids": None})
        return _redirect("/", notice="retried", n=rows[0]["n"], queue=queue)
    if name == "cancel":
        job_id = _form_id(form)
        rows = await _fetch(dashboard, "cancel", {"ids": [job_id]})
        status = rows[0]["status"] if rows else "unknown"
        return _redirect(f"/jobs/{job_id}", notice="cancelled", id=job_id, status=status)
    if name in ("pause", "resume"):
        queue = _form_queue(form)
        await _fetch(dashboard, name, {"queue": queue})
        return _redirect("/", notice=f"{name}d", queue=queue)
    if name == "purge":
        age = str(form.get("older_than", ""))
        if age not in PURGE_AGES:
            raise HttpProblem(400, "older_than is not valid: expected one of " + ", ".join(PURGE_AGES))
        include_failed = form.get("include_failed") == "on"
        rows = await _fetch(
            dashboard, "purge", {"older_than": PURGE_AGES[age], "include_failed": include_failed}
        )
        return _redirect("/", notice="purged", n=rows[0]["n"])
    raise HttpProblem(404, f"no such action: {name}")


# -- errors -----------------------------------------------------------------------


async def _problem_page(request: Request, status: int, message: str) -> Response:
    templates: Jinja2Templates = request.app.state.templates
    accept = request.headers.get("accept", "")
    if request.url.path.startswith("/api/") or ("text/html" not in accept and request.method != "POST"):
        return JSONResponse({"error": message}, status_code=status)
    return templates.TemplateResponse(
        request,
        "error.html",
        {"status": status, "message": message, "page": "error", "role": "", "version": "", "notice": None},
        status_code=status,
    )


async def http_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpProblem)
    return await _problem_page(request, exc.status, exc.message)


async def database_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, psycopg.Error)
    dashboard = _state(request)
    if isinstance(exc, psycopg.errors.QueryCanceled):
        return await _problem_page(
            request,
            503,
            f"the query took longer than {dashboard.statement_timeout:g} s (the dashboard's "
            "statement_timeout): narrow the search (a status, a queue)",
        )
    if exc.sqlstate == "42501":
        return await _problem_page(request, 403, f"the database refused: {_first_line(exc)}")
    if exc.sqlstate in ("22023", "22004", "22P02"):
        return await _problem_page(request, 400, f"the database refused: {_first_line(exc)}")
    log.warning("dashboard: %s", _first_line(exc))
    return await _problem_page(request, 503, f"database error: {_first_line(exc)}")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- the app ----------------------------------------------------------------------


def create_app(
    dsn: str,
    *,
    allow_actions: bool = False,
    user: str | None = None,
    password: str | None = None,
    host: str = "127.0.0.1",
    statement_timeout: float = 5.0,
    sample_seconds: float = 5.0,
    trusted_hosts: Sequence[str] = (),
) -> Starlette:
    """The dashboard as an ASGI app (serve() runs it with uvicorn).

    allow_actions: offer the actions (they also need the admin level); user and password: Basic auth on
    every request; host: where it is served (on a loopback address, only requests naming a loopback
    host are answered, against DNS rebinding, and the names in trusted_hosts: a reverse proxy's);
    statement_timeout: seconds any of its queries may
    take; sample_seconds: how often the charts' history is sampled.
    """
    dashboard = Dashboard(
        dsn=dsn,
        allow_actions=allow_actions,
        statement_timeout=statement_timeout,
        sample_seconds=sample_seconds,
    )

    async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
        await conn.execute(query("set_timeout"), {"milliseconds": str(int(statement_timeout * 1000))})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        dashboard.pool = AsyncConnectionPool(
            dsn,
            min_size=1,
            max_size=4,
            kwargs={"autocommit": True, "prepare_threshold": None},
            configure=configure,
            open=False,
            name="pgjobq-dashboard",
            timeout=10.0,  # a page waits this long for a connection, then says the database is away
        )
        await dashboard.pool.open(wait=True, timeout=15)
        try:
            who = await _who(dashboard)
            if who["version"] is None:
                raise IncompatibleExtension("the database has no pgjobq extension (CREATE EXTENSION pgjobq)")
            dashboard.role, dashboard.version = who["role"], who["version"]
            dashboard.sampler = Sampler(dashboard.pool, interval=sample_seconds)
            await dashboard.sampler.sample()
            dashboard.sampler.start()
            try:
                yield
            finally:
                await dashboard.sampler.stop()
        finally:
            await dashboard.pool.close()

    static = Path(str(resources.files("pgjobq.dashboard").joinpath("static")))
    routes = [
        Route("/", queues_page),
        Route("/jobs", jobs_page),
        Route("/jobs/{job_id:int}", job_page),
        Route("/waiting", waiting_page),
        Route("/schedules", schedules_page),
        Route("/api/queues", queues_json),
        Route("/api/history", history_json),
        Route("/actions/{name}", action, methods=["POST"]),
        Mount("/static", StaticFiles(directory=static), name="static"),
    ]
    middleware = [Middleware(SecurityHeaders)]
    if user is not None and password is not None:
        middleware.append(Middleware(BasicAuth, user=user, password=password))
    if is_loopback(host):
        # a page of another site that rebinds its name to 127.0.0.1 sends its own name as Host: refused
        middleware.append(
            Middleware(
                TrustedHostMiddleware,
                allowed_hosts=["127.0.0.1", "localhost", "[::1]", "::1", *trusted_hosts],
            )
        )
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HttpProblem: http_problem, psycopg.Error: database_problem},
    )
    app.state.dashboard = dashboard
    app.state.templates = _templates()
    return app
