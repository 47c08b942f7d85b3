/* sql/updates/pgjobq--0.7.0--0.8.0.sql: pgjobq 0.7.0 -> 0.8.0.
 * What the Python ecosystem's tools read and carry: jobq.metrics (the
 * queue's state for a scraper, from partial indexes only), the read-only
 * monitor level (jobq.grant_monitor), trace context from the session's
 * pgjobq.traceparent into the headers of jobs enqueued from SQL, and
 * jobq.version for plain-SQL installs.  Written once; it never changes
 * after 0.8.0 is released.  The definitions are copied from sql/src/ as
 * 0.8.0 has them.
 *
 * The index of running jobs becomes one of running and failed jobs; its
 * build reads the whole of jobq.jobs once, holding a SHARE lock on it
 * (enqueues and claims wait meanwhile): on a large table, purge first. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.8.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Tables and indexes
----------------------------------------------------------------------------

DROP INDEX jobq.jobs_reap_idx;
-- Serves jobq.reap: the running jobs, whose leases it judges one by one;
-- and the failed ones, the dead-letter queue (0.8.0: jobq.metrics,
-- jobq.health and jobq.retry_failed count and find them without walking the
-- done ones).  Keyed by status and queue, which a heartbeat never changes
-- (not by lease_expires_at, which every heartbeat moves): so a heartbeat
-- changes no indexed column and can be a HOT update, and a running entry
-- lives only while a worker holds its job.  One index for both, not two:
-- every partial index costs each INSERT and status change of jobq.jobs the
-- setting up of its predicate, also where it does not match.
CREATE INDEX jobs_running_failed_idx ON jobq.jobs (status, queue)
    WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'failed']::text[]);
COMMENT ON INDEX jobq.jobs_running_failed_idx IS
    'Serves jobq.reap (the running jobs) and the dead-letter queue (the failed jobs), by status and queue (keys heartbeats do not change).';


/*
 * jobq.plain_install: the version of a plain-SQL install (one made without
 * the extension's files, by `pgjobq sql install | psql`, and upgraded by
 * `pgjobq sql upgrade | psql`, on a managed PostgreSQL), in its one row.
 * CREATE EXTENSION leaves it empty: pg_extension records that version.  A
 * plain install of a version older than 0.8.0 (made for tests of the upgrade
 * path) gets this table from the generator, with this very definition, so
 * an upgraded plain install ends with the catalog of a fresh one.
 */
CREATE TABLE IF NOT EXISTS jobq.plain_install (
    version  text NOT NULL,
    only_row boolean NOT NULL DEFAULT true,
    CONSTRAINT plain_install_pkey PRIMARY KEY (only_row),
    CONSTRAINT plain_install_only_row_check CHECK (only_row)
);
COMMENT ON TABLE jobq.plain_install IS
    'The version of a plain-SQL install (pgjobq sql install), in one row; empty for CREATE EXTENSION, which records it in pg_extension.';
REVOKE ALL ON TABLE jobq.plain_install FROM PUBLIC;

----------------------------------------------------------------------------
-- New functions, as sql/src/ has them in 0.8.0
----------------------------------------------------------------------------

/*
 * jobq._traced_headers(headers): headers with the caller's trace context.
 * When the session's setting pgjobq.traceparent holds a W3C traceparent
 * (SET LOCAL pgjobq.traceparent = '00-<trace id>-<span id>-<flags>', and
 * optionally pgjobq.tracestate) and headers has no "traceparent" of its
 * own, returns headers (or {}) with "traceparent" (and "tracestate") added,
 * so that a job enqueued from SQL, a trigger for one, joins the trace of
 * the application that set it; otherwise headers unchanged (a headers that
 * is not an object is left for jobq._check_job_options to refuse).  Locks
 * nothing.  Raises 22023 when the setting is not a traceparent, or
 * pgjobq.tracestate is over 512 characters.
 */
