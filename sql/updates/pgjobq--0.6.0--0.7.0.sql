/* sql/updates/pgjobq--0.6.0--0.7.0.sql: pgjobq 0.6.0 -> 0.7.0.
 * Flow control and schedules from plain SQL: concurrency limits (per queue
 * and per concurrency key, in priority or round-robin order), rate limits,
 * dependencies between jobs (depends_on, jobq.enqueue_flow), claims over
 * several queues (jobq.claim_any) and cron or periodic schedules
 * (jobq.schedule, unschedule, tick and the view jobq.schedules).  Written
 * once; it never changes after 0.7.0 is released.  The definitions are
 * copied from sql/src/ as 0.7.0 has them.
 *
 * Functions that gain arguments are created beside the old ones, given the
 * old ones' grants, and the old ones dropped at the end; jobq.stats,
 * configure_queue, _queues and the view jobq.queues, whose results gain
 * columns, are renamed aside first.  Adding the columns rewrites no table. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.7.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Tables: the limits of jobq.queue_settings (and their cached copy in
-- jobq._claim_hints); jobq.job_state gains depends_on.  jobq.jobs is not
-- rewritten: flow control keeps to its control column and tables of its
-- own (created with their files below).
----------------------------------------------------------------------------

ALTER TABLE jobq.queue_settings
    ADD COLUMN concurrency integer,
    ADD COLUMN key_concurrency integer,
    ADD COLUMN key_order text,
    ADD COLUMN rate_limit integer,
    ADD COLUMN rate_interval interval;
COMMENT ON COLUMN jobq.queue_settings.concurrency IS 'At most this many of the queue''s jobs run at once; default none (no limit).';
COMMENT ON COLUMN jobq.queue_settings.key_concurrency IS 'At most this many jobs of one concurrency key run at once; default none (no limit).';
COMMENT ON COLUMN jobq.queue_settings.key_order IS 'How claims choose among keys: priority (the default: claim order, full keys passed over) or round_robin (one job per key in turn).';
COMMENT ON COLUMN jobq.queue_settings.rate_limit IS 'At most this many claims of the queue''s jobs per rate_interval; default none (no limit).';
COMMENT ON COLUMN jobq.queue_settings.rate_interval IS 'The window of rate_limit (set with it; 1 second when rate_limit is set alone).';

ALTER TABLE jobq._claim_hints ADD COLUMN limited boolean;
-- cached rows of 0.6.0 lack the limits: read afresh
DELETE FROM jobq._claim_hints;

ALTER TYPE jobq.job_state ADD ATTRIBUTE depends_on bigint[];

COMMENT ON TABLE jobq.jobs IS
    'One row per job.  status: (waiting ->) queued -> running -> done | failed | cancelled; failed rows are the dead-letter queue.';
COMMENT ON COLUMN jobq.jobs.status IS 'waiting (for parent jobs), queued, running, done, failed or cancelled.';
COMMENT ON COLUMN jobq.jobs.control IS 'Job control, as bits: 1, a cancel was requested (jobq.cancel) while it ran; 2, it is watched (jobq.watch); 4, it was enqueued with a unique key (jobq.unique_keys); 8, jobs depend on it (jobq.job_deps); 16, it has a concurrency key (jobq.concurrency_keys); 32, it depends on jobs. NULL: none of these.';

-- set aside, replaced below: their results change
ALTER FUNCTION jobq.stats() RENAME TO _stats_0_6_0;
ALTER FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[])
    RENAME TO _configure_queue_0_6_0;
ALTER VIEW jobq.queues RENAME TO _queues_0_6_0;
ALTER FUNCTION jobq._queues() RENAME TO _queues_rows_0_6_0;

----------------------------------------------------------------------------
-- New functions, tables and views, as sql/src/ has them in 0.7.0
----------------------------------------------------------------------------

/*
 * jobq._queues(): one row per queue that is configured or has queued or
 * running jobs, with its effective settings (the defaults filled in).  The
 * queues with jobs are found by skipping through the claim and reap
 * indexes, one probe per queue, so a long backlog is never read.  Runs with
 * the caller's rights (the admin level reads the tables).
 */
CREATE FUNCTION jobq._queues()
RETURNS TABLE (queue text, paused boolean, max_attempts integer, backoff_base interval,
               backoff_max interval, backoff_jitter double precision, lease_timeout interval,
               timeout interval, configured boolean, concurrency integer, key_concurrency integer,
               key_order text, rate_limit integer, rate_interval interval)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE queued (queue) AS (
        (SELECT j.queue FROM jobq.jobs AS j WHERE j.status = 'queued' ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM jobq.jobs AS j
                 WHERE j.status = 'queued' AND j.queue > q.queue ORDER BY j.queue LIMIT 1)
          FROM queued AS q
         WHERE q.queue IS NOT NULL
    ), running (queue) AS (
        (SELECT j.queue FROM jobq.jobs AS j WHERE j.status = 'running' ORDER BY j.queue LIMIT 1)
        UNION ALL
        SELECT (SELECT j.queue FROM jobq.jobs AS j
                 WHERE j.status = 'running' AND j.queue > r.queue ORDER BY j.queue LIMIT 1)
          FROM running AS r
         WHERE r.queue IS NOT NULL
    ), known (queue) AS (
        SELECT q.queue FROM queued AS q WHERE q.queue IS NOT NULL
        UNION
        SELECT r.queue FROM running AS r WHERE r.queue IS NOT NULL
        UNION
        SELECT s.queue FROM jobq.queue_settings AS s
    )
    SELECT k.queue,
           coalesce(s.paused, false),
           coalesce(s.max_attempts, 3),
           coalesce(s.backoff_base, interval '1 second'),
           coalesce(s.backoff_max, interval '300 seconds'),
           coalesce(s.backoff_jitter, 0),
           coalesce(s.lease_timeout, interval '60 seconds'),
           s.timeout,
           s.queue IS NOT NULL,
           s.concurrency,
           s.key_concurrency,
           coalesce(s.key_order, 'priority'),
           s.rate_limit,
           s.rate_interval
      FROM known AS k
      LEFT JOIN jobq.queue_settings AS s ON s.queue = k.queue
     ORDER BY k.queue
$$;
COMMENT ON FUNCTION jobq._queues() IS 'Internal: the rows of the view jobq.queues.';
REVOKE ALL ON FUNCTION jobq._queues() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._queues() TO @extowner@;

CREATE VIEW jobq.queues AS SELECT q.* FROM jobq._queues() AS q;
COMMENT ON VIEW jobq.queues IS
    'Every queue that is configured or has queued or running jobs, with its effective settings (defaults filled in).';
COMMENT ON COLUMN jobq.queues.queue IS 'The queue.';
COMMENT ON COLUMN jobq.queues.paused IS 'No claim hands out its jobs (jobq.pause, jobq.resume).';
COMMENT ON COLUMN jobq.queues.max_attempts IS 'Attempts of a job enqueued without max_attempts.';
COMMENT ON COLUMN jobq.queues.backoff_base IS 'Retry delay after attempt a: least(backoff_max, backoff_base * 2^a), shortened by up to backoff_jitter.';
COMMENT ON COLUMN jobq.queues.backoff_max IS 'The longest retry delay.';
COMMENT ON COLUMN jobq.queues.backoff_jitter IS 'The fraction by which a retry delay is shortened at random, at most.';
COMMENT ON COLUMN jobq.queues.lease_timeout IS 'The lease of a claim that names none.';
COMMENT ON COLUMN jobq.queues.timeout IS 'The longest an attempt of one of its jobs may run once claimed; NULL: no limit.';
COMMENT ON COLUMN jobq.queues.configured IS 'Whether the queue has a row in jobq.queue_settings.';
COMMENT ON COLUMN jobq.queues.concurrency IS 'At most this many of its jobs run at once; NULL: no limit.';
COMMENT ON COLUMN jobq.queues.key_concurrency IS 'At most this many jobs of one concurrency key run at once; NULL: no limit.';
COMMENT ON COLUMN jobq.queues.key_order IS 'How claims choose among concurrency keys: priority or round_robin.';
COMMENT ON COLUMN jobq.queues.rate_limit IS 'At most this many claims per rate_interval; NULL: no limit.';
COMMENT ON COLUMN jobq.queues.rate_interval IS 'The window of rate_limit.';
REVOKE ALL ON TABLE jobq.queues FROM PUBLIC;
GRANT SELECT ON TABLE jobq.queues TO @extowner@;

/*
 * jobq.configure_queue(queue, max_attempts, backoff_base, backoff_max,
 * backoff_jitter, lease_timeout, timeout, unset, concurrency,
 * key_concurrency, key_order, rate_limit, rate_interval): the queue's row of
 * jobq.queues after the change.  A NULL argument leaves its setting as it
 * is; unset names settings to put back to their defaults (unsetting
 * rate_limit unsets rate_interval too).  Takes effect for the claims and
 * failures that start after the commit; a job already claimed keeps the
 * max_attempts, lease and deadline it was claimed with, and a lowered limit
 * lets the jobs already running finish.  The limits (52_limits.sql):
 * concurrency, the most jobs of the queue running at once; key_concurrency,
 * the most per concurrency key; key_order, 'priority' or 'round_robin';
 * rate_limit claims per rate_interval (1 second when rate_limit is set
 * without it).  Locks the queue's settings row.  Raises 22004 (NULL queue),
 * 22023 (bad queue name; max_attempts outside 1..1000; backoff_base not
 * positive or over 1 day; backoff_max not positive or over 10 years;
 * backoff_jitter outside 0..1; lease_timeout not positive or over 1 day;
 * timeout not positive or over 30 days; concurrency or key_concurrency
 * outside 1..100000; key_order neither 'priority' nor 'round_robin';
 * rate_limit outside 1..10000; rate_interval not positive or over 1 day,
 * or given without rate_limit on a queue that has none; unset naming
 * anything else, or a setting also given).
 */
CREATE FUNCTION jobq.configure_queue(
    queue          text,
    max_attempts   integer          DEFAULT NULL,
    backoff_base   interval         DEFAULT NULL,
    backoff_max    interval         DEFAULT NULL,
    backoff_jitter double precision DEFAULT NULL,
    lease_timeout  interval         DEFAULT NULL,
    timeout        interval         DEFAULT NULL,
    unset          text[]           DEFAULT '{}',
    concurrency     integer         DEFAULT NULL,
    key_concurrency integer         DEFAULT NULL,
    key_order       text            DEFAULT NULL,
    rate_limit      integer         DEFAULT NULL,
    rate_interval   interval        DEFAULT NULL)
RETURNS jobq.queues
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    settings constant text[] := ARRAY['max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter',
                                      'lease_timeout', 'timeout', 'concurrency', 'key_concurrency',
                                      'key_order', 'rate_limit', 'rate_interval'];
    given    text[];
    bad      bigint;
    outcome  jobq.queues;
BEGIN
    PERFORM jobq._check_queue(configure_queue.queue);
    IF configure_queue.max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000, got %', configure_queue.max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.backoff_base <= interval '0' OR configure_queue.backoff_base > interval '1 day' THEN
        RAISE EXCEPTION 'backoff_base must be a positive interval of at most 1 day, got %', configure_queue.backoff_base
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.backoff_max <= interval '0' OR configure_queue.backoff_max > interval '10 years' THEN
        RAISE EXCEPTION 'backoff_max must be a positive interval of at most 10 years, got %', configure_queue.backoff_max
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.backoff_jitter < 0 OR configure_queue.backoff_jitter > 1 THEN  -- NaN > 1 too
        RAISE EXCEPTION 'backoff_jitter must be between 0 and 1, got %', configure_queue.backoff_jitter
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.lease_timeout <= interval '0' OR configure_queue.lease_timeout > interval '1 day' THEN
        RAISE EXCEPTION 'lease_timeout must be a positive interval of at most 1 day, got %', configure_queue.lease_timeout
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.timeout <= interval '0' OR configure_queue.timeout > interval '30 days' THEN
        RAISE EXCEPTION 'timeout must be a positive interval of at most 30 days, got %', configure_queue.timeout
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.concurrency NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'concurrency must be between 1 and 100000, got %', configure_queue.concurrency
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.key_concurrency NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'key_concurrency must be between 1 and 100000, got %', configure_queue.key_concurrency
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.key_order NOT IN ('priority', 'round_robin') THEN
        RAISE EXCEPTION 'key_order must be priority or round_robin, got %', quote_literal(left(configure_queue.key_order, 80))
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.rate_limit NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'rate_limit must be between 1 and 10000, got %', configure_queue.rate_limit
            USING ERRCODE = '22023',
                  HINT = 'For more claims, make rate_interval longer.';
    END IF;
    IF configure_queue.rate_interval <= interval '0' OR configure_queue.rate_interval > interval '1 day' THEN
        RAISE EXCEPTION 'rate_interval must be a positive interval of at most 1 day, got %', configure_queue.rate_interval
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.unset IS NULL THEN
        RAISE EXCEPTION 'unset must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(configure_queue.unset) > 1 THEN
        RAISE EXCEPTION 'unset must be a one-dimensional array, got % dimensions', array_ndims(configure_queue.unset)
            USING ERRCODE = '22023';
    END IF;
    SELECT u.position INTO bad
      FROM unnest(configure_queue.unset) WITH ORDINALITY AS u (setting, position)
     WHERE u.setting IS NULL OR NOT u.setting = ANY (settings)
     ORDER BY u.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'unset[%] must name a setting (%), got %', bad, array_to_string(settings, ', '),
                        quote_nullable(configure_queue.unset[bad])
            USING ERRCODE = '22023';
    END IF;
    given := array_remove(ARRAY[
                 CASE WHEN configure_queue.max_attempts IS NOT NULL THEN 'max_attempts' END,
                 CASE WHEN configure_queue.backoff_base IS NOT NULL THEN 'backoff_base' END,
                 CASE WHEN configure_queue.backoff_max IS NOT NULL THEN 'backoff_max' END,
                 CASE WHEN configure_queue.backoff_jitter IS NOT NULL THEN 'backoff_jitter' END,
                 CASE WHEN configure_queue.lease_timeout IS NOT NULL THEN 'lease_timeout' END,
                 CASE WHEN configure_queue.timeout IS NOT NULL THEN 'timeout' END,
                 CASE WHEN configure_queue.concurrency IS NOT NULL THEN 'concurrency' END,
                 CASE WHEN configure_queue.key_concurrency IS NOT NULL THEN 'key_concurrency' END,
                 CASE WHEN configure_queue.key_order IS NOT NULL THEN 'key_order' END,
                 CASE WHEN configure_queue.rate_limit IS NOT NULL THEN 'rate_limit' END,
                 CASE WHEN configure_queue.rate_interval IS NOT NULL THEN 'rate_interval' END], NULL);
    IF given && configure_queue.unset THEN
        RAISE EXCEPTION 'unset must not name a setting also given, got %',
                        array_to_string(ARRAY(SELECT unnest(given) INTERSECT SELECT unnest(configure_queue.unset)), ', ')
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.rate_interval IS NOT NULL AND configure_queue.rate_limit IS NULL
       AND NOT EXISTS (SELECT FROM jobq.queue_settings AS s
                        WHERE s.queue = configure_queue.queue AND s.rate_limit IS NOT NULL
                          AND NOT 'rate_limit' = ANY (configure_queue.unset)) THEN
        RAISE EXCEPTION 'rate_interval needs a rate_limit: queue % has none', quote_literal(configure_queue.queue)
            USING ERRCODE = '22023';
    END IF;

    INSERT INTO jobq.queue_settings AS s (queue, max_attempts, backoff_base, backoff_max, backoff_jitter,
                                          lease_timeout, timeout, concurrency, key_concurrency, key_order,
                                          rate_limit, rate_interval)
    VALUES (configure_queue.queue, configure_queue.max_attempts, configure_queue.backoff_base,
            configure_queue.backoff_max, configure_queue.backoff_jitter, configure_queue.lease_timeout,
            configure_queue.timeout, configure_queue.concurrency, configure_queue.key_concurrency,
            configure_queue.key_order, configure_queue.rate_limit,
            CASE WHEN configure_queue.rate_limit IS NOT NULL
                 THEN coalesce(configure_queue.rate_interval, interval '1 second') END)
    ON CONFLICT ON CONSTRAINT queue_settings_pkey DO UPDATE
       SET max_attempts   = CASE WHEN 'max_attempts' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.max_attempts, s.max_attempts) END,
           backoff_base   = CASE WHEN 'backoff_base' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.backoff_base, s.backoff_base) END,
           backoff_max    = CASE WHEN 'backoff_max' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.backoff_max, s.backoff_max) END,
           backoff_jitter = CASE WHEN 'backoff_jitter' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.backoff_jitter, s.backoff_jitter) END,
           lease_timeout  = CASE WHEN 'lease_timeout' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.lease_timeout, s.lease_timeout) END,
           timeout        = CASE WHEN 'timeout' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.timeout, s.timeout) END,
           concurrency    = CASE WHEN 'concurrency' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.concurrency, s.concurrency) END,
           key_concurrency = CASE WHEN 'key_concurrency' = ANY (configure_queue.unset) THEN NULL
                                  ELSE coalesce(excluded.key_concurrency, s.key_concurrency) END,
           key_order      = CASE WHEN 'key_order' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.key_order, s.key_order) END,
           rate_limit     = CASE WHEN 'rate_limit' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.rate_limit, s.rate_limit) END,
           -- the window goes with its limit: given, kept, or 1 second (for a new limit)
           rate_interval  = CASE WHEN 'rate_limit' = ANY (configure_queue.unset) THEN NULL
                                 WHEN 'rate_interval' = ANY (configure_queue.unset)
                                      AND coalesce(excluded.rate_limit, s.rate_limit) IS NOT NULL THEN interval '1 second'
                                 WHEN 'rate_interval' = ANY (configure_queue.unset) THEN NULL
                                 WHEN coalesce(excluded.rate_limit, s.rate_limit) IS NULL THEN NULL
                                 ELSE coalesce(configure_queue.rate_interval, s.rate_interval, interval '1 second') END,
           updated_at     = statement_timestamp();

    SELECT q.* INTO outcome FROM jobq.queues AS q WHERE q.queue = configure_queue.queue;
    RETURN outcome;
END
$$;
COMMENT ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval) IS
    'Set a queue''s policy: max_attempts, backoff_base, backoff_max, backoff_jitter, lease_timeout, timeout, and its limits concurrency, key_concurrency, key_order, rate_limit per rate_interval (NULL: unchanged; unset: back to the default). Returns its row of jobq.queues.';
REVOKE ALL ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval) TO @extowner@;

/*
 * jobq._check_keys(keys, payloads, argument): returns nothing; raises 22023
 * when keys (the array passed as argument, aligned with payloads of that
 * many elements) is multidimensional, of another length, or holds a key that
 * is not 1 to 512 characters (naming it by its own subscript, as
 * argument[i]).  NULL elements are jobs without a key.  For
 * jobq.enqueue_many's unique_keys and concurrency_keys.
 */
