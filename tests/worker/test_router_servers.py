"""Queue-level sharding over three real PostgreSQL servers: producers enqueue through
pgjobq.QueueRouter, one real `pgjobq worker` process per server takes that server's queues, and each
job runs exactly once, on its own server, by that server's worker.

The session's server (tests/helpers/fixtures.py) is pg1, with this test's own database; this module
starts two more throwaway servers (pg2, pg3) and gives each test a fresh database with the extension
on each.  About 4 s in all on the quiet 2-core machine (20 s under a load average of 10), most of it
starting the two servers and the worker processes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import sql
from throwaway_pg import ThrowawayPostgres

import pgjobq
from pgjobq import ConfigurationError, JobAddress, QueueRouter

from helpers.handlers import EXECUTIONS_DDL
from helpers.processes import StartWorker
from helpers.sqlhelpers import Db, scalar, statuses

PLACED = {"emails": "pg1", "sms": "pg2", "reports": "pg3"}
HASHED = ["billing", "webhooks", "thumbnails", "exports"]  # placed by the rendezvous hash
BULK = 60  # jobs per queue in one enqueue_many
SINGLE = 2  # and one by one, each kept as a JobAddress


@pytest.fixture(scope="module")
def two_more_servers() -> Iterator[list[ThrowawayPostgres]]:
    """pg2 and pg3: two throwaway servers beside the session's, started at once, for this module."""
    servers = [ThrowawayPostgres(fast=True) for _ in range(2)]
    try:
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda server: server.start(), servers))
        yield servers
    finally:
        for server in servers:
            server.remove()


