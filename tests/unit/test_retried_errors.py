"""The errors on which a worker reconnects and tries again, rather than stopping: among them those of a
statement whose functions changed under it, as when an ALTER EXTENSION pgjobq UPDATE commits while the
statement waits on its lock (tests/upgrade/ meets it under load)."""

from __future__ import annotations

import psycopg
import pytest

from pgjobq._worker import connections


@pytest.mark.parametrize(
    "error",
    [
        psycopg.errors.DatatypeMismatch("structure of query does not match function result type"),
        psycopg.errors.FeatureNotSupported("cached plan must not change result type"),
        psycopg.errors.UndefinedFunction("function jobq.fail(bigint, text, bigint, interval) does not exist"),
        psycopg.errors.UndefinedColumn('column "task" does not exist'),
    ],
    ids=lambda error: type(error).__name__,
)
def test_a_statement_whose_functions_changed_under_it_is_retried_and_says_why(error: psycopg.Error) -> None:
    assert isinstance(error, connections.RETRIED)

    line = connections.retrying(error, 0.5)

    assert line.startswith("the database's pgjobq changed under a statement (")
    assert line.endswith("retrying in 0.5 s: an upgrade may be under way")


def test_an_error_of_the_workers_own_making_is_not_retried() -> None:
    assert not isinstance(psycopg.errors.InvalidParameterValue("bad"), connections.RETRIED)
