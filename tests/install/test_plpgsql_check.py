"""plpgsql_check lints every PL/pgSQL function of the extension: no error, no warning of any kind."""

from __future__ import annotations

from helpers.sqlhelpers import Db

# Every PL/pgSQL function in jobq, the trigger function checked against the
# table and transition table it fires with, and every warning class enabled.
CHECK_EVERY_FUNCTION = """
    SELECT p.oid::regprocedure::text AS function, r.lineno, r.sqlstate, r.message, r.detail
      FROM pg_proc AS p
      JOIN pg_language AS l ON l.oid = p.prolang AND l.lanname = 'plpgsql'
      CROSS JOIN LATERAL plpgsql_check_function_tb(
               p.oid,
               relid => CASE WHEN p.prorettype = 'trigger'::regtype THEN 'jobq.jobs'::regclass ELSE 0 END,
               newtable => CASE WHEN p.prorettype = 'trigger'::regtype THEN 'inserted' END,
               fatal_errors => false,
               other_warnings => true,
               extra_warnings => true,
               performance_warnings => true,
               security_warnings => true,
               compatibility_warnings => true) AS r
     WHERE p.pronamespace = 'jobq'::regnamespace
     ORDER BY 1, 2
"""


def test_every_plpgsql_function_passes_plpgsql_check_with_all_warnings_on(db: Db) -> None:
    db.execute("CREATE EXTENSION plpgsql_check")
    checked = db.execute(
        "SELECT count(*) AS n FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang"
        " WHERE l.lanname = 'plpgsql' AND p.pronamespace = 'jobq'::regnamespace"
    ).fetchone()

    findings = db.execute(CHECK_EVERY_FUNCTION).fetchall()

    assert checked is not None and checked["n"] >= 15
    assert findings == []