@pytest.fixture
def servers(dsn: str, db: Db, two_more_servers: list[ThrowawayPostgres]) -> Iterator[dict[str, str]]:
    """Three servers' databases, name to DSN, each with pgjobq and the executions table: pg1 is this
    test's own database, pg2 and pg3 fresh ones on the module's servers (dropped afterwards)."""
    name = f"router_{uuid.uuid4().hex[:12]}"
    created: list[ThrowawayPostgres] = []
    try:
        for server in two_more_servers:
            with psycopg.connect(server.dsn(), autocommit=True) as admin:
                admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            created.append(server)
            with psycopg.connect(server.dsn(name), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION pgjobq")
                conn.execute(EXECUTIONS_DDL)
        db.execute(EXECUTIONS_DDL)
        yield {"pg1": dsn, "pg2": two_more_servers[0].dsn(name), "pg3": two_more_servers[1].dsn(name)}
    finally:
        for server in created:
            with psycopg.connect(server.dsn(), autocommit=True) as admin:
                admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def connections(servers: dict[str, str]) -> Iterator[dict[str, psycopg.Connection[dict[str, Any]]]]:
    """An autocommit connection to each server's database, by server name."""
    opened = {
        name: psycopg.connect(conninfo, autocommit=True, row_factory=psycopg.rows.dict_row)
        for name, conninfo in servers.items()
    }
    yield opened
    for conn in opened.values():
        conn.close()


def test_every_job_runs_once_on_its_own_server_by_that_servers_worker(
    servers: dict[str, str],
    connections: dict[str, psycopg.Connection[dict[str, Any]]],
    start_worker: StartWorker,
) -> None:
    router = QueueRouter(servers, PLACED)
    queues = [*PLACED, *HASHED]
    by_server = router.by_server(queues)
    assert set(by_server) == {"pg1", "pg2", "pg3"}
    assert len({router.server(queue) for queue in HASHED}) > 1, "the hashed queues should spread"

    # producers: every enqueue on the connection of the queue's server
    addresses: list[JobAddress] = []
    for queue in queues:
        conn = connections[router.server(queue)]
        pgjobq.enqueue_many(conn, queue, [{"n": n} for n in range(BULK)])
        for n in range(SINGLE):
            addresses.append(JobAddress(queue, pgjobq.enqueue(conn, queue, {"single": n})))

    # one worker per server, over that server's queues, until they are empty
    workers = {
        name: start_worker(
            "record", *(f"--queue={queue}" for queue in held), "--burst", "--batch", "10",
            "--log-level", "WARNING", dsn=router.servers[name], name=name,
        )
        for name, held in by_server.items()
    }  # fmt: skip
    exits = {name: worker.wait(timeout=120) for name, worker in workers.items()}
    assert exits == {"pg1": 0, "pg2": 0, "pg3": 0}, {n: w.log()[-2000:] for n, w in workers.items()}

    per_queue = BULK + SINGLE
    for name, conn in connections.items():
        held = by_server[name]
        jobs = conn.execute("SELECT queue, status, count(*) AS n FROM jobq.jobs GROUP BY 1, 2").fetchall()
        # this server holds its own queues' jobs, all done, and no job of another server's queue
        assert {(r["queue"], r["status"]): r["n"] for r in jobs} == {(q, "done"): per_queue for q in held}
        runs = conn.execute(
            "SELECT count(*) AS runs, count(DISTINCT e.job_id) AS jobs, array_agg(DISTINCT e.pid) AS pids,"
            "       count(j.id) AS of_this_servers_jobs, bool_and(e.lease = 1) AS first_lease"
            "  FROM executions AS e LEFT JOIN jobq.jobs AS j ON j.id = e.job_id AND j.lease = e.lease"
        ).fetchone()
        assert runs == {
            "runs": per_queue * len(held),
            "jobs": per_queue * len(held),
            "pids": [workers[name].pid],  # run by this server's worker, no other
            "of_this_servers_jobs": per_queue * len(held),
            "first_lease": True,
        }, name

    # ids are per server: the same id names a job on every server, so a job is its (queue, id)
    ids = [{row["id"] for row in conn.execute("SELECT id FROM jobq.jobs")} for conn in connections.values()]
    assert set.intersection(*ids), "each server numbers its jobs from 1"
    by_conninfo = {servers[name]: conn for name, conn in connections.items()}
    for address in addresses:
        state = pgjobq.job(by_conninfo[router.locate(address)], address.id)
        assert (state.queue, state.status) == (address.queue, "done")
        for name, conn in connections.items():
            if name == router.server(address.queue):
                continue
            try:
                elsewhere = pgjobq.job(conn, address.id)
            except pgjobq.JobNotFound:
                continue
            assert elsewhere.queue not in by_server[router.server(address.queue)], (address, name)

    # stats, gathered over every server: each queue on exactly one, with all its jobs done
    seen: dict[str, list[tuple[str, int]]] = {}
    for name, conninfo in router.servers.items():
        for row in pgjobq.stats(by_conninfo[conninfo]):
            seen.setdefault(row.queue, []).append((name, row.done))
    assert seen == {queue: [(router.server(queue), per_queue)] for queue in queues}


def test_a_worker_over_queues_of_two_servers_is_refused_since_it_would_leave_one_behind(
    servers: dict[str, str],
    connections: dict[str, psycopg.Connection[dict[str, Any]]],
    start_worker: StartWorker,
) -> None:
    router = QueueRouter(servers, PLACED)
    for queue in ("emails", "reports"):
        pgjobq.enqueue_many(connections[router.server(queue)], queue, [{"n": n} for n in range(3)])

    with pytest.raises(ConfigurationError, match=r"queues span servers \(emails on pg1; reports on pg3\)"):
        router.conninfo_for(["emails", "reports"])

    # what the refusal prevents: a worker given both queues on emails' server finishes "all" its work
    # while reports' jobs, on their own server, stay queued
    worker = start_worker(
        "record", "--queue=emails", "--queue=reports", "--burst", "--log-level", "WARNING",
        dsn=router.servers["pg1"],
    )  # fmt: skip
    assert worker.wait(timeout=60) == 0, worker.log()
    assert statuses(connections["pg1"]) == {"done": 3}
    assert statuses(connections["pg3"]) == {"queued": 3}


def test_the_router_refuses_exactly_the_queue_names_the_extension_refuses(db: Db) -> None:
    names = ["emails", "a", "q_1", "x" * 58, "", "Emails", "a-b", "x" * 59, "emails\n", "\u00e9", " emails"]
    router = QueueRouter({"pg1": "host=pg1"})

    def extension_accepts(queue: str) -> bool:
        try:
            scalar(db, "SELECT jobq.channel(%s)", (queue,))
        except psycopg.errors.InvalidParameterValue:
            return False
        return True

    def router_accepts(queue: str) -> bool:
        try:
            router.server(queue)
        except ConfigurationError:
            return False
        return True

    verdicts = {queue: (router_accepts(queue), extension_accepts(queue)) for queue in names}

    assert all(router == extension for router, extension in verdicts.values()), verdicts
    assert sum(extension for _, extension in verdicts.values()) == 4  # both sides refuse some, accept some
