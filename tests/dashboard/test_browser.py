"""The dashboard end to end: headless Chromium (Debian's, driven by Playwright) on a real uvicorn server.

One browser for the module (starting it is the slow part), a fresh context (cookies) per test.
Skipped, saying why, where /usr/bin/chromium is absent (tools/ensure-deps installs it); failed instead
where PGJOBQ_REQUIRE names browser.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright

from helpers import required
from helpers.sqlhelpers import Db, claim_one, enqueue, scalar

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip

pytestmark = [
    pytest.mark.browser,
    pytest.mark.xdist_group("dashboard-browser"),  # one worker, one Chromium, under make test's loadgroup
]

ServeDashboard = Callable[..., str]  # the serve_dashboard fixture (conftest.py)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        required.skip_or_fail("browser", f"{CHROMIUM} is absent: run tools/ensure-deps (Debian's chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def problems() -> list[str]:
    """What went wrong in the page: script errors, failed loads, CSP violations (none unless expected)."""
    return []


@pytest.fixture
def page(browser: Browser, problems: list[str]) -> Iterator[Page]:
    context = browser.new_context()
    opened = context.new_page()
    opened.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    opened.on(
        "console",
        lambda message: (
            problems.append(f"console {message.type}: {message.text}") if message.type == "error" else None
        ),
    )
    yield opened
    context.close()
    assert problems == [], problems  # no script error, no blocked resource, no CSP violation


def fail_for_good(db: Db, queue: str, error: str) -> int:
    job_id = enqueue(db, queue, {"n": 1}, max_attempts=1)
    claimed = claim_one(db, queue)
    db.execute("SELECT jobq.fail(%s, %s, %s)", (job_id, error, claimed["lease"]))
    return job_id


def test_the_queue_numbers_in_the_browser_equal_the_database(
    db: Db, serve_dashboard: ServeDashboard, page: Page
) -> None:
    db.execute("SELECT jobq.enqueue_many('emails', array_fill('{}'::jsonb, ARRAY[7]))")
    db.execute("SELECT jobq.enqueue('emails', '{}', run_at => now() + interval '1 hour')")
    claim_one(db, "emails")
    claim_one(db, "emails")
    fail_for_good(db, "reports", "boom")
    db.execute("SELECT jobq.enqueue_many('reports', array_fill('{}'::jsonb, ARRAY[4]))")
    url = serve_dashboard(sample_seconds=0.5)

    page.goto(url + "/")
    page.wait_for_selector("#chart-done .uplot")  # the charts drew (the vendored uPlot ran)

    expected = {
        row["queue"]: row
        for row in db.execute(
            "SELECT queue, count(*) FILTER (WHERE status = 'queued' AND run_at <= now()) AS runnable,"
            " count(*) FILTER (WHERE status = 'queued' AND run_at > now()) AS scheduled,"
            " count(*) FILTER (WHERE status = 'running') AS running,"
            " count(*) FILTER (WHERE status = 'waiting') AS waiting,"
            " count(*) FILTER (WHERE status = 'failed') AS failed FROM jobq.jobs GROUP BY queue"
        ).fetchall()
    }
    assert set(expected) == {"emails", "reports"}
    for queue, row in expected.items():
        for field in ("runnable", "scheduled", "running", "waiting", "failed"):
            shown = page.locator(f'td[data-queue="{queue}"][data-field="{field}"]').inner_text()
            assert shown.strip() == str(row[field]), (queue, field)


def test_the_numbers_follow_the_database_without_a_reload(
    db: Db, serve_dashboard: ServeDashboard, page: Page
) -> None:
    enqueue(db, "emails", {})
    url = serve_dashboard(sample_seconds=0.5)  # the page polls at the sampling interval
    page.goto(url + "/")
    runnable = page.locator('td[data-queue="emails"][data-field="runnable"]')
    assert runnable.inner_text().strip() == "1"

    db.execute("SELECT jobq.enqueue_many('emails', array_fill('{}'::jsonb, ARRAY[4]))")

    expect(runnable).to_have_text("5", timeout=30_000)  # polled by Playwright (the CSP forbids eval)


def test_pausing_from_the_browser_pauses_the_queue(
    db: Db, serve_dashboard: ServeDashboard, page: Page
) -> None:
    enqueue(db, "emails", {})
    url = serve_dashboard(allow_actions=True)
    page.goto(url + "/")

    page.locator('tr[data-queue="emails"] button[data-action="pause"]').click()

    page.wait_for_selector(".notice")
    assert "Paused queue emails" in page.locator(".notice").inner_text()
    assert scalar(db, "SELECT paused FROM jobq.queues WHERE queue = 'emails'") is True
    assert page.locator('td[data-queue="emails"][data-field="paused"]').inner_text().strip() == "paused"


def test_retrying_a_failed_job_from_its_page(db: Db, serve_dashboard: ServeDashboard, page: Page) -> None:
    job_id = fail_for_good(db, "emails", "boom")
    url = serve_dashboard(allow_actions=True)
    page.goto(f"{url}/jobs/{job_id}")

    page.locator('button[data-action="retry"]').click()

    page.wait_for_selector(".notice")
    assert scalar(db, "SELECT status FROM jobq.jobs WHERE id = %s", (job_id,)) == "queued"


def test_filtering_the_jobs_by_task_from_the_browser(
    db: Db, serve_dashboard: ServeDashboard, page: Page
) -> None:
    welcome = {enqueue(db, "emails", {}, task="send_welcome") for _ in range(3)}
    enqueue(db, "emails", {}, task="send_reminder")
    enqueue(db, "emails", {})
    url = serve_dashboard()
    page.goto(url + "/jobs")
    rows = page.locator("tr[data-job]")
    expect(rows).to_have_count(5)

    page.locator('form.search input[name="task"]').fill("send_welcome")
    page.locator('form.search button[type="submit"]').click()

    page.wait_for_url(re.compile(r"/jobs\?.*task=send_welcome"))
    expect(rows).to_have_count(3)
    assert {int(rows.nth(n).get_attribute("data-job") or "") for n in range(3)} == welcome
    assert page.locator('td[data-field="task"]').all_inner_texts() == ["send_welcome"] * 3


def test_a_script_payload_renders_inert(db: Db, serve_dashboard: ServeDashboard, page: Page) -> None:
    evil = "<script>window.pwned = 1; alert('payload')</script><img src='x' onerror='window.pwned = 2'>"
    job_id = fail_for_good(db, "emails", evil)
    db.execute(
        "UPDATE jobq.jobs SET payload = jsonb_build_object('html', %s::text) WHERE id = %s", (evil, job_id)
    )
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    url = serve_dashboard()

    for path in (f"/jobs/{job_id}", "/jobs?status=failed"):
        page.goto(url + path)
        page.wait_for_load_state("load")
        assert page.evaluate("window.pwned === undefined"), path
        assert page.locator("script:not([src])").count() == 0, path
    assert dialogs == []
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    page.goto(f"{url}/jobs/{job_id}")
    assert evil in page.locator('pre[data-field="payload"]').inner_text()  # shown as text
    assert evil in page.locator('pre[data-field="last_error"]').inner_text()


def test_a_cross_site_post_is_refused(
    db: Db, serve_dashboard: ServeDashboard, page: Page, problems: list[str]
) -> None:
    enqueue(db, "emails", {})
    url = serve_dashboard(allow_actions=True)
    page.goto(url + "/")  # the victim has the dashboard open: its CSRF cookie is set
    token = page.locator('input[name="csrf"]').first.get_attribute("value")
    assert token
    # a page of another site that knows even the token posts the pause form to the dashboard
    attacker = "http://attacker.test/"
    form = (
        f'<form id="f" method="post" action="{url}/actions/pause">'
        f'<input name="queue" value="emails"><input name="csrf" value="{token}"></form>'
        "<script>document.getElementById('f').submit()</script>"
    )
    page.route(attacker, lambda route: route.fulfill(status=200, content_type="text/html", body=form))

    with page.expect_response(re.compile(r"/actions/pause$")) as answer:
        page.goto(attacker)

    assert answer.value.status == 403
    assert "cross-site request refused" in page.locator("body").inner_text()
    assert scalar(db, "SELECT paused FROM jobq.queues WHERE queue = 'emails'") is False
    assert problems == [
        "console error: Failed to load resource: the server responded with a status of 403 (Forbidden)"
    ]
    problems.clear()
