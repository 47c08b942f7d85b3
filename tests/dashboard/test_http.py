"""The dashboard over HTTP (Starlette's TestClient on the real app and a real database)."""

from __future__ import annotations

import asyncio
import base64
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

import pgjobq
from pgjobq.dashboard import create_app, serve
from pgjobq.dashboard._sampler import Sampler

from helpers.processes import wait_until
from helpers.sqlhelpers import Db, claim_one, enqueue, scalar

MakeClient = Callable[..., TestClient]  # the make_client fixture (conftest.py)
ORIGIN = "http://127.0.0.1"  # the clients' base URL
HTML = {"accept": "text/html"}


def token_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, "the page offers no action form"
    return found.group(1)


def cell(page: str, queue: str, field: str) -> str:
    found = re.search(rf'data-queue="{re.escape(queue)}" data-field="{field}">(?:<a [^>]*>)?([^<]*)', page)
    assert found is not None, f"no cell {field} for queue {queue}"
    return found.group(1).strip()


def fail_for_good(db: Db, queue: str, error: str) -> int:
    """A job of queue that failed its only attempt with error."""
    job_id = enqueue(db, queue, {"n": 1}, max_attempts=1)
    claimed = claim_one(db, queue)
    assert claimed is not None and claimed["id"] == job_id
    db.execute("SELECT jobq.fail(%s, %s, %s)", (job_id, error, claimed["lease"]))
    return job_id


# -- what the pages show ------------------------------------------------------------


def test_queue_counts_on_the_page_equal_the_database(db: Db, make_client: MakeClient) -> None:
    for n in range(3):
        enqueue(db, "emails", {"n": n})
    db.execute("SELECT jobq.enqueue('emails', '{}', run_at => now() + interval '1 hour')")
    claim_one(db, "emails")
    fail_for_good(db, "reports", "boom")
    parent = enqueue(db, "reports", {})
    enqueue(db, "reports", {}, depends_on=[parent])

    page = make_client().get("/", headers=HTML).text

    rows = db.execute(
        "SELECT queue, count(*) FILTER (WHERE status = 'queued' AND run_at <= now()) AS runnable,"
        " count(*) FILTER (WHERE status = 'queued' AND run_at > now()) AS scheduled,"
        " count(*) FILTER (WHERE status = 'running') AS running,"
        " count(*) FILTER (WHERE status = 'waiting') AS waiting,"
        " count(*) FILTER (WHERE status = 'failed') AS failed"
        " FROM jobq.jobs GROUP BY queue"
    ).fetchall()
    assert {row["queue"] for row in rows} == {"emails", "reports"}
    for row in rows:
        for field in ("runnable", "scheduled", "running", "waiting", "failed"):
            assert cell(page, row["queue"], field) == str(row[field]), (row["queue"], field)


def test_paused_queues_and_limits_are_shown(db: Db, make_client: MakeClient) -> None:
    db.execute("SELECT jobq.configure_queue('mail', concurrency => 3, rate_limit => 10)")
    db.execute("SELECT jobq.pause('mail')")

    page = make_client().get("/", headers=HTML).text

    assert '<span class="tag paused">paused</span>' in page
    assert "3 at once" in page and "10 per 1.0 s" in page


def test_each_queues_retention_is_shown_per_final_state(db: Db, make_client: MakeClient) -> None:
    db.execute("SELECT jobq.configure_queue('mail', retain_done => '2 hours', keep_forever => '{failed}')")
    enqueue(db, "pdfs", {})
    client = make_client()

    page = client.get("/", headers=HTML).text
    listed = {row["queue"]: row for row in client.get("/api/queues").json()["queues"]}

    assert cell(page, "mail", "kept") == "2.0 h · ∞ · 7.0 d"
    assert cell(page, "pdfs", "kept") == "1.0 d · 14.0 d · 7.0 d"
    assert [listed["mail"][f"retain_{state}_seconds"] for state in ("done", "failed", "cancelled")] == [
        7200, None, 604800,
    ]  # fmt: skip


