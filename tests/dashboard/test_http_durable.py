"""Durable execution on the dashboard (extension 0.11.0), over HTTP (Starlette's TestClient on the real app
and a real database): the Waiting page (held, sleeping and signal-waiting jobs, and what each waits for),
and a job's steps, progress and wait on its page.  On extension 0.10.0 every page keeps working without
them."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
from starlette.testclient import TestClient
from throwaway_pg import ThrowawayPostgres

import pgjobq

from helpers.databases import connect_as, fresh_database
from helpers.sqlhelpers import Db, claim_one, enqueue

MakeClient = Callable[..., TestClient]  # the make_client fixture (conftest.py)
HTML = {"accept": "text/html"}


def running(db: Db, queue: str = "default") -> tuple[int, int]:
    """A new job of queue, claimed: its id and lease."""
    enqueue(db, queue, {})
    claimed = claim_one(db, queue)
    return claimed["id"], claimed["lease"]


def parked_on_signal(db: Db, key: str, queue: str = "default") -> int:
    """A job of queue waiting (jobq.await_signal) for the signal key; its id."""
    job_id, lease = running(db, queue)
    db.execute("SELECT jobq.await_signal(%s, %s, %s)", (job_id, lease, key))
    return job_id


def sleeping(db: Db, name: str) -> int:
    """A job in a durable sleep (jobq.sleep) of an hour; its id."""
    job_id, lease = running(db)
    db.execute("SELECT jobq.sleep(%s, %s, %s, now() + interval '1 hour')", (job_id, lease, name))
    return job_id


def waits_shown(page: str) -> dict[int, str]:
    """What the Waiting page says each job waits for, by id."""
    found = re.findall(r'<tr data-job="(\d+)">.*?<td data-field="waiting_for">([^<]*)</td>', page, re.DOTALL)
    return {int(job_id): text for job_id, text in found}


@pytest.fixture
def dsn_0_10_0(db: Db, pg_server: ThrowawayPostgres) -> Iterator[str]:
    """The DSN of a database of its own at extension 0.10.0, which has no durable execution."""
    with fresh_database(db) as dbname, connect_as(pg_server, dbname) as conn:
        conn.execute("CREATE EXTENSION pgjobq VERSION '0.10.0'")
        conn.execute("SELECT jobq.enqueue('emails', '{}')")
        yield pg_server.dsn(dbname)


# -- the Waiting page -----------------------------------------------------------------------------


def test_the_waiting_page_shows_held_sleeping_and_signal_waiting_jobs_and_what_for(
    db: Db, make_client: MakeClient
) -> None:
    held = pgjobq.enqueue(db, "emails", {}, hold=True)
    napping = sleeping(db, "nap")
    approval = parked_on_signal(db, "approved:7")

    page = make_client().get("/waiting", headers=HTML).text

    shown = waits_shown(page)
    assert set(shown) == {held, napping, approval}
    assert shown[held] == "held: until released (unhold)"
    assert shown[napping].startswith("sleep nap until ") and shown[napping].endswith(" UTC")
    assert shown[approval] == "signal approved:7 (no timeout)"


def test_the_waiting_page_leaves_out_jobs_a_worker_or_a_parent_will_take_up(
    db: Db, make_client: MakeClient
) -> None:
    parent = enqueue(db, "emails", {})
    enqueue(db, "emails", {}, depends_on=[parent])  # waiting for its parent: the Jobs page's
    db.execute("SELECT jobq.enqueue('emails', '{}', run_at => now() + interval '1 hour')")  # no sleep
    running(db, "emails")

    page = make_client().get("/waiting", headers=HTML).text

    assert waits_shown(page) == {}
    assert "No job is held, sleeping or waiting for a signal." in page


def test_the_waiting_page_shows_a_jobs_latest_progress(db: Db, make_client: MakeClient) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.progress(%s, %s, '{\"done\": 40}')", (job_id, lease))
    db.execute("SELECT jobq.await_signal(%s, %s, 'go')", (job_id, lease))

    page = make_client().get("/waiting", headers=HTML).text

    assert '<code class="payload" data-field="progress">{&#34;done&#34;: 40}</code>' in page


def test_every_page_leads_to_the_waiting_page(db: Db, make_client: MakeClient) -> None:
    page = make_client().get("/jobs", headers=HTML).text

    assert '<a href="/waiting" >Waiting</a>' in page


# -- a job's page -----------------------------------------------------------------------------------


def test_a_jobs_page_shows_its_steps_progress_and_what_it_waits_for(db: Db, make_client: MakeClient) -> None:
    job_id, lease = running(db)
    db.execute("SELECT jobq.checkpoint(%s, %s, 'fetch', '{\"rows\": 3}')", (job_id, lease))
    db.execute("SELECT jobq.progress(%s, %s, '{\"done\": 1}')", (job_id, lease))
    db.execute("SELECT jobq.await_signal(%s, %s, 'go')", (job_id, lease))

    page = make_client().get(f"/jobs/{job_id}", headers=HTML).text

    assert '<dd data-field="waiting_for">signal go (no timeout)</dd>' in page
    assert re.search(r'<pre class="json" data-field="progress">\{\s*&#34;done&#34;: 1\s*\}</pre>', page)
    steps = re.findall(
        r'<tr data-step="([^"]+)">\s*<td>[^<]*</td>\s*<td>([^<]*)</td>\s*<td class="num">(\d+)', page
    )
    assert steps == [("fetch", "step", "1")]
    assert "{&#34;rows&#34;: 3}" in page


def test_a_plain_jobs_page_says_it_recorded_no_step(db: Db, make_client: MakeClient) -> None:
    job_id = enqueue(db, "emails", {})

    page = make_client().get(f"/jobs/{job_id}", headers=HTML).text

    assert '<p class="empty" data-field="steps">No step recorded.</p>' in page
    assert '<dd data-field="waiting_for">—</dd>' in page


def test_a_held_jobs_page_says_it_waits_to_be_released(db: Db, make_client: MakeClient) -> None:
    job_id = pgjobq.enqueue(db, "emails", {}, hold=True)

    page = make_client().get(f"/jobs/{job_id}", headers=HTML).text

    assert '<dd data-field="waiting_for">held: until released (unhold)</dd>' in page


# -- extension 0.10.0 --------------------------------------------------------------------------------


def test_on_extension_0_10_0_every_page_works_without_durable_execution(
    dsn_0_10_0: str, make_client: MakeClient
) -> None:
    client = make_client(dsn=dsn_0_10_0)
    paths = ("/", "/jobs", "/jobs/1", "/waiting")

    pages = {path: client.get(path, headers=HTML) for path in paths}

    assert {path: page.status_code for path, page in pages.items()} == dict.fromkeys(paths, 200)
    assert 'href="/waiting"' not in pages["/"].text
    assert (
        'data-field="waiting_for"' not in pages["/jobs/1"].text
        and "<h2>Steps</h2>" not in pages["/jobs/1"].text
    )
    assert "come with the pgjobq extension 0.11.0; this database has 0.10.0" in pages["/waiting"].text
