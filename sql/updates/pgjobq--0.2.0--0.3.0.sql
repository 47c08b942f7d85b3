/* sql/pgjobq--0.2.0--0.3.0.sql: pgjobq 0.2.0 -> 0.3.0, fast paths and upkeep */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.3.0'" to load this file. \quit

/*
 * What 0.3.0 adds, for the speed and upkeep that bench/ measures:
 *
 * - jobq.claim picks its jobs into an array and updates them by primary
 *   key, and jobq.complete_many no longer reads its rows twice
 *   (jobq._acknowledge): same contracts, cheaper plans.  And jobq.claim
 *   keeps its cost flat while a long-open transaction holds vacuum back
 *   (forward mode, below).
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
-- Working: a leaner claim, and acknowledge and claim in one round trip
----------------------------------------------------------------------------

/*
 * jobq.claim, same contract as in 0.1.0, with two changes.
 *
 * - The jobs are picked into an array and updated by primary key (id =
 *   ANY), where 0.1.0 joined a MATERIALIZED CTE, which a generic plan could
 *   turn into a hash join over a sequential scan of the whole table.
 * - Forward mode, for a bloated claim index.  Every claimed job leaves a
 *   dead entry at the start of jobs_claim_idx until vacuum clears it, and a
 *   long-open transaction anywhere keeps vacuum from clearing it: each claim
 *   then walks all of them before reaching a queued job.  A claim that
 *   walked more than 1,000 entries in vain (dead ones, or rows locked by
 *   others) puts its session in forward mode for 2 seconds: its next claims
 *   of that queue scan on from the last job the session claimed, within
 *   that job's priority, instead of from the start.  A forward scan that
 *   comes up short, and the first claim after the 2 seconds, scan from the
 *   start again (and decide anew).  So in forward mode a job that sorts
 *   before that point (a higher priority, an earlier run_at) waits up to 2
 *   seconds; without bloat every claim scans from the start, in exact
 *   order.  The session's position lives in the setting jobq.claim_hint
 *   (queue|priority|run_at in microseconds since 1970|id|until, in
 *   microseconds): a hint only, ignored unless it parses.
 */
CREATE OR REPLACE FUNCTION jobq.claim(queue text, n integer, worker text)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 10
-- SECURITY DEFINER (restated: CREATE OR REPLACE resets it): workers claim
-- without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    now_us  bigint := (extract(epoch FROM statement_timestamp()) * 1000000)::bigint;
    hint    text[] := regexp_match(current_setting('jobq.claim_hint', true),
                                   '^([a-z0-9_]{1,58})\|(-?[0-9]{1,10})\|(-?[0-9]{1,16})\|([0-9]{1,18})\|([0-9]{1,18})$');
    until   bigint;  -- forward mode lasts until then (microseconds since 1970); NULL: off
    picked  bigint[];
    walked  bigint;
    last    record;
BEGIN
    PERFORM jobq._check_queue(claim.queue);
    IF claim.n IS NULL THEN
        RAISE EXCEPTION 'n must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF claim.n < 1 OR claim.n > 1000 THEN
        RAISE EXCEPTION 'n must be between 1 and 1000, got %', claim.n USING ERRCODE = '22023';
    END IF;
    IF claim.worker IS NULL THEN
        RAISE EXCEPTION 'worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF length(claim.worker) < 1 OR length(claim.worker) > 200 THEN
        RAISE EXCEPTION 'worker must be 1 to 200 characters, got %', length(claim.worker)
            USING ERRCODE = '22023';
    END IF;

    IF hint[1] = claim.queue AND hint[5]::bigint > now_us
       AND hint[2]::bigint BETWEEN -2147483648 AND 2147483647 THEN
        until := hint[5]::bigint;
        picked := ARRAY(
            SELECT p.id
              FROM jobq.jobs AS p
             WHERE p.queue = claim.queue
               AND p.status = 'queued'
               AND p.priority = hint[2]::integer
               AND (p.run_at, p.id) > (to_timestamp(0) + hint[3]::bigint * interval '1 microsecond',
                                       hint[4]::bigint)
               AND p.run_at <= statement_timestamp()
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT claim.n
               FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(picked) IS DISTINCT FROM claim.n THEN
        -- from the start of the index, counting the entries it walks in vain
        walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass);
        picked := ARRAY(
            SELECT p.id
              FROM jobq.jobs AS p
             WHERE p.queue = claim.queue
               AND p.status = 'queued'
               AND p.run_at <= statement_timestamp()
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT claim.n
               FOR NO KEY UPDATE SKIP LOCKED);
        walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass) - walked
                  - cardinality(picked);
        until := CASE WHEN walked > 1000 THEN now_us + 2000000 END;
    END IF;

    IF until IS NOT NULL AND cardinality(picked) > 0 THEN
        SELECT p.priority, (extract(epoch FROM p.run_at) * 1000000)::bigint AS run_at_us, p.id INTO last
          FROM jobq.jobs AS p
         WHERE p.id = picked[cardinality(picked)];
        PERFORM set_config('jobq.claim_hint',
                           format('%s|%s|%s|%s|%s', claim.queue, last.priority, last.run_at_us, last.id, until),
                           false);
    ELSIF until IS NULL AND hint IS NOT NULL THEN
        PERFORM set_config('jobq.claim_hint', '', false);
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE jobq.jobs AS j
           SET status    = 'running',
               locked_by = claim.worker,
               locked_at = statement_timestamp(),
               attempts  = j.attempts + 1,
               lease     = j.lease + 1
         WHERE j.id = ANY (picked)
        RETURNING j.*
    )
    SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;