def test_a_script_in_a_payload_or_an_error_is_escaped(db: Db, make_client: MakeClient) -> None:
    evil = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    job_id = fail_for_good(db, "emails", evil)
    db.execute(
        "UPDATE jobq.jobs SET payload = jsonb_build_object('html', %s::text) WHERE id = %s", (evil, job_id)
    )
    client = make_client()

    for path in (f"/jobs/{job_id}", "/jobs?status=failed", f"/jobs?error={evil}"):
        page = client.get(path, headers=HTML).text
        assert "<script>alert" not in page and "<img src=x" not in page, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, path


def test_one_job_shows_payload_headers_result_error_attempts_and_dependencies(
    db: Db, make_client: MakeClient
) -> None:
    parent = enqueue(db, "flows", {"step": "first"}, headers=Jsonb({"trace": "abc"}))
    child = enqueue(db, "flows", {"step": "second"}, depends_on=[parent])
    claimed = claim_one(db, "flows")
    assert claimed is not None
    db.execute("SELECT jobq.complete(%s, %s, '{\"sent\": 42}')", (parent, claimed["lease"]))
    client = make_client()

    parent_page = client.get(f"/jobs/{parent}", headers=HTML).text
    child_page = client.get(f"/jobs/{child}", headers=HTML).text

    assert "&#34;step&#34;: &#34;first&#34;" in parent_page
    assert "&#34;trace&#34;: &#34;abc&#34;" in parent_page
    assert "&#34;sent&#34;: 42" in parent_page
    assert "1 of 3" in parent_page
    assert f'<a href="/jobs/{child}">{child}</a>' in parent_page  # its dependent
    assert f'<a href="/jobs/{parent}">{parent}</a> <span class="tag done">done</span>' in child_page


def test_an_unknown_job_is_404(make_client: MakeClient) -> None:
    assert make_client().get("/jobs/987654", headers=HTML).status_code == 404


def test_jobs_are_found_by_status_concurrency_key_unique_key_and_error_text(
    db: Db, make_client: MakeClient
) -> None:
    failed = fail_for_good(db, "emails", "SMTP 550 mailbox unavailable")
    keyed = enqueue(db, "emails", {}, concurrency_key="customer-7")
    unique = enqueue(db, "emails", {}, unique_key="order-9")
    enqueue(db, "emails", {})
    client = make_client()

    def ids(path: str) -> set[int]:
        return {int(i) for i in re.findall(r'<tr data-job="(\d+)">', client.get(path, headers=HTML).text)}

    assert ids("/jobs?key=customer-7") == {keyed}
    assert ids("/jobs?key=order-9") == {unique}
    assert ids("/jobs?error=mailbox+UNAVAILABLE") == {failed}
    assert ids("/jobs?status=failed") == {failed}
    assert len(ids("/jobs?status=queued&queue=emails")) == 3


def test_the_job_id_box_leads_to_the_job(db: Db, make_client: MakeClient) -> None:
    job_id = enqueue(db, "emails", {})
    response = make_client().get(f"/jobs?id={job_id}", headers=HTML)
    assert response.status_code == 303 and response.headers["location"] == f"/jobs/{job_id}"


def test_jobs_are_paged_by_keyset(db: Db, make_client: MakeClient) -> None:
    ids = [row["id"] for row in db.execute(
        "SELECT unnest(jobq.enqueue_many('bulk', array_fill('{}'::jsonb, ARRAY[60]))) AS id"
    ).fetchall()]  # fmt: skip
    client = make_client()

    first = client.get("/jobs?queue=bulk", headers=HTML).text
    older = re.search(r'href="/jobs\?([^"]+)" rel="next"', first)
    assert older is not None
    second = client.get("/jobs?" + older.group(1).replace("&amp;", "&"), headers=HTML).text

    shown_first = [int(i) for i in re.findall(r'<tr data-job="(\d+)">', first)]
    shown_second = [int(i) for i in re.findall(r'<tr data-job="(\d+)">', second)]
    assert shown_first == sorted(ids, reverse=True)[:50]
    assert shown_second == sorted(ids, reverse=True)[50:]
    assert 'rel="next"' not in second


def test_bad_search_input_is_a_400_naming_it(make_client: MakeClient) -> None:
    response = make_client().get("/jobs?status=nonsense", headers=HTML)
    assert response.status_code == 400 and "status is not valid" in response.text