CREATE FUNCTION jobq._traced_headers(headers jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parent text := nullif(current_setting('pgjobq.traceparent', true), '');
    state  text := nullif(current_setting('pgjobq.tracestate', true), '');
BEGIN
    IF parent IS NULL
       OR (_traced_headers.headers IS NOT NULL
           AND (jsonb_typeof(_traced_headers.headers) <> 'object' OR _traced_headers.headers ? 'traceparent')) THEN
        RETURN _traced_headers.headers;
    END IF;
    IF parent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' OR parent ~ '^ff'
       OR parent ~ '^..-0{32}-' OR parent ~ '-0{16}-..$' THEN
        RAISE EXCEPTION 'setting pgjobq.traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, not all zeros), got %',
                        quote_literal(left(parent, 80))
            USING ERRCODE = '22023',
                  HINT = 'RESET pgjobq.traceparent, or set it from the application''s current span.';
    END IF;
    IF length(state) > 512 THEN
        RAISE EXCEPTION 'setting pgjobq.tracestate must be at most 512 characters, got %', length(state)
            USING ERRCODE = '22023';
    END IF;
    RETURN coalesce(_traced_headers.headers, '{}'::jsonb)
           || jsonb_build_object('traceparent', parent)
           || CASE WHEN state IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('tracestate', state) END;
END
$$;
COMMENT ON FUNCTION jobq._traced_headers(jsonb) IS
    'Internal: headers with traceparent and tracestate from the settings pgjobq.traceparent and pgjobq.tracestate, when set and headers has none.';
REVOKE ALL ON FUNCTION jobq._traced_headers(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._traced_headers(jsonb) TO @extowner@;

-- 62_metrics.sql, new in 0.8.0

----------------------------------------------------------------------------
-- Metrics: the queue's state for a scraper, cheap enough to read every few
-- seconds on a table of millions of finished jobs
----------------------------------------------------------------------------

/*
 * jobq.metrics(): one row per (metric, queue), queue NULL for the rows about
 * the table as a whole; every value a double precision.  Per queue (every
 * queue that has queued, running, waiting or failed jobs, or settings, so
 * that a drained queue reads 0 instead of vanishing):
 *   jobs_runnable                queued jobs whose run_at has come
 *   jobs_scheduled               queued jobs due later (run_at in the future)
 *   jobs_running                 jobs held under a lease
 *   jobs_waiting                 jobs waiting for parent jobs
 *   jobs_failed                  the dead-letter queue
 *   oldest_runnable_age_seconds  how long the oldest runnable job has waited (0: none)
 *   paused                       1 while the queue is paused (jobq.pause), else 0
 * For the table (queue NULL):
 *   live_tuples, dead_tuples     pg_stat_user_tables' estimates for jobq.jobs
 *   table_bytes                  jobq.jobs with its indexes and TOAST
 *   last_vacuum_timestamp_seconds  the last vacuum, manual or automatic, as a Unix time (absent: never)
 *   oldest_transaction_age_seconds the oldest open transaction of another session
 *   oldest_xmin_age              in transactions: how far the oldest snapshot holds back vacuum
 * Never reads a done or cancelled row: every count walks a partial index
 * (jobs_claim_idx, jobs_running_failed_idx) or jobq.job_waits, so
 * the cost follows the unfinished jobs, not the table.  Takes no row locks;
 * done totals are for counters (the worker's), not for this function.
 */
CREATE FUNCTION jobq.metrics()
RETURNS TABLE (metric text, queue text, value double precision)
LANGUAGE sql STABLE
-- SECURITY DEFINER: the worker level exports the queue's state (pgjobq
-- worker --metrics-port) without SELECT on jobq.jobs; it returns counts
-- only, and reads other sessions' transaction ages as the extension's owner.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH queued AS (
        SELECT j.queue,
               count(*) FILTER (WHERE j.run_at <= statement_timestamp()) AS runnable,
               count(*) FILTER (WHERE j.run_at > statement_timestamp()) AS scheduled,
               extract(epoch FROM statement_timestamp()
                                  - min(j.run_at) FILTER (WHERE j.run_at <= statement_timestamp())) AS oldest
          FROM jobq.jobs AS j
         WHERE j.status = 'queued'
         GROUP BY j.queue
    ), running AS (
        SELECT j.queue, count(*) AS n FROM jobq.jobs AS j WHERE j.status = 'running' GROUP BY j.queue
    ), failed AS (
        SELECT j.queue, count(*) AS n FROM jobq.jobs AS j WHERE j.status = 'failed' GROUP BY j.queue
    ), waiting AS (
        -- from jobq.job_waits, each job looked up by id (a scalar subquery
        -- is never turned into a join that could scan jobq.jobs)
        SELECT l.queue, count(*) AS n
          FROM (SELECT (SELECT j.queue FROM jobq.jobs AS j WHERE j.id = w.id AND j.status = 'waiting') AS queue
                  FROM jobq.job_waits AS w) AS l
         WHERE l.queue IS NOT NULL
         GROUP BY l.queue
    ), queues AS (
        SELECT q.queue FROM queued AS q
        UNION SELECT r.queue FROM running AS r
        UNION SELECT f.queue FROM failed AS f
        UNION SELECT w.queue FROM waiting AS w
        UNION SELECT s.queue FROM jobq.queue_settings AS s
    ), per_queue AS (
        SELECT q.queue, coalesce(qd.runnable, 0) AS runnable, coalesce(qd.scheduled, 0) AS scheduled,
               coalesce(r.n, 0) AS running, coalesce(w.n, 0) AS waiting, coalesce(f.n, 0) AS failed,
               coalesce(qd.oldest, 0) AS oldest, coalesce(s.paused, false) AS paused
          FROM queues AS q
          LEFT JOIN queued AS qd ON qd.queue = q.queue
          LEFT JOIN running AS r ON r.queue = q.queue
          LEFT JOIN failed AS f ON f.queue = q.queue
          LEFT JOIN waiting AS w ON w.queue = q.queue
          LEFT JOIN jobq.queue_settings AS s ON s.queue = q.queue
    ), activity AS (
        SELECT extract(epoch FROM statement_timestamp() - min(a.xact_start)) AS oldest_transaction,
               max(age(a.backend_xmin)) AS oldest_xmin
          FROM pg_stat_activity AS a
         WHERE a.pid <> pg_backend_pid()
    )
    SELECT m.metric, p.queue, m.value
      FROM per_queue AS p
     CROSS JOIN LATERAL (VALUES ('jobs_runnable', p.runnable::float8),
                                ('jobs_scheduled', p.scheduled::float8),
                                ('jobs_running', p.running::float8),
                                ('jobs_waiting', p.waiting::float8),
                                ('jobs_failed', p.failed::float8),
                                ('oldest_runnable_age_seconds', p.oldest::float8),
                                ('paused', CASE WHEN p.paused THEN 1 ELSE 0 END::float8)) AS m(metric, value)
    UNION ALL
    SELECT m.metric, NULL, m.value
      FROM pg_stat_user_tables AS s
     CROSS JOIN activity AS a
     CROSS JOIN LATERAL (VALUES ('live_tuples', s.n_live_tup::float8),
                                ('dead_tuples', s.n_dead_tup::float8),
                                ('table_bytes', pg_total_relation_size('jobq.jobs'::regclass)::float8),
                                ('last_vacuum_timestamp_seconds',
                                 extract(epoch FROM greatest(s.last_autovacuum, s.last_vacuum))::float8),
                                ('oldest_transaction_age_seconds', coalesce(a.oldest_transaction, 0)::float8),
                                ('oldest_xmin_age', coalesce(a.oldest_xmin, 0)::float8)) AS m(metric, value)
     WHERE s.relid = 'jobq.jobs'::regclass
       AND m.value IS NOT NULL
$$;
COMMENT ON FUNCTION jobq.metrics() IS
    'The queue''s state for a scraper, per queue: jobs_runnable, jobs_scheduled, jobs_running, jobs_waiting, jobs_failed, oldest_runnable_age_seconds, paused; for the table (queue NULL): live_tuples, dead_tuples, table_bytes, last_vacuum_timestamp_seconds, oldest_transaction_age_seconds, oldest_xmin_age. Reads partial indexes only, never the finished jobs.';
REVOKE ALL ON FUNCTION jobq.metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.metrics() TO @extowner@;

CREATE FUNCTION jobq.grant_monitor(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_monitor.role, 'monitor') $$;
COMMENT ON FUNCTION jobq.grant_monitor(regrole) IS
    'Let role read everything and change nothing, for dashboards and exporters: jobq.metrics, stats, job, wait, watch, SELECT on jobq.jobs, the tables of settings, results, limits, dependencies and schedules, and the views jobq.health, jobq.queues and jobq.schedules. Owner or superuser only.';
REVOKE ALL ON FUNCTION jobq.grant_monitor(regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.grant_monitor(regrole) TO @extowner@;

----------------------------------------------------------------------------
-- Functions whose definitions change (grants kept)
----------------------------------------------------------------------------

/*
 * jobq.enqueue(queue, payload, priority, run_at, max_attempts, unique_key,
 * unique_scope, on_conflict, headers, concurrency_key, depends_on,
 * on_parent_failure): the new job's id.  Runs in the
 * caller's transaction: rolled back, the job never existed.  Inserts one
 * row; holds the queue's wake-up advisory lock shared (never waiting for
 * it) until the transaction ends, and notifies jobq_<queue> when a worker
 * waits (see 30_notify.sql).
 *
 * Options: priority (higher first), run_at (not before), max_attempts (NULL:
 * the queue's, else 3), headers (a JSON object the worker receives with the
 * payload; the session's pgjobq.traceparent, when set, is added to it:
 * jobq._traced_headers).  With unique_key, while a job of the queue holding that key is
 * queued or running (or done, with unique_scope => 'until_done', until
 * purged), no second one is created; on_conflict decides what happens
 * instead: return (the holder's id), skip (NULL), raise (JQ004), replace (a
 * queued holder takes this call's payload, priority, run_at, max_attempts
 * and headers, and its id is returned; a running holder gives up the key
 * and is asked to stop, as by jobq.cancel, and a new job is inserted; a done holder is
 * returned).  A conflicting enqueue still in flight is waited for.
 * concurrency_key: the key the queue's key_concurrency limits (52_limits.sql).
 * depends_on: parent job ids; the job waits (status 'waiting') until every
 * parent is done, and a parent ending failed or cancelled cancels it, or
 * with on_parent_failure => 'run' counts as ended (45_flow.sql); the parents
 * stay locked until the transaction ends.
 *
 * Raises 22004 (NULL argument), 22023 (bad queue name, payload not a JSON
 * object, priority outside -32768..32767, run_at not within 10 years of
 * now, max_attempts outside 1..1000, and what jobq._check_job_options and
 * jobq._enqueue_linked refuse), 54000 (payload or headers over 1 MiB),
 * JQ002 (a parent that does not exist), JQ004, 40001.
 *
 * The hot path of producers: the checks are inline (a helper is called
 * only to raise, or to measure a payload that may be compressed), the work
 * is the wake-up lock and one INSERT, which also looks at jobq._waiters.
 */
CREATE OR REPLACE FUNCTION jobq.enqueue(
    queue        text,
    payload      jsonb,
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT NULL,
    unique_key   text        DEFAULT NULL,
    unique_scope text        DEFAULT 'active',
    on_conflict  text        DEFAULT 'return',
    headers      jsonb       DEFAULT NULL,
    concurrency_key   text     DEFAULT NULL,
    depends_on        bigint[] DEFAULT NULL,
    on_parent_failure text     DEFAULT 'cancel')
RETURNS bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers insert jobs without INSERT on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id  bigint;
    locked  boolean;
    waiting boolean;  -- a worker waits for the queue
BEGIN
    IF enqueue.queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF enqueue.queue !~ '^[a-z0-9_]{1,58}$' THEN
        RAISE EXCEPTION 'queue must be 1 to 58 characters of a-z, 0-9 and _, got %',
                        quote_literal(left(enqueue.queue, 80))
            USING ERRCODE = '22023',
                  HINT = 'Queue names become notification channels jobq_<queue>.';
    END IF;
    -- a payload read from a table may arrive compressed, and the limit is on
    -- its full size: one that could be compressed (over 1,000 bytes as it
    -- is) is measured by jobq._check_payload, which sees it whole
    IF enqueue.payload IS NULL OR jsonb_typeof(enqueue.payload) <> 'object'
       OR pg_column_size(enqueue.payload) > 1000 THEN
        PERFORM jobq._check_payload(enqueue.payload, 'payload');  -- raises if it is bad
    END IF;
    IF enqueue.priority IS NULL OR enqueue.priority NOT BETWEEN -32768 AND 32767
       OR enqueue.run_at IS NULL OR NOT isfinite(enqueue.run_at)
       -- within 3,650 days is within 10 years; outside, _check_options decides on the calendar
       OR NOT (enqueue.run_at - now() BETWEEN interval '-3650 days' AND interval '3650 days')
       OR enqueue.max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM jobq._check_options(enqueue.priority, enqueue.run_at, enqueue.max_attempts);  -- raises if bad
    END IF;

    -- the wake-up (30_notify.sql): the lock first, then, in the INSERT, so
    -- with a snapshot taken after it, the look at the waiters
    locked := pg_try_advisory_xact_lock_shared(hashtext('jobq._waiters'), hashtext(enqueue.queue));
    IF enqueue.unique_key IS NULL AND enqueue.headers IS NULL
       AND enqueue.on_conflict = 'return' AND enqueue.unique_scope = 'active'
       AND enqueue.concurrency_key IS NULL AND enqueue.depends_on IS NULL AND enqueue.on_parent_failure = 'cancel'
       -- no trace context to carry (jobq._traced_headers): unset, or reset to '' after a SET LOCAL
       AND coalesce(current_setting('pgjobq.traceparent', true), '') = '' THEN
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts)
        VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts)
        RETURNING jobq.jobs.id,
                  EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now())
             INTO new_id, waiting;
    ELSE
        enqueue.headers := jobq._traced_headers(enqueue.headers);
        -- the options of job control, checked by their helper
        PERFORM jobq._check_job_options(enqueue.unique_key, enqueue.unique_scope, enqueue.on_conflict,
                                        enqueue.headers);
        IF enqueue.concurrency_key IS NOT NULL OR enqueue.depends_on IS NOT NULL
           OR enqueue.on_parent_failure IS DISTINCT FROM 'cancel' THEN
            -- a concurrency key or parents (45_flow.sql)
            SELECT l.id, l.runnable INTO new_id, waiting
              FROM jobq._enqueue_linked(enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at,
                                        enqueue.max_attempts, enqueue.unique_key, enqueue.unique_scope,
                                        enqueue.on_conflict, enqueue.headers, enqueue.concurrency_key,
                                        enqueue.depends_on, enqueue.on_parent_failure) AS l;
            IF NOT waiting THEN
                RETURN new_id;  -- nothing new to run (yet): no wake-up
            END IF;
            waiting := EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now());
        ELSIF enqueue.unique_key IS NULL THEN
            -- the INSERT above with headers (kept apart so that the plain one keeps its plan)
            INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers)
            VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts,
                    enqueue.headers)
            RETURNING jobq.jobs.id,
                      EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now())
                 INTO new_id, waiting;
        ELSE
            SELECT u.id, u.changed INTO new_id, waiting
              FROM jobq._enqueue_unique(enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at,
                                        enqueue.max_attempts, enqueue.unique_key, enqueue.unique_scope,
                                        enqueue.on_conflict, enqueue.headers) AS u;
            IF NOT waiting THEN
                RETURN new_id;  -- nothing new to run: no wake-up
            END IF;
            waiting := EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now());
        END IF;
    END IF;
    IF waiting OR NOT locked OR current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM pg_notify('jobq_' || enqueue.queue, '');
    END IF;
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text) IS
    'Enqueue one job; returns its id. Options: priority, run_at, max_attempts, headers; unique_key with unique_scope (active, until_done) and on_conflict (return, skip, raise, replace); concurrency_key; depends_on (parent job ids) with on_parent_failure (cancel, run). Notifies jobq_<queue> when a worker waits.';

