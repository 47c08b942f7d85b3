/* sql/pgjobq--0.1.0--0.2.0.sql: pgjobq 0.1.0 -> 0.2.0, least privilege */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.2.0'" to load this file. \quit

/*
 * What 0.2.0 changes: clearer refusals of bad input in complete_many, reap
 * and enqueue_many (below); and three levels of access, granted by helpers,
 * with no table privilege for the two lower ones:
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
-- Bad input found by tests/test_sql_bad_input.py: three functions replaced
-- with the same signatures and the same behaviour for good input.
--   complete_many: a two-dimensional array raised 0A000 from array_position,
--     naming no argument; now 22023 naming ids or leases.  A NULL element is
--     reported with its array and position.  The checks move to
--     jobq._check_pairs, shared with jobq.heartbeat_many (0.3.0).
--   reap: a stale interval of thousands of years overflowed the timestamp
--     (22008); now refused with 22023 naming stale, beyond 10 years.
--   enqueue_many: a bad element of an array whose subscripts do not start at
--     1 was named by its ordinal; now by its subscript.
----------------------------------------------------------------------------

/*
 * jobq._check_pairs(ids, leases): returns nothing; raises 22004 when either
 * array is NULL, 22023 when they differ in length, have more than one
 * dimension or hold a NULL (naming the array and the position).
 */
CREATE FUNCTION jobq._check_pairs(ids bigint[], leases bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _check_pairs.ids IS NULL THEN
        RAISE EXCEPTION 'ids must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF _check_pairs.leases IS NULL THEN
        RAISE EXCEPTION 'leases must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(_check_pairs.ids) > 1 THEN
        RAISE EXCEPTION 'ids must be a one-dimensional array, got % dimensions', array_ndims(_check_pairs.ids)
            USING ERRCODE = '22023';
    END IF;
    IF array_ndims(_check_pairs.leases) > 1 THEN
        RAISE EXCEPTION 'leases must be a one-dimensional array, got % dimensions',
                        array_ndims(_check_pairs.leases)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(_check_pairs.ids) <> cardinality(_check_pairs.leases) THEN
        RAISE EXCEPTION 'ids and leases must have the same length, got % and %',
                        cardinality(_check_pairs.ids), cardinality(_check_pairs.leases)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(_check_pairs.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'ids must not contain NULL, found one at ids[%]', array_position(_check_pairs.ids, NULL)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(_check_pairs.leases, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'leases must not contain NULL, found one at leases[%]',
                        array_position(_check_pairs.leases, NULL)
            USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_pairs(bigint[], bigint[]) IS
    'Internal: raises 22004/22023 unless ids and leases are two NULL-free one-dimensional arrays of one length.';
REVOKE ALL ON FUNCTION jobq._check_pairs(bigint[], bigint[]) FROM PUBLIC;

CREATE OR REPLACE FUNCTION jobq.complete_many(ids bigint[], leases bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 50
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_pairs(complete_many.ids, complete_many.leases);

    RETURN QUERY
    WITH acks AS (
        SELECT a.id, a.lease FROM unnest(complete_many.ids, complete_many.leases) AS a(id, lease)
    ), done AS (
        UPDATE jobq.jobs AS j
           SET status = 'done', finished_at = statement_timestamp()
          FROM acks AS a
         WHERE j.id = a.id AND j.lease = a.lease AND j.status = 'running'
        RETURNING j.id
    )
    -- the outer query sees the rows as they were before "done" ran
    SELECT acknowledged.id
      FROM (SELECT d.id FROM done AS d
            UNION
            SELECT j.id FROM jobq.jobs AS j JOIN acks AS a ON j.id = a.id AND j.lease = a.lease
             WHERE j.status = 'done') AS acknowledged
     ORDER BY acknowledged.id;
END
$$;

CREATE OR REPLACE FUNCTION jobq.reap(stale interval DEFAULT '60 seconds')
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF reap.stale IS NULL THEN
        RAISE EXCEPTION 'stale must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF reap.stale <= interval '0' OR reap.stale > interval '10 years' THEN
        RAISE EXCEPTION 'stale must be a positive interval of at most 10 years, got %', reap.stale
            USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    WITH expired AS MATERIALIZED (
        SELECT j.id
          FROM jobq.jobs AS j
         WHERE j.status = 'running'
           AND j.locked_at < statement_timestamp() - reap.stale
           FOR NO KEY UPDATE SKIP LOCKED
    ), reaped AS (
        UPDATE jobq.jobs AS j
           SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
               run_at      = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                                  ELSE statement_timestamp() + jobq._backoff(j.attempts) END,
               finished_at = CASE WHEN j.attempts >= j.max_attempts THEN statement_timestamp() END,
               last_error  = right(concat_ws(E'\n', j.last_error,
                                             format('reaped: lease %s of %s went stale', j.lease, j.locked_by)),
                                   2000)
          FROM expired
         WHERE j.id = expired.id
        RETURNING j.*
    )
    SELECT r.* FROM reaped AS r ORDER BY r.id;
END
$$;

CREATE OR REPLACE FUNCTION jobq.enqueue_many(
    queue        text,
    payloads     jsonb[],
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT 3)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad_position bigint;
    bad_payload  jsonb;
    new_ids      bigint[];
BEGIN
    PERFORM jobq._check_queue(enqueue_many.queue);
    IF enqueue_many.payloads IS NULL THEN
        RAISE EXCEPTION 'payloads must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(enqueue_many.payloads) > 1 THEN
        RAISE EXCEPTION 'payloads must be a one-dimensional array, got % dimensions',
                        array_ndims(enqueue_many.payloads)
            USING ERRCODE = '22023';
    END IF;
    -- name the element by the array's own subscript, which need not start at 1
    SELECT p.position + array_lower(enqueue_many.payloads, 1) - 1, p.payload INTO bad_position, bad_payload
      FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, position)
     WHERE p.payload IS NULL
        OR jsonb_typeof(p.payload) <> 'object'
        OR pg_column_size(p.payload) > 1048576
     ORDER BY p.position
     LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(bad_payload, format('payloads[%s]', bad_position));
    END IF;
    PERFORM jobq._check_options(enqueue_many.priority, enqueue_many.run_at, enqueue_many.max_attempts);

    WITH inserted AS (
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts)
        SELECT enqueue_many.queue, p.payload, enqueue_many.priority,
               enqueue_many.run_at, enqueue_many.max_attempts
          FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, position)
         ORDER BY p.position
        RETURNING jobq.jobs.id
    )
    -- ids come from one session's sequence in insertion order, so sorting
    -- them restores the order of payloads
    SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}') INTO new_ids
      FROM inserted AS i;
    RETURN new_ids;