CREATE FUNCTION jobq._check_keys(keys text[], payloads integer, argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad_position bigint;
BEGIN
    IF array_ndims(_check_keys.keys) > 1 THEN
        RAISE EXCEPTION '% must be a one-dimensional array, got % dimensions', _check_keys.argument,
                        array_ndims(_check_keys.keys)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(_check_keys.keys) <> _check_keys.payloads THEN
        RAISE EXCEPTION '% must have as many elements as payloads, got % and %', _check_keys.argument,
                        cardinality(_check_keys.keys), _check_keys.payloads
            USING ERRCODE = '22023',
                  HINT = 'Pass NULL for a job without a key.';
    END IF;
    SELECT k.position + array_lower(_check_keys.keys, 1) - 1 INTO bad_position
      FROM unnest(_check_keys.keys) WITH ORDINALITY AS k(given, position)
     WHERE length(k.given) NOT BETWEEN 1 AND 512
     ORDER BY k.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%[%] must be 1 to 512 characters, got %', _check_keys.argument, bad_position,
                        length(_check_keys.keys[bad_position])
            USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_keys(text[], integer, text) IS
    'Internal: check keys aligned with payloads (jobq.enqueue_many''s unique_keys and concurrency_keys).';
REVOKE ALL ON FUNCTION jobq._check_keys(text[], integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_keys(text[], integer, text) TO @extowner@;

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
 * payload).  With unique_key, while a job of the queue holding that key is
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
CREATE FUNCTION jobq.enqueue(
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
       AND enqueue.concurrency_key IS NULL AND enqueue.depends_on IS NULL AND enqueue.on_parent_failure = 'cancel' THEN
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts)
        VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts)
        RETURNING jobq.jobs.id,
                  EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now())
             INTO new_id, waiting;
    ELSE
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
REVOKE ALL ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text) TO @extowner@;

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
CREATE FUNCTION jobq.enqueue_many(
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
REVOKE ALL ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[]) TO @extowner@;

-- 45_flow.sql, new in 0.7.0

----------------------------------------------------------------------------
-- Flows: jobs that wait for other jobs (jobq.enqueue(..., depends_on =>
-- ...), jobq.enqueue_flow), and the concurrency keys jobs are enqueued
-- with (their limits are in 52_limits.sql).
--
-- A job with unfinished parents is 'waiting': outside the claim index, so
-- never claimed.  Its parents carry control bit 8 (they have dependents),
-- so the functions that finish a job (complete, fail, reap, cancel, ...)
-- settle the dependents of those only, inline, in their own transaction
-- (jobq._finish_linked): plain jobs never look here.  When its last parent
-- is done, a waiting job becomes queued; when a parent ends failed or
-- cancelled, it is cancelled (on_parent_failure 'cancel', the default) or
-- counts that parent as settled ('run').  A job can depend only on jobs
-- that exist when it is enqueued, so the graph has no cycles.
--
-- Control bits (jobq.jobs.control): 8, the job has dependents; 16, it has
-- a concurrency key (jobq.concurrency_keys); 32, it has parents
-- (jobq.job_deps).
----------------------------------------------------------------------------

-- One row per parent and child, kept until the child is purged: what the
-- child depends on (jobq.job shows it), and whether the parent's end was
-- counted already (a failed parent redriven and then done is not counted
-- twice).
CREATE TABLE jobq.job_deps (
    parent  bigint  NOT NULL,
    child   bigint  NOT NULL,
    settled boolean NOT NULL,
    CONSTRAINT job_deps_pkey PRIMARY KEY (parent, child)
);
CREATE INDEX job_deps_child_idx ON jobq.job_deps (child);
COMMENT ON INDEX jobq.job_deps_child_idx IS 'A job''s parents, for jobq.job and jobq.purge.';
COMMENT ON TABLE jobq.job_deps IS 'Dependencies: the child job waits for the parent job to end.';
COMMENT ON COLUMN jobq.job_deps.parent IS 'The job waited for.';
COMMENT ON COLUMN jobq.job_deps.child IS 'The job that waits.';
COMMENT ON COLUMN jobq.job_deps.settled IS 'The parent''s end has been counted for the child.';
SELECT pg_catalog.pg_extension_config_dump('jobq.job_deps', '');
REVOKE ALL ON TABLE jobq.job_deps FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.job_deps TO @extowner@;