def test_schedules_show_their_next_run(db: Db, make_client: MakeClient) -> None:
    db.execute("SELECT jobq.schedule('nightly', 'reports', cron => '0 3 * * *')")
    db.execute("SELECT jobq.schedule('often', 'reports', every => interval '90 seconds')")
    page = make_client().get("/schedules", headers=HTML).text
    for name in ("nightly", "often"):
        next_run = scalar(db, "SELECT next_run FROM jobq.schedules WHERE name = %s", (name,))
        assert next_run.strftime("%Y-%m-%d %H:%M:%S UTC") in page
    # and the two after: 90 s apart, and the next two days at 03:00
    often = scalar(db, "SELECT next_run FROM jobq.schedules WHERE name = 'often'")
    nightly = scalar(db, "SELECT next_run FROM jobq.schedules WHERE name = 'nightly'")
    for later in (often + timedelta(seconds=90), often + timedelta(seconds=180), nightly + timedelta(days=2)):
        assert later.strftime("%Y-%m-%d %H:%M:%S UTC") in page
    assert "<code>0 3 * * *</code>" in page and "every 1.5 min" in page


# -- tasks (extension 0.9.0) and the version before them --------------------------------


def shown_ids(client: TestClient, path: str) -> set[int]:
    """The ids of the jobs the listing at path shows."""
    return {int(i) for i in re.findall(r'<tr data-job="(\d+)">', client.get(path, headers=HTML).text)}


def test_the_jobs_listing_shows_each_job_s_task(db: Db, make_client: MakeClient) -> None:
    enqueue(db, "emails", {}, task="send_welcome")
    enqueue(db, "billing", {}, task="billing.invoice:v2")
    enqueue(db, "emails", {})

    page = make_client().get("/jobs", headers=HTML).text

    shown = dict(re.findall(r'<tr data-job="(\d+)">.*?<td data-field="task">([^<]*)</td>', page, re.DOTALL))
    expected = db.execute("SELECT id::text AS id, coalesce(task, '') AS task FROM jobq.jobs").fetchall()
    assert shown == {row["id"]: row["task"] for row in expected}
    assert "<th>queue</th><th>task</th><th>status</th>" in page


def test_jobs_are_found_by_task(db: Db, make_client: MakeClient) -> None:
    welcome = [enqueue(db, "emails", {}, task="send_welcome") for _ in range(2)]
    other_queue = enqueue(db, "signups", {}, task="send_welcome")
    enqueue(db, "emails", {}, task="send_reminder")
    enqueue(db, "emails", {})
    client = make_client()

    assert shown_ids(client, "/jobs?task=send_welcome") == {*welcome, other_queue}
    assert shown_ids(client, "/jobs?task=send_welcome&queue=emails") == set(welcome)
    assert shown_ids(client, "/jobs?task=send_welcome&status=queued&queue=signups") == {other_queue}
    assert shown_ids(client, "/jobs?task=never_enqueued") == set()


def test_the_task_filter_is_kept_by_the_status_tabs_and_the_search_form(
    db: Db, make_client: MakeClient
) -> None:
    enqueue(db, "emails", {}, task="billing.invoice:v2")

    page = make_client().get("/jobs?task=billing.invoice:v2&queue=emails", headers=HTML).text

    assert '<a href="/jobs?queue=emails&amp;task=billing.invoice%3Av2" aria-current="page">all</a>' in page
    assert 'href="/jobs?status=failed&amp;queue=emails&amp;task=billing.invoice%3Av2"' in page
    assert '<input name="task" value="billing.invoice:v2" size="14">' in page


def test_a_task_filter_that_is_no_task_name_is_a_400_naming_it(make_client: MakeClient) -> None:
    client = make_client()
    for bad in ("9lives", "send welcome", "<script>", "x" * 201):
        response = client.get("/jobs", params={"task": bad}, headers=HTML)
        assert response.status_code == 400, bad
        assert "task is not valid: expected a task name" in response.text, bad
        assert "<script>" not in response.text


def test_a_job_s_page_shows_its_task_leading_to_the_jobs_of_that_task(
    db: Db, make_client: MakeClient
) -> None:
    task_job = enqueue(db, "emails", {}, task="send_welcome")
    plain_job = enqueue(db, "emails", {})
    client = make_client()

    task_page = client.get(f"/jobs/{task_job}", headers=HTML).text
    plain_page = client.get(f"/jobs/{plain_job}", headers=HTML).text

    assert '<dd data-field="task"><a href="/jobs?task=send_welcome">send_welcome</a></dd>' in task_page
    assert '<dd data-field="task">— <span class="dim">(a plain job)</span></dd>' in plain_page