END
$$;

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
LANGUAGE plpgsql STABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- one branch per level, so that planning one never plans the others
    IF _level_functions.level = 'producer' THEN
        RETURN ARRAY[
                'jobq.enqueue(text, jsonb, integer, timestamptz, integer)',
                'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer)',
                'jobq.channel(text)',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'worker' THEN
        RETURN ARRAY[
                'jobq.claim(text, integer, text)',
                'jobq.complete(bigint, bigint)',
                'jobq.complete_many(bigint[], bigint[])',
                'jobq.fail(bigint, text, bigint)',
                'jobq.heartbeat(bigint, bigint)',
                'jobq.release(bigint, bigint)',
                'jobq.channel(text)',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'admin' THEN
        -- both levels above, and what operating the queue takes
        RETURN ARRAY(
                SELECT DISTINCT f
                  FROM unnest(jobq._level_functions('producer') || jobq._level_functions('worker')
                              || ARRAY[
                                     'jobq.reap(interval)',
                                     'jobq.retry_failed(text, bigint[])',
                                     'jobq.stats()',
                                     'jobq._check_payload(jsonb, text)',
                                     'jobq._check_options(integer, timestamptz, integer)',
                                     'jobq._check_lease(bigint, bigint)',
                                     'jobq._raise_not_held(bigint, bigint)',
                                     'jobq._backoff(integer)']::regprocedure[]) AS f
                 ORDER BY f);
    END IF;
    RETURN NULL;
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