/*
 * jobq.enqueue_many(queue, payloads, priority, run_at, max_attempts,
 * unique_keys, unique_scope, on_conflict, headers, concurrency_keys): the
 * ids, in the order of payloads; without unique_keys one INSERT, and at
 * most one notification (as jobq.enqueue).  unique_keys, when given, is
 * aligned with payloads (NULL: no key for that job), and each job is
 * enqueued as jobq.enqueue would, in order: of equal keys the first wins,
 * and the ids returned follow on_conflict (NULL for skip).
 * concurrency_keys, when given, is aligned with payloads too (NULL: none).
 * headers and the other options apply to every job.  Raises like
 * jobq.enqueue, naming the first bad element by its own subscript
 * (payloads[i], unique_keys[i], concurrency_keys[i]), and 22023 for a
 * multidimensional array or keys of another length; inserts nothing then.
 */
CREATE OR REPLACE FUNCTION jobq.enqueue_many(
    queue        text,
    payloads     jsonb[],
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT NULL,
    unique_keys  text[]      DEFAULT NULL,
    unique_scope text        DEFAULT 'active',
    on_conflict  text        DEFAULT 'return',
    headers      jsonb       DEFAULT NULL,
    concurrency_keys text[]  DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers insert jobs without INSERT on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad_position bigint;
    bad_payload  jsonb;
    new_ids      bigint[];
    locked       boolean;
    one          record;
    one_id       bigint;
    any_changed  boolean := false;
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
        PERFORM jobq._check_payload(bad_payload, format('payloads[%s]', bad_position));  -- raises
    END IF;
    PERFORM jobq._check_options(enqueue_many.priority, enqueue_many.run_at, enqueue_many.max_attempts);
    enqueue_many.headers := jobq._traced_headers(enqueue_many.headers);
    PERFORM jobq._check_job_options(NULL, enqueue_many.unique_scope, enqueue_many.on_conflict,
                                    enqueue_many.headers);
    IF enqueue_many.unique_keys IS NOT NULL THEN
        PERFORM jobq._check_keys(enqueue_many.unique_keys, cardinality(enqueue_many.payloads), 'unique_keys');
    END IF;
    IF enqueue_many.concurrency_keys IS NOT NULL THEN
        PERFORM jobq._check_keys(enqueue_many.concurrency_keys, cardinality(enqueue_many.payloads),
                                 'concurrency_keys');
    END IF;

    IF enqueue_many.unique_keys IS NULL AND enqueue_many.concurrency_keys IS NOT NULL THEN
        -- with concurrency keys: the keyed jobs marked (control bit 16), their keys stored
        WITH inserted AS (
            INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, control)
            SELECT enqueue_many.queue, p.payload, enqueue_many.priority, enqueue_many.run_at,
                   enqueue_many.max_attempts, enqueue_many.headers,
                   CASE WHEN p.concurrency_key IS NOT NULL THEN 16 END
              FROM unnest(enqueue_many.payloads, enqueue_many.concurrency_keys) WITH ORDINALITY
                   AS p(payload, concurrency_key, position)
             ORDER BY p.position
            RETURNING jobq.jobs.id
        )
        SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}') INTO new_ids
          FROM inserted AS i;
        INSERT INTO jobq.concurrency_keys (id, queue, concurrency_key, priority)
        SELECT k.id, enqueue_many.queue, k.concurrency_key, enqueue_many.priority
          FROM unnest(new_ids, enqueue_many.concurrency_keys) AS k(id, concurrency_key)
         WHERE k.concurrency_key IS NOT NULL;
        any_changed := cardinality(new_ids) > 0;
    ELSIF enqueue_many.unique_keys IS NULL THEN
        WITH inserted AS (
            INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers)
            SELECT enqueue_many.queue, p.payload, enqueue_many.priority, enqueue_many.run_at,
                   enqueue_many.max_attempts, enqueue_many.headers
              FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, position)
             ORDER BY p.position
            RETURNING jobq.jobs.id
        )
        -- ids come from one session's sequence in insertion order, so sorting
        -- them restores the order of payloads
        SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}') INTO new_ids
          FROM inserted AS i;
        any_changed := cardinality(new_ids) > 0;
    ELSE
        new_ids := '{}';
        FOR one IN
            SELECT p.payload, p.unique_key, p.concurrency_key
              FROM unnest(enqueue_many.payloads, enqueue_many.unique_keys,
                          coalesce(enqueue_many.concurrency_keys, '{}')) WITH ORDINALITY
                   AS p(payload, unique_key, concurrency_key, position)
             ORDER BY p.position
        LOOP
            IF one.concurrency_key IS NOT NULL THEN
                SELECT new_ids || l.id, any_changed OR l.runnable INTO new_ids, any_changed
                  FROM jobq._enqueue_linked(enqueue_many.queue, one.payload, enqueue_many.priority,
                                            enqueue_many.run_at, enqueue_many.max_attempts, one.unique_key,
                                            enqueue_many.unique_scope, enqueue_many.on_conflict,
                                            enqueue_many.headers, one.concurrency_key, NULL, 'cancel') AS l;
            ELSIF one.unique_key IS NULL THEN
                INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers)
                VALUES (enqueue_many.queue, one.payload, enqueue_many.priority, enqueue_many.run_at,
                        enqueue_many.max_attempts, enqueue_many.headers)
                RETURNING jobq.jobs.id INTO one_id;
                new_ids := new_ids || one_id;
                any_changed := true;
            ELSE
                SELECT new_ids || u.id, any_changed OR u.changed INTO new_ids, any_changed
                  FROM jobq._enqueue_unique(enqueue_many.queue, one.payload, enqueue_many.priority,
                                            enqueue_many.run_at, enqueue_many.max_attempts, one.unique_key,
                                            enqueue_many.unique_scope, enqueue_many.on_conflict,
                                            enqueue_many.headers) AS u;
            END IF;
        END LOOP;
    END IF;

    -- the wake-up, as in jobq.enqueue
    locked := pg_try_advisory_xact_lock_shared(hashtext('jobq._waiters'), hashtext(enqueue_many.queue));
    IF any_changed
       AND (NOT locked OR current_setting('transaction_isolation') <> 'read committed'
            OR EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue_many.queue AND w.until > now())) THEN
        PERFORM pg_notify('jobq_' || enqueue_many.queue, '');
    END IF;
    RETURN new_ids;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[]) IS
    'Enqueue many jobs in one call; returns their ids in the order of payloads. Same options as jobq.enqueue, with unique_keys and concurrency_keys aligned with payloads.';