def test_on_extension_0_8_0_every_page_works_without_tasks(
    db_before_tasks: Db, dsn_before_tasks: str, make_client: MakeClient
) -> None:
    failed = fail_for_good(db_before_tasks, "emails", "boom")
    queued = enqueue(db_before_tasks, "emails", {})
    db_before_tasks.execute("SELECT jobq.schedule('nightly', 'reports', cron => '0 3 * * *')")
    client = make_client(dsn=dsn_before_tasks, allow_actions=True)
    paths = ("/", "/jobs", "/jobs?status=failed&queue=emails", f"/jobs/{failed}", "/schedules",
             "/api/queues", "/api/history")  # fmt: skip

    pages = {path: client.get(path, headers=HTML) for path in paths}

    assert {path: page.status_code for path, page in pages.items()} == dict.fromkeys(paths, 200)
    assert "pgjobq 0.8.0" in pages["/"].text
    assert shown_ids(client, "/jobs") == {failed, queued}
    assert shown_ids(client, "/jobs?status=failed&queue=emails") == {failed}
    assert "<th>task</th>" not in pages["/jobs"].text and 'name="task"' not in pages["/jobs"].text
    assert 'data-field="task"' not in pages["/jobs"].text + pages[f"/jobs/{failed}"].text
    assert "boom" in pages[f"/jobs/{failed}"].text and "nightly" in pages["/schedules"].text
    assert cell(pages["/"].text, "emails", "failed") == "1"


def test_on_extension_0_8_0_a_task_filter_is_a_400_saying_tasks_need_0_9_0(
    dsn_before_tasks: str, make_client: MakeClient
) -> None:
    response = make_client(dsn=dsn_before_tasks).get("/jobs?task=send_welcome", headers=HTML)

    assert response.status_code == 400
    assert "task is not a filter of this database" in response.text
    assert "pgjobq extension 0.9.0 on, and it has 0.8.0" in response.text


# -- the history behind the charts ----------------------------------------------------


def test_the_sampler_counts_jobs_finished_between_samples(dsn: str, db: Db) -> None:
    fail_for_good(db, "emails", "before the first sample: not counted")
    for n in range(5):
        enqueue(db, "emails", {"n": n})

    async def run() -> tuple[Any, Any]:
        from psycopg_pool import AsyncConnectionPool

        async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=1) as pool:
            sampler = Sampler(pool, interval=1.0)
            first = await sampler.sample()
            with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
                for _ in range(3):
                    claimed = claim_one(conn, "emails")
                    assert claimed is not None
                    conn.execute("SELECT jobq.complete(%s, %s)", (claimed["id"], claimed["lease"]))
                claimed = claim_one(conn, "emails")
                assert claimed is not None
                conn.execute(
                    "SELECT jobq.fail(%s, 'x', %s, interval '1 hour')", (claimed["id"], claimed["lease"])
                )
            second = await sampler.sample()
            return first, (second, sampler.series())

    first, (second, series) = asyncio.run(run())
    assert first.queues["emails"].done_since is None  # nothing to count against yet
    assert second.queues["emails"].done_since == 3
    assert second.queues["emails"].failed_since == 0  # retried later: not finished
    assert second.queues["emails"].runnable == 1 and second.queues["emails"].scheduled == 1
    assert series["queues"] == ["emails"] and len(series["times"]) == 2
    assert series["done_per_minute"]["emails"][0] is None and series["done_per_minute"]["emails"][1] > 0


# -- headers, authentication, binding -------------------------------------------------


def test_every_response_carries_the_content_security_policy(make_client: MakeClient) -> None:
    client = make_client()
    for path in ("/", "/jobs", "/schedules", "/api/history", "/static/dashboard.css", "/nope"):
        response = client.get(path, headers=HTML)
        assert response.headers["content-security-policy"] == "default-src 'self'; frame-ancestors 'none'", (
            path
        )
        assert response.headers["x-content-type-options"] == "nosniff", path


