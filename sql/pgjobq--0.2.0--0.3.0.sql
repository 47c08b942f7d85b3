/* sql/pgjobq--0.2.0--0.3.0.sql: pgjobq 0.2.0 -> 0.3.0, fast paths and upkeep */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.3.0'" to load this file. \quit

/*
 * What 0.3.0 adds, for the speed and upkeep that bench/ measures:
 *
 * - jobq.complete_and_claim: a worker acknowledges the jobs it finished and
 *   claims its next ones in one statement: one round trip and one commit
 *   per batch instead of two.
 * - jobq.heartbeat_many: one statement extends every lease a worker holds.
 * - Autovacuum settings on jobq.jobs for a table whose rows are all
 *   updated twice and then deleted: vacuum early and unthrottled, so dead
 *   tuples never pile up in the claim index.
 * - jobq.purge: deletes finished jobs older than a given age, so the hot
 *   table stays small.
 * - jobq.health: one row of what an operator watches for: depth, oldest
 *   runnable job, dead tuples, the last autovacuum, the oldest open
 *   transaction (which holds back vacuum).
 * - The worker level gains complete_and_claim and heartbeat_many; the admin
 *   level gains them, purge and SELECT on jobq.health.
 */

----------------------------------------------------------------------------
-- Working: acknowledge and claim in one round trip
----------------------------------------------------------------------------

/*
 * jobq.complete_and_claim(ids, leases, queue, n, worker): first the jobs
 * acknowledged, as jobq.complete_many would (status 'done': now done, or
 * already done under that same lease; stale pairs are left out), then up to
 * n newly claimed jobs of queue (status 'running', each with its new lease),
 * as jobq.claim would.  Empty arrays claim only; to acknowledge without
 * claiming, use jobq.complete_many.  One statement: if any argument is
 * refused, nothing is acknowledged and nothing claimed.  Locks: the rows it marks done, and
 * FOR NO KEY UPDATE SKIP LOCKED on the rows it claims.  Raises 22004 (NULL
 * argument), 22023 (arrays of different lengths or with NULL elements, bad
 * queue name, n outside 1..1000, worker empty or over 200 characters).
 */
CREATE FUNCTION jobq.complete_and_claim(ids bigint[], leases bigint[], queue text, n integer, worker text)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 20
-- SECURITY DEFINER: like claim and complete_many, for workers without
-- privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    acknowledged bigint[];
BEGIN
    SELECT coalesce(array_agg(a.id), '{}') INTO acknowledged
      FROM jobq.complete_many(complete_and_claim.ids, complete_and_claim.leases) AS a(id);
    RETURN QUERY
        SELECT j.* FROM jobq.jobs AS j WHERE j.id = ANY (acknowledged) ORDER BY j.id;
    RETURN QUERY
        SELECT c.* FROM jobq.claim(complete_and_claim.queue, complete_and_claim.n,
                                   complete_and_claim.worker) AS c;
END
$$;
COMMENT ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text) IS
    'Acknowledge finished jobs (returned with status done) and claim up to n more (returned running), in one statement.';

/*
 * jobq.heartbeat_many(ids, leases): the ids whose lease was extended
 * (locked_at = now), ascending: the jobs still running under the lease
 * given.  A pair whose lease is not current, or whose job is no longer
 * running, is left out, not raised, so a worker extends every job in hand
 * with one statement and learns which it lost.  One UPDATE; locks the rows it
 * changes.  Raises like jobq._check_pairs.
 */
CREATE FUNCTION jobq.heartbeat_many(ids bigint[], leases bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 20
-- SECURITY DEFINER: like heartbeat, for workers without privileges on
-- jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_pairs(heartbeat_many.ids, heartbeat_many.leases);
    RETURN QUERY
    WITH extended AS (
        UPDATE jobq.jobs AS j
           SET locked_at = statement_timestamp()
          FROM unnest(heartbeat_many.ids, heartbeat_many.leases) AS a(id, lease)
         WHERE j.id = a.id AND j.lease = a.lease AND j.status = 'running'
        RETURNING j.id
    )
    SELECT e.id FROM extended AS e ORDER BY e.id;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) IS
    'Extend the leases of many running jobs in one statement; returns the ids extended. Stale pairs are left out.';

----------------------------------------------------------------------------
-- Upkeep
----------------------------------------------------------------------------

