/* sql/pgjobq--0.1.0--0.2.0.sql: pgjobq 0.1.0 -> 0.2.0, least privilege */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.2.0'" to load this file. \quit

/*
 * What 0.2.0 changes: three levels of access, granted by helpers, and no
 * table privilege for the two lower ones.
 *
 * - producer: jobq.enqueue, jobq.enqueue_many (and jobq.channel).
 * - worker:   jobq.claim, complete, complete_many, fail, heartbeat, release
 *             (and jobq.channel).  Not reap: see admin.
 * - admin:    every function above plus jobq.reap, jobq.retry_failed,
 *             jobq.stats and the internal helpers they call, and SELECT,
 *             INSERT, UPDATE, DELETE on jobq.jobs (USAGE on its sequence).
 * - Handing out levels stays with the extension's owner (and superusers):
 *   jobq.grant_producer / grant_worker / grant_admin / revoke_all run with
 *   the caller's rights and are granted to nobody else.
 *
 * So that producers and workers need no privilege on jobq.jobs, the eight
 * functions they call become SECURITY DEFINER.  Like every object of the
 * extension they belong to the role that ran CREATE EXTENSION (pgjobq is
 * trusted: a database owner without superuser can install it, and should, so
 * that these functions never run with a superuser's rights).  All of them
 * pin search_path to pg_catalog, pg_temp and qualify every object; none runs
 * dynamic SQL.
 */

----------------------------------------------------------------------------
-- Producer and worker functions run as the extension's owner: callers need
-- EXECUTE, not table privileges.
----------------------------------------------------------------------------

-- SECURITY DEFINER: producers insert jobs without INSERT on jobq.jobs.
ALTER FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer) SECURITY DEFINER;
ALTER FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer) SECURITY DEFINER;

-- SECURITY DEFINER: workers claim and settle jobs without SELECT or UPDATE
-- on jobq.jobs; the lease checks decide which rows they may change.
ALTER FUNCTION jobq.claim(text, integer, text) SECURITY DEFINER;
ALTER FUNCTION jobq.complete(bigint, bigint) SECURITY DEFINER;
ALTER FUNCTION jobq.complete_many(bigint[], bigint[]) SECURITY DEFINER;
ALTER FUNCTION jobq.fail(bigint, text, bigint) SECURITY DEFINER;
ALTER FUNCTION jobq.heartbeat(bigint, bigint) SECURITY DEFINER;
ALTER FUNCTION jobq.release(bigint, bigint) SECURITY DEFINER;

----------------------------------------------------------------------------
-- Access levels
----------------------------------------------------------------------------

/*
 * jobq._level_functions(level): the functions a level may execute, for
 * level 'producer', 'worker' or 'admin'; NULL for any other level.
 */
CREATE FUNCTION jobq._level_functions(level text)
RETURNS regprocedure[]
LANGUAGE sql STABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE level
        WHEN 'producer' THEN ARRAY[
            'jobq.enqueue(text, jsonb, integer, timestamptz, integer)',
            'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer)',
            'jobq.channel(text)',
            'jobq._check_queue(text)']::regprocedure[]
        WHEN 'worker' THEN ARRAY[
            'jobq.claim(text, integer, text)',
            'jobq.complete(bigint, bigint)',
            'jobq.complete_many(bigint[], bigint[])',
            'jobq.fail(bigint, text, bigint)',
            'jobq.heartbeat(bigint, bigint)',
            'jobq.release(bigint, bigint)',
            'jobq.channel(text)',
            'jobq._check_queue(text)']::regprocedure[]
        WHEN 'admin' THEN ARRAY[
            'jobq.enqueue(text, jsonb, integer, timestamptz, integer)',
            'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer)',
            'jobq.claim(text, integer, text)',
            'jobq.complete(bigint, bigint)',
            'jobq.complete_many(bigint[], bigint[])',
            'jobq.fail(bigint, text, bigint)',
            'jobq.heartbeat(bigint, bigint)',
            'jobq.release(bigint, bigint)',
            'jobq.reap(interval)',
            'jobq.retry_failed(text, bigint[])',
            'jobq.stats()',
            'jobq.channel(text)',
            'jobq._check_queue(text)',
            'jobq._check_payload(jsonb, text)',
            'jobq._check_options(integer, timestamptz, integer)',
            'jobq._check_lease(bigint, bigint)',
            'jobq._raise_not_held(bigint, bigint)',
            'jobq._backoff(integer)']::regprocedure[]
    END
$$;
COMMENT ON FUNCTION jobq._level_functions(text) IS
    'Internal: the functions that the producer, worker or admin level may execute.';