def test_a_foreign_host_header_is_refused_on_loopback(make_client: MakeClient) -> None:
    # a page of another site whose name was rebound to 127.0.0.1 sends its own name
    response = make_client().get("/", headers={"host": "attacker.example"})
    assert response.status_code == 400


def test_basic_auth_guards_every_path(make_client: MakeClient) -> None:
    client = make_client(user="ops", password="s3cret")

    def basic(user: str, password: str) -> dict[str, str]:
        return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

    for path in ("/", "/static/dashboard.css", "/api/queues"):
        anonymous = client.get(path)
        assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Basic")
    assert client.get("/", headers=basic("ops", "wrong")).status_code == 401
    assert client.get("/", headers=basic("other", "s3cret")).status_code == 401
    assert client.get("/", headers=basic("ops", "s3cret")).status_code == 200


def test_serve_answers_on_its_port_and_stops_on_sigterm(dsn: str, db: Db) -> None:
    enqueue(db, "emails", {})
    with socket.socket() as probe:  # a free port (serve binds it itself)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    program = (
        f"from pgjobq.dashboard import serve; serve({dsn!r}, '127.0.0.1', {port}, False, None, None, False)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:

        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/api/queues", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        assert wait_until(answers, timeout=30), process.communicate()[0] if process.poll() is not None else ""
        queues = httpx.get(f"http://127.0.0.1:{port}/api/queues").json()["queues"]
        assert [(row["queue"], row["runnable"]) for row in queues] == [("emails", 1)]
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    finally:
        process.kill()
        process.wait()


def test_create_app_needs_the_extension(postgresql: psycopg.Connection[Any], dsn: str) -> None:
    postgresql.execute("DROP EXTENSION pgjobq CASCADE")
    postgresql.commit()
    with (
        pytest.raises(pgjobq.IncompatibleExtension, match="no pgjobq extension"),
        TestClient(create_app(dsn), base_url=ORIGIN),
    ):
        pass


# -- actions --------------------------------------------------------------------------


def test_read_only_by_default_offers_and_accepts_no_action(db: Db, make_client: MakeClient) -> None:
    fail_for_good(db, "emails", "boom")
    client = make_client()
    page = client.get("/", headers=HTML).text
    assert '<form method="post"' not in page and "Read-only: start with --allow-actions" in page
    client.cookies.set("pgjobq_csrf", "t" * 43)
    response = client.post("/actions/pause", data={"queue": "emails", "csrf": "t" * 43}, headers=HTML)
    assert response.status_code == 403
    assert not scalar(db, "SELECT EXISTS (SELECT FROM jobq.queues WHERE queue = 'emails' AND paused)")