-- One row per waiting job: how many of its parents have not ended yet.  The
-- row is the lock that parents finishing at once take turns on, so the last
-- of them, and only it, sees the count reach 0.
CREATE TABLE jobq.job_waits (
    id                bigint  NOT NULL,
    pending           integer NOT NULL,
    on_parent_failure text    NOT NULL,
    CONSTRAINT job_waits_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE jobq.job_waits IS 'Each waiting job''s count of parents not yet ended, and what their failure does to it.';
COMMENT ON COLUMN jobq.job_waits.id IS 'The waiting job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.job_waits.pending IS 'Parents not yet ended; at 0 the job becomes queued.';
COMMENT ON COLUMN jobq.job_waits.on_parent_failure IS 'cancel: a parent ending failed or cancelled cancels the job; run: it counts as ended.';
SELECT pg_catalog.pg_extension_config_dump('jobq.job_waits', '');
REVOKE ALL ON TABLE jobq.job_waits FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.job_waits TO @extowner@;

/*
 * jobq._check_link_options(concurrency_key, depends_on, on_parent_failure,
 * unique_key): returns nothing; raises 22004 (NULL on_parent_failure),
 * 22023 (concurrency_key not 1 to 512 characters; depends_on
 * multidimensional, with NULL elements or over 1,000 of them, or given with
 * a unique_key; on_parent_failure neither 'cancel' nor 'run'), for
 * jobq.enqueue and jobq.enqueue_flow.
 */
CREATE FUNCTION jobq._check_link_options(concurrency_key text, depends_on bigint[], on_parent_failure text,
                                         unique_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _check_link_options.on_parent_failure IS NULL THEN
        RAISE EXCEPTION 'on_parent_failure must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF _check_link_options.on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'on_parent_failure must be cancel or run, got %',
                        quote_literal(left(_check_link_options.on_parent_failure, 80))
            USING ERRCODE = '22023';
    END IF;
    IF length(_check_link_options.concurrency_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'concurrency_key must be 1 to 512 characters, got %', length(_check_link_options.concurrency_key)
            USING ERRCODE = '22023';
    END IF;
    IF array_ndims(_check_link_options.depends_on) > 1 THEN
        RAISE EXCEPTION 'depends_on must be a one-dimensional array, got % dimensions',
                        array_ndims(_check_link_options.depends_on)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(_check_link_options.depends_on, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on must not contain NULL, found one at depends_on[%]',
                        array_position(_check_link_options.depends_on, NULL)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(_check_link_options.depends_on) > 1000 THEN
        RAISE EXCEPTION 'depends_on must name at most 1000 jobs, got %', cardinality(_check_link_options.depends_on)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(_check_link_options.depends_on) > 0 AND _check_link_options.unique_key IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on cannot be combined with unique_key' USING ERRCODE = '22023';
    END IF;

END
$$;
COMMENT ON FUNCTION jobq._check_link_options(text, bigint[], text, text) IS
    'Internal: check the concurrency_key, depends_on and on_parent_failure of an enqueue.';
REVOKE ALL ON FUNCTION jobq._check_link_options(text, bigint[], text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_link_options(text, bigint[], text, text) TO @extowner@;

/*
 * jobq._enqueue_linked(queue, payload, priority, run_at, max_attempts,
 * unique_key, unique_scope, on_conflict, headers, concurrency_key,
 * depends_on, on_parent_failure): for jobq.enqueue, a job with a
 * concurrency key or parents: its id, and runnable (it is queued, and new
 * or changed: worth a wake-up).  The job is 'waiting' while a parent has not
 * ended, 'cancelled' at once when a parent already ended failed or
 * cancelled (and on_parent_failure is 'cancel'), else 'queued'.  The caller
 * has checked the other options.  Locks: the parents FOR NO KEY UPDATE, in
 * id order, until the transaction ends (so a parent finishing meanwhile
 * waits, then sees its new dependent); the rows of jobq.enqueue otherwise.
 * Raises what jobq._check_link_options raises, and JQ002 (a parent that
 * does not exist).
 */
CREATE FUNCTION jobq._enqueue_linked(
    queue text, payload jsonb, priority integer, run_at timestamptz, max_attempts integer,
    unique_key text, unique_scope text, on_conflict text, headers jsonb,
    concurrency_key text, depends_on bigint[], on_parent_failure text,
    OUT id bigint, OUT runnable boolean)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parent_ids      bigint[] := '{}'::bigint[];
    parent_statuses text[] := '{}'::text[];
    missing         bigint;
    failed_parent   bigint;
    failed_status   text;
    open_parents    bigint[];
    new_status      text := 'queued';
    control_bits    smallint;
BEGIN
    PERFORM jobq._check_link_options(_enqueue_linked.concurrency_key, _enqueue_linked.depends_on,
                                     _enqueue_linked.on_parent_failure, _enqueue_linked.unique_key);

    IF cardinality(_enqueue_linked.depends_on) > 0 THEN
        -- the parents, locked in id order: one finishing now waits for this
        -- transaction, and then sees the dependent (jobq._finish_linked)
        SELECT coalesce(array_agg(p.id ORDER BY p.id), '{}'), coalesce(array_agg(p.status ORDER BY p.id), '{}')
          INTO parent_ids, parent_statuses
          FROM (SELECT j.id, j.status
                  FROM jobq.jobs AS j
                 WHERE j.id = ANY (_enqueue_linked.depends_on)
                 ORDER BY j.id
                   FOR NO KEY UPDATE) AS p;
        SELECT d.id INTO missing
          FROM unnest(_enqueue_linked.depends_on) WITH ORDINALITY AS d(id, step_no)
         WHERE NOT d.id = ANY (parent_ids)
         ORDER BY d.step_no
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'depends_on names job %, which does not exist', missing
                USING ERRCODE = 'JQ002';
        END IF;
        open_parents := ARRAY(SELECT p.id FROM unnest(parent_ids, parent_statuses) AS p(id, status)
                               WHERE p.status IN ('queued', 'waiting', 'running') ORDER BY p.id);
        SELECT p.id, p.status INTO failed_parent, failed_status
          FROM unnest(parent_ids, parent_statuses) AS p(id, status)
         WHERE p.status IN ('failed', 'cancelled')
         ORDER BY p.id
         LIMIT 1;
        IF failed_parent IS NOT NULL AND _enqueue_linked.on_parent_failure = 'cancel' THEN
            new_status := 'cancelled';
        ELSIF cardinality(open_parents) > 0 THEN
            new_status := 'waiting';
        END IF;
    END IF;
    control_bits := (CASE WHEN _enqueue_linked.concurrency_key IS NOT NULL THEN 16 ELSE 0 END
                     | CASE WHEN cardinality(parent_ids) > 0 THEN 32 ELSE 0 END)::smallint;

    IF _enqueue_linked.unique_key IS NULL THEN
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, status, control,
                               finished_at, last_error)
        VALUES (_enqueue_linked.queue, _enqueue_linked.payload, _enqueue_linked.priority, _enqueue_linked.run_at,
                _enqueue_linked.max_attempts, _enqueue_linked.headers, new_status, nullif(control_bits, 0),
                CASE WHEN new_status = 'cancelled' THEN statement_timestamp() END,
                CASE WHEN new_status = 'cancelled'
                     THEN format('cancelled: parent job %s had ended %s', failed_parent, failed_status) END)
        RETURNING jobq.jobs.id INTO id;
        runnable := new_status = 'queued';
    ELSE
        -- a unique job with a concurrency key: the key goes with the job
        -- inserted or replaced, not with a holder returned as it is
        SELECT u.id, u.changed INTO id, runnable
          FROM jobq._enqueue_unique(_enqueue_linked.queue, _enqueue_linked.payload, _enqueue_linked.priority,
                                    _enqueue_linked.run_at, _enqueue_linked.max_attempts, _enqueue_linked.unique_key,
                                    _enqueue_linked.unique_scope, _enqueue_linked.on_conflict,
                                    _enqueue_linked.headers) AS u;
        IF NOT runnable THEN
            RETURN;
        END IF;
        UPDATE jobq.jobs AS j SET control = coalesce(j.control, 0) | 16 WHERE j.id = _enqueue_linked.id;
    END IF;

    IF _enqueue_linked.concurrency_key IS NOT NULL THEN
        INSERT INTO jobq.concurrency_keys (id, queue, concurrency_key, priority)
        VALUES (_enqueue_linked.id, _enqueue_linked.queue, _enqueue_linked.concurrency_key, _enqueue_linked.priority)
        ON CONFLICT ON CONSTRAINT concurrency_keys_pkey DO UPDATE
           SET concurrency_key = excluded.concurrency_key, priority = excluded.priority;
    END IF;
    IF cardinality(parent_ids) > 0 THEN
        INSERT INTO jobq.job_deps (parent, child, settled)
        SELECT p.id, _enqueue_linked.id, NOT p.id = ANY (open_parents)
          FROM unnest(parent_ids) AS p(id);
        IF new_status = 'waiting' THEN
            INSERT INTO jobq.job_waits (id, pending, on_parent_failure)
            VALUES (_enqueue_linked.id, cardinality(open_parents), _enqueue_linked.on_parent_failure);
            UPDATE jobq.jobs AS j
               SET control = coalesce(j.control, 0) | 8
             WHERE j.id = ANY (open_parents) AND coalesce(j.control & 8 = 0, true);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._enqueue_linked(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text) IS
    'Internal: jobq.enqueue for a job with a concurrency key or parents.';
REVOKE ALL ON FUNCTION jobq._enqueue_linked(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._enqueue_linked(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text) TO @extowner@;

/*
 * jobq._finish_linked(id, status, control): true, after the bookkeeping of
 * a job with control bits 8, 16 or 32 that has just ended with status
 * (done, failed or cancelled), called by the function that ended it, in its
 * transaction: its concurrency key is dropped (done or cancelled: a failed
 * job keeps it for jobq.retry_failed), its dependents are settled
 * (jobq._settle_dependents), and a waiting job cancelled stops waiting.
 * Locks what jobq._settle_dependents locks.
 */
CREATE FUNCTION jobq._finish_linked(id bigint, status text, control smallint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _finish_linked.control & 16 <> 0 AND _finish_linked.status IN ('done', 'cancelled') THEN
        DELETE FROM jobq.concurrency_keys AS k WHERE k.id = _finish_linked.id;
    END IF;
    IF _finish_linked.control & 32 <> 0 AND _finish_linked.status = 'cancelled' THEN
        DELETE FROM jobq.job_waits AS w WHERE w.id = _finish_linked.id;
    END IF;
    IF _finish_linked.control & 8 <> 0 AND _finish_linked.status IN ('done', 'failed', 'cancelled') THEN
        PERFORM jobq._settle_dependents(_finish_linked.id, _finish_linked.status);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._finish_linked(bigint, text, smallint) IS
    'Internal: after a job with a concurrency key, dependents or parents ended: drop its key, settle its dependents.';
REVOKE ALL ON FUNCTION jobq._finish_linked(bigint, text, smallint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._finish_linked(bigint, text, smallint) TO @extowner@;

/*
 * jobq._settle_dependents(parent, status): returns nothing.  The parent has
 * ended with status; each of its dependents not yet told counts it: one
 * parent fewer to wait for (status done, or on_parent_failure 'run'), and
 * at none the dependent becomes queued (its queue notified); or, for a
 * parent failed or cancelled under on_parent_failure 'cancel', the
 * dependent is cancelled, and its own dependents settled in turn.  Locks:
 * the parent's rows of jobq.job_deps, then each dependent's row of
 * jobq.job_waits (FOR UPDATE, in id order: parents ending at once take
 * turns there, so exactly the last one releases the dependent) and its row
 * of jobq.jobs.
 */
CREATE FUNCTION jobq._settle_dependents(parent bigint, status text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    children bigint[];
    child    bigint;
    left_    integer;
    policy   text;
    released record;
BEGIN
    WITH told AS (
        UPDATE jobq.job_deps AS d
           SET settled = true
         WHERE d.parent = _settle_dependents.parent AND NOT d.settled
        RETURNING d.child
    )
    SELECT coalesce(array_agg(t.child ORDER BY t.child), '{}') INTO children FROM told AS t;
    FOREACH child IN ARRAY children LOOP
        UPDATE jobq.job_waits AS w
           SET pending = w.pending - CASE WHEN _settle_dependents.status = 'done' OR w.on_parent_failure = 'run'
                                          THEN 1 ELSE 0 END
         WHERE w.id = child
        RETURNING w.pending, w.on_parent_failure INTO left_, policy;
        CONTINUE WHEN NOT FOUND;  -- no longer waiting (cancelled meanwhile)
        IF _settle_dependents.status <> 'done' AND policy = 'cancel' THEN
            DELETE FROM jobq.job_waits AS w WHERE w.id = child;
            UPDATE jobq.jobs AS j
               SET status = 'cancelled', finished_at = statement_timestamp(),
                   last_error = format('cancelled: parent job %s ended %s', _settle_dependents.parent,
                                       _settle_dependents.status)
             WHERE j.id = child AND j.status = 'waiting'
            RETURNING j.id, j.control INTO released;
            IF FOUND THEN
                IF released.control & 2 <> 0 THEN
                    PERFORM jobq._notify_finished(child);
                END IF;
                IF released.control & 24 <> 0 THEN
                    PERFORM jobq._finish_linked(child, 'cancelled', released.control);
                END IF;
            END IF;
        ELSIF left_ <= 0 THEN
            DELETE FROM jobq.job_waits AS w WHERE w.id = child;
            UPDATE jobq.jobs AS j
               SET status = 'queued'
             WHERE j.id = child AND j.status = 'waiting'
            RETURNING j.queue INTO released;
            IF FOUND THEN
                PERFORM pg_notify('jobq_' || released.queue, '');
            END IF;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._settle_dependents(bigint, text) IS
    'Internal: a parent job ended: release (queued) or cancel its waiting dependents as their on_parent_failure says.';
REVOKE ALL ON FUNCTION jobq._settle_dependents(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._settle_dependents(bigint, text) TO @extowner@;

/*
 * jobq.enqueue_flow(queue, steps): the ids of the jobs enqueued, one per
 * step, in the order of steps, all in the caller's transaction.  steps is
 * a JSON array of objects, each a job: payload (required), and optionally
 * name (1 to 200 characters, unique in the flow), queue (default: the
 * queue argument), priority, run_at, max_attempts, headers,
 * concurrency_key, on_parent_failure, and depends_on: an array of the
 * names of steps before this one and of ids of existing jobs.  Each step is
 * enqueued as jobq.enqueue would, once every step has been checked: a bad
 * one enqueues nothing.  Locks what jobq.enqueue locks.  Raises
 * 22004 (NULL argument), 22023 (steps not an array of 1 to 1,000 objects,
 * an unknown key, a value of the wrong JSON type, a name repeated or not
 * naming an earlier step), JQ002, and what jobq.enqueue raises, each
 * message prefixed with the step, as steps[0].
 */
CREATE FUNCTION jobq.enqueue_flow(queue text, steps jsonb)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers enqueue without privileges on jobq.jobs; it
-- checks its steps and enqueues them with jobq.enqueue, nothing else.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known_keys constant text[] := ARRAY['name', 'payload', 'queue', 'priority', 'run_at', 'max_attempts',
                                        'headers', 'concurrency_key', 'depends_on', 'on_parent_failure'];
    step       jsonb;
    step_no   integer;
    ids        bigint[] := '{}'::bigint[];
    names      jsonb := '{}'::jsonb;   -- step name -> its position in steps
    parents    bigint[];
    parent     jsonb;
    bad        text;
    missing    bigint;
    problem    text;
    state      text;
BEGIN
    PERFORM jobq._check_queue(enqueue_flow.queue);
    IF enqueue_flow.steps IS NULL THEN
        RAISE EXCEPTION 'steps must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF jsonb_typeof(enqueue_flow.steps) <> 'array' OR jsonb_array_length(enqueue_flow.steps) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'steps must be a JSON array of 1 to 1000 objects, got %',
                        CASE WHEN jsonb_typeof(enqueue_flow.steps) = 'array'
                             THEN format('%s elements', jsonb_array_length(enqueue_flow.steps))
                             ELSE 'a JSON ' || jsonb_typeof(enqueue_flow.steps) END
            USING ERRCODE = '22023';
    END IF;
    -- first every step checked, so that a bad one enqueues nothing (and
    -- takes no id); then every step enqueued
    FOR step, step_no IN
        SELECT s.value, (s.ordinality - 1)::integer FROM jsonb_array_elements(enqueue_flow.steps) WITH ORDINALITY AS s
    LOOP
        IF jsonb_typeof(step) <> 'object' THEN
            RAISE EXCEPTION 'steps[%] must be a JSON object, got a JSON %', step_no, jsonb_typeof(step)
                USING ERRCODE = '22023';
        END IF;
        SELECT k INTO bad FROM jsonb_object_keys(step) AS k WHERE NOT k = ANY (known_keys) ORDER BY k LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'steps[%] has an unknown key %', step_no, quote_literal(left(bad, 80))
                USING ERRCODE = '22023',
                      HINT = 'A step may have: ' || array_to_string(known_keys, ', ') || '.';
        END IF;
        SELECT t.k INTO bad
          FROM (VALUES ('name', 'string'), ('queue', 'string'), ('priority', 'number'), ('run_at', 'string'),
                       ('max_attempts', 'number'), ('concurrency_key', 'string'), ('depends_on', 'array'),
                       ('on_parent_failure', 'string')) AS t(k, kind)
         WHERE step ? t.k AND jsonb_typeof(step -> t.k) NOT IN (t.kind, 'null')
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'steps[%].% must be a JSON %, got a JSON %', step_no, bad,
                            CASE WHEN bad IN ('priority', 'max_attempts') THEN 'integer'
                                 WHEN bad = 'depends_on' THEN 'array' ELSE 'string' END,
                            jsonb_typeof(step -> bad)
                USING ERRCODE = '22023';
        END IF;
        IF jsonb_typeof(step -> 'name') = 'string' THEN
            IF length(step ->> 'name') NOT BETWEEN 1 AND 200 THEN
                RAISE EXCEPTION 'steps[%].name must be 1 to 200 characters, got %', step_no, length(step ->> 'name')
                    USING ERRCODE = '22023';
            END IF;
            IF names ? (step ->> 'name') THEN
                RAISE EXCEPTION 'steps[%].name % is the name of an earlier step', step_no,
                                quote_literal(step ->> 'name')
                    USING ERRCODE = '22023';
            END IF;
            names := names || jsonb_build_object(step ->> 'name', step_no);
        END IF;
        parents := '{}';
        FOR parent IN SELECT d.value FROM jsonb_array_elements(coalesce(nullif(step -> 'depends_on', 'null'), '[]')) AS d LOOP
            IF jsonb_typeof(parent) = 'string' AND names ? (parent #>> '{}')
               AND (names ->> (parent #>> '{}'))::integer < step_no THEN
                CONTINUE;  -- an earlier step
            ELSIF jsonb_typeof(parent) = 'string' THEN
                RAISE EXCEPTION 'steps[%].depends_on names %, which is not an earlier step', step_no,
                                quote_literal(left(parent #>> '{}', 80))
                    USING ERRCODE = '22023',
                          HINT = 'A step may depend on the steps before it (by name) and on existing jobs (by id).';
            ELSIF jsonb_typeof(parent) = 'number' AND (parent #>> '{}') ~ '^[0-9]{1,19}$'
                  AND (parent #>> '{}')::numeric <= 9223372036854775807 THEN
                parents := parents || (parent #>> '{}')::bigint;
            ELSE
                RAISE EXCEPTION 'steps[%].depends_on must hold step names and job ids, got %', step_no,
                                left(parent::text, 80)
                    USING ERRCODE = '22023';
            END IF;
        END LOOP;
        BEGIN
            PERFORM jobq._check_queue(coalesce(step ->> 'queue', enqueue_flow.queue));
            PERFORM jobq._check_payload(step -> 'payload', 'payload');
            PERFORM jobq._check_options(coalesce((step ->> 'priority')::integer, 0),
                                        coalesce((step ->> 'run_at')::timestamptz, now()),
                                        (step ->> 'max_attempts')::integer);
            PERFORM jobq._check_job_options(NULL, 'active', 'return', nullif(step -> 'headers', 'null'));
            PERFORM jobq._check_link_options(step ->> 'concurrency_key', parents,
                                             coalesce(step ->> 'on_parent_failure', 'cancel'), NULL);
            SELECT p.id INTO missing
              FROM unnest(parents) AS p(id)
             WHERE NOT EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = p.id)
             LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'depends_on names job %, which does not exist', missing
                    USING ERRCODE = 'JQ002';
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT, state = RETURNED_SQLSTATE;
            IF state IN ('22P02', '22003', '22007', '22008') THEN
                state := '22023';  -- a value that is not the number or time it should be
            END IF;
            RAISE EXCEPTION 'steps[%]: %', step_no, problem USING ERRCODE = state;
        END;
    END LOOP;

    FOR step, step_no IN
        SELECT s.value, (s.ordinality - 1)::integer FROM jsonb_array_elements(enqueue_flow.steps) WITH ORDINALITY AS s
    LOOP
        -- the parents: the earlier steps' new ids, and the jobs named by id
        parents := ARRAY(
            SELECT CASE WHEN jsonb_typeof(d.value) = 'string' THEN ids[(names ->> (d.value #>> '{}'))::integer + 1]
                        ELSE (d.value #>> '{}')::bigint END
              FROM jsonb_array_elements(coalesce(nullif(step -> 'depends_on', 'null'), '[]')) WITH ORDINALITY AS d
             ORDER BY d.ordinality);
        ids := ids || jobq.enqueue(
            queue             => coalesce(step ->> 'queue', enqueue_flow.queue),
            payload           => step -> 'payload',
            priority          => coalesce((step ->> 'priority')::integer, 0),
            run_at            => coalesce((step ->> 'run_at')::timestamptz, now()),
            max_attempts      => (step ->> 'max_attempts')::integer,
            headers           => nullif(step -> 'headers', 'null'),
            concurrency_key   => step ->> 'concurrency_key',
            depends_on        => nullif(parents, '{}'),
            on_parent_failure => coalesce(step ->> 'on_parent_failure', 'cancel'));
    END LOOP;
    RETURN ids;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_flow(text, jsonb) IS
    'Enqueue a graph of jobs in one call: steps is a JSON array of jobs that may depend on earlier steps (by name) and on existing jobs (by id). Returns the ids, in the order of steps.';
REVOKE ALL ON FUNCTION jobq.enqueue_flow(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_flow(text, jsonb) TO @extowner@;

/*
 * jobq.claim_any(queues, n, worker, lease_timeout): up to n runnable jobs
 * of any of queues, running under new leases, as jobq.claim hands them out
 * (each queue's pause, settings and limits apply), in claim order across
 * the queues: priority desc, run_at, id.  First it looks, without locking,
 * for the n best runnable jobs across the queues that are not paused, then
 * claims from each queue, in name order, as many as it has among those
 * (jobq.claim); when a queue gives fewer (its limits, or jobs another
 * worker took meanwhile), a second pass asks the other queues for the
 * rest.  So it may return fewer than n while more are runnable,
 * never more.  Locks what jobq.claim locks, queue by queue in name order
 * (so two such claims take the gates of queues with limits in the same
 * order).  Raises 22004 (NULL queues), 22023 (queues empty,
 * multidimensional, over 100 names, or holding a NULL or a bad name), and
 * what jobq.claim raises.
 */
CREATE FUNCTION jobq.claim_any(queues text[], n integer, worker text, lease_timeout interval DEFAULT NULL)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 10
-- SECURITY DEFINER: workers claim without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names   text[];
    shares  integer[];
    got     jobq.jobs[] := '{}'::jobq.jobs[];
    one     text;
    bad     bigint;
BEGIN
    IF claim_any.queues IS NULL THEN
        RAISE EXCEPTION 'queues must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(claim_any.queues) > 1 THEN
        RAISE EXCEPTION 'queues must be a one-dimensional array, got % dimensions', array_ndims(claim_any.queues)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(claim_any.queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'queues must name 1 to 100 queues, got %', cardinality(claim_any.queues)
            USING ERRCODE = '22023';
    END IF;
    SELECT q.position INTO bad
      FROM unnest(claim_any.queues) WITH ORDINALITY AS q(queue, position)
     WHERE q.queue IS NULL OR q.queue !~ '^[a-z0-9_]{1,58}$'
     ORDER BY q.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queues[%] must be 1 to 58 characters of a-z, 0-9 and _, got %', bad,
                        quote_nullable(left(claim_any.queues[bad], 80))
            USING ERRCODE = '22023';
    END IF;
    names := ARRAY(SELECT DISTINCT q FROM unnest(claim_any.queues) AS q ORDER BY q);
    IF cardinality(names) = 1 THEN
        RETURN QUERY SELECT c.* FROM jobq.claim(names[1], claim_any.n, claim_any.worker, claim_any.lease_timeout) AS c;
        RETURN;
    END IF;
    IF claim_any.n IS NULL OR claim_any.n NOT BETWEEN 1 AND 1000 THEN
        -- jobq.claim names the fault
        RETURN QUERY SELECT c.* FROM jobq.claim(names[1], claim_any.n, claim_any.worker, claim_any.lease_timeout) AS c;
        RETURN;
    END IF;

    -- each queue's share of the n best runnable jobs across them
    shares := ARRAY(
        SELECT count(b.queue) FILTER (WHERE b.queue IS NOT NULL)::integer
          FROM unnest(names) WITH ORDINALITY AS q(queue, position)
          LEFT JOIN (SELECT c.queue
                       FROM unnest(names) AS q(queue)
                      CROSS JOIN LATERAL (
                            SELECT p.queue, p.priority, p.run_at, p.id
                              FROM jobq.jobs AS p
                             WHERE p.queue = q.queue
                               AND p.status = 'queued'
                               AND p.run_at <= statement_timestamp()
                             ORDER BY p.priority DESC, p.run_at, p.id
                             LIMIT claim_any.n) AS c
                      WHERE NOT EXISTS (SELECT FROM jobq.queue_settings AS s WHERE s.queue = q.queue AND s.paused)
                      ORDER BY c.priority DESC, c.run_at, c.id
                      LIMIT claim_any.n) AS b ON b.queue = q.queue
         GROUP BY q.position
         ORDER BY q.position);

    -- first pass: each queue its share; second: what is left, to the queues
    -- that gave all they were asked for
    FOR i IN 1 .. cardinality(names) LOOP
        CONTINUE WHEN shares[i] = 0;
        one := names[i];
        got := got || ARRAY(SELECT c FROM jobq.claim(one, shares[i], claim_any.worker, claim_any.lease_timeout) AS c);
    END LOOP;
    IF cardinality(got) < claim_any.n THEN
        FOR i IN 1 .. cardinality(names) LOOP
            EXIT WHEN cardinality(got) >= claim_any.n;
            one := names[i];
            CONTINUE WHEN shares[i] > 0
                      AND (SELECT count(*) FROM unnest(got) AS g WHERE g.queue = one) < shares[i];
            got := got || ARRAY(SELECT c FROM jobq.claim(one, claim_any.n - cardinality(got), claim_any.worker,
                                                        claim_any.lease_timeout) AS c);
        END LOOP;
    END IF;
    RETURN QUERY SELECT g.* FROM unnest(got) AS g ORDER BY g.priority DESC, g.run_at, g.id;
END
$$;
COMMENT ON FUNCTION jobq.claim_any(text[], integer, text, interval) IS
    'Claim up to n runnable jobs from several queues at once, best first across them (priority desc, run_at, id), each queue''s pause and limits applied; returns them running.';
REVOKE ALL ON FUNCTION jobq.claim_any(text[], integer, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.claim_any(text[], integer, text, interval) TO @extowner@;

-- 52_limits.sql, new in 0.7.0

----------------------------------------------------------------------------
-- Limits: how many jobs of a queue may run at once (concurrency), how many
-- per concurrency key (key_concurrency, served in priority or round-robin
-- order across keys), and how many may be claimed per window of time
-- (rate_limit per rate_interval), all set by jobq.configure_queue.
--
-- Exact, not approximate.  A claim of a queue with limits first locks the
-- queue's gate row (jobq.queue_gates) FOR UPDATE, so such claims of one
-- queue take turns, each holding the gate to the end of its transaction;
-- then, with a snapshot taken after the lock, it counts the queue's running
-- jobs from jobq.jobs itself: every claim that took the gate before it has
-- committed or rolled back by then, so its jobs are counted exactly, and
-- nothing is kept in counters that a killed worker could leave wrong.  A
-- limit bounds the jobs in status running, that is the valid leases and
-- the expired ones not yet reaped (a heartbeat may still extend those); a
-- reaped job's worker, a zombie, may still be executing it.  Only claims
-- take the gate: completing, failing and reaping free a place without it.
-- A queue without limits never reads any of this (jobq.claim branches on
-- its cached settings).
----------------------------------------------------------------------------

-- One row per queue claimed with limits: the lock that claims of the queue
-- take turns on, the claims of the current rate window, and where
-- round-robin claiming goes on from.  Not dumped: a restore starts a new
-- window.
CREATE TABLE jobq.queue_gates (
    queue        text          NOT NULL,
    claim_times  timestamptz[] NOT NULL DEFAULT '{}',  -- the claims of the last rate_interval: when,
    claim_counts integer[]     NOT NULL DEFAULT '{}',  -- and how many jobs each took
    next_key     text,                                 -- round robin: the key served last
    CONSTRAINT queue_gates_pkey PRIMARY KEY (queue)
);
COMMENT ON TABLE jobq.queue_gates IS
    'Internal: per queue with limits, the row its claims lock in turn, its recent claims (for rate_limit) and the round-robin position.';
COMMENT ON COLUMN jobq.queue_gates.queue IS 'The queue.';
COMMENT ON COLUMN jobq.queue_gates.claim_times IS 'When each claim of the current rate window took jobs (the clock after the gate was locked).';
COMMENT ON COLUMN jobq.queue_gates.claim_counts IS 'How many jobs each of those claims took.';
COMMENT ON COLUMN jobq.queue_gates.next_key IS 'Round robin: the concurrency key served last; the next claim goes on after it.';
REVOKE ALL ON TABLE jobq.queue_gates FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.queue_gates TO @extowner@;

-- The concurrency key of each job enqueued with one (jobq.enqueue(...,
-- concurrency_key => ...)), while it is queued, waiting, running or failed:
-- finishing done or cancelled deletes the row, so the index below holds
-- the jobs that may still run.  A table of its own, not a column of
-- jobq.jobs, which would cost every plain job's statements (10_jobs.sql).
-- priority is the job's, which never changes: round-robin claims take a
-- key's jobs by priority, then in enqueue order.
CREATE TABLE jobq.concurrency_keys (
    id              bigint  NOT NULL,
    queue           text    NOT NULL,
    concurrency_key text    NOT NULL,
    priority        integer NOT NULL,
    CONSTRAINT concurrency_keys_pkey PRIMARY KEY (id)
);
CREATE INDEX concurrency_keys_claim_idx ON jobq.concurrency_keys (queue, concurrency_key, priority DESC, id);
COMMENT ON INDEX jobq.concurrency_keys_claim_idx IS
    'Round-robin claims: the keys of a queue in order, and each key''s jobs by priority, then id.';
COMMENT ON TABLE jobq.concurrency_keys IS
    'The concurrency key of each job enqueued with one, until it is done or cancelled.';
COMMENT ON COLUMN jobq.concurrency_keys.id IS 'The job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.concurrency_keys.queue IS 'The job''s queue.';
COMMENT ON COLUMN jobq.concurrency_keys.concurrency_key IS 'The key: at most key_concurrency jobs of the queue with this key run at once.';
COMMENT ON COLUMN jobq.concurrency_keys.priority IS 'The job''s priority.';
SELECT pg_catalog.pg_extension_config_dump('jobq.concurrency_keys', '');
REVOKE ALL ON TABLE jobq.concurrency_keys FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.concurrency_keys TO @extowner@;

/*
 * jobq._claim_gated(queue, n): for jobq.claim on a queue with limits (its
 * cached settings say so), the ids of the jobs to claim, locked FOR NO KEY
 * UPDATE, at most n and as many as the limits leave room for, and at:
 * the clock when the gate was taken, which the claim uses as its time (its
 * locked_at), so that the claims of the rate window are in the order they
 * took the gate.
 *
 * Locks: the queue's row of jobq.queue_gates FOR UPDATE (waiting for the
 * claim that holds it to commit or roll back; then it reads the limits
 * afresh from jobq.queue_settings), then the jobs picked, FOR NO
 * KEY UPDATE SKIP LOCKED.  Raises 25000 when the transaction is not READ
 * COMMITTED: only a snapshot taken after the gate's lock sees the claims
 * that held it before.
 *
 * Which jobs: room = n, less the jobs running over concurrency, less the
 * claims of the last rate_interval over rate_limit.  With key_concurrency,
 * a key already running key_concurrency jobs gets none, and one claim takes
 * at most the room each key has left.  key_order 'priority': the queue's
 * jobs in claim order (priority desc, run_at, id), those of full keys
 * passed over (a long backlog of full keys ahead of the others is walked
 * at every claim: that is where 'round_robin' is the better order).
 * 'round_robin': one job per key in turn, from the key after the one served
 * last, each key's best job (priority, then enqueue order), round after
 * round while room is left; jobs without a key come after the keys' turns.
 */
CREATE FUNCTION jobq._claim_gated(queue text, n integer, OUT picked bigint[], OUT at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- the walk in priority order is planned for the whole backlog (it is read
-- only as far as the room), whose cost would have the JIT compile it at
-- every claim: 250 ms, where the claim takes a few
SET jit = off
AS $$
DECLARE
    gate         jobq.queue_gates;
    limits       jobq.queue_settings;  -- the queue's limits, read after the gate's lock
    room         integer := _claim_gated.n;
    kept_times   timestamptz[];
    kept_counts  integer[];
    run_keys     text[];      -- the keys of the running jobs and of those picked,
    run_counts   integer[];   -- and how many each has
    full_keys    text[];
    slot         integer;
    one          bigint;
    this_key     text;
    served       text;        -- round robin: the key served last
    round_keys   text[];      -- the keys that gave a job this round and have room left
    next_round   text[];
    wrapped      boolean := false;
    -- priority order: the queue's runnable jobs in claim order, with their
    -- keys, those of full keys left out.  A cursor, so planned to return its
    -- first rows fast: it is read only as far as the room.
    in_order CURSOR (from_queue text, skipped text[]) FOR
        SELECT p.id, k.concurrency_key
          FROM jobq.jobs AS p
          LEFT JOIN jobq.concurrency_keys AS k ON k.id = p.id
         WHERE p.queue = from_queue
           AND p.status = 'queued'
           AND p.run_at <= statement_timestamp()
           AND (k.concurrency_key IS NULL OR NOT k.concurrency_key = ANY (skipped))
         ORDER BY p.priority DESC, p.run_at, p.id;
BEGIN
    picked := '{}';
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'claim of queue % needs a READ COMMITTED transaction: the queue has limits',
                        quote_literal(_claim_gated.queue)
            USING ERRCODE = '25000',
                  DETAIL = format('The transaction is %s.', current_setting('transaction_isolation')),
                  HINT = 'Claim from a queue with limits in a READ COMMITTED transaction (the default), best a short one of its own.';
    END IF;
    SELECT g.* INTO gate FROM jobq.queue_gates AS g WHERE g.queue = _claim_gated.queue FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO jobq.queue_gates (queue) VALUES (_claim_gated.queue)
        ON CONFLICT ON CONSTRAINT queue_gates_pkey DO NOTHING;
        SELECT g.* INTO gate FROM jobq.queue_gates AS g WHERE g.queue = _claim_gated.queue FOR UPDATE;
    END IF;
    -- every claim that held the gate before this one has ended: the
    -- statements below see its jobs, and the clock is past its time
    at := clock_timestamp();
    SELECT s.* INTO limits FROM jobq.queue_settings AS s WHERE s.queue = _claim_gated.queue;

    IF limits.concurrency IS NOT NULL THEN
        room := least(room, limits.concurrency
                            - (SELECT count(*) FROM jobq.jobs AS j
                                WHERE j.queue = _claim_gated.queue AND j.status = 'running')::integer);
    END IF;
    IF limits.rate_limit IS NOT NULL THEN
        -- the claims of the window that ends now
        SELECT coalesce(array_agg(c.t ORDER BY c.o), '{}'), coalesce(array_agg(c.k ORDER BY c.o), '{}')
          INTO kept_times, kept_counts
          FROM unnest(gate.claim_times, gate.claim_counts) WITH ORDINALITY AS c(t, k, o)
         WHERE c.t > at - limits.rate_interval;
        room := least(room, limits.rate_limit - coalesce((SELECT sum(k)::integer FROM unnest(kept_counts) AS k), 0));
    END IF;
    IF room <= 0 THEN
        RETURN;  -- at a limit: none now (the gate stays locked to the end of the transaction all the same)
    END IF;

    IF limits.key_concurrency IS NULL THEN
        picked := ARRAY(
            SELECT p.id
              FROM jobq.jobs AS p
             WHERE p.queue = (SELECT _claim_gated.queue)
               AND p.status = 'queued'
               AND p.run_at <= statement_timestamp()
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT (SELECT room)
               FOR NO KEY UPDATE SKIP LOCKED);
    ELSE
        -- the running jobs' keys, counted
        SELECT coalesce(array_agg(r.concurrency_key ORDER BY r.concurrency_key), '{}'),
               coalesce(array_agg(r.running ORDER BY r.concurrency_key), '{}')
          INTO run_keys, run_counts
          FROM (SELECT k.concurrency_key, count(*)::integer AS running
                  FROM jobq.jobs AS j
                  JOIN jobq.concurrency_keys AS k ON k.id = j.id
                 WHERE j.queue = _claim_gated.queue AND j.status = 'running'
                 GROUP BY k.concurrency_key) AS r;
        full_keys := ARRAY(SELECT u.k FROM unnest(run_keys, run_counts) AS u(k, c) WHERE u.c >= limits.key_concurrency);

        IF limits.key_order = 'round_robin' THEN
            -- the first round: every key once, from the one after the key
            -- served last, round to it
            served := gate.next_key;
            this_key := gate.next_key;
            round_keys := '{}';
            LOOP
                EXIT WHEN cardinality(picked) >= room;
                IF this_key IS NULL THEN
                    this_key := (SELECT min(k.concurrency_key) FROM jobq.concurrency_keys AS k
                                  WHERE k.queue = _claim_gated.queue);
                ELSE
                    this_key := (SELECT min(k.concurrency_key) FROM jobq.concurrency_keys AS k
                                  WHERE k.queue = _claim_gated.queue AND k.concurrency_key > this_key);
                END IF;
                IF this_key IS NULL THEN  -- past the last key
                    EXIT WHEN wrapped OR gate.next_key IS NULL;
                    wrapped := true;
                    CONTINUE;
                END IF;
                EXIT WHEN wrapped AND this_key > gate.next_key;  -- round to the start: every key had its turn
                IF NOT this_key = ANY (full_keys) THEN
                    one := (SELECT p.id
                              FROM jobq.concurrency_keys AS k
                              JOIN jobq.jobs AS p ON p.id = k.id
                             WHERE k.queue = (SELECT _claim_gated.queue) AND k.concurrency_key = (SELECT this_key)
                               AND p.status = 'queued' AND p.run_at <= statement_timestamp()
                             ORDER BY k.priority DESC, k.id
                             LIMIT 1
                               FOR NO KEY UPDATE OF p SKIP LOCKED);
                    IF one IS NOT NULL THEN
                        picked := picked || one;
                        served := this_key;
                        slot := array_position(run_keys, this_key);
                        IF slot IS NULL THEN
                            run_keys := run_keys || this_key;
                            run_counts := run_counts || 0;
                            slot := cardinality(run_keys);
                        END IF;
                        run_counts[slot] := run_counts[slot] + 1;
                        IF run_counts[slot] < limits.key_concurrency THEN
                            round_keys := round_keys || this_key;
                        END IF;
                    END IF;
                END IF;
                EXIT WHEN wrapped AND this_key = gate.next_key;
            END LOOP;
            -- the rounds after: the keys that gave a job and have room left, in the same order
            WHILE cardinality(picked) < room AND cardinality(round_keys) > 0 LOOP
                next_round := '{}';
                FOREACH this_key IN ARRAY round_keys LOOP
                    EXIT WHEN cardinality(picked) >= room;
                    one := (SELECT p.id
                              FROM jobq.concurrency_keys AS k
                              JOIN jobq.jobs AS p ON p.id = k.id
                             WHERE k.queue = (SELECT _claim_gated.queue) AND k.concurrency_key = (SELECT this_key)
                               AND p.status = 'queued' AND p.run_at <= statement_timestamp()
                               AND NOT p.id = ANY ((SELECT picked)::bigint[])
                             ORDER BY k.priority DESC, k.id
                             LIMIT 1
                               FOR NO KEY UPDATE OF p SKIP LOCKED);
                    CONTINUE WHEN one IS NULL;
                    picked := picked || one;
                    served := this_key;
                    slot := array_position(run_keys, this_key);
                    run_counts[slot] := run_counts[slot] + 1;
                    IF run_counts[slot] < limits.key_concurrency THEN
                        next_round := next_round || this_key;
                    END IF;
                END LOOP;
                round_keys := next_round;
            END LOOP;
            IF served IS DISTINCT FROM gate.next_key THEN
                UPDATE jobq.queue_gates AS g SET next_key = served WHERE g.queue = _claim_gated.queue;
            END IF;
            -- jobs without a key, after the keys' turns
            IF cardinality(picked) < room THEN
                picked := picked || ARRAY(
                    SELECT p.id
                      FROM jobq.jobs AS p
                     WHERE p.queue = (SELECT _claim_gated.queue)
                       AND p.status = 'queued'
                       AND p.run_at <= statement_timestamp()
                       AND coalesce(p.control & 16 = 0, true)
                     ORDER BY p.priority DESC, p.run_at, p.id
                     LIMIT (SELECT room - cardinality(picked))
                       FOR NO KEY UPDATE SKIP LOCKED);
            END IF;
        ELSE
            -- priority order
            FOR candidate IN in_order(_claim_gated.queue, full_keys) LOOP
                slot := NULL;
                IF candidate.concurrency_key IS NOT NULL THEN
                    slot := array_position(run_keys, candidate.concurrency_key);
                    CONTINUE WHEN slot IS NOT NULL AND run_counts[slot] >= limits.key_concurrency;
                END IF;
                PERFORM FROM jobq.jobs AS p
                  WHERE p.id = candidate.id AND p.status = 'queued'
                    FOR NO KEY UPDATE SKIP LOCKED;
                CONTINUE WHEN NOT FOUND;
                picked := picked || candidate.id;
                IF candidate.concurrency_key IS NOT NULL THEN
                    IF slot IS NULL THEN
                        run_keys := run_keys || candidate.concurrency_key;
                        run_counts := run_counts || 1;
                    ELSE
                        run_counts[slot] := run_counts[slot] + 1;
                    END IF;
                END IF;
                EXIT WHEN cardinality(picked) >= room;
            END LOOP;
        END IF;
    END IF;

    IF limits.rate_limit IS NOT NULL THEN
        UPDATE jobq.queue_gates AS g
           SET claim_times  = kept_times || CASE WHEN cardinality(picked) > 0 THEN ARRAY[at] ELSE '{}' END,
               claim_counts = kept_counts || CASE WHEN cardinality(picked) > 0 THEN ARRAY[cardinality(picked)] ELSE '{}' END
         WHERE g.queue = _claim_gated.queue;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._claim_gated(text, integer) IS
    'Internal: for jobq.claim on a queue with limits, take the queue''s gate and pick (and lock) the jobs the limits leave room for.';
REVOKE ALL ON FUNCTION jobq._claim_gated(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._claim_gated(text, integer) TO @extowner@;

/*
 * jobq.stats(): one row per queue: how many jobs are queued (of which
 * runnable now), running, done and failed, how long the oldest runnable
 * queued job has been waiting, how many jobs are cancelled, and how many
 * wait for parent jobs (waiting).  Reads the whole table; takes no row
 * locks.
 */
CREATE FUNCTION jobq.stats()
RETURNS TABLE (queue text, queued bigint, runnable bigint, running bigint, done bigint,
               failed bigint, oldest_queued_age interval, cancelled bigint, waiting bigint)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT j.queue,
           count(*) FILTER (WHERE j.status = 'queued'),
           count(*) FILTER (WHERE j.status = 'queued' AND j.run_at <= statement_timestamp()),
           count(*) FILTER (WHERE j.status = 'running'),
           count(*) FILTER (WHERE j.status = 'done'),
           count(*) FILTER (WHERE j.status = 'failed'),
           statement_timestamp() - min(j.run_at) FILTER (WHERE j.status = 'queued'
                                                         AND j.run_at <= statement_timestamp()),
           count(*) FILTER (WHERE j.status = 'cancelled'),
           count(*) FILTER (WHERE j.status = 'waiting')
      FROM jobq.jobs AS j
     GROUP BY j.queue
     ORDER BY j.queue
$$;
COMMENT ON FUNCTION jobq.stats() IS
    'Per queue: counts of queued (and runnable now), running, done and failed jobs, the wait of the oldest runnable job, and the counts of cancelled and waiting jobs.';
REVOKE ALL ON FUNCTION jobq.stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.stats() TO @extowner@;

-- 75_schedule.sql, new in 0.7.0

----------------------------------------------------------------------------
-- Schedules: cron expressions and fixed periods, turned into jobs by
-- jobq.tick, which every worker runs each reap interval (or pg_cron does).
-- A schedule's row keeps next_at, its first occurrence not yet enqueued;
-- a tick enqueues the occurrences due within a minute, each a unique job
-- ('cron:<name>:<epoch seconds>'), and moves next_at past them in the same
-- transaction.
--
-- Cron expressions: five fields (minute 0-59, hour 0-23, day of month
-- 1-31, month 1-12 or jan-dec, day of week 0-7, 0 and 7 Sunday, or
-- sun-sat; names in any case), each *, a, a-b, */s or a-b/s, or a list of
-- these separated by commas.  When both day fields are restricted (neither
-- starts with *), a day matches when either does (Vixie cron); a field
-- that starts with * (*/2 too) counts as unrestricted for that rule, as in
-- Debian's cron and cronsim.
--
-- Time zones and daylight saving time, as Debian's cron and cronsim do it:
--   - an expression whose minute and hour fields both name specific values
--     (neither starts with *), such as '30 2 * * *', is evaluated on the
--     wall clock: an occurrence whose local time is skipped by a
--     spring-forward happens at the end of the gap (02:30 in Berlin on the
--     last Sunday of March runs at 03:00 CEST, once, however many
--     occurrences fell in the gap), and one whose local time repeats at a
--     fall-back happens once, at its first pass (02:30 CEST, not 02:30 CET);
--   - any other expression (such as '*/15 * * * *' or '0 * * * *') is
--     evaluated on real instants: an occurrence is every instant whose local
--     time matches, so none falls in a skipped hour and a repeated hour
--     runs twice.
-- Periods (every => interval) ignore time zones: occurrences are the
-- multiples of the period since the Unix epoch.
----------------------------------------------------------------------------

CREATE TYPE jobq._cron AS (
    minute_next integer[],  -- [1:60]: element m+1 is the first allowed minute >= m, NULL for none
    hour_next   integer[],  -- [1:24]: the same for hours
    dom_next    integer[],  -- [1:31]: element d is the first allowed day of the month >= d
    month_next  integer[],  -- [1:12]: element m is the first allowed month >= m
    dow_gap     integer[],  -- [1:7]: element w+1 is how many days from weekday w (0 Sunday) to an allowed one
    days_or     boolean,    -- both day fields restricted: a day matches when either matches
    fixed_time  boolean     -- minute and hour both restricted: the wall-clock rule for DST
);
COMMENT ON TYPE jobq._cron IS 'Internal: a parsed cron expression (jobq._cron_parse), in the form jobq._cron_walk reads fast.';

/*
 * jobq._cron_field(cron, part, field): the values part (one field of cron)
 * allows, as an array of 60 booleans (element v+1 for value v; the day of
 * week folds 7 into 0).  field is 1 to 5 (minute, hour, day-of-month,
 * month, day-of-week).  Raises 22023 naming the field for anything but *,
 * a, a-b, steps of * or of a-b (s after a slash) and lists of them: an
 * empty list element, a value out of range or an unknown name, a range
 * from high to low, a step outside 1 to the field's number of values, a
 * step of one value (a/s: write a-max/s), any other character (L, W, #, ?).
 */
CREATE FUNCTION jobq._cron_field(cron text, part text, field integer)
RETURNS boolean[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names   constant text[] := ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
    lows    constant integer[] := ARRAY[0, 0, 1, 1, 0];
    highs   constant integer[] := ARRAY[59, 23, 31, 12, 7];
    months  constant text[] := ARRAY['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
    days    constant text[] := ARRAY['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
    label   text := names[field];
    low     integer := lows[field];
    high    integer := highs[field];
    allowed boolean[] := array_fill(false, ARRAY[60]);
    element text;
    base    text;
    bounds  text[];
    ends    integer[];
    step    integer;
    word    text;
    v       integer;
BEGIN
    FOREACH element IN ARRAY string_to_array(part, ',') LOOP
        IF element = '' THEN
            RAISE EXCEPTION 'cron''s % field must not have an empty list element, got %', label, quote_literal(part)
                USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
        END IF;
        IF element !~ '^[A-Za-z0-9*]+(-[A-Za-z0-9]+)?(/[0-9]+)?$' THEN
            RAISE EXCEPTION 'cron''s % field must be *, a value, a range a-b, or a step */s or a-b/s (or a list of these), got %',
                            label, quote_literal(element)
                USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron)),
                      HINT = 'L, W, #, ? and a/s are not supported.';
        END IF;
        base := split_part(element, '/', 1);
        step := 1;
        IF strpos(element, '/') > 0 THEN
            IF length(split_part(element, '/', 2)) > 4
               OR split_part(element, '/', 2)::integer NOT BETWEEN 1 AND high - low + 1 THEN
                RAISE EXCEPTION 'cron''s % field must have steps between 1 and %, got %', label, high - low + 1,
                                quote_literal(element)
                    USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
            END IF;
            step := split_part(element, '/', 2)::integer;
            IF base <> '*' AND strpos(base, '-') = 0 THEN
                RAISE EXCEPTION 'cron''s % field must step over * or a range a-b, got %', label, quote_literal(element)
                    USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron)),
                          HINT = format('Write %s-%s/%s for every %s from %s.', base, high, step, label, base);
            END IF;
        END IF;
        IF base = '*' THEN
            ends := ARRAY[low, high];
        ELSIF strpos(base, '*') > 0 THEN
            RAISE EXCEPTION 'cron''s % field must be *, a value, a range a-b, or a step */s or a-b/s (or a list of these), got %',
                            label, quote_literal(element)
                USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
        ELSE
            bounds := string_to_array(base, '-');
            ends := '{}';
            FOREACH word IN ARRAY bounds LOOP
                v := NULL;
                IF word ~ '^[0-9]{1,4}$' THEN
                    v := word::integer;
                ELSIF field = 4 THEN
                    v := array_position(months, lower(word));
                ELSIF field = 5 THEN
                    v := array_position(days, lower(word)) - 1;
                END IF;
                IF v IS NULL OR v NOT BETWEEN low AND high THEN
                    RAISE EXCEPTION 'cron''s % field must hold values from % to %, got %', label, low,
                                    high || CASE WHEN field = 4 THEN ' or jan to dec' WHEN field = 5 THEN ' or sun to sat'
                                                 ELSE '' END,
                                    quote_literal(word)
                        USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
                END IF;
                ends := ends || v;
            END LOOP;
            IF cardinality(ends) = 1 THEN
                ends := ends || ends[1];
            END IF;
            IF ends[2] < ends[1] THEN
                RAISE EXCEPTION 'cron''s % field must have ranges from low to high, got %', label, quote_literal(element)
                    USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
            END IF;
        END IF;
        FOR v IN ends[1]..ends[2] BY step LOOP
            allowed[v % CASE WHEN field = 5 THEN 7 ELSE 60 END + 1] := true;
        END LOOP;
    END LOOP;
    RETURN allowed;
END
$$;
COMMENT ON FUNCTION jobq._cron_field(text, text, integer) IS
    'Internal: the values one field of a cron expression allows; raises 22023 naming the field.';
REVOKE ALL ON FUNCTION jobq._cron_field(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_field(text, text, integer) TO @extowner@;

/*
 * jobq._cron_parse(cron): the expression as jobq._cron: for each field,
 * the next allowed value from each value (so that the walk jumps instead
 * of stepping), and the two rules that depend on how the fields are
 * written (days_or, fixed_time: see the top of this file).  Raises 22004
 * for NULL and 22023 for anything but five valid fields (separated by
 * spaces or tabs; @macros are not supported), naming the field, and for
 * an expression that can never match (a day of the month that none of
 * its months has, such as '0 0 30 2 *').
 */
CREATE FUNCTION jobq._cron_parse(cron text)
RETURNS jobq._cron
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parts   text[];
    allowed boolean[];
    spec    jobq._cron;
    lengths constant integer[] := ARRAY[60, 24, 31, 12, 7];
    firsts  constant integer[] := ARRAY[0, 0, 1, 1, 0];
    nexts   integer[];
    nxt     integer;
    longest integer;
BEGIN
    IF cron IS NULL THEN
        RAISE EXCEPTION 'cron must not be NULL' USING ERRCODE = '22004';
    END IF;
    parts := regexp_split_to_array(btrim(cron, E' \t'), E'[ \t]+');
    IF cardinality(parts) <> 5 OR btrim(cron, E' \t') = '' THEN
        RAISE EXCEPTION 'cron must have five fields (minute hour day-of-month month day-of-week), got %',
                        quote_literal(left(cron, 200))
            USING ERRCODE = '22023',
                  HINT = 'Macros such as @daily and a field of seconds are not supported: write ''0 0 * * *''.';
    END IF;
    FOR field IN 1..5 LOOP
        allowed := jobq._cron_field(cron, parts[field], field);
        nexts := array_fill(NULL::integer, ARRAY[lengths[field]]);
        IF field = 5 THEN
            FOR w IN 0..6 LOOP
                FOR k IN 0..6 LOOP
                    IF allowed[(w + k) % 7 + 1] THEN
                        nexts[w + 1] := k;
                        EXIT;
                    END IF;
                END LOOP;
            END LOOP;
        ELSE
            nxt := NULL;
            FOR i IN REVERSE lengths[field] - 1 + firsts[field]..firsts[field] LOOP
                IF allowed[i + 1] THEN
                    nxt := i;
                END IF;
                nexts[i - firsts[field] + 1] := nxt;
            END LOOP;
        END IF;
        IF field = 1 THEN spec.minute_next := nexts;
        ELSIF field = 2 THEN spec.hour_next := nexts;
        ELSIF field = 3 THEN spec.dom_next := nexts;
        ELSIF field = 4 THEN spec.month_next := nexts;
        ELSE spec.dow_gap := nexts;
        END IF;
    END LOOP;
    spec.days_or := left(parts[3], 1) <> '*' AND left(parts[5], 1) <> '*';
    spec.fixed_time := left(parts[1], 1) <> '*' AND left(parts[2], 1) <> '*';
    IF NOT spec.days_or THEN
        -- both day fields must match: some allowed day must exist in some allowed month (29 in February)
        longest := 0;
        FOR m IN 1..12 LOOP
            IF spec.month_next[m] = m THEN
                longest := greatest(longest, CASE WHEN m = 2 THEN 29 WHEN m = ANY (ARRAY[4, 6, 9, 11]) THEN 30
                                                  ELSE 31 END);
            END IF;
        END LOOP;
        IF spec.dom_next[1] > longest THEN
            RAISE EXCEPTION 'cron can never match: no month of its month field (%) has the day % of its day-of-month field',
                            parts[4], spec.dom_next[1]
                USING ERRCODE = '22023', DETAIL = format('In cron %s.', quote_literal(cron));
        END IF;
    END IF;
    RETURN spec;
END
$$;
COMMENT ON FUNCTION jobq._cron_parse(text) IS
    'Internal: parse a five-field cron expression; raises 22023 naming the bad field, or for an expression that never matches.';
REVOKE ALL ON FUNCTION jobq._cron_parse(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_parse(text) TO @extowner@;

/*
 * jobq._cron_day(spec, day): the first day on or after day (a local date)
 * whose month and day match spec.  Jumps over months, and within a month
 * from one allowed day of the month or week to the next.  Raises XX000
 * if none comes within 400 years (jobq._cron_parse refuses the
 * expressions that never match, so it does not happen).
 */
CREATE FUNCTION jobq._cron_day(spec jobq._cron, day date)
RETURNS date
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    y        integer := date_part('year', day)::integer;
    m        integer := date_part('month', day)::integer;
    d        integer := date_part('day', day)::integer;
    last_y   integer := y + 400;
    dim      integer;
    dom      integer;
    yy       integer;
    dow      integer;
    gap      integer;
    offsets  constant integer[] := ARRAY[0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];  -- Sakamoto's weekday method
BEGIN
    WHILE y <= last_y LOOP
        IF spec.month_next[m] IS NULL THEN
            y := y + 1; m := spec.month_next[1]; d := 1;
            CONTINUE;
        ELSIF spec.month_next[m] <> m THEN
            m := spec.month_next[m]; d := 1;
        END IF;
        dim := CASE WHEN m = 2 THEN CASE WHEN y % 4 = 0 AND (y % 100 <> 0 OR y % 400 = 0) THEN 29 ELSE 28 END
                    WHEN m = ANY (ARRAY[4, 6, 9, 11]) THEN 30 ELSE 31 END;
        LOOP
            EXIT WHEN d > dim;
            dom := spec.dom_next[d];
            yy := CASE WHEN m < 3 THEN y - 1 ELSE y END;
            dow := (yy + yy / 4 - yy / 100 + yy / 400 + offsets[m] + d) % 7;
            gap := spec.dow_gap[dow + 1];
            IF spec.days_or THEN
                d := least(dom, d + gap);
                EXIT;
            END IF;
            IF dom IS NULL THEN
                d := NULL;
                EXIT;
            END IF;
            IF dom = d AND gap = 0 THEN
                EXIT;
            END IF;
            d := greatest(dom, d + gap);
        END LOOP;
        IF d IS NOT NULL AND d <= dim THEN
            RETURN make_date(y, m, d);
        END IF;
        d := 1;
        IF m = 12 THEN
            y := y + 1; m := 1;
        ELSE
            m := m + 1;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'no day matches the cron expression within 400 years' USING ERRCODE = 'XX000';
END
$$;
COMMENT ON FUNCTION jobq._cron_day(jobq._cron, date) IS 'Internal: the first date on or after day that the cron expression''s day and month fields match.';
REVOKE ALL ON FUNCTION jobq._cron_day(jobq._cron, date) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_day(jobq._cron, date) TO @extowner@;

/*
 * jobq._cron_time(spec, minute): the first minute of the day (0 to 1439)
 * at or after minute that the hour and minute fields allow; NULL for none.
 */
CREATE FUNCTION jobq._cron_time(spec jobq._cron, minute integer)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    h  integer := _cron_time.minute / 60;
    mi integer := _cron_time.minute % 60;
    h2 integer;
BEGIN
    IF h > 23 THEN
        RETURN NULL;
    END IF;
    h2 := spec.hour_next[h + 1];
    IF h2 = h THEN
        IF spec.minute_next[mi + 1] IS NOT NULL THEN
            RETURN h * 60 + spec.minute_next[mi + 1];
        END IF;
        IF h = 23 THEN
            RETURN NULL;
        END IF;
        h2 := spec.hour_next[h + 2];
    END IF;
    RETURN h2 * 60 + spec.minute_next[1];  -- NULL when no hour is left
END
$$;
COMMENT ON FUNCTION jobq._cron_time(jobq._cron, integer) IS 'Internal: the first allowed minute of the day at or after the given one, or NULL.';
REVOKE ALL ON FUNCTION jobq._cron_time(jobq._cron, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_time(jobq._cron, integer) TO @extowner@;

/*
 * jobq._cron_walk(spec, timezone, after): the first occurrence of spec
 * strictly after after, by the rules at the top of this file, in the
 * (valid) time zone timezone.  Walks day by day over the days that match
 * (jobq._cron_day jumps to them) and, in each, jumps to the first allowed
 * minute.  A day's UTC offsets come from two probes around it; when they
 * differ, a binary search (to the second) finds the transition T, and the
 * day is two stretches: before T at the old offset, from T at the new one.
 * With fixed_time, a wall-clock time in neither stretch (skipped) runs at
 * T, and one in both (repeated) at its first pass; an occurrence at or
 * before after (in the second pass of a repeated hour) is passed over.
 * Assumes at most one transition within 52 hours (true of tzdata's zones).
 */
CREATE FUNCTION jobq._cron_walk(spec jobq._cron, timezone text, after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    tz        text := _cron_walk.timezone;
    local_x   timestamp := after AT TIME ZONE tz;
    low_wall  timestamp := date_trunc('minute', local_x) + interval '1 minute';  -- fixed_time: walls from here
    on_day       date;
    next_day  timestamp;
    probe_a   timestamptz;
    probe_b   timestamptz;
    off1      interval;
    off2      interval;
    lo        timestamptz;
    hi        timestamptz;
    mid       timestamptz;
    t_change  timestamptz;  -- the transition within reach of the day, or NULL
    seg_start timestamp;
    seg_end   timestamp;
    seg_off   interval;
    from_wall timestamp;
    tod       integer;
    wall      timestamp;
    instant   timestamptz;
BEGIN
    IF spec.fixed_time THEN
        on_day := low_wall::date;
    ELSE
        -- the local date of after, or the day before (a fall-back across
        -- midnight repeats walls of the previous date)
        on_day := ((after - interval '3 hours') AT TIME ZONE tz)::date;
    END IF;
    FOR round IN 1..1000 LOOP
        on_day := jobq._cron_day(spec, on_day);
        next_day := (on_day + 1)::timestamp;
        -- the day's offsets: probes 15 hours before its first and 13 after its last wall time (as UTC)
        probe_a := (on_day::timestamp - interval '15 hours') AT TIME ZONE 'UTC';
        probe_b := (next_day + interval '13 hours') AT TIME ZONE 'UTC';
        off1 := (probe_a AT TIME ZONE tz) - (probe_a AT TIME ZONE 'UTC');
        off2 := (probe_b AT TIME ZONE tz) - (probe_b AT TIME ZONE 'UTC');
        t_change := NULL;
        IF off1 <> off2 THEN
            lo := probe_a;
            hi := probe_b;
            WHILE hi - lo > interval '1 second' LOOP
                mid := to_timestamp(floor((extract(epoch FROM lo) + extract(epoch FROM hi)) / 2)::double precision);
                IF (mid AT TIME ZONE tz) - (mid AT TIME ZONE 'UTC') = off1 THEN
                    lo := mid;
                ELSE
                    hi := mid;
                END IF;
            END LOOP;
            t_change := hi;
        END IF;

        IF spec.fixed_time THEN
            tod := CASE WHEN on_day = low_wall::date
                        THEN (date_part('hour', low_wall) * 60 + date_part('minute', low_wall))::integer ELSE 0 END;
            LOOP
                tod := jobq._cron_time(spec, tod);
                EXIT WHEN tod IS NULL;
                wall := on_day + make_interval(mins => tod);
                IF t_change IS NULL THEN
                    instant := (wall - off1) AT TIME ZONE 'UTC';
                ELSIF wall < (t_change AT TIME ZONE 'UTC') + off1 THEN
                    instant := (wall - off1) AT TIME ZONE 'UTC';  -- before the change, or its first pass
                ELSIF wall >= (t_change AT TIME ZONE 'UTC') + off2 THEN
                    instant := (wall - off2) AT TIME ZONE 'UTC';
                ELSE
                    instant := t_change;  -- skipped: at the end of the gap
                END IF;
                IF instant > after THEN
                    RETURN instant;
                END IF;
                tod := tod + 1;
            END LOOP;
        ELSE
            FOR stretch IN 1..CASE WHEN t_change IS NULL THEN 1 ELSE 2 END LOOP
                IF t_change IS NULL THEN
                    seg_start := on_day::timestamp; seg_end := next_day; seg_off := off1;
                ELSIF stretch = 1 THEN
                    seg_start := on_day::timestamp; seg_end := least(next_day, (t_change AT TIME ZONE 'UTC') + off1); seg_off := off1;
                ELSE
                    seg_start := greatest(on_day::timestamp, (t_change AT TIME ZONE 'UTC') + off2); seg_end := next_day;
                    seg_off := off2;
                END IF;
                from_wall := greatest(seg_start, date_trunc('minute', (after AT TIME ZONE 'UTC') + seg_off)
                                                 + interval '1 minute');
                CONTINUE WHEN from_wall >= seg_end;
                tod := jobq._cron_time(spec, (date_part('hour', from_wall) * 60
                                              + date_part('minute', from_wall))::integer);
                CONTINUE WHEN tod IS NULL;
                wall := on_day + make_interval(mins => tod);
                IF wall < seg_end THEN
                    RETURN (wall - seg_off) AT TIME ZONE 'UTC';
                END IF;
            END LOOP;
        END IF;
        on_day := on_day + 1;
    END LOOP;
    RAISE EXCEPTION 'no occurrence of the cron expression found' USING ERRCODE = 'XX000';
END
$$;
COMMENT ON FUNCTION jobq._cron_walk(jobq._cron, text, timestamptz) IS
    'Internal: the first occurrence of a parsed cron expression strictly after a time, in a time zone, DST handled as cron does.';
REVOKE ALL ON FUNCTION jobq._cron_walk(jobq._cron, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_walk(jobq._cron, text, timestamptz) TO @extowner@;

/*
 * jobq._check_timezone(timezone, canonical): returns nothing; raises 22004
 * for NULL, 22023 for a name PostgreSQL does not know (canonical: one not in
 * pg_timezone_names, spelled as there, so that abbreviations and POSIX
 * strings such as 'UTC+3' are refused too; reading that view takes tens
 * of milliseconds, so only jobq.schedule asks for it).
 */
CREATE FUNCTION jobq._check_timezone(timezone text, canonical boolean)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _check_timezone.timezone IS NULL THEN
        RAISE EXCEPTION 'timezone must not be NULL' USING ERRCODE = '22004';
    END IF;
    BEGIN
        PERFORM now() AT TIME ZONE _check_timezone.timezone;
    EXCEPTION WHEN invalid_parameter_value THEN
        RAISE EXCEPTION 'timezone must name a time zone (pg_timezone_names), got %',
                        quote_literal(left(_check_timezone.timezone, 80))
            USING ERRCODE = '22023', HINT = 'For example ''UTC'' or ''Europe/Berlin''.';
    END;
    IF _check_timezone.canonical
       AND NOT EXISTS (SELECT FROM pg_timezone_names AS z WHERE z.name = _check_timezone.timezone) THEN
        RAISE EXCEPTION 'timezone must name a time zone (pg_timezone_names), got %',
                        quote_literal(left(_check_timezone.timezone, 80))
            USING ERRCODE = '22023', HINT = 'For example ''UTC'' or ''Europe/Berlin''; abbreviations and offsets are refused.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_timezone(text, boolean) IS 'Internal: raises 22004/22023 unless timezone names a time zone.';
REVOKE ALL ON FUNCTION jobq._check_timezone(text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_timezone(text, boolean) TO @extowner@;

/*
 * jobq._cron_next(cron, timezone, after): the first occurrence of cron
 * strictly after after, evaluated on the wall clock of timezone, DST as
 * described at the top of this file (the rule of Debian's cron and of
 * cronsim: a specific time skipped by a spring-forward runs at the end of
 * the gap, one repeated by a fall-back runs at its first pass; other
 * expressions match real instants only).  Raises 22004 (NULL argument),
 * 22023 (bad cron, naming the field; an expression that never matches; an
 * unknown timezone; after infinite).
 */
CREATE FUNCTION jobq._cron_next(cron text, timezone text, after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spec jobq._cron := jobq._cron_parse(_cron_next.cron);
BEGIN
    PERFORM jobq._check_timezone(_cron_next.timezone, false);
    IF _cron_next.after IS NULL THEN
        RAISE EXCEPTION 'after must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT isfinite(_cron_next.after) THEN
        RAISE EXCEPTION 'after must be finite, got %', _cron_next.after USING ERRCODE = '22023';
    END IF;
    RETURN jobq._cron_walk(spec, _cron_next.timezone, _cron_next.after);
END
$$;
COMMENT ON FUNCTION jobq._cron_next(text, text, timestamptz) IS
    'Internal: the first occurrence of a cron expression strictly after a time, in a time zone (DST as Debian''s cron and cronsim).';
REVOKE ALL ON FUNCTION jobq._cron_next(text, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cron_next(text, text, timestamptz) TO @extowner@;

/*
 * jobq._every_next(every, after): the first multiple of every since the
 * Unix epoch strictly after after.  every is checked by the caller (whole
 * seconds, 1 second to 366 days).
 */
CREATE FUNCTION jobq._every_next(every interval, after timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT to_timestamp(((floor(extract(epoch FROM _every_next.after)::numeric
                                / extract(epoch FROM _every_next.every)::numeric) + 1)
                         * extract(epoch FROM _every_next.every)::numeric)::double precision)
$$;
COMMENT ON FUNCTION jobq._every_next(interval, timestamptz) IS 'Internal: the first multiple of a period since the epoch strictly after a time.';
REVOKE ALL ON FUNCTION jobq._every_next(interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._every_next(interval, timestamptz) TO @extowner@;

----------------------------------------------------------------------------
-- The schedules table and view
----------------------------------------------------------------------------

CREATE TABLE jobq.schedule_settings (
    name         text        NOT NULL,
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    cron         text,
    timezone     text        NOT NULL,
    every        interval,
    priority     integer     NOT NULL,
    max_attempts integer,
    headers      jsonb,
    catch_up     text        NOT NULL,
    next_at      timestamptz NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT schedule_settings_pkey PRIMARY KEY (name)
);
-- Serves jobq.tick: the schedules due, one probe when none is.
CREATE INDEX schedule_settings_next_idx ON jobq.schedule_settings (next_at);
COMMENT ON INDEX jobq.schedule_settings_next_idx IS 'Serves jobq.tick: the schedules by their next occurrence not yet enqueued.';
COMMENT ON TABLE jobq.schedule_settings IS
    'One row per schedule (jobq.schedule, jobq.unschedule); jobq.tick enqueues its occurrences. Read it through the view jobq.schedules.';
COMMENT ON COLUMN jobq.schedule_settings.name IS 'The schedule''s name: 1 to 200 characters.';
COMMENT ON COLUMN jobq.schedule_settings.queue IS 'The queue its jobs go to.';
COMMENT ON COLUMN jobq.schedule_settings.payload IS 'The payload of each of its jobs.';
COMMENT ON COLUMN jobq.schedule_settings.cron IS 'A five-field cron expression, evaluated in timezone; NULL when every is set.';
COMMENT ON COLUMN jobq.schedule_settings.timezone IS 'The time zone of cron (a name of pg_timezone_names).';
COMMENT ON COLUMN jobq.schedule_settings.every IS 'A period (1 second to 366 days): occurrences at its multiples since the Unix epoch; NULL when cron is set.';
COMMENT ON COLUMN jobq.schedule_settings.priority IS 'The priority of its jobs.';
COMMENT ON COLUMN jobq.schedule_settings.max_attempts IS 'The max_attempts of its jobs; NULL: the queue''s.';
COMMENT ON COLUMN jobq.schedule_settings.headers IS 'Headers of its jobs, to which each job adds "schedule" (the name) and "occurrence" (its time).';
COMMENT ON COLUMN jobq.schedule_settings.catch_up IS 'What a tick does with occurrences missed by more than a minute: latest (enqueue the most recent, to run now), all (every one, up to 1,000 a tick), skip.';
COMMENT ON COLUMN jobq.schedule_settings.next_at IS 'The first occurrence not yet enqueued.';
COMMENT ON COLUMN jobq.schedule_settings.created_at IS 'When the schedule was first created.';
COMMENT ON COLUMN jobq.schedule_settings.updated_at IS 'When it was last created or replaced.';

-- pg_dump keeps the schedules, like the jobs.
SELECT pg_catalog.pg_extension_config_dump('jobq.schedule_settings', '');

REVOKE ALL ON TABLE jobq.schedule_settings FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.schedule_settings TO @extowner@;

/*
 * jobq._schedule_next(cron, timezone, every, after): the schedule's first
 * occurrence strictly after after (by cron in timezone, or every).
 */
CREATE FUNCTION jobq._schedule_next(cron text, timezone text, every interval, after timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN _schedule_next.every IS NOT NULL THEN jobq._every_next(_schedule_next.every, _schedule_next.after)
                ELSE jobq._cron_walk(jobq._cron_parse(_schedule_next.cron), _schedule_next.timezone,
                                     _schedule_next.after) END
$$;
COMMENT ON FUNCTION jobq._schedule_next(text, text, interval, timestamptz) IS
    'Internal: a schedule''s first occurrence strictly after a time.';
REVOKE ALL ON FUNCTION jobq._schedule_next(text, text, interval, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._schedule_next(text, text, interval, timestamptz) TO @extowner@;

CREATE VIEW jobq.schedules AS
SELECT s.name, s.queue, s.payload, s.cron, s.timezone, s.every, s.priority, s.max_attempts, s.headers,
       s.catch_up, jobq._schedule_next(s.cron, s.timezone, s.every, pg_catalog.now()) AS next_run,
       s.next_at, s.created_at, s.updated_at
  FROM jobq.schedule_settings AS s;
COMMENT ON VIEW jobq.schedules IS 'Every schedule, with its next occurrence after now().';
COMMENT ON COLUMN jobq.schedules.name IS 'The schedule''s name.';
COMMENT ON COLUMN jobq.schedules.queue IS 'The queue its jobs go to.';
COMMENT ON COLUMN jobq.schedules.payload IS 'The payload of each of its jobs.';
COMMENT ON COLUMN jobq.schedules.cron IS 'Its cron expression (NULL: every).';
COMMENT ON COLUMN jobq.schedules.timezone IS 'The time zone of cron.';
COMMENT ON COLUMN jobq.schedules.every IS 'Its period (NULL: cron).';
COMMENT ON COLUMN jobq.schedules.priority IS 'The priority of its jobs.';
COMMENT ON COLUMN jobq.schedules.max_attempts IS 'The max_attempts of its jobs (NULL: the queue''s).';
COMMENT ON COLUMN jobq.schedules.headers IS 'Headers of its jobs (each adds "schedule" and "occurrence").';
COMMENT ON COLUMN jobq.schedules.catch_up IS 'latest, all or skip: what a tick does with missed occurrences.';
COMMENT ON COLUMN jobq.schedules.next_run IS 'Its next occurrence after now().';
COMMENT ON COLUMN jobq.schedules.next_at IS 'The first occurrence not yet enqueued (past: missed, caught up by the next tick).';
COMMENT ON COLUMN jobq.schedules.created_at IS 'When it was first created.';
COMMENT ON COLUMN jobq.schedules.updated_at IS 'When it was last created or replaced.';
REVOKE ALL ON TABLE jobq.schedules FROM PUBLIC;
GRANT SELECT ON TABLE jobq.schedules TO @extowner@;

/*
 * jobq._cancel_occurrences(name, queue): how many jobs it cancelled: the
 * queued jobs of queue enqueued by the schedule name (its header
 * "schedule" and a unique key 'cron:<name>:...').  Locks them FOR NO KEY
 * UPDATE first, so that a job claimed meanwhile (running) is left alone,
 * then cancels them with jobq.cancel (which notifies their watchers).
 */
CREATE FUNCTION jobq._cancel_occurrences(name text, queue text)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    prefix text := 'cron:' || _cancel_occurrences.name || ':';
    ids    bigint[];
BEGIN
    ids := ARRAY(SELECT j.id
                   FROM jobq.jobs AS j
                  WHERE j.queue = (SELECT _cancel_occurrences.queue) AND j.status = 'queued'
                    AND j.headers ->> 'schedule' = (SELECT _cancel_occurrences.name)
                    AND EXISTS (SELECT FROM jobq.unique_keys AS k
                                 WHERE k.job_id = j.id AND left(k.unique_key, length(prefix)) = prefix)
                  ORDER BY j.id
                    FOR NO KEY UPDATE OF j);
    IF cardinality(ids) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM jobq.cancel(ids);
    RETURN cardinality(ids);
END
$$;
COMMENT ON FUNCTION jobq._cancel_occurrences(text, text) IS
    'Internal: cancel the queued jobs a schedule enqueued in a queue (running ones finish).';
REVOKE ALL ON FUNCTION jobq._cancel_occurrences(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._cancel_occurrences(text, text) TO @extowner@;

/*
 * jobq.schedule(name, queue, payload, cron, timezone, every, priority,
 * max_attempts, headers, catch_up): the schedule's row of jobq.schedules.
 * Creates the schedule name, or replaces it: then the queued occurrences
 * of the old definition (not yet started: running ones finish) are
 * cancelled, and the new one starts afresh, its first occurrence the first
 * after now() (no catch-up at creation).  Exactly one of cron (five fields,
 * evaluated in timezone) and every (occurrences at the multiples of it
 * since the Unix epoch).  Each occurrence becomes a job of queue with
 * payload, priority, max_attempts and headers (plus "schedule": name and
 * "occurrence": its time), enqueued by jobq.tick.  Locks the schedule's
 * row, and the queued jobs it cancels.  Raises 22004 (NULL name, queue,
 * payload, timezone, priority or catch_up), 22023 (name not 1 to 200
 * characters; bad queue name; payload or headers not a JSON object;
 * neither or both of cron and every; a bad cron, naming the field, or one
 * that never matches; an unknown timezone; every not whole seconds from 1
 * second to 366 days, or with months; priority or max_attempts out of
 * range; catch_up not latest, all or skip), 54000 (payload or headers
 * over 1 MiB).
 */
CREATE FUNCTION jobq.schedule(
    name         text,
    queue        text,
    payload      jsonb    DEFAULT '{}',
    cron         text     DEFAULT NULL,
    timezone     text     DEFAULT 'UTC',
    every        interval DEFAULT NULL,
    priority     integer  DEFAULT 0,
    max_attempts integer  DEFAULT NULL,
    headers      jsonb    DEFAULT NULL,
    catch_up     text     DEFAULT 'latest')
RETURNS jobq.schedules
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_queue text;
    outcome   jobq.schedules;
BEGIN
    IF schedule.name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF length(schedule.name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'name must be 1 to 200 characters, got %', length(schedule.name) USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._check_queue(schedule.queue);
    PERFORM jobq._check_payload(schedule.payload, 'payload');
    IF (schedule.cron IS NULL) = (schedule.every IS NULL) THEN
        RAISE EXCEPTION 'exactly one of cron and every must be given, got %',
                        CASE WHEN schedule.cron IS NULL THEN 'neither' ELSE 'both' END
            USING ERRCODE = '22023';
    END IF;
    IF schedule.cron IS NOT NULL THEN
        PERFORM jobq._cron_parse(schedule.cron);
    END IF;
    PERFORM jobq._check_timezone(schedule.timezone, true);
    IF schedule.every IS NOT NULL
       AND (date_part('month', schedule.every) <> 0 OR date_part('year', schedule.every) <> 0
            OR extract(epoch FROM schedule.every) < 1 OR extract(epoch FROM schedule.every) > 366 * 86400
            OR extract(epoch FROM schedule.every) <> floor(extract(epoch FROM schedule.every))) THEN
        RAISE EXCEPTION 'every must be a whole number of seconds from 1 second to 366 days, without months, got %',
                        schedule.every
            USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._check_options(schedule.priority, now(), schedule.max_attempts);
    IF schedule.headers IS NOT NULL THEN
        PERFORM jobq._check_job_options(NULL, 'until_done', 'skip', schedule.headers);
        -- with what each job adds
        PERFORM jobq._check_payload(schedule.headers || jsonb_build_object('schedule', schedule.name,
                                                                           'occurrence', '2000-01-01T00:00:00Z'),
                                    'headers');
    END IF;
    IF schedule.catch_up IS NULL THEN
        RAISE EXCEPTION 'catch_up must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF schedule.catch_up <> ALL (ARRAY['latest', 'all', 'skip']) THEN
        RAISE EXCEPTION 'catch_up must be latest, all or skip, got %', quote_literal(left(schedule.catch_up, 80))
            USING ERRCODE = '22023';
    END IF;

    SELECT s.queue INTO old_queue FROM jobq.schedule_settings AS s WHERE s.name = schedule.name FOR UPDATE;
    INSERT INTO jobq.schedule_settings AS s (name, queue, payload, cron, timezone, every, priority, max_attempts,
                                             headers, catch_up, next_at)
    VALUES (schedule.name, schedule.queue, schedule.payload, schedule.cron, schedule.timezone, schedule.every,
            schedule.priority, schedule.max_attempts, schedule.headers, schedule.catch_up,
            jobq._schedule_next(schedule.cron, schedule.timezone, schedule.every, now()))
    ON CONFLICT ON CONSTRAINT schedule_settings_pkey DO UPDATE
       SET queue = excluded.queue, payload = excluded.payload, cron = excluded.cron,
           timezone = excluded.timezone, every = excluded.every, priority = excluded.priority,
           max_attempts = excluded.max_attempts, headers = excluded.headers, catch_up = excluded.catch_up,
           next_at = excluded.next_at, updated_at = now();
    -- the row is ours until the commit (ticks skip it): whatever is queued
    -- for the name now belongs to an older definition
    PERFORM jobq._cancel_occurrences(schedule.name, schedule.queue);
    IF old_queue IS DISTINCT FROM schedule.queue AND old_queue IS NOT NULL THEN
        PERFORM jobq._cancel_occurrences(schedule.name, old_queue);
    END IF;

    SELECT v.* INTO outcome FROM jobq.schedules AS v WHERE v.name = schedule.name;
    RETURN outcome;
END
$$;
COMMENT ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text) IS
    'Create or replace a schedule: a cron expression in a time zone, or a period (every); jobq.tick enqueues its occurrences as jobs of queue. A replace cancels the old definition''s queued occurrences. Returns its row of jobq.schedules.';
REVOKE ALL ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text) TO @extowner@;

/*
 * jobq.unschedule(name): true when the schedule existed.  Deletes it and
 * cancels its queued occurrences (running ones finish).  Locks its row
 * (waiting for a tick that holds it) and the jobs it cancels.  Raises
 * 22004 (NULL name).
 */
CREATE FUNCTION jobq.unschedule(name text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_queue text;
BEGIN
    IF unschedule.name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    DELETE FROM jobq.schedule_settings AS s WHERE s.name = unschedule.name RETURNING s.queue INTO old_queue;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM jobq._cancel_occurrences(unschedule.name, old_queue);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq.unschedule(text) IS 'Delete a schedule and cancel its queued occurrences; false when there is no such schedule.';
REVOKE ALL ON FUNCTION jobq.unschedule(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.unschedule(text) TO @extowner@;

/*
 * jobq._enqueue_occurrence(schedule, occurrence, run_at): 1 when it
 * enqueued the occurrence as a job, 0 when a job of it exists already
 * (its unique key 'cron:<name>:<epoch seconds>', kept until done).
 */
CREATE FUNCTION jobq._enqueue_occurrence(schedule jobq.schedule_settings, occurrence timestamptz, run_at timestamptz)
RETURNS integer
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN jobq.enqueue(
                   queue        => (_enqueue_occurrence.schedule).queue,
                   payload      => (_enqueue_occurrence.schedule).payload,
                   priority     => (_enqueue_occurrence.schedule).priority,
                   -- within enqueue's bounds (10 years of now) whatever the occurrence
                   run_at       => least(greatest(_enqueue_occurrence.run_at, now() - interval '3650 days'),
                                         now() + interval '3650 days'),
                   max_attempts => (_enqueue_occurrence.schedule).max_attempts,
                   unique_key   => 'cron:' || (_enqueue_occurrence.schedule).name || ':'
                                   || floor(extract(epoch FROM _enqueue_occurrence.occurrence))::bigint,
                   unique_scope => 'until_done',
                   on_conflict  => 'skip',
                   headers      => coalesce((_enqueue_occurrence.schedule).headers, '{}'::jsonb)
                                   || jsonb_build_object(
                                          'schedule', (_enqueue_occurrence.schedule).name,
                                          'occurrence', to_char(_enqueue_occurrence.occurrence AT TIME ZONE 'UTC',
                                                                'YYYY-MM-DD"T"HH24:MI:SS"Z"')))
                IS NULL THEN 0 ELSE 1 END
$$;
COMMENT ON FUNCTION jobq._enqueue_occurrence(jobq.schedule_settings, timestamptz, timestamptz) IS
    'Internal: enqueue one occurrence of a schedule as a unique job; 1 if enqueued, 0 if it was already.';
REVOKE ALL ON FUNCTION jobq._enqueue_occurrence(jobq.schedule_settings, timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._enqueue_occurrence(jobq.schedule_settings, timestamptz, timestamptz) TO @extowner@;

/*
 * jobq._tick(at): how many jobs it enqueued, as jobq.tick at the time at
 * (tests drive the clock through it; at must be within 10 years of now).
 * For each schedule whose next_at is at most at + 1 minute (the
 * lookahead), locked FOR UPDATE SKIP LOCKED (a schedule another tick or a
 * replace holds is left to it), enqueues each occurrence from next_at to
 * at + 1 minute as a job to run at its time, and moves next_at past them,
 * in the caller's transaction.  Occurrences more than a minute before at
 * are missed (no tick ran): catch_up 'latest' enqueues only the most
 * recent of them, to run at at; 'all' each of them, to run at its time (at
 * most 1,000 jobs per schedule per tick: the rest at the next tick);
 * 'skip' none.  Each job has the unique key 'cron:<name>:<epoch seconds>'
 * until done, so an occurrence is enqueued at most once even past the row
 * lock.  Raises what jobq.enqueue raises (40001 under contention).
 */
CREATE FUNCTION jobq._tick(at timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    lookahead constant interval := interval '1 minute';
    s         jobq.schedule_settings;
    spec      jobq._cron;
    missed    timestamptz := _tick.at - lookahead;  -- occurrences before this were missed
    horizon   timestamptz := _tick.at + lookahead;
    n         timestamptz;
    lo        timestamptz;
    hi        timestamptz;
    probe     timestamptz;
    jobs      integer;
    enqueued  integer := 0;
BEGIN
    FOR s IN
        SELECT t.*
          FROM jobq.schedule_settings AS t
         WHERE t.next_at <= (SELECT horizon)
         ORDER BY t.next_at
           FOR UPDATE SKIP LOCKED
    LOOP
        spec := CASE WHEN s.cron IS NOT NULL THEN jobq._cron_parse(s.cron) END;
        n := s.next_at;
        jobs := 0;
        IF n < missed THEN
            IF s.catch_up = 'all' THEN
                WHILE n < missed AND jobs < 1000 LOOP
                    enqueued := enqueued + jobq._enqueue_occurrence(s, n, n);
                    jobs := jobs + 1;
                    n := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, n)
                              ELSE jobq._cron_walk(spec, s.timezone, n) END;
                END LOOP;
            ELSE
                IF s.catch_up = 'latest' THEN
                    -- the last occurrence before missed, by bisection: lo is
                    -- always an occurrence before it, none lies in (hi, missed)
                    lo := n;
                    hi := missed;
                    LOOP
                        probe := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, lo)
                                      ELSE jobq._cron_walk(spec, s.timezone, lo) END;
                        EXIT WHEN probe >= missed;
                        probe := to_timestamp(((extract(epoch FROM lo) + extract(epoch FROM hi)) / 2)::double precision);
                        probe := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, probe)
                                      ELSE jobq._cron_walk(spec, s.timezone, probe) END;
                        IF probe < missed THEN
                            lo := probe;
                        ELSE
                            hi := to_timestamp(((extract(epoch FROM lo) + extract(epoch FROM hi)) / 2)::double precision);
                        END IF;
                    END LOOP;
                    enqueued := enqueued + jobq._enqueue_occurrence(s, lo, _tick.at);
                    jobs := jobs + 1;
                END IF;
                -- the first occurrence not missed
                n := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, missed - interval '1 microsecond')
                          ELSE jobq._cron_walk(spec, s.timezone, missed - interval '1 microsecond') END;
            END IF;
        END IF;
        WHILE n <= horizon AND jobs < 1000 LOOP
            enqueued := enqueued + jobq._enqueue_occurrence(s, n, n);
            jobs := jobs + 1;
            n := CASE WHEN s.every IS NOT NULL THEN jobq._every_next(s.every, n)
                      ELSE jobq._cron_walk(spec, s.timezone, n) END;
        END LOOP;
        UPDATE jobq.schedule_settings AS t SET next_at = n WHERE t.name = s.name;
    END LOOP;
    RETURN enqueued;
END
$$;
COMMENT ON FUNCTION jobq._tick(timestamptz) IS
    'Internal: jobq.tick as at a given time: enqueue the occurrences due within a minute of it, catching up missed ones by each schedule''s catch_up.';
REVOKE ALL ON FUNCTION jobq._tick(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._tick(timestamptz) TO @extowner@;

/*
 * jobq.tick(): how many jobs it enqueued: jobq._tick(statement_timestamp()).
 * Every worker runs it each reap interval (or pg_cron does, every
 * minute or more often); ticks at once share the work (a schedule one
 * holds, the others skip), and with nothing due it costs one probe of
 * schedule_settings_next_idx.
 */
CREATE FUNCTION jobq.tick()
RETURNS integer
LANGUAGE sql VOLATILE
-- SECURITY DEFINER: workers run it, and have no privilege on the
-- schedules table or the jobs table; it only does what the schedules say.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._tick(statement_timestamp()) $$;
COMMENT ON FUNCTION jobq.tick() IS
    'Enqueue the occurrences of schedules due within the next minute (and missed ones, by catch_up); returns how many jobs it enqueued. Run by workers or pg_cron.';
REVOKE ALL ON FUNCTION jobq.tick() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.tick() TO @extowner@;

----------------------------------------------------------------------------
-- Functions whose definitions change (grants kept)
----------------------------------------------------------------------------

/*
 * jobq._claim_settings(queue): the queue's row of jobq._claim_hints, its
 * settings read afresh from jobq.queue_settings, for a claim that found no
 * row or an expired one.  Stores the row (cached for a minute) when it can
 * take the queue's advisory lock at once, the transaction is READ
 * COMMITTED (an older snapshot could store settings already changed) and
 * the claim is the transaction's first statement (so that the lock, which
 * a change of the settings waits for, and which forward mode's position
 * needs too, is held for a moment, not for a long transaction's life);
 * otherwise only returns it, and a claim in a longer transaction reads the
 * settings afresh each time.  Deletes the rows of queues not claimed for a
 * minute.  Locks: the queue's advisory lock (pg_try_advisory_xact_lock,
 * never waiting), held to the end of the transaction.
 */
CREATE OR REPLACE FUNCTION jobq._claim_settings(queue text)
RETURNS jobq._claim_hints
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cached jobq._claim_hints;
    stored boolean;
BEGIN
    -- stored only by a claim that is its transaction's first statement (an
    -- autocommit claim: the lock is held for a moment), under READ COMMITTED
    stored := current_setting('transaction_isolation') = 'read committed'
              AND transaction_timestamp() = statement_timestamp()
              AND pg_try_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext(_claim_settings.queue));
    -- read after the lock, with a snapshot of its own
    SELECT _claim_settings.queue, h.priority, h.run_at, h.id, h.until, s.paused, s.lease_timeout, s.timeout,
           s.max_attempts, statement_timestamp() + interval '1 minute',
           s.concurrency IS NOT NULL OR s.key_concurrency IS NOT NULL OR s.rate_limit IS NOT NULL
      INTO cached
      FROM (SELECT) AS one
      LEFT JOIN jobq.queue_settings AS s ON s.queue = _claim_settings.queue
      LEFT JOIN jobq._claim_hints AS h ON h.queue = _claim_settings.queue;
    IF stored THEN
        DELETE FROM jobq._claim_hints AS h
         WHERE h.queue = _claim_settings.queue
            OR (h.cached_until < statement_timestamp() - interval '1 minute'
                AND (h.until IS NULL OR h.until < statement_timestamp()));
        INSERT INTO jobq._claim_hints SELECT (cached).*;
    END IF;
    RETURN cached;
END
$$;
COMMENT ON FUNCTION jobq._claim_settings(text) IS
    'Internal: read a queue''s settings for jobq.claim and cache them in jobq._claim_hints.';

/*
 * jobq.claim(queue, n, worker, lease_timeout): up to n runnable jobs of
 * queue, now running under a new lease that expires lease_timeout from now
 * (NULL, the default: the queue's lease_timeout, else 60 seconds;
 * heartbeats extend it by that length again), in claim order (priority
 * desc, run_at, id).  Never claims a job whose run_at is in the future, nor
 * any job of a paused queue.  locked_at is the statement's clock.  Applies
 * the queue's settings (jobq.queue_settings, as cached in
 * jobq._claim_hints): a job's deadline is now + the queue's timeout (NULL:
 * none), which its lease never outlasts (kept in jobq.deadlines for the
 * heartbeats), and a job enqueued without max_attempts gets the queue's,
 * written into its row (without settings it stays NULL, which means 3).
 *
 * Locks: FOR NO KEY UPDATE SKIP LOCKED on the jobs it picks (at most n, from
 * jobs_claim_idx), which it then updates by primary key; never waits on a
 * job's lock.  When it claims a job, deletes worker's registration as a
 * waiter of queue (jobq.wait), if any: that worker is busy.  Raises 22004 (NULL
 * queue, n or worker), 22023 (bad queue name, n outside 1..1000, worker empty
 * or over 200 characters, lease_timeout not positive or over 1 day).
 *
 * Forward mode, for a bloated claim index.  Every claimed job leaves a dead
 * entry at the start of jobs_claim_idx until vacuum clears it, and a
 * long-open transaction anywhere keeps vacuum from clearing it: each claim
 * then walks all of them before reaching a queued job.  A claim that walked
 * more than 1,000 entries in vain (dead ones, or rows locked by others) puts
 * the queue in forward mode for 2 seconds: it records the last job it
 * claimed in jobq._claim_hints, and the claims of that queue that follow,
 * from any session, scan on from there, within that job's priority, instead
 * of from the start.  A forward scan that walks more than 1,000 entries in
 * vain moves the position on to its own last job; one that comes up short,
 * and the first claim after the 2 seconds, scan from the start again (and
 * decide anew).  So in forward mode a job that sorts before the position (a
 * higher priority, an earlier run_at) waits up to 2 seconds; without bloat
 * every claim scans from the start, in exact order.  The position is written
 * only under a transaction-level advisory lock taken with
 * pg_try_advisory_xact_lock, so a claim never waits for another to write it
 * and a queue never has two positions.
 */
CREATE OR REPLACE FUNCTION jobq.claim(queue text, n integer, worker text,
                           lease_timeout interval DEFAULT NULL)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 10
-- SECURITY DEFINER: workers claim without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hint          jobq._claim_hints;  -- the queue's settings and forward mode's position
    picked        bigint[];
    walked        bigint;
    forward_until timestamptz;  -- forward mode lasts until then; NULL: the last scan was from the start
    claimed_at    timestamptz;  -- a queue with limits: when its claim took the gate (52_limits.sql)
BEGIN
    IF claim.queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF claim.queue !~ '^[a-z0-9_]{1,58}$' THEN
        RAISE EXCEPTION 'queue must be 1 to 58 characters of a-z, 0-9 and _, got %',
                        quote_literal(left(claim.queue, 80))
            USING ERRCODE = '22023',
                  HINT = 'Queue names become notification channels jobq_<queue>.';
    END IF;
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
    IF claim.lease_timeout <= interval '0' OR claim.lease_timeout > interval '1 day' THEN  -- NULL: the queue's
        RAISE EXCEPTION 'lease_timeout must be a positive interval of at most 1 day, got %', claim.lease_timeout
            USING ERRCODE = '22023';
    END IF;

    -- The statements below read the arguments through sub-selects, written
    -- (SELECT claim.queue), (SELECT claim.n), (SELECT picked): the planner
    -- cannot see through them, so a plan made for one call's values costs
    -- the same as the generic plan and the plan cache keeps the generic one.
    -- Given the values themselves, it re-planned these statements at every
    -- call (a custom plan looks cheaper for a known queue, n or array), which
    -- was a third of a claim's instructions (bench/instructions.py).
    SELECT h.* INTO hint
      FROM jobq._claim_hints AS h
     WHERE h.queue = claim.queue AND h.cached_until >= statement_timestamp();
    IF NOT FOUND OR hint.paused THEN
        IF NOT FOUND THEN  -- none, or a minute old
            hint := jobq._claim_settings(claim.queue);
        END IF;
        IF hint.paused THEN
            RETURN;  -- a paused queue hands out nothing
        END IF;
    END IF;
    IF hint.limited THEN
        -- a queue with limits (52_limits.sql): its gate decides how many, and when
        SELECT g.picked, g.at INTO picked, claimed_at FROM jobq._claim_gated(claim.queue, claim.n) AS g;
    ELSIF hint.until > statement_timestamp() THEN
        forward_until := hint.until;
        walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass);
        picked := ARRAY(
            SELECT p.id
              FROM jobq.jobs AS p
             WHERE p.queue = (SELECT claim.queue)
               AND p.status = 'queued'
               AND p.priority = hint.priority
               AND (p.run_at, p.id) > (hint.run_at, hint.id)
               AND p.run_at <= statement_timestamp()
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT (SELECT claim.n)
               FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(picked) IS DISTINCT FROM claim.n AND NOT hint.limited IS TRUE THEN
        -- from the start of the index
        forward_until := NULL;
        walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass);
        picked := ARRAY(
            SELECT p.id
              FROM jobq.jobs AS p
             WHERE p.queue = (SELECT claim.queue)
               AND p.status = 'queued'
               AND p.run_at <= statement_timestamp()
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT (SELECT claim.n)
               FOR NO KEY UPDATE SKIP LOCKED);
    END IF;

    -- the entries the scan walked in vain: those it returned but did not claim
    walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass) - walked
              - cardinality(picked);  -- NULL for a queue with limits: no forward mode
    IF walked > 1000 AND cardinality(picked) > 0
       AND pg_try_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext(claim.queue)) THEN
        UPDATE jobq._claim_hints AS h
           SET priority = p.priority, run_at = p.run_at, id = p.id,
               until = coalesce(forward_until, statement_timestamp() + interval '2 seconds')
          FROM jobq.jobs AS p
         WHERE h.queue = claim.queue AND p.id = picked[cardinality(picked)];
        IF NOT FOUND THEN  -- the settings were not cached: a row for the position alone
            INSERT INTO jobq._claim_hints (queue, priority, run_at, id, until)
            SELECT claim.queue, p.priority, p.run_at, p.id, statement_timestamp() + interval '2 seconds'
              FROM jobq.jobs AS p
             WHERE p.id = picked[cardinality(picked)];
        END IF;
    END IF;

    -- a worker that got jobs is busy, no longer waiting (30_notify.sql):
    -- enqueues stop notifying for it until it waits again.  One that got
    -- none stays registered: it is about to sleep.
    IF cardinality(picked) > 0 THEN
        DELETE FROM jobq._waiters AS w WHERE w.queue = claim.queue AND w.worker = claim.worker;
    END IF;

    IF hint.paused IS NULL THEN
        -- a plain queue (no settings): the lease asked for, else 60 seconds;
        -- max_attempts stays as enqueued (NULL: 3, which fail and reap apply)
        RETURN QUERY
        WITH claimed AS (
            UPDATE jobq.jobs AS j
               SET status           = 'running',
                   locked_by        = claim.worker,
                   locked_at        = statement_timestamp(),
                   lease_expires_at = statement_timestamp() + coalesce(claim.lease_timeout, interval '60 seconds'),
                   attempts         = j.attempts + 1,
                   lease            = j.lease + 1
             WHERE j.id = ANY ((SELECT picked)::bigint[])
            RETURNING j.*
        )
        SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
        RETURN;
    END IF;

    -- a queue with settings: its lease, its max_attempts, and its timeout,
    -- which the lease never outlasts (jobq.deadlines keeps the deadline for
    -- the heartbeats); a statement of its own, so the plain one keeps its
    -- short plan
    RETURN QUERY
    WITH claimed AS (
        UPDATE jobq.jobs AS j
           SET status           = 'running',
               locked_by        = claim.worker,
               locked_at        = coalesce(claimed_at, statement_timestamp()),
               lease_expires_at = least(coalesce(claimed_at, statement_timestamp())
                                        + coalesce(claim.lease_timeout, hint.lease_timeout, interval '60 seconds'),
                                        coalesce(claimed_at, statement_timestamp()) + hint.timeout),
               max_attempts     = coalesce(j.max_attempts, hint.max_attempts, 3),
               attempts         = j.attempts + 1,
               lease            = j.lease + 1
         WHERE j.id = ANY ((SELECT picked)::bigint[])
        RETURNING j.*
    ), timed AS (
        INSERT INTO jobq.deadlines (id, lease, deadline)
        SELECT c.id, c.lease, coalesce(claimed_at, statement_timestamp()) + hint.timeout
          FROM claimed AS c
         WHERE (SELECT hint.timeout) IS NOT NULL  -- a sub-select, so the plan cache keeps one plan
        ON CONFLICT ON CONSTRAINT deadlines_pkey DO UPDATE SET lease = excluded.lease, deadline = excluded.deadline
    )
    SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;
COMMENT ON FUNCTION jobq.claim(text, integer, text, interval) IS
    'Claim up to n runnable jobs of a queue for worker (FOR NO KEY UPDATE SKIP LOCKED), each under a new lease that expires lease_timeout (default: the queue''s, else 60 s) from now; returns them running. A paused queue gives none.';

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
           -- "IS TRUE" keeps the planner from matching jobs_reap_idx's predicate:
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
 * jobq.complete(id, lease, result): running -> done, storing result (any
 * JSON value; NULL: none) in jobq.results, also when the job's worker was asked to cancel
 * it (the work happened); notifies "jobq.done" when the job is watched
 * (jobq.watch).  Locks the job's row (waits for a concurrent reaper holding
 * it).  Repeating a successful complete with the same lease
 * does nothing and succeeds (its result is not stored again).  Raises 22004
 * (NULL id or lease), 54000 (result over 1 MiB), JQ002 (no such job), JQ001
 * (the lease is not the job's current one, or the job is not running: it
 * was reaped, failed, finished, cancelled or re-claimed).
 */
CREATE OR REPLACE FUNCTION jobq.complete(id bigint, lease bigint, result jsonb DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers settle jobs without UPDATE on jobq.jobs; the lease
-- decides which rows they may change.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    control smallint;
BEGIN
    -- a hot path: the check inline, the helper called only to raise
    IF complete.id IS NULL OR complete.lease IS NULL THEN
        PERFORM jobq._check_lease(complete.id, complete.lease);  -- raises, naming the NULL
    END IF;
    -- a job without job control: the whole work is this UPDATE (and, with a
    -- result, its INSERT).  The result is tested in plpgsql, not in the
    -- UPDATE, which the plan cache would re-plan for each value (jobq.claim)
    UPDATE jobq.jobs AS j
       SET status = 'done', finished_at = statement_timestamp()
     WHERE j.id = complete.id AND j.lease = complete.lease AND j.status = 'running' AND j.control IS NULL;
    IF FOUND AND complete.result IS NULL THEN
        RETURN;
    END IF;
    IF FOUND THEN
        IF pg_column_size(complete.result) > 1000 THEN
            PERFORM jobq._check_result(complete.result, 'result');  -- sees it whole; its error undoes the UPDATE
        END IF;
        INSERT INTO jobq.results (id, result) VALUES (complete.id, complete.result)
        ON CONFLICT ON CONSTRAINT results_pkey DO UPDATE SET result = excluded.result;
        RETURN;
    END IF;
    -- a job under job control (watched, or asked to cancel), a repeat, or a lease not held
    IF pg_column_size(complete.result) > 1000 THEN
        PERFORM jobq._check_result(complete.result, 'result');
    END IF;
    UPDATE jobq.jobs AS j
       SET status = 'done', finished_at = statement_timestamp()
     WHERE j.id = complete.id AND j.lease = complete.lease AND j.status = 'running'
    RETURNING j.control INTO control;
    IF FOUND THEN
        IF complete.result IS NOT NULL THEN
            INSERT INTO jobq.results (id, result) VALUES (complete.id, complete.result)
            ON CONFLICT ON CONSTRAINT results_pkey DO UPDATE SET result = excluded.result;
        END IF;
        IF control & 2 <> 0 THEN  -- watched
            PERFORM jobq._notify_finished(complete.id);
        END IF;
        IF control & 24 <> 0 THEN  -- a concurrency key, or dependents (45_flow.sql)
            PERFORM jobq._finish_linked(complete.id, 'done', control);
        END IF;
        RETURN;
    END IF;
    PERFORM FROM jobq.jobs AS j
      WHERE j.id = complete.id AND j.lease = complete.lease AND j.status = 'done';
    IF FOUND THEN
        RETURN;  -- a repeat of a complete that succeeded
    END IF;
    PERFORM jobq._raise_not_held(complete.id, complete.lease);
END
$$;
COMMENT ON FUNCTION jobq.complete(bigint, bigint, jsonb) IS
    'Mark a running job done, storing its result (any JSON value, optional). Refuses a lease that is not current with SQLSTATE JQ001 (JQ002: no such job); repeating a successful call is harmless.';

/*
 * jobq.fail(id, error, lease, retry_in): the job's row after the failure:
 * queued again with run_at = now + retry_in, or + the queue's backoff
 * (jobq._retry_delay: by default 2^attempts seconds, at most 300), or
 * failed once attempts reached max_attempts; cancelled instead, never
 * retried, when jobq.cancel asked its worker to stop (notifying "jobq.done"
 * then, for a watched job).  error is kept in last_error, cut to 2,000
 * characters.  Locks the job's row.  Raises 22004
 * (NULL id, lease or error), 22023 (retry_in negative or over 10 years),
 * JQ002, JQ001 like jobq.complete (a repeated fail is refused: the job is no
 * longer held).
 */
CREATE OR REPLACE FUNCTION jobq.fail(id bigint, error text, lease bigint, retry_in interval DEFAULT NULL)
RETURNS jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers settle jobs without UPDATE on jobq.jobs; the lease
-- decides which rows they may change.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    failed_job jobq.jobs;
BEGIN
    PERFORM jobq._check_lease(fail.id, fail.lease);
    IF fail.error IS NULL THEN
        RAISE EXCEPTION 'error must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF fail.retry_in < interval '0' OR fail.retry_in > interval '10 years' THEN
        RAISE EXCEPTION 'retry_in must be an interval between 0 and 10 years, got %', fail.retry_in
            USING ERRCODE = '22023';
    END IF;
    UPDATE jobq.jobs AS j
       SET status      = CASE WHEN j.control & 1 <> 0 THEN 'cancelled'  -- a cancel was requested
                              WHEN j.attempts >= coalesce(j.max_attempts, jobq._max_attempts(j.queue)) THEN 'failed'
                              ELSE 'queued' END,
           run_at      = CASE WHEN coalesce(j.control & 1 = 0, true) AND j.attempts < coalesce(j.max_attempts, jobq._max_attempts(j.queue))
                              THEN statement_timestamp()
                                   + coalesce(fail.retry_in, jobq._retry_delay(j.queue, j.attempts))
                              ELSE j.run_at END,
           finished_at = CASE WHEN j.control & 1 <> 0 OR j.attempts >= coalesce(j.max_attempts, jobq._max_attempts(j.queue))
                              THEN statement_timestamp() END,
           last_error  = left(fail.error, 2000)
     WHERE j.id = fail.id AND j.lease = fail.lease AND j.status = 'running'
    RETURNING j.* INTO failed_job;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(fail.id, fail.lease);
    END IF;
    IF failed_job.control & 2 <> 0 AND failed_job.status <> 'queued' THEN  -- watched, and finished
        PERFORM jobq._notify_finished(fail.id);
    END IF;
    IF failed_job.control & 24 <> 0 AND failed_job.status <> 'queued' THEN  -- a key or dependents, and finished
        PERFORM jobq._finish_linked(fail.id, failed_job.status, failed_job.control);
    END IF;
    RETURN failed_job;
END
$$;
COMMENT ON FUNCTION jobq.fail(bigint, text, bigint, interval) IS
    'Record a failure of a running job: back to queued after retry_in or the queue''s backoff, failed at max_attempts, cancelled if a cancel was requested. Refuses a stale lease with JQ001.';

/*
 * jobq.snooze(id, lease, delay): the job's new run_at, now + delay: the
 * running job goes back to queued without spending an attempt (a handler
 * waiting on something outside); the lease is spent all the same.  A job
 * whose worker was asked to cancel it becomes cancelled instead, and NULL is
 * returned.  Locks the job's row.  Raises 22004 (NULL argument), 22023
 * (delay negative or over 10 years), JQ002, JQ001 like jobq.complete.
 */
CREATE OR REPLACE FUNCTION jobq.snooze(id bigint, lease bigint, delay interval)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers settle jobs without UPDATE on jobq.jobs; the lease
-- decides which rows they may change.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_status text;
    new_run_at timestamptz;
    watched    boolean;
    bits       smallint;
BEGIN
    PERFORM jobq._check_lease(snooze.id, snooze.lease);
    IF snooze.delay IS NULL THEN
        RAISE EXCEPTION 'delay must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF snooze.delay < interval '0' OR snooze.delay > interval '10 years' THEN
        RAISE EXCEPTION 'delay must be an interval between 0 and 10 years, got %', snooze.delay
            USING ERRCODE = '22023';
    END IF;
    UPDATE jobq.jobs AS j
       SET status      = CASE WHEN j.control & 1 <> 0 THEN 'cancelled' ELSE 'queued' END,
           run_at      = CASE WHEN j.control & 1 <> 0 THEN j.run_at ELSE statement_timestamp() + snooze.delay END,
           attempts    = CASE WHEN j.control & 1 <> 0 THEN j.attempts ELSE j.attempts - 1 END,
           finished_at = CASE WHEN j.control & 1 <> 0 THEN statement_timestamp() END
     WHERE j.id = snooze.id AND j.lease = snooze.lease AND j.status = 'running'
    RETURNING j.status, j.run_at, j.control & 2 <> 0, j.control INTO new_status, new_run_at, watched, bits;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(snooze.id, snooze.lease);
    END IF;
    IF watched AND new_status = 'cancelled' THEN
        PERFORM jobq._notify_finished(snooze.id);
    END IF;
    IF bits & 24 <> 0 AND new_status = 'cancelled' THEN
        PERFORM jobq._finish_linked(snooze.id, new_status, bits);
    END IF;
    RETURN CASE WHEN new_status = 'queued' THEN new_run_at END;
END
$$;
COMMENT ON FUNCTION jobq.snooze(bigint, bigint, interval) IS
    'Put a running job back to queued, runnable after delay, without spending an attempt; returns its run_at (NULL: cancelled, as requested). Refuses a stale lease with JQ001.';

/*
 * jobq.release(id, lease): hands a claimed job back unstarted (a worker
 * shutting down): running -> queued, run_at kept, the attempt not counted;
 * cancelled instead when jobq.cancel asked its worker to stop.  The lease
 * is spent all the same.  Locks the job's row.  Raises 22004, JQ002, JQ001
 * like jobq.complete.
 */
CREATE OR REPLACE FUNCTION jobq.release(id bigint, lease bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers hand jobs back without UPDATE on jobq.jobs; the lease
-- decides which rows they may change.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cancelled_watched boolean;
    bits              smallint;
    new_status        text;
BEGIN
    PERFORM jobq._check_lease(release.id, release.lease);
    UPDATE jobq.jobs AS j
       SET status      = CASE WHEN j.control & 1 <> 0 THEN 'cancelled' ELSE 'queued' END,
           attempts    = CASE WHEN j.control & 1 <> 0 THEN j.attempts ELSE j.attempts - 1 END,
           finished_at = CASE WHEN j.control & 1 <> 0 THEN statement_timestamp() END
     WHERE j.id = release.id AND j.lease = release.lease AND j.status = 'running'
    RETURNING j.control & 3 = 3, j.control, j.status INTO cancelled_watched, bits, new_status;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(release.id, release.lease);
    END IF;
    IF cancelled_watched THEN
        PERFORM jobq._notify_finished(release.id);
    END IF;
    IF bits & 24 <> 0 AND new_status = 'cancelled' THEN
        PERFORM jobq._finish_linked(release.id, new_status, bits);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq.release(bigint, bigint) IS
    'Hand a claimed, unstarted job back to the queue without counting the attempt (cancelled, if a cancel was requested). Refuses a stale lease with JQ001.';

/*
 * jobq.reap(stale): the recovered jobs, by id: running jobs whose lease has
 * expired (lease_expires_at, set by claim from its lease_timeout and moved on
 * by every heartbeat, never past the job's deadline) go back to queued
 * (after the queue's retry backoff), or to failed when out of attempts, or
 * to cancelled when jobq.cancel asked their worker to stop; a note naming
 * the lost lease, or the timeout that passed, is appended to last_error.  Each job is judged by its own lease, so workers with
 * different lease lengths never reap each other's live jobs.  stale (default
 * NULL) only ever holds reaping back: given, a job must also have been
 * claimed or extended more than stale ago (kept from 0.3.0, where stale was
 * the whole test; no longer needed).  Locks: FOR NO KEY UPDATE SKIP LOCKED,
 * so two reapers, or a reaper and a completing worker, never wait on each
 * other.  Raises 22023 (stale not positive, or over 10 years).
 */
CREATE OR REPLACE FUNCTION jobq.reap(stale interval DEFAULT NULL)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: the worker level recovers expired leases without UPDATE
-- on jobq.jobs, so a fleet of workers needs no admin to recover a killed
-- worker's jobs.  It can touch nothing else: only jobs whose lease expired.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF reap.stale <= interval '0' OR reap.stale > interval '10 years' THEN
        RAISE EXCEPTION 'stale must be a positive interval of at most 10 years, got %', reap.stale
            USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    WITH expired AS MATERIALIZED (
        SELECT j.id, (SELECT d.deadline FROM jobq.deadlines AS d WHERE d.id = j.id AND d.lease = j.lease) AS deadline
          FROM jobq.jobs AS j
         WHERE j.status = 'running'
           AND j.lease_expires_at < statement_timestamp()
           AND (reap.stale IS NULL OR j.locked_at < statement_timestamp() - reap.stale)
           FOR NO KEY UPDATE SKIP LOCKED
    ), reaped AS (
        UPDATE jobq.jobs AS j
           SET status      = CASE WHEN j.control & 1 <> 0 THEN 'cancelled'  -- a cancel was requested
                                  WHEN j.attempts >= coalesce(j.max_attempts, jobq._max_attempts(j.queue)) THEN 'failed'
                                  ELSE 'queued' END,
               run_at      = CASE WHEN coalesce(j.control & 1 = 0, true) AND j.attempts < coalesce(j.max_attempts, jobq._max_attempts(j.queue))
                                  THEN statement_timestamp() + jobq._retry_delay(j.queue, j.attempts)
                                  ELSE j.run_at END,
               finished_at = CASE WHEN j.control & 1 <> 0 OR j.attempts >= coalesce(j.max_attempts, jobq._max_attempts(j.queue))
                                  THEN statement_timestamp() END,
               last_error  = right(concat_ws(E'\n', j.last_error,
                                             CASE WHEN expired.deadline <= statement_timestamp()
                                                  THEN format('reaped: lease %s of %s timed out at its deadline %s',
                                                              j.lease, j.locked_by, expired.deadline)
                                                  ELSE format('reaped: lease %s of %s went stale',
                                                              j.lease, j.locked_by) END),
                                   2000)
          FROM expired
         WHERE j.id = expired.id
        RETURNING j.*
    )
    -- every row passes; a watched one that finished notifies "jobq.done" on its
    -- way, and one with a concurrency key or dependents settles them
    SELECT r.* FROM reaped AS r
     WHERE r.status = 'queued' OR r.control IS NULL
        OR ((r.control & 2 = 0 OR jobq._notify_finished(r.id))
            AND (r.control & 24 = 0 OR jobq._finish_linked(r.id, r.status, r.control)))
     ORDER BY r.id;
END
$$;
COMMENT ON FUNCTION jobq.reap(interval) IS
    'Recover running jobs whose lease expired or whose timeout passed: back to queued, failed when out of attempts, cancelled when a cancel was requested. Returns them. stale, when given, also requires the lease to be older than stale.';

/*
 * jobq.purge(older_than, max_rows): the number of jobs deleted: done and
 * cancelled jobs (and failed ones too when include_failed) that finished more than
 * older_than ago, at most max_rows of them, so a large backlog can be purged
 * in short transactions, with their results, deadlines, keys and
 * dependency rows.
 * Skips rows locked by others.  Raises 22004 (NULL
 * argument), 22023 (older_than negative, max_rows outside 1..1000000).
 */
CREATE OR REPLACE FUNCTION jobq.purge(older_than interval, max_rows integer DEFAULT 100000,
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
         WHERE (j.status = ANY (ARRAY['done', 'cancelled']) OR (purge.include_failed AND j.status = 'failed'))
           AND j.finished_at < statement_timestamp() - purge.older_than
         LIMIT purge.max_rows
           FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM jobq.jobs AS j USING doomed WHERE j.id = doomed.id
        RETURNING j.id, j.control
    ), keys AS (
        -- the keys these jobs held: free now
        DELETE FROM jobq.unique_keys AS k USING gone AS g WHERE k.job_id = g.id
    ), results AS (
        DELETE FROM jobq.results AS r USING gone AS g WHERE r.id = g.id
    ), deadlines AS (
        DELETE FROM jobq.deadlines AS d USING gone AS g WHERE d.id = g.id
    ), concurrency_keys AS (
        DELETE FROM jobq.concurrency_keys AS k USING gone AS g WHERE k.id = g.id AND g.control & 16 <> 0
    ), parents AS (
        DELETE FROM jobq.job_deps AS d USING gone AS g WHERE d.child = g.id AND g.control & 32 <> 0
    ), waits AS (
        DELETE FROM jobq.job_waits AS w USING gone AS g WHERE w.id = g.id AND g.control & 32 <> 0
    )
    SELECT count(*) INTO deleted FROM gone;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION jobq.purge(interval, integer, boolean) IS
    'Delete done and cancelled jobs (and failed ones with include_failed) finished more than older_than ago, at most max_rows; returns how many.';

/*
 * jobq.cancel(ids, force): one row per known id, by id, with its status
 * after the call: 'cancelled' (it was queued, scheduled, waiting or already
 * cancelled, or running and force is true: its lease is refused from now
 * on), 'cancel_requested' (running: its worker is asked to stop, through a
 * notification on jobq_<queue> with the payload cancel:<id>,... and through
 * jobq.heartbeat_status; it ends cancelled if it fails, snoozes, is
 * released or reaped, and done if it completes), 'done' or 'failed'
 * (finished: unchanged).  Unknown ids are left out.  Locks the jobs' rows
 * FOR NO KEY UPDATE in id order, waiting for a claim or an acknowledgement
 * in flight, so its decision is made on the job's newest state.  Raises
 * 22004 (NULL ids or force), 22023 (ids multidimensional or holding NULL).
 */
CREATE OR REPLACE FUNCTION jobq.cancel(ids bigint[], force boolean DEFAULT false)
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known_ids bigint[];
    queues    text[];
    were      text[];  -- each job's status before
    statuses  text[];  -- and after
    linked    record;
BEGIN
    IF cancel.ids IS NULL THEN
        RAISE EXCEPTION 'ids must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(cancel.ids) > 1 THEN
        RAISE EXCEPTION 'ids must be a one-dimensional array, got % dimensions', array_ndims(cancel.ids)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(cancel.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'ids must not contain NULL, found one at ids[%]', array_position(cancel.ids, NULL)
            USING ERRCODE = '22023';
    END IF;
    IF cancel.force IS NULL THEN
        RAISE EXCEPTION 'force must not be NULL' USING ERRCODE = '22004';
    END IF;

    WITH target AS MATERIALIZED (
        -- the newest version of each job, locked (this waits for a claim in flight)
        SELECT j.id, j.status AS was
          FROM jobq.jobs AS j
         WHERE j.id = ANY (cancel.ids)
         ORDER BY j.id
           FOR NO KEY UPDATE
    ), changed AS (
        UPDATE jobq.jobs AS j
           SET status              = CASE WHEN t.was <> 'running' OR cancel.force THEN 'cancelled' ELSE j.status END,
               finished_at         = CASE WHEN t.was <> 'running' OR cancel.force THEN statement_timestamp()
                                          ELSE j.finished_at END,
               control             = CASE WHEN t.was = 'running' THEN coalesce(j.control, 0) | 1  -- cancel requested
                                          ELSE j.control END
          FROM target AS t
         WHERE j.id = t.id AND t.was = ANY (ARRAY['queued', 'waiting', 'running'])
        RETURNING j.id, j.queue, j.status,
                  j.control & 2 <> 0 AND j.status = 'cancelled' AND jobq._notify_finished(j.id) AS notified
    )
    SELECT array_agg(t.id ORDER BY t.id), array_agg(c.queue ORDER BY t.id), array_agg(t.was ORDER BY t.id),
           array_agg(coalesce(c.status, t.was) ORDER BY t.id)
      INTO known_ids, queues, were, statuses
      FROM target AS t
      LEFT JOIN changed AS c ON c.id = t.id;

    -- the cancelled ones with a concurrency key, dependents or parents: their
    -- bookkeeping (45_flow.sql), after the statement that cancelled them all
    FOR linked IN
        SELECT j.id, j.control FROM jobq.jobs AS j
         WHERE j.id = ANY (known_ids) AND j.status = 'cancelled' AND j.control & 56 <> 0
           AND NOT (were[array_position(known_ids, j.id)] = 'cancelled')
         ORDER BY j.id
    LOOP
        PERFORM jobq._finish_linked(linked.id, 'cancelled', linked.control);
    END LOOP;

    -- tell the workers of the running ones, 500 ids per notification (under
    -- the 8,000-byte limit of a payload)
    PERFORM pg_notify('jobq_' || n.queue, 'cancel:' || n.ids)
       FROM (SELECT r.queue, string_agg(r.id::text, ',' ORDER BY r.id) AS ids
               FROM (SELECT o.id, o.queue, (row_number() OVER (PARTITION BY o.queue ORDER BY o.id) - 1) / 500 AS chunk
                       FROM unnest(known_ids, queues, were) AS o (id, queue, was)
                      WHERE o.was = 'running') AS r
              GROUP BY r.queue, r.chunk) AS n;

    RETURN QUERY
    SELECT o.id, CASE WHEN o.status = 'running' THEN 'cancel_requested' ELSE o.status END
      FROM unnest(known_ids, statuses) AS o (id, status)
     ORDER BY o.id;
END
$$;
COMMENT ON FUNCTION jobq.cancel(bigint[], boolean) IS
    'Cancel jobs: queued ones at once, running ones by asking their worker (or at once with force, fencing the lease). Returns each known id with its status: cancelled, cancel_requested, done or failed.';

/*
 * jobq.job(id): the job's public state (jobq.job_state), its result read
 * from jobq.results.  Reads the rows without locking them.  Raises 22004
 * (NULL id), JQ002 (no such job).
 */
CREATE OR REPLACE FUNCTION jobq.job(id bigint)
RETURNS jobq.job_state
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
-- SECURITY DEFINER: the roles given it read a job's state without SELECT on
-- jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    state jobq.job_state;
BEGIN
    IF job.id IS NULL THEN
        RAISE EXCEPTION 'id must not be NULL' USING ERRCODE = '22004';
    END IF;
    SELECT j.id, j.queue, j.status, j.attempts, coalesce(j.max_attempts, s.max_attempts, 3), r.result,
           j.last_error, j.run_at, j.created_at, j.finished_at, coalesce(j.control & 1 <> 0, false),
           CASE WHEN j.control & 32 <> 0
                THEN ARRAY(SELECT d.parent FROM jobq.job_deps AS d WHERE d.child = j.id ORDER BY d.parent) END
      INTO state.id, state.queue, state.status, state.attempts, state.max_attempts, state.result,
           state.last_error, state.run_at, state.created_at, state.finished_at, state.cancel_requested,
           state.depends_on
      FROM jobq.jobs AS j
      LEFT JOIN jobq.queue_settings AS s ON s.queue = j.queue
      LEFT JOIN jobq.results AS r ON r.id = j.id
     WHERE j.id = job.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'id %: no such job', job.id
            USING ERRCODE = 'JQ002';
    END IF;
    RETURN state;
END
$$;
COMMENT ON FUNCTION jobq.job(bigint) IS
    'A job''s public state: queue, status, attempts, max_attempts, result, last_error, run_at, created_at, finished_at, cancel_requested, depends_on (its parents; not its payload). JQ002: no such job.';

/*
 * jobq._level_functions(level): the functions a level may execute, for
 * level 'producer', 'observer', 'worker' or 'admin'; NULL for any other
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
    ELSIF _level_functions.level = 'admin' THEN
        -- both levels above, and what operating the queue takes
        RETURN ARRAY(
                SELECT DISTINCT f
                  FROM unnest(jobq._level_functions('producer') || jobq._level_functions('worker')
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
    'Internal: the functions that the producer, worker or admin level may execute.';

/*
 * jobq._grant_level(role, level): returns nothing.  Grants role USAGE on the
 * schema, EXECUTE on jobq._level_functions(level) and, for admin, table
 * privileges on jobq.jobs, its sequence, jobq.queue_settings,
 * jobq.unique_keys, jobq.results, jobq.deadlines and the tables of limits,
 * dependencies and schedules, and SELECT on the views jobq.health,
 * jobq.queues and jobq.schedules.  Runs with the caller's rights.
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
        RAISE EXCEPTION 'level must be producer, observer, worker or admin, got %', quote_nullable(_grant_level.level)
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
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._grant_level(regrole, text) IS
    'Internal: grants the privileges of one access level (producer, worker, admin).';

/*
 * jobq.grant_producer(role, see_jobs): returns nothing.  Grants the
 * producer level, and with see_jobs the observer level too: jobq.job, wait
 * and watch, which show any job's state and result by its id (ids are
 * sequential, so a producer given them can read every job's outcome; not
 * its payload).  Raises like jobq._grantee, and 22004 for a NULL see_jobs.
 */
CREATE OR REPLACE FUNCTION jobq.grant_producer(role regrole, see_jobs boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF grant_producer.see_jobs IS NULL THEN
        RAISE EXCEPTION 'see_jobs must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM jobq._grant_level(grant_producer.role, 'producer');
    IF grant_producer.see_jobs THEN
        PERFORM jobq._grant_level(grant_producer.role, 'observer');
    END IF;
END
$$;
COMMENT ON FUNCTION jobq.grant_producer(regrole, boolean) IS
    'Let role enqueue jobs (jobq.enqueue, jobq.enqueue_many, jobq.enqueue_flow), and with see_jobs look any job up (jobq.job, wait, watch); no access to the jobs table. Owner or superuser only.';

CREATE OR REPLACE FUNCTION jobq.grant_worker(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_worker.role, 'worker') $$;
COMMENT ON FUNCTION jobq.grant_worker(regrole) IS
    'Let role work jobs (claim, claim_any, heartbeat, complete, fail, snooze, release and their batch forms), recover expired leases (reap), advance schedules (tick) and look jobs up (job, wait, watch); no access to the jobs table. Owner or superuser only.';

CREATE OR REPLACE FUNCTION jobq.grant_admin(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_admin.role, 'admin') $$;
COMMENT ON FUNCTION jobq.grant_admin(regrole) IS
    'Let role do everything with the queue: every function, retry_failed, purge, stats, cancel, pause, resume, configure_queue, schedule, unschedule, jobq.health, jobq.queues, jobq.schedules, and read and write jobq.jobs, jobq.queue_settings, jobq.unique_keys, jobq.results, jobq.deadlines and the tables of limits and dependencies. Owner or superuser only.';

/*
 * jobq.revoke_all(role): returns nothing.  Takes back every privilege the
 * three levels give (admin's include the other two's); grants made by hand
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
    'Take back from role every privilege that grant_producer, grant_worker or grant_admin gave. Owner or superuser only.';

----------------------------------------------------------------------------
-- Grants: each role keeps its level.  A new function is granted to every
-- role that may execute the function it replaces, or a function of the
-- same level; the admins (EXECUTE on jobq.retry_failed) get the new tables
-- and views.
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
                ('jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb)',
                 'jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text)', 'f'),
                ('jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb)',
                 'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[])', 'f'),
                ('jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb)',
                 'jobq.enqueue_flow(text, jsonb)', 'f'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.claim_any(text[], integer, text, interval)', 'f'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.tick()', 'f'),
                ('jobq._stats_0_6_0()', 'jobq.stats()', 'f'),
                ('jobq._configure_queue_0_6_0(text, integer, interval, interval, double precision, interval, interval, text[])',
                 'jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval)', 'f'),
                ('jobq._queues_rows_0_6_0()', 'jobq._queues()', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._finish_linked(bigint, text, smallint)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._settle_dependents(bigint, text)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.unschedule(text)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._schedule_next(text, text, interval, timestamptz)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._every_next(interval, timestamptz)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._cron_parse(text)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._cron_field(text, text, integer)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._cron_walk(jobq._cron, text, timestamptz)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._cron_day(jobq._cron, date)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._cron_time(jobq._cron, integer)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._check_timezone(text, boolean)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._cancel_occurrences(text, text)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._check_job_options(text, text, text, jsonb)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.schedule_settings', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.queue_gates', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.concurrency_keys', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.job_deps', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.job_waits', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.queues', 'v'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.schedules', 'v')) AS c(old, new, kind)
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
        RAISE WARNING 'pgjobq 0.7.0 granted % the new jobq.enqueue, enqueue_many, enqueue_flow, claim_any, tick, stats, '
                      'configure_queue, schedule, unschedule, jobq.queues, jobq.schedules and the functions and '
                      'tables of limits, dependencies and schedules',
                      pg_catalog.array_to_string(kept, ', ')
            USING DETAIL = 'An upgrade not run by a superuser records its grants as initial privileges, which '
                           'pg_dump leaves out.',
                  HINT = 'After restoring a dump of this database, run jobq.grant_producer, grant_worker or '
                         'grant_admin again for these roles.';
    END IF;
END
$$;

DROP FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb);
DROP FUNCTION jobq._stats_0_6_0();
DROP FUNCTION jobq._configure_queue_0_6_0(text, integer, interval, interval, double precision, interval, interval, text[]);
DROP VIEW jobq._queues_0_6_0;
DROP FUNCTION jobq._queues_rows_0_6_0();
