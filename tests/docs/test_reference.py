"""The generated reference (docs/_ext): the catalog check that fails the docs build, the SQLSTATEs read
from the functions' sources, and the CLI's environment variables that docs/reference/configuration.md
lists.

The SQL tests read the catalog of this test's database (the working tree's extension, as the docs build
does) through the generator's own functions, after adding to it the function each one is about.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
import sqlref
from throwaway_pg import find_bindir


@pytest.fixture(scope="module")
def conditions() -> dict[str, str]:
    """SQLSTATE -> condition name, from the test server's errcodes.txt."""
    return sqlref.condition_names(find_bindir())


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


def problems_with(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str], *statements: str
) -> list[str]:
    """The build's problems with the catalog of conn's database once statements have run."""
    for statement in statements:
        conn.execute(statement)
    return sqlref.check(sqlref.read_catalog(conn, conditions))


def test_the_working_trees_functions_pass_the_check(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str]
) -> None:
    assert problems_with(conn, conditions) == []


def problems_with_probe(
    conn: psycopg.Connection[tuple[object, ...]],
    conditions: dict[str, str],
    *,
    name: str = "probe",
    comment: str | None = None,
    revoke: bool = True,
) -> list[str]:
    """The build's problems once the function jobq.<name>(text) is added, with comment if one is given,
    and with PUBLIC's EXECUTE revoked if revoke (what every function of sql/src does)."""
    function = f"jobq.{name}(text)"
    statements = [f"CREATE FUNCTION jobq.{name}(queue text) RETURNS int LANGUAGE sql AS 'SELECT 1'"]
    if comment is not None:
        statements.append(f"COMMENT ON FUNCTION {function} IS '{comment}'")
    if revoke:
        statements.append(f"REVOKE ALL ON FUNCTION {function} FROM PUBLIC")
    return problems_with(conn, conditions, *statements)


def test_a_function_without_a_comment_fails_the_build_naming_it(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str]
) -> None:
    problems = problems_with_probe(conn, conditions)
    assert "jobq.probe(text) has no COMMENT: add COMMENT ON FUNCTION after it in sql/src" in problems


def test_a_function_no_level_may_call_fails_the_build_naming_it(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str]
) -> None:
    problems = problems_with_probe(conn, conditions, comment="A probe.")
    assert len(problems) == 1
    assert problems[0].startswith("jobq.probe(text) may be called by no access level")


def test_a_function_public_may_execute_fails_the_build_naming_it(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str]
) -> None:
    problems = problems_with_probe(conn, conditions, comment="A probe.", revoke=False)
    assert len(problems) == 1
    assert problems[0].startswith("jobq.probe(text) may be executed by PUBLIC")


def test_a_function_whose_comment_says_owner_only_needs_no_level(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str]
) -> None:
    assert problems_with_probe(conn, conditions, comment="A probe. Owner or superuser only.") == []


def test_an_internal_function_needs_neither_comment_nor_level(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str]
) -> None:
    assert problems_with_probe(conn, conditions, name="_probe") == []


def test_a_function_raises_what_the_internal_functions_it_calls_raise(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str]
) -> None:
    for statement in (
        "CREATE FUNCTION jobq._deepest() RETURNS void LANGUAGE plpgsql AS $$"
        " BEGIN RAISE EXCEPTION 'deep' USING ERRCODE = 'JQ999'; END $$",
        "CREATE FUNCTION jobq._middle() RETURNS void LANGUAGE sql AS 'SELECT jobq._deepest()'",
        "CREATE FUNCTION jobq.probe() RETURNS void LANGUAGE plpgsql AS $$"
        " BEGIN PERFORM jobq._middle(); RAISE division_by_zero; END $$",
    ):
        conn.execute(statement)
    catalog = sqlref.read_catalog(conn, conditions)
    (probe,) = [f for f in catalog.functions if f.name == "probe"]
    assert probe.raises == ("22012", "JQ999")


def test_the_levels_that_may_call_a_function_are_read_from_the_grants(
    conn: psycopg.Connection[tuple[object, ...]], conditions: dict[str, str]
) -> None:
    catalog = sqlref.read_catalog(conn, conditions)
    levels = {f.identity: f.levels for f in catalog.functions}
    assert levels["jobq.job(bigint)"] == ("producer with see_jobs", "worker", "monitor", "admin")
    assert levels["jobq.grant_worker(regrole)"] == ()


@pytest.mark.parametrize(
    ("source", "codes"),
    [
        ("RAISE EXCEPTION 'bad' USING ERRCODE = '22023';", {"22023"}),
        ("RAISE EXCEPTION 'bad %', x\n    USING HINT = 'h', ERRCODE = 'unique_violation';", {"23505"}),
        ("RAISE invalid_parameter_value USING MESSAGE = 'bad';", {"22023"}),
        ("RAISE SQLSTATE 'JQ001';", {"JQ001"}),
        ("RAISE EXCEPTION 'no code given';", {"P0001"}),
        ("RAISE NOTICE 'only a notice' USING ERRCODE = '22023';", set()),
        ("-- RAISE EXCEPTION 'in a comment' USING ERRCODE = '22023';\nRAISE;", set()),
        ("RAISE EXCEPTION 'a; semicolon' USING ERRCODE = 'JQ002';", {"JQ002"}),
        ("RAISE EXCEPTION '%', problem USING ERRCODE = state;", set()),
    ],
)
def test_the_sqlstates_a_raise_statement_raises(
    source: str, codes: set[str], conditions: dict[str, str]
) -> None:
    assert sqlref.raised_codes(source, conditions) == codes