/*
 * jobq._grantee(role): the name of role, for GRANT and REVOKE.  Raises 22004
 * (NULL role) and 42501 unless the caller may pass pgjobq's privileges on
 * (holds the grant option on schema jobq: the extension's owner, a
 * superuser).
 */
CREATE FUNCTION jobq._grantee(role regrole)
RETURNS name
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    grantee name;
BEGIN
    IF _grantee.role IS NULL THEN
        RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT has_schema_privilege('jobq', 'USAGE WITH GRANT OPTION') THEN
        RAISE EXCEPTION 'permission denied to grant or revoke pgjobq privileges'
            USING ERRCODE = '42501',
                  HINT = 'Run this as the role that created the extension, or as a superuser.';
    END IF;
    SELECT r.rolname INTO grantee FROM pg_roles AS r WHERE r.oid = _grantee.role;
    RETURN grantee;
END
$$;
COMMENT ON FUNCTION jobq._grantee(regrole) IS
    'Internal: the role''s name, once the caller is known to hold the grant option on jobq.';

/*
 * jobq._grant_level(role, level): returns nothing.  Grants role USAGE on the
 * schema, EXECUTE on jobq._level_functions(level) and, for admin, table
 * privileges on jobq.jobs and its sequence.  Runs with the caller's rights.
 * Raises like jobq._grantee, and 22023 for an unknown level.
 */
CREATE FUNCTION jobq._grant_level(role regrole, level text)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    grantee   name := jobq._grantee(_grant_level.role);
    functions regprocedure[] := jobq._level_functions(_grant_level.level);
    fn        regprocedure;
BEGIN
    IF functions IS NULL THEN
        RAISE EXCEPTION 'level must be producer, worker or admin, got %', quote_nullable(_grant_level.level)
            USING ERRCODE = '22023';
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA jobq TO %I', grantee);
    FOREACH fn IN ARRAY functions LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', fn, grantee);
    END LOOP;
    IF _grant_level.level = 'admin' THEN
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.jobs TO %I', grantee);
        EXECUTE format('GRANT USAGE, SELECT ON SEQUENCE jobq.jobs_id_seq TO %I', grantee);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._grant_level(regrole, text) IS
    'Internal: grants the privileges of one access level (producer, worker, admin).';

CREATE FUNCTION jobq.grant_producer(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_producer.role, 'producer') $$;
COMMENT ON FUNCTION jobq.grant_producer(regrole) IS
    'Let role enqueue jobs (jobq.enqueue, jobq.enqueue_many); no access to the jobs table. Owner or superuser only.';

CREATE FUNCTION jobq.grant_worker(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_worker.role, 'worker') $$;
COMMENT ON FUNCTION jobq.grant_worker(regrole) IS
    'Let role work jobs (claim, heartbeat, complete, complete_many, fail, release); not reap; no access to the jobs table. Owner or superuser only.';

CREATE FUNCTION jobq.grant_admin(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_admin.role, 'admin') $$;
COMMENT ON FUNCTION jobq.grant_admin(regrole) IS
    'Let role do everything with the queue: every function, reap, retry_failed, stats, and read and write jobq.jobs. Owner or superuser only.';

/*
 * jobq.revoke_all(role): returns nothing.  Takes back every privilege the
 * three levels give (admin's include the other two's); grants made by hand
 * on other objects are left alone.  Raises like jobq._grantee.
 */
CREATE FUNCTION jobq.revoke_all(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    grantee name := jobq._grantee(revoke_all.role);
    fn      regprocedure;
BEGIN
    EXECUTE format('REVOKE USAGE ON SCHEMA jobq FROM %I', grantee);
    FOREACH fn IN ARRAY jobq._level_functions('admin') LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %I', fn, grantee);
    END LOOP;
    EXECUTE format('REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.jobs FROM %I', grantee);
    EXECUTE format('REVOKE USAGE, SELECT ON SEQUENCE jobq.jobs_id_seq FROM %I', grantee);
END
$$;
COMMENT ON FUNCTION jobq.revoke_all(regrole) IS
    'Take back from role every privilege that grant_producer, grant_worker or grant_admin gave. Owner or superuser only.';

-- The helpers run with the caller's rights and are the owner's alone.
REVOKE ALL ON FUNCTION jobq._level_functions(text) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq._grantee(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq._grant_level(regrole, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.grant_producer(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.grant_worker(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.grant_admin(regrole) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.revoke_all(regrole) FROM PUBLIC;

GRANT EXECUTE ON FUNCTION jobq._level_functions(text) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq._grantee(regrole) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq._grant_level(regrole, text) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq.grant_producer(regrole) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq.grant_worker(regrole) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq.grant_admin(regrole) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq.revoke_all(regrole) TO @extowner@;
