-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pgjobq" to load this file. \quit

/*
 * Notes for readers of this script.
 *
 * - This script is built by make from the files of sql/src/, concatenated in
 *   name order: one file per concern, one current definition of every object,
 *   each function with its header, its COMMENT and its grants.  Released
 *   versions and the steps between them live, unchanged, in sql/updates/.
 * - State machine: queued -> running -> done | failed | cancelled; a failure
 *   with attempts left (unless failed with retry => false: failed at once),
 *   a snooze, or a running job whose lease went stale or whose timeout
 *   passed, goes back to queued (cancelled instead when a cancel was
 *   requested); jobq.cancel ends a queued job at once.  A job is waiting
 *   (never claimed) while its parents have not ended, while it is held
 *   (enqueue(hold => true), until jobq.unhold) and while it awaits a
 *   signal (jobq.await_signal, until jobq.signal or its timeout); then
 *   queued.  A durable sleep (jobq.sleep) queues the job at the sleep's end.
 * - Every function pins search_path to pg_catalog, pg_temp and writes its own
 *   objects as jobq.<name>.  DDL expressions spell their operators as
 *   OPERATOR(pg_catalog.x), because CREATE EXTENSION runs this script with the
 *   caller's first schema on the search_path.
 * - Errors: 22004 (a NULL argument), 22023 (an argument out of its domain),
 *   54000 (a payload, headers or a result over 1 MiB), JQ001 (the lease
 *   given is not the job's current lease), JQ002 (no job has that id, or
 *   none the caller may see), JQ003 (the attempt's timeout has passed), JQ004
 *   (a unique key is held by another job), JQ005 (the signal a job awaited
 *   did not arrive before its timeout), 40001 (a unique enqueue could not
 *   settle: retry), 42501 (the caller may not).
 * - Clocks: created_at and the default run_at use now() (the enqueueing
 *   transaction); everything a worker does (claim, locked_at, heartbeat,
 *   backoff, reaping) uses statement_timestamp(), so a long transaction never
 *   makes a fresh lease look stale.
 * - Privileges: nothing is granted to PUBLIC.  Every object belongs to the
 *   role that ran CREATE EXTENSION (pgjobq is trusted: a database owner
 *   without superuser can install it, and should, so that the SECURITY
 *   DEFINER functions never run with a superuser's rights), which may use all
 *   of it; jobq.grant_producer, grant_worker and grant_admin (70_access.sql)
 *   hand out the three access levels.
 */

CREATE SCHEMA jobq;
COMMENT ON SCHEMA jobq IS 'pgjobq: a job queue living in PostgreSQL';

REVOKE ALL ON SCHEMA jobq FROM PUBLIC;
GRANT USAGE ON SCHEMA jobq TO @extowner@;