@pytest.fixture
def viewer_dsn(db: Db, dsn: str) -> Iterator[str]:
    """A role (of this test's database) that may read everything the pages show, and run every action
    but one; dropped at the end (roles belong to the whole server)."""
    role = sql.Identifier(f"viewer_{db.info.dbname}")
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(role))
    db.execute(sql.SQL("GRANT USAGE ON SCHEMA jobq TO {}").format(role))
    db.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA jobq TO {}").format(role))
    db.execute(sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA jobq TO {}").format(role))
    db.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION jobq.pause(text) FROM {}").format(role))
    yield psycopg.conninfo.make_conninfo(dsn, user=f"viewer_{db.info.dbname}")
    db.execute(sql.SQL("DROP OWNED BY {}").format(role))
    db.execute(sql.SQL("DROP ROLE {}").format(role))


@pytest.fixture
def monitor_dsn(db: Db, dsn: str) -> Iterator[str]:
    """A role of pgjobq's read-only monitor level (jobq.grant_monitor); dropped at the end."""
    name = f"monitor_{db.info.dbname}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    db.execute("SELECT jobq.grant_monitor(%s)", (name,))
    yield psycopg.conninfo.make_conninfo(dsn, user=name)
    db.execute(sql.SQL("DROP OWNED BY {0}; DROP ROLE {0}").format(sql.Identifier(name)))


def test_the_monitor_level_reads_every_page_and_is_offered_no_action(
    db: Db, monitor_dsn: str, make_client: MakeClient
) -> None:
    failed = fail_for_good(db, "emails", "boom")
    db.execute("SELECT jobq.schedule('nightly', 'reports', cron => '0 3 * * *')")
    client = make_client(dsn=monitor_dsn, allow_actions=True)

    pages = {path: client.get(path, headers=HTML) for path in ("/", "/jobs", f"/jobs/{failed}", "/schedules")}

    assert {path: page.status_code for path, page in pages.items()} == dict.fromkeys(pages, 200)
    assert cell(pages["/"].text, "emails", "failed") == "1"
    assert "boom" in pages[f"/jobs/{failed}"].text and "nightly" in pages["/schedules"].text
    assert all('<form method="post"' not in page.text for page in pages.values())


def test_actions_need_the_admin_level(db: Db, viewer_dsn: str, make_client: MakeClient) -> None:
    enqueue(db, "emails", {})
    client = make_client(dsn=viewer_dsn, allow_actions=True)

    page = client.get("/", headers=HTML).text

    assert "lacks pgjobq's admin level" in page and '<form method="post"' not in page
    client.cookies.set("pgjobq_csrf", "t" * 43)
    response = client.post("/actions/pause", data={"queue": "emails", "csrf": "t" * 43}, headers=HTML)
    assert response.status_code == 403 and "admin level" in response.text


def test_pause_resume_retry_cancel_and_purge_change_the_database(db: Db, make_client: MakeClient) -> None:
    failed = fail_for_good(db, "emails", "boom")
    queued = enqueue(db, "emails", {})
    old = enqueue(db, "old", {})
    claimed = claim_one(db, "old")
    assert claimed is not None
    db.execute("SELECT jobq.complete(%s, %s)", (old, claimed["lease"]))
    db.execute("UPDATE jobq.jobs SET finished_at = now() - interval '8 days' WHERE id = %s", (old,))
    client = make_client(allow_actions=True)
    token = token_of(client.get("/", headers=HTML).text)

    def post(action: str, **form: Any) -> str:
        response = client.post(f"/actions/{action}", data={"csrf": token, **form}, headers={"origin": ORIGIN})
        assert response.status_code == 303, response.text
        return str(response.headers["location"])

    assert post("pause", queue="emails") == "/?notice=paused&queue=emails"
    assert scalar(db, "SELECT paused FROM jobq.queues WHERE queue = 'emails'") is True
    post("resume", queue="emails")
    assert scalar(db, "SELECT paused FROM jobq.queues WHERE queue = 'emails'") is False
    post("retry", queue="emails")
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (failed,)) == "queued"
    assert post("cancel", id=str(queued)) == f"/jobs/{queued}?notice=cancelled&id={queued}&status=cancelled"
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (queued,)) == "cancelled"
    post("purge", older_than="7 days")
    assert scalar(db, "SELECT count(*) FROM jobq.jobs WHERE id = %s", (old,)) == 0
    shown = client.get("/?notice=purged&n=1", headers=HTML).text
    assert "Purged 1 finished job(s)." in shown


FORGERIES = {
    "no token": ({}, None),
    "a token that is not the cookie's": ({}, "forged-" + "x" * 40),
    "Sec-Fetch-Site cross-site": ({"sec-fetch-site": "cross-site"}, "cookie"),
    "Sec-Fetch-Site same-site": ({"sec-fetch-site": "same-site"}, "cookie"),
    "a foreign Origin": ({"origin": "http://attacker.example"}, "cookie"),
    "Origin null": ({"origin": "null"}, "cookie"),
}


def test_a_forged_post_is_refused(db: Db, make_client: MakeClient) -> None:
    enqueue(db, "emails", {})
    client = make_client(allow_actions=True)
    real = token_of(client.get("/", headers=HTML).text)
    for case, (headers, token) in FORGERIES.items():
        form = {"queue": "emails"}
        if token is not None:
            form["csrf"] = real if token == "cookie" else token

        response = client.post("/actions/pause", data=form, headers={**HTML, **headers})

        assert response.status_code == 403 and "refused" in response.text, case
        assert scalar(db, "SELECT paused FROM jobq.queues WHERE queue = 'emails'") is False, case


def test_serve_says_in_one_line_when_its_port_is_taken(dsn: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(pgjobq.Error, match=f"^the dashboard cannot listen on 127.0.0.1:{port}: "):
            serve(dsn, "127.0.0.1", port, False, None, None, False)
