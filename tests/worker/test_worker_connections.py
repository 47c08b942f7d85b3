"""What a worker's connection (pgjobq._worker.connections.configure) sends: job ids and leases of its hot
statement as bigint[] literals (proto.Bigints), on a real server."""

from __future__ import annotations

import psycopg
import pytest

from pgjobq import WorkerSettings
from pgjobq._client.proto import Bigints
from pgjobq._worker import connections


@pytest.mark.parametrize("values", [[], [1], [1, 2**40, -(2**63)]])
def test_a_worker_connection_sends_bigints_as_a_bigint_array(dsn: str, values: list[int]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        connections.configure(conn, WorkerSettings(queue="q"))
        row = conn.execute(
            "SELECT pg_typeof(%s)::text, %s::bigint[]", (Bigints(values), Bigints(values))
        ).fetchone()

    assert row == ("bigint[]", values)