-- Every job inserts one row, updates it twice and is eventually purged:
-- vacuum after 1% churn (at least 1,000 rows) without cost-based throttling,
-- so that dead tuples are cleared before they slow the claim index down.
ALTER TABLE jobq.jobs SET (
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

/*
 * jobq.purge(older_than, max_rows): the number of jobs deleted: done jobs
 * (and failed ones too when include_failed) that finished more than
 * older_than ago, at most max_rows of them, so a large backlog can be purged
 * in short transactions.  Skips rows locked by others.  Raises 22004 (NULL
 * argument), 22023 (older_than negative, max_rows outside 1..1000000).
 */
CREATE FUNCTION jobq.purge(older_than interval, max_rows integer DEFAULT 100000,
                           include_failed boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deleted bigint;
BEGIN
    IF purge.older_than IS NULL THEN
        RAISE EXCEPTION 'older_than must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF purge.older_than < interval '0' THEN
        RAISE EXCEPTION 'older_than must not be negative, got %', purge.older_than
            USING ERRCODE = '22023';
    END IF;
    IF purge.max_rows IS NULL THEN
        RAISE EXCEPTION 'max_rows must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF purge.max_rows < 1 OR purge.max_rows > 1000000 THEN
        RAISE EXCEPTION 'max_rows must be between 1 and 1000000, got %', purge.max_rows
            USING ERRCODE = '22023';
    END IF;
    IF purge.include_failed IS NULL THEN
        RAISE EXCEPTION 'include_failed must not be NULL' USING ERRCODE = '22004';
    END IF;

    WITH doomed AS MATERIALIZED (
        SELECT j.id
          FROM jobq.jobs AS j
         WHERE (j.status = 'done' OR (purge.include_failed AND j.status = 'failed'))
           AND j.finished_at < statement_timestamp() - purge.older_than
         LIMIT purge.max_rows
           FOR UPDATE SKIP LOCKED
    )
    DELETE FROM jobq.jobs AS j USING doomed WHERE j.id = doomed.id;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION jobq.purge(interval, integer, boolean) IS
    'Delete done jobs (and failed ones with include_failed) finished more than older_than ago, at most max_rows; returns how many.';

-- Written fully qualified (OPERATOR(pg_catalog.x), pg_catalog.f): a view is
-- parsed once, here, with the installing session's search_path.
CREATE VIEW jobq.health AS
    SELECT (SELECT pg_catalog.count(*) FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'queued') AS queued,
           (SELECT pg_catalog.count(*) FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'queued'
               AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()) AS runnable,
           (SELECT pg_catalog.count(*) FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'running') AS running,
           (SELECT pg_catalog.count(*) FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'failed') AS failed,
           (SELECT pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) pg_catalog.min(j.run_at)
              FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'queued'
               AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()) AS oldest_runnable_age,
           s.n_live_tup AS live_tuples,
           s.n_dead_tup AS dead_tuples,
           pg_catalog.pg_total_relation_size('jobq.jobs'::pg_catalog.regclass) AS total_bytes,
           GREATEST(s.last_autovacuum, s.last_vacuum) AS last_vacuum,
           GREATEST(s.last_autoanalyze, s.last_analyze) AS last_analyze,
           (SELECT pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) pg_catalog.min(a.xact_start)
              FROM pg_catalog.pg_stat_activity AS a
             WHERE a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()) AS oldest_transaction_age,
           (SELECT pg_catalog.max(pg_catalog.age(a.backend_xmin))
              FROM pg_catalog.pg_stat_activity AS a
             WHERE a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()) AS oldest_xmin_age
      FROM pg_catalog.pg_stat_user_tables AS s
     WHERE s.relid OPERATOR(pg_catalog.=) 'jobq.jobs'::pg_catalog.regclass;
COMMENT ON VIEW jobq.health IS
    'One row: queue depth, oldest runnable job, dead tuples, table size, last vacuum and analyze, and the oldest open transaction (it holds vacuum back). Other sessions'' transactions show only with pg_read_all_stats.';
COMMENT ON COLUMN jobq.health.queued IS 'Queued jobs, runnable now or later.';
COMMENT ON COLUMN jobq.health.runnable IS 'Queued jobs whose run_at has come.';
COMMENT ON COLUMN jobq.health.running IS 'Jobs held under a lease.';
COMMENT ON COLUMN jobq.health.failed IS 'The dead-letter queue.';
COMMENT ON COLUMN jobq.health.oldest_runnable_age IS 'How long the oldest runnable job has waited.';
COMMENT ON COLUMN jobq.health.live_tuples IS 'Estimated live rows of jobq.jobs (pg_stat_user_tables).';
COMMENT ON COLUMN jobq.health.dead_tuples IS 'Estimated dead rows not yet vacuumed: a steady climb means vacuum is held back.';
COMMENT ON COLUMN jobq.health.total_bytes IS 'jobq.jobs with its indexes and TOAST, in bytes.';
COMMENT ON COLUMN jobq.health.last_vacuum IS 'The last vacuum of jobq.jobs, manual or automatic.';
COMMENT ON COLUMN jobq.health.last_analyze IS 'The last analyze of jobq.jobs, manual or automatic.';
COMMENT ON COLUMN jobq.health.oldest_transaction_age IS 'Age of the oldest open transaction of another session; vacuum cannot clear rows it may still see.';
COMMENT ON COLUMN jobq.health.oldest_xmin_age IS 'In transactions: how far the oldest snapshot of another session holds back vacuum.';

----------------------------------------------------------------------------
-- Access levels: the worker level gains complete_and_claim and
-- heartbeat_many; admin gains those, purge and jobq.health.
----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq._level_functions(level text)
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
                'jobq.complete_and_claim(bigint[], bigint[], text, integer, text)',
                'jobq.fail(bigint, text, bigint)',
                'jobq.heartbeat(bigint, bigint)',
                'jobq.heartbeat_many(bigint[], bigint[])',
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
                                     'jobq.purge(interval, integer, boolean)',
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

-- grant_admin and revoke_all now cover jobq.health as well
CREATE OR REPLACE FUNCTION jobq._grant_level(role regrole, level text)
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
        EXECUTE format('GRANT SELECT ON TABLE jobq.health TO %I', grantee);
    END IF;
END
$$;

CREATE OR REPLACE FUNCTION jobq.revoke_all(role regrole)
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
    EXECUTE format('REVOKE SELECT ON TABLE jobq.health FROM %I', grantee);
END
$$;

REVOKE ALL ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.purge(interval, integer, boolean) FROM PUBLIC;
REVOKE ALL ON TABLE jobq.health FROM PUBLIC;

GRANT EXECUTE ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq.purge(interval, integer, boolean) TO @extowner@;
GRANT SELECT ON TABLE jobq.health TO @extowner@;