/*
 * jobq._acknowledge(ids, leases, results): the jobs of the (id, lease) pairs
 * acknowledged, in no particular order: running under that lease and now
 * done (with the result at the same position of results, when given), or
 * already done under that same lease by an earlier statement (a repeated
 * acknowledgement, whose result is not stored again).  Results go to
 * jobq.results.  Stale pairs are left out.  Notifies "jobq.done" for the
 * watched jobs it marks done.  The caller checks the arrays (jobq._check_pairs,
 * jobq._check_results).  Locks the rows it marks done.  The
 * repeat check runs only when some pair was not marked done; it tells this
 * statement's own updates by finished_at = statement_timestamp(), so a pair
 * acknowledged twice within one statement counts once.
 */
CREATE OR REPLACE FUNCTION jobq._acknowledge(ids bigint[], leases bigint[], results jsonb[])
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 50
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    marked bigint;
    also   bigint;
BEGIN
    IF _acknowledge.results IS NULL THEN
        -- the jobs without job control: this UPDATE alone
        RETURN QUERY
        UPDATE jobq.jobs AS j
           SET status = 'done', finished_at = statement_timestamp()
          -- the arrays through sub-selects, so that the plan cache keeps one
          -- generic plan (see jobq.claim); the pairs drive the join, one probe
          -- of the primary key each (with j.id = ANY (ids) as well, the planner
          -- scanned all the pairs again for every job: n^2 at batch n)
          FROM unnest((SELECT _acknowledge.ids), (SELECT _acknowledge.leases)) AS a(id, lease)
         WHERE j.id = a.id AND j.lease = a.lease
           -- "IS TRUE" keeps the planner from matching jobs_running_failed_idx's predicate:
           -- by primary key, the cost stays flat while dead entries pile up there
           AND (j.status = 'running') IS TRUE
           AND j.control IS NULL
        RETURNING j.*;
        GET DIAGNOSTICS marked = ROW_COUNT;
        IF marked < cardinality(_acknowledge.ids) THEN
            -- the others: under job control (watched, or asked to cancel),
            -- stale, or repeated
            RETURN QUERY
            WITH acknowledged AS (
                UPDATE jobq.jobs AS j
                   SET status = 'done', finished_at = statement_timestamp()
                  FROM unnest((SELECT _acknowledge.ids), (SELECT _acknowledge.leases)) AS a(id, lease)
                 WHERE j.id = a.id AND j.lease = a.lease
                   AND (j.status = 'running') IS TRUE
                RETURNING j.*
            )
            -- every row passes; a watched one notifies "jobq.done" on its way, and
            -- one with a concurrency key or dependents settles them (45_flow.sql)
            SELECT d.* FROM acknowledged AS d
             WHERE (d.control & 2 = 0 OR jobq._notify_finished(d.id))
               AND (d.control & 24 = 0 OR jobq._finish_linked(d.id, 'done', d.control));
            GET DIAGNOSTICS also = ROW_COUNT;
            marked := marked + also;
        END IF;
    ELSE
        -- the same, storing results; a statement of its own, so that
        -- acknowledging without results keeps its plan
        RETURN QUERY
        WITH acknowledged AS (
            UPDATE jobq.jobs AS j
               SET status = 'done', finished_at = statement_timestamp()
              FROM unnest((SELECT _acknowledge.ids), (SELECT _acknowledge.leases)) AS a(id, lease)
             WHERE j.id = a.id AND j.lease = a.lease
               AND (j.status = 'running') IS TRUE
            RETURNING j.*
        ), stored AS (
            -- the result of the pair that acknowledged the job (its id and
            -- lease), the first such pair's if it came twice
            INSERT INTO jobq.results (id, result)
            SELECT DISTINCT ON (d.id) d.id, r.result
              FROM acknowledged AS d
              JOIN unnest(_acknowledge.ids, _acknowledge.leases, _acknowledge.results) WITH ORDINALITY
                   AS r(id, lease, result, position)
                ON r.id = d.id AND r.lease = d.lease
             WHERE r.result IS NOT NULL
             ORDER BY d.id, r.position
            ON CONFLICT ON CONSTRAINT results_pkey DO UPDATE SET result = excluded.result
        )
        SELECT d.* FROM acknowledged AS d
         WHERE d.control IS NULL
            OR ((d.control & 2 = 0 OR jobq._notify_finished(d.id))
                AND (d.control & 24 = 0 OR jobq._finish_linked(d.id, 'done', d.control)));
        GET DIAGNOSTICS marked = ROW_COUNT;
    END IF;
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
COMMENT ON FUNCTION jobq._acknowledge(bigint[], bigint[], jsonb[]) IS
    'Internal: mark done (with their results) the jobs of the (id, lease) pairs still running under that lease; returns them and those already done under it.';

