"""pgjobq.contrib.django with a real Django project (tests/frameworks/djangoapp) on the test's database.

Django is set up once in this process (settings from djangoapp.settings);
each test points the "default" connection at its own database and migrates
it.  The worker command runs as a real manage.py subprocess, stopped by a
real SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgjobq
from pgjobq import WorkerSettings

from helpers.fixtures import RunWorker
from helpers.processes import TESTS, process_env
from helpers.sqlhelpers import Db, scalar

pytest.importorskip(
    "django", reason="Django is not installed (the django extra): pgjobq.contrib.django untested"
)

import django
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connections, transaction
from django.test import Client

from pgjobq.contrib import django as jobs

from frameworks.djangoapp.settings import databases, settings_for

MANAGE = TESTS / "frameworks" / "djangoapp" / "manage.py"
SHIP = "frameworks.djangoapp.shop.jobs:ship"
WAIT = timedelta(seconds=30)


class Refused(Exception):
    """Raised inside an atomic block to roll it back."""


def point_django_at(dsn: str) -> None:
    """Django's default connection, closed, now for the database dsn names."""
    if not settings.configured:
        settings.configure(**settings_for(dsn))
        django.setup()
    connections["default"].close()
    connections["default"].settings_dict.update(databases(dsn)["default"])


@pytest.fixture
def shop(dsn: str) -> Iterator[str]:
    """Django on this test's database, migrated (pgjobq's migration, then the shop's); its dsn."""
    point_django_at(dsn)
    call_command("migrate", verbosity=0)
    yield dsn
    connections.close_all()


def orders(db: Db) -> list[dict[str, Any]]:
    return db.execute("SELECT id, item, shipped FROM shop_order ORDER BY id").fetchall()


def jobs_of(db: Db, queue: str = "orders") -> list[dict[str, Any]]:
    return db.execute(
        "SELECT id, payload, status FROM jobq.jobs WHERE queue = %s ORDER BY id", [queue]
    ).fetchall()


def test_a_view_writes_an_order_and_enqueues_its_job_in_one_transaction(shop: str, db: Db) -> None:
    response = Client().post("/orders", {"item": "book"})

    assert response.status_code == 201
    placed = response.json()
    assert orders(db) == [{"id": placed["order"], "item": "book", "shipped": False}]
    assert jobs_of(db) == [{"id": placed["job"], "payload": {"order": placed["order"]}, "status": "queued"}]


def test_a_rollback_of_the_atomic_block_drops_the_order_and_its_job(shop: str, db: Db) -> None:
    from frameworks.djangoapp.shop.orders import place_order

    with pytest.raises(Refused), transaction.atomic():
        place_order("book")
        raise Refused

    assert orders(db) == []
    assert jobs_of(db) == []


def test_a_rolled_back_savepoint_drops_only_its_own_job(shop: str, db: Db) -> None:
    with transaction.atomic():
        kept = jobs.enqueue("orders", {"order": 1})
        with pytest.raises(Refused), transaction.atomic():
            jobs.enqueue("orders", {"order": 2})
            raise Refused

    assert jobs_of(db) == [{"id": kept, "payload": {"order": 1}, "status": "queued"}]


def test_a_job_claimed_on_djangos_connection_has_a_dict_payload(shop: str) -> None:
    # Django's psycopg backend loads jsonb as text on its connections: the client decodes itself
    jobs.enqueue("orders", {"order": 7, "items": ["book"]})

    (job,) = pgjobq.claim(jobs.connection(), "orders", 1, "test")

    assert job.payload == {"order": 7, "items": ["book"]}


def test_aenqueue_enqueues_from_async_code(shop: str, db: Db) -> None:
    async def enqueue() -> int | None:
        job_id = await jobs.aenqueue("orders", {"order": 3})
        await sync_to_async(connections.close_all)()  # the connection of sync_to_async's thread
        return job_id

    job_id = asyncio.run(enqueue())

    assert jobs_of(db) == [{"id": job_id, "payload": {"order": 3}, "status": "queued"}]


def test_manage_py_pgjobq_worker_runs_the_handler_until_sigterm(shop: str, db: Db, tmp_path: Path) -> None:
    from frameworks.djangoapp.shop.orders import place_order

    order, job_id = place_order("book")
    log = tmp_path / "worker.log"
    with log.open("w") as output:
        worker = subprocess.Popen(
            [sys.executable, str(MANAGE), "pgjobq_worker", SHIP, "--queue", "orders", "--log-level", "DEBUG"],
            env=process_env(shop, DJANGOAPP_DSN=shop),
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        state = pgjobq.wait(db, job_id, WAIT)
        assert state is not None, log.read_text()
        assert state.status == "done", log.read_text()
        assert orders(db) == [{"id": order, "item": "book", "shipped": True}]

        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0, log.read_text()
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_the_worker_command_names_a_bad_variable(shop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGJOBQ_CONCURRENCY", "many")

    with pytest.raises(CommandError) as refused:
        call_command("pgjobq_worker", SHIP)

    assert str(refused.value) == "PGJOBQ_CONCURRENCY: expected an integer, got 'many'"


def test_a_handler_using_the_orm_gets_a_working_connection_for_each_job(
    shop: str, db: Db, run_worker: RunWorker
) -> None:
    # CONN_MAX_AGE 0 (Django's default): the connection a job used is closed after it, so a
    # backend that went away between jobs (a restart, a pooler) costs the next job nothing
    from frameworks.djangoapp.shop.jobs import ship
    from frameworks.djangoapp.shop.orders import place_order

    _, first = place_order("book")
    run_worker(shop, jobs.close_old_connections_around(ship), WorkerSettings(queue="orders"))
    state = pgjobq.wait(db, first, WAIT)
    assert state is not None and state.status == "done"
    db.execute("SELECT pg_terminate_backend(%s)", [state.result["backend"]])

    _, second = place_order("pen")
    state = pgjobq.wait(db, second, WAIT)

    assert state is not None and state.status == "done"
    assert [order["shipped"] for order in orders(db)] == [True, True]


def test_the_migration_installs_the_extension_and_reversing_it_drops_it(dsn: str, db: Db) -> None:
    name = f"{db.info.dbname}_bare"
    db.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    bare = psycopg.conninfo.make_conninfo(dsn, dbname=name)
    try:
        point_django_at(bare)
        with psycopg.connect(bare, autocommit=True) as conn:
            call_command("migrate", "pgjobq", verbosity=0)
            installed = scalar(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'pgjobq'")
            call_command("migrate", "pgjobq", "zero", verbosity=0)
            removed = scalar(conn, "SELECT count(*) FROM pg_extension WHERE extname = 'pgjobq'")
    finally:
        connections.close_all()
        db.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))

    assert (installed, removed) == (1, 0)