/*
 * jobq._acknowledge(ids, leases): the jobs of the (id, lease) pairs
 * acknowledged, in no particular order: running under that lease and now
 * done, or already done under that same lease by an earlier statement (a
 * repeated acknowledgement).  Stale pairs are left out.  The caller checks
 * the arrays (jobq._check_pairs).  Locks the rows it marks done.  The
 * repeat check runs only when some pair was not marked done; it tells this
 * statement's own updates by finished_at = statement_timestamp(), so a pair
 * acknowledged twice within one statement counts once.
 */
CREATE FUNCTION jobq._acknowledge(ids bigint[], leases bigint[])
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE STRICT ROWS 50
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    marked bigint;
BEGIN
    RETURN QUERY
    UPDATE jobq.jobs AS j
       SET status = 'done', finished_at = statement_timestamp()
      FROM unnest(_acknowledge.ids, _acknowledge.leases) AS a(id, lease)
     WHERE j.id = ANY (_acknowledge.ids)
       AND j.id = a.id AND j.lease = a.lease
       -- "IS TRUE" keeps the planner from matching jobs_reap_idx's predicate:
       -- by primary key, the cost stays flat while dead entries pile up there
       AND (j.status = 'running') IS TRUE
    RETURNING j.*;
    GET DIAGNOSTICS marked = ROW_COUNT;
    IF marked < cardinality(_acknowledge.ids) THEN
        RETURN QUERY
        SELECT j.*
          FROM jobq.jobs AS j
         WHERE j.id = ANY (_acknowledge.ids)
           AND (j.id, j.lease) IN (SELECT a.id, a.lease
                                     FROM unnest(_acknowledge.ids, _acknowledge.leases) AS a(id, lease))
           AND j.status = 'done'
           AND j.finished_at <> statement_timestamp();
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._acknowledge(bigint[], bigint[]) IS
    'Internal: mark done the jobs of the (id, lease) pairs still running under that lease; returns them and those already done under it.';

/*
 * jobq.complete_many, same contract as in 0.1.0, without reading the rows
 * again after marking them done (jobq._acknowledge).
 */
CREATE OR REPLACE FUNCTION jobq.complete_many(ids bigint[], leases bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 50
-- SECURITY DEFINER (restated: CREATE OR REPLACE resets it): workers
-- acknowledge without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_pairs(complete_many.ids, complete_many.leases);
    RETURN QUERY
    SELECT a.id FROM jobq._acknowledge(complete_many.ids, complete_many.leases) AS a ORDER BY a.id;
END
$$;

/*
 * jobq.complete_and_claim(ids, leases, queue, n, worker): first the jobs
 * acknowledged, by ascending id, as jobq.complete_many would (status
 * 'done': now done, or already done under that same lease; stale pairs are
 * left out), then up to n newly claimed jobs of queue (status 'running', each
 * with its new lease), as jobq.claim would.  Empty arrays claim only; to
 * acknowledge without claiming, use jobq.complete_many.  One statement: if
 * any argument is refused, nothing is acknowledged and nothing claimed.
 * Locks: the rows it marks done, and FOR NO KEY UPDATE SKIP LOCKED on the
 * rows it claims.  Raises 22004 (NULL argument), 22023 (arrays of different
 * lengths or with NULL elements, bad queue name, n outside 1..1000, worker
 * empty or over 200 characters).
 */
CREATE FUNCTION jobq.complete_and_claim(ids bigint[], leases bigint[], queue text, n integer, worker text)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 20
-- SECURITY DEFINER: like claim and complete_many, for workers without
-- privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_pairs(complete_and_claim.ids, complete_and_claim.leases);
    IF cardinality(complete_and_claim.ids) > 0 THEN
        -- should jobq.claim below refuse its arguments, the error undoes these
        -- acknowledgements with the rest of the statement
        RETURN QUERY
        SELECT a.* FROM jobq._acknowledge(complete_and_claim.ids, complete_and_claim.leases) AS a
         ORDER BY a.id;
    END IF;
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
         WHERE j.id = ANY (heartbeat_many.ids)
           AND j.id = a.id AND j.lease = a.lease
           AND (j.status = 'running') IS TRUE  -- by primary key, as in jobq._acknowledge
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
REVOKE ALL ON FUNCTION jobq._acknowledge(bigint[], bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION jobq.purge(interval, integer, boolean) FROM PUBLIC;
REVOKE ALL ON TABLE jobq.health FROM PUBLIC;

GRANT EXECUTE ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq._acknowledge(bigint[], bigint[]) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) TO @extowner@;
GRANT EXECUTE ON FUNCTION jobq.purge(interval, integer, boolean) TO @extowner@;
GRANT SELECT ON TABLE jobq.health TO @extowner@;