/*
 * jobq.version(): the version of pgjobq installed in this database: its
 * pg_extension row, else the row of a plain-SQL install (jobq.plain_install),
 * for clients that check what they talk to.
 */
CREATE OR REPLACE FUNCTION jobq.version()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
-- SECURITY DEFINER: every access level may ask the version, and none is
-- granted jobq.plain_install; the function reads that one value and nothing else.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pgjobq'),
                    (SELECT i.version FROM jobq.plain_install AS i))
$$;
COMMENT ON FUNCTION jobq.version() IS
    'The installed version of pgjobq (for example 0.8.0): as in pg_extension, or, for a plain-SQL install, as jobq.plain_install records it.';

/*
 * jobq._level_functions(level): the functions a level may execute, for
 * level 'producer', 'observer', 'worker', 'monitor' or 'admin'; NULL for any other
 * level.
 */
CREATE OR REPLACE FUNCTION jobq._level_functions(level text)
RETURNS regprocedure[]
LANGUAGE plpgsql STABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- one branch per level, so that planning one never plans the others
    IF _level_functions.level = 'producer' THEN
        RETURN ARRAY[
                'jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text)',
                'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[])',
                'jobq.enqueue_flow(text, jsonb)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'worker' THEN
        RETURN ARRAY[
                'jobq.claim(text, integer, text, interval)',
                'jobq.claim_any(text[], integer, text, interval)',
                'jobq.complete(bigint, bigint, jsonb)',
                'jobq.complete_many(bigint[], bigint[], jsonb[])',
                'jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval, jsonb[])',
                'jobq.fail(bigint, text, bigint, interval)',
                'jobq.snooze(bigint, bigint, interval)',
                'jobq.heartbeat(bigint, bigint)',
                'jobq.heartbeat_many(bigint[], bigint[])',
                'jobq.heartbeat_status(bigint[], bigint[])',
                'jobq.release(bigint, bigint)',
                'jobq.reap(interval)',
                'jobq.tick()',
                'jobq.metrics()',
                'jobq.wait(text, text, interval)',
                'jobq.job(bigint)',
                'jobq.wait(bigint, interval)',
                'jobq.watch(bigint)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'observer' THEN
        RETURN ARRAY[
                'jobq.job(bigint)',
                'jobq.wait(bigint, interval)',
                'jobq.watch(bigint)',
                'jobq.channel(text)',
                'jobq.version()']::regprocedure[];
    ELSIF _level_functions.level = 'monitor' THEN
        -- what reading every table and view of the queue takes (the views
        -- call these helpers with the reader's rights)
        RETURN ARRAY[
                'jobq.metrics()',
                'jobq.stats()',
                'jobq.job(bigint)',
                'jobq.wait(bigint, interval)',
                'jobq.watch(bigint)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)',
                'jobq._queues()',
                'jobq._schedule_next(text, text, interval, timestamptz)',
                'jobq._every_next(interval, timestamptz)',
                'jobq._cron_parse(text)',
                'jobq._cron_field(text, text, integer)',
                'jobq._cron_walk(jobq._cron, text, timestamptz)',
                'jobq._cron_day(jobq._cron, date)',
                'jobq._cron_time(jobq._cron, integer)',
                'jobq._check_timezone(text, boolean)']::regprocedure[];
    ELSIF _level_functions.level = 'admin' THEN
        -- the levels above, and what operating the queue takes
        RETURN ARRAY(
                SELECT DISTINCT f
                  FROM unnest(jobq._level_functions('producer') || jobq._level_functions('worker')
                              || jobq._level_functions('monitor')
                              || ARRAY[
                                     'jobq.retry_failed(text, bigint[])',
                                     'jobq.purge(interval, integer, boolean)',
                                     'jobq.stats()',
                                     'jobq.cancel(bigint[], boolean)',
                                     'jobq.pause(text)',
                                     'jobq.resume(text)',
                                     'jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval)',
                                     'jobq._queues()',
                                     'jobq._notify_finished(bigint)',
                                     'jobq._finish_linked(bigint, text, smallint)',
                                     'jobq._settle_dependents(bigint, text)',
                                     'jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text)',
                                     'jobq.unschedule(text)',
                                     'jobq._schedule_next(text, text, interval, timestamptz)',
                                     'jobq._every_next(interval, timestamptz)',
                                     'jobq._cron_parse(text)',
                                     'jobq._cron_field(text, text, integer)',
                                     'jobq._cron_walk(jobq._cron, text, timestamptz)',
                                     'jobq._cron_day(jobq._cron, date)',
                                     'jobq._cron_time(jobq._cron, integer)',
                                     'jobq._check_timezone(text, boolean)',
                                     'jobq._cancel_occurrences(text, text)',
                                     'jobq._check_job_options(text, text, text, jsonb)',
                                     'jobq._check_payload(jsonb, text)',
                                     'jobq._check_options(integer, timestamptz, integer)',
                                     'jobq._check_lease(bigint, bigint)',
                                     'jobq._raise_not_held(bigint, bigint)',
                                     'jobq._retry_delay(text, integer)']::regprocedure[]) AS f
                 ORDER BY f);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._level_functions(text) IS
    'Internal: the functions that the producer, observer, worker, monitor or admin level may execute.';

/*
 * jobq._grant_level(role, level): returns nothing.  Grants role USAGE on the
 * schema, EXECUTE on jobq._level_functions(level) and, for admin, table
 * privileges on jobq.jobs, its sequence, jobq.queue_settings,
 * jobq.unique_keys, jobq.results, jobq.deadlines and the tables of limits,
 * dependencies and schedules, and SELECT on the views jobq.health,
 * jobq.queues and jobq.schedules; for monitor, SELECT on those tables and
 * views.  Runs with the caller's rights.
 * Raises like jobq._grantee, and 22023 for an unknown level.
 */
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
        RAISE EXCEPTION 'level must be producer, observer, worker, monitor or admin, got %', quote_nullable(_grant_level.level)
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
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.queue_settings, jobq.unique_keys,'
                       ' jobq.results, jobq.deadlines, jobq.queue_gates, jobq.concurrency_keys, jobq.job_deps,'
                       ' jobq.job_waits, jobq.schedule_settings TO %I', grantee);
        EXECUTE format('GRANT SELECT ON TABLE jobq.queues, jobq.schedules TO %I', grantee);
    ELSIF _grant_level.level = 'monitor' THEN
        EXECUTE format('GRANT SELECT ON TABLE jobq.jobs, jobq.health, jobq.queue_settings, jobq.unique_keys,'
                       ' jobq.results, jobq.deadlines, jobq.queue_gates, jobq.concurrency_keys, jobq.job_deps,'
                       ' jobq.job_waits, jobq.schedule_settings, jobq.queues, jobq.schedules TO %I', grantee);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._grant_level(regrole, text) IS
    'Internal: grants the privileges of one access level (producer, observer, worker, monitor, admin).';

/*
 * jobq.revoke_all(role): returns nothing.  Takes back every privilege the
 * levels give (admin's include the others'); grants made by hand
 * on other objects are left alone.  Raises like jobq._grantee.
 */
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
    EXECUTE format('REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.queue_settings, jobq.unique_keys,'
                   ' jobq.results, jobq.deadlines, jobq.queue_gates, jobq.concurrency_keys, jobq.job_deps,'
                   ' jobq.job_waits, jobq.schedule_settings FROM %I', grantee);
    EXECUTE format('REVOKE SELECT ON TABLE jobq.queues, jobq.schedules FROM %I', grantee);
END
$$;
COMMENT ON FUNCTION jobq.revoke_all(regrole) IS
    'Take back from role every privilege that grant_producer, grant_worker, grant_monitor or grant_admin gave. Owner or superuser only.';

----------------------------------------------------------------------------
-- Grants: each role keeps its level.  The new jobq.metrics is granted to
-- every role of the worker level (EXECUTE on jobq.claim), admins included;
-- the monitor level is new, so no role has it yet.
-- An upgrade run by a superuser restores the initial privileges its grants
-- changed, so that pg_dump keeps them; otherwise it says which roles a
-- dump would leave without them.
----------------------------------------------------------------------------

DO $$
DECLARE
    change  record;
    initial aclitem[];
    grantee text;
    kept    text[] := '{}';  -- grantees whose grants a dump would leave out
BEGIN
    FOR change IN
        SELECT c.old::pg_catalog.regprocedure AS old, c.new AS new, c.kind
          FROM (VALUES
                ('jobq.claim(text, integer, text, interval)', 'jobq.metrics()', 'f')) AS c(old, new, kind)
    LOOP
        SELECT i.initprivs INTO initial
          FROM pg_catalog.pg_init_privs AS i
         WHERE i.objoid OPERATOR(pg_catalog.=) CASE WHEN change.kind OPERATOR(pg_catalog.=) 'f'
                                                    THEN change.new::pg_catalog.regprocedure::pg_catalog.oid
                                                    ELSE change.new::pg_catalog.regclass::pg_catalog.oid END
           AND i.classoid OPERATOR(pg_catalog.=) CASE WHEN change.kind OPERATOR(pg_catalog.=) 'f'
                                                      THEN 'pg_catalog.pg_proc'::pg_catalog.regclass
                                                      ELSE 'pg_catalog.pg_class'::pg_catalog.regclass END
           AND i.objsubid OPERATOR(pg_catalog.=) 0;
        FOR grantee IN
            SELECT a.grantee::pg_catalog.regrole::text
              FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
             WHERE p.oid OPERATOR(pg_catalog.=) change.old
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
               AND a.grantee OPERATOR(pg_catalog.<>) 0
        LOOP
            IF change.kind OPERATOR(pg_catalog.=) 'f' THEN
                EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', change.new, grantee);
            ELSIF change.kind OPERATOR(pg_catalog.=) 't' THEN
                EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %s TO %s', change.new, grantee);
            ELSE
                EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %s TO %s', change.new, grantee);
            END IF;
            IF NOT grantee OPERATOR(pg_catalog.=) ANY (kept) THEN
                kept := kept OPERATOR(pg_catalog.||) grantee;
            END IF;
        END LOOP;
        IF pg_catalog.has_table_privilege('pg_catalog.pg_init_privs', 'UPDATE') THEN
            UPDATE pg_catalog.pg_init_privs AS i
               SET initprivs = initial
             WHERE i.objoid OPERATOR(pg_catalog.=) CASE WHEN change.kind OPERATOR(pg_catalog.=) 'f'
                                                        THEN change.new::pg_catalog.regprocedure::pg_catalog.oid
                                                        ELSE change.new::pg_catalog.regclass::pg_catalog.oid END
               AND i.classoid OPERATOR(pg_catalog.=) CASE WHEN change.kind OPERATOR(pg_catalog.=) 'f'
                                                          THEN 'pg_catalog.pg_proc'::pg_catalog.regclass
                                                          ELSE 'pg_catalog.pg_class'::pg_catalog.regclass END
               AND i.objsubid OPERATOR(pg_catalog.=) 0;
            kept := '{}';
        END IF;
    END LOOP;
    IF pg_catalog.cardinality(kept) OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING 'pgjobq 0.8.0 granted % the new jobq.metrics',
                      pg_catalog.array_to_string(kept, ', ')
            USING DETAIL = 'An upgrade not run by a superuser records its grants as initial privileges, which '
                           'pg_dump leaves out.',
                  HINT = 'After restoring a dump of this database, run jobq.grant_producer, grant_worker or '
                         'grant_admin again for these roles.';
    END IF;
END
$$;

