----------------------------------------------------------------------------
-- Queues: each queue's policy, stored in the database, so that a worker in
-- any language applies the same one.  A queue needs no row: without one it
-- runs on the defaults, and claim finds nothing to apply.
----------------------------------------------------------------------------

CREATE TABLE jobq.queue_settings (
    queue          text             NOT NULL,
    paused         boolean          NOT NULL DEFAULT false,
    max_attempts   integer,
    backoff_base   interval,
    backoff_max    interval,
    backoff_jitter double precision,
    lease_timeout  interval,
    timeout        interval,
    updated_at     timestamptz      NOT NULL DEFAULT pg_catalog.now(),
    -- 0.7.0: limits (52_limits.sql)
    concurrency     integer,
    key_concurrency integer,
    key_order       text,
    rate_limit      integer,
    rate_interval   interval,
    -- 0.10.0: retention (80_retention.sql)
    retain_done      interval,
    retain_failed    interval,
    retain_cancelled interval,
    keep_forever     text[],
    CONSTRAINT queue_settings_pkey PRIMARY KEY (queue)
);
COMMENT ON TABLE jobq.queue_settings IS
    'Each configured queue''s policy (jobq.configure_queue, pause, resume); NULL: the default. Read it through the view jobq.queues.';
COMMENT ON COLUMN jobq.queue_settings.queue IS 'The queue.';
COMMENT ON COLUMN jobq.queue_settings.paused IS 'No claim hands out the queue''s jobs while true (jobq.pause, jobq.resume).';
COMMENT ON COLUMN jobq.queue_settings.max_attempts IS 'Attempts of a job enqueued without max_attempts; default 3.';
COMMENT ON COLUMN jobq.queue_settings.backoff_base IS 'Retry delay after attempt a: least(backoff_max, backoff_base * 2^a); default 1 second.';
COMMENT ON COLUMN jobq.queue_settings.backoff_max IS 'The longest retry delay; default 300 seconds.';
COMMENT ON COLUMN jobq.queue_settings.backoff_jitter IS 'Between 0 and 1: each delay is shortened by up to this fraction, at random; default 0.';
COMMENT ON COLUMN jobq.queue_settings.lease_timeout IS 'The lease of a claim that names none; default 60 seconds.';
COMMENT ON COLUMN jobq.queue_settings.timeout IS 'The longest an attempt of one of its jobs may run once claimed; default none (no limit).';
COMMENT ON COLUMN jobq.queue_settings.updated_at IS 'When the row last changed.';
COMMENT ON COLUMN jobq.queue_settings.concurrency IS 'At most this many of the queue''s jobs run at once; default none (no limit).';
COMMENT ON COLUMN jobq.queue_settings.key_concurrency IS 'At most this many jobs of one concurrency key run at once; default none (no limit).';
COMMENT ON COLUMN jobq.queue_settings.key_order IS 'How claims choose among keys: priority (the default: claim order, full keys passed over) or round_robin (one job per key in turn).';
COMMENT ON COLUMN jobq.queue_settings.rate_limit IS 'At most this many claims of the queue''s jobs per rate_interval; default none (no limit).';
COMMENT ON COLUMN jobq.queue_settings.rate_interval IS 'The window of rate_limit (set with it; 1 second when rate_limit is set alone).';
COMMENT ON COLUMN jobq.queue_settings.retain_done IS 'How long a done job is kept after it finished; default 1 day.';
COMMENT ON COLUMN jobq.queue_settings.retain_failed IS 'How long a failed job (the dead-letter queue) is kept after it failed; default 14 days.';
COMMENT ON COLUMN jobq.queue_settings.retain_cancelled IS 'How long a cancelled job is kept after it was cancelled; default 7 days.';
COMMENT ON COLUMN jobq.queue_settings.keep_forever IS 'The final states (done, failed, cancelled) whose jobs are kept until purged, whatever retain_* says; NULL: none.';

-- pg_dump keeps the settings, like the jobs.
SELECT pg_catalog.pg_extension_config_dump('jobq.queue_settings', '');

REVOKE ALL ON TABLE jobq.queue_settings FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.queue_settings TO @extowner@;

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

/*
 * jobq._retention(retain, keep_forever, state): how long a job of a queue
 * that finished in state (done, failed or cancelled) is kept, given the
 * queue's settings retain (its retain_<state>) and keep_forever: NULL when
 * the state is kept forever, else retain, else the default (done 1 day,
 * failed 14 days, cancelled 7 days).  The one place the defaults are
 * written; jobq.queues shows them and jobq.tick applies them.
 */
CREATE FUNCTION jobq._retention(retain interval, keep_forever text[], state text)
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN _retention.state = ANY (_retention.keep_forever) THEN NULL
                ELSE coalesce(_retention.retain,
                              CASE _retention.state WHEN 'done' THEN interval '1 day'
                                                    WHEN 'failed' THEN interval '14 days'
                                                    WHEN 'cancelled' THEN interval '7 days' END) END
$$;
COMMENT ON FUNCTION jobq._retention(interval, text[], text) IS
    'Internal: how long a job that finished in the state is kept, by the queue''s retain_<state> and keep_forever (NULL: forever); the defaults are 1 day done, 14 days failed, 7 days cancelled.';
REVOKE ALL ON FUNCTION jobq._retention(interval, text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._retention(interval, text[], text) TO @extowner@;

/*
 * jobq._finished_queues(): one row per final state (done, failed,
 * cancelled) and queue that has jobs finished in that state, with how long
 * the queue keeps them (jobq._retention; NULL: until purged).  Found by
 * skipping through jobs_status_idx, one probe per queue and state, so the
 * finished jobs themselves are never read (the constant list of states
 * lets the planner use the partial index for a state given as a value).  For retention (jobq._retain)
 * and jobq.metrics.
 */
CREATE FUNCTION jobq._finished_queues()
RETURNS TABLE (status text, queue text, retention interval)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE finished (status, queue) AS (
        SELECT s.status,
               (SELECT j.queue FROM jobq.jobs AS j
                 WHERE j.status = s.status AND j.status IN ('done', 'failed', 'cancelled')
                 ORDER BY j.queue LIMIT 1)
          FROM unnest(ARRAY['done', 'failed', 'cancelled']) AS s (status)
        UNION ALL
        SELECT f.status,
               (SELECT j.queue FROM jobq.jobs AS j
                 WHERE j.status = f.status AND j.status IN ('done', 'failed', 'cancelled') AND j.queue > f.queue
                 ORDER BY j.queue LIMIT 1)
          FROM finished AS f
         WHERE f.queue IS NOT NULL
    )
    SELECT f.status, f.queue,
           jobq._retention(CASE f.status WHEN 'done' THEN s.retain_done
                                         WHEN 'failed' THEN s.retain_failed
                                         ELSE s.retain_cancelled END,
                           s.keep_forever, f.status)
      FROM finished AS f
      LEFT JOIN jobq.queue_settings AS s ON s.queue = f.queue
     WHERE f.queue IS NOT NULL
$$;
COMMENT ON FUNCTION jobq._finished_queues() IS
    'Internal: each final state and queue with jobs finished in it, and how long the queue keeps them (NULL: until purged).';
REVOKE ALL ON FUNCTION jobq._finished_queues() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._finished_queues() TO @extowner@;

CREATE VIEW jobq.queues AS
SELECT q.*,
       jobq._retention(s.retain_done, s.keep_forever, 'done') AS retain_done,
       jobq._retention(s.retain_failed, s.keep_forever, 'failed') AS retain_failed,
       jobq._retention(s.retain_cancelled, s.keep_forever, 'cancelled') AS retain_cancelled
  FROM jobq._queues() AS q
  LEFT JOIN jobq.queue_settings AS s ON s.queue = q.queue;
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
COMMENT ON COLUMN jobq.queues.retain_done IS 'How long a done job is kept after it finished; NULL: until purged.';
COMMENT ON COLUMN jobq.queues.retain_failed IS 'How long a failed job is kept after it failed; NULL: until purged.';
COMMENT ON COLUMN jobq.queues.retain_cancelled IS 'How long a cancelled job is kept after it was cancelled; NULL: until purged.';
REVOKE ALL ON TABLE jobq.queues FROM PUBLIC;
GRANT SELECT ON TABLE jobq.queues TO @extowner@;

/*
 * jobq._retry_delay(queue, attempts): how long a job of queue waits before
 * its next attempt, after attempts of them: least(backoff_max, backoff_base
 * * 2^attempts), shortened at random by up to backoff_jitter of itself,
 * from the queue's settings or the defaults (1 second, 300 seconds, 0: so
 * 2^attempts seconds, at most 300).  Reads the queue's settings row.
 */
CREATE FUNCTION jobq._retry_delay(queue text, attempts integer)
RETURNS interval
LANGUAGE sql VOLATILE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT make_interval(secs => least(extract(epoch FROM coalesce(s.backoff_max, interval '300 seconds')),
                                       extract(epoch FROM coalesce(s.backoff_base, interval '1 second'))
                                       * 2 ^ least(greatest(_retry_delay.attempts, 0), 1000))
                                 * (1 - coalesce(s.backoff_jitter, 0) * random()))
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN jobq.queue_settings AS s ON s.queue = _retry_delay.queue
$$;
COMMENT ON FUNCTION jobq._retry_delay(text, integer) IS
    'Internal: the retry delay of a job of the queue after the given number of attempts, by the queue''s backoff settings.';
REVOKE ALL ON FUNCTION jobq._retry_delay(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._retry_delay(text, integer) TO @extowner@;

/*
 * jobq._max_attempts(queue): the attempts a job of queue enqueued without
 * max_attempts gets: the queue's setting, else 3 (what jobq.job shows, and
 * what jobq.fail and jobq.reap apply to a job whose max_attempts is NULL).
 */
CREATE FUNCTION jobq._max_attempts(queue text)
RETURNS integer
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT s.max_attempts FROM jobq.queue_settings AS s WHERE s.queue = _max_attempts.queue), 3)
$$;
COMMENT ON FUNCTION jobq._max_attempts(text) IS
    'Internal: the max_attempts of a job of the queue enqueued without one: the queue''s setting, else 3.';
REVOKE ALL ON FUNCTION jobq._max_attempts(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._max_attempts(text) TO @extowner@;

/*
 * jobq.configure_queue(queue, max_attempts, backoff_base, backoff_max,
 * backoff_jitter, lease_timeout, timeout, unset, concurrency,
 * key_concurrency, key_order, rate_limit, rate_interval, retain_done,
 * retain_failed, retain_cancelled, keep_forever): the queue's row of
 * jobq.queues after the change.  A NULL argument leaves its setting as it
 * is; unset names settings to put back to their defaults (unsetting
 * rate_limit unsets rate_interval too).  Takes effect for the claims and
 * failures that start after the commit; a job already claimed keeps the
 * max_attempts, lease and deadline it was claimed with, and a lowered limit
 * lets the jobs already running finish.  The limits (52_limits.sql):
 * concurrency, the most jobs of the queue running at once; key_concurrency,
 * the most per concurrency key; key_order, 'priority' or 'round_robin';
 * rate_limit claims per rate_interval (1 second when rate_limit is set
 * without it).  Retention (80_retention.sql): how long a job that
 * finished done, failed or cancelled is kept before jobq.tick deletes it
 * (0: at the next tick); keep_forever names the final states kept until
 * purged, and replaces the list stored (a retain_<state> given or unset
 * takes its state off the list).  A change applies to every finished job
 * of the queue at the next tick, those finished before it too.  Locks the
 * queue's settings row.  Raises 22004 (NULL queue),
 * 22023 (bad queue name; max_attempts outside 1..1000; backoff_base not
 * positive or over 1 day; backoff_max not positive or over 10 years;
 * backoff_jitter outside 0..1; lease_timeout not positive or over 1 day;
 * timeout not positive or over 30 days; concurrency or key_concurrency
 * outside 1..100000; key_order neither 'priority' nor 'round_robin';
 * rate_limit outside 1..10000; rate_interval not positive or over 1 day,
 * or given without rate_limit on a queue that has none; backoff_base
 * above backoff_max, as the queue would have them (given, else kept unless
 * unset, else the defaults: 0.10.0); retain_done,
 * retain_failed or retain_cancelled negative or over 10 years;
 * keep_forever naming anything but done, failed and cancelled, or a state
 * whose retain_<state> is also given or unset; unset naming anything
 * else, or a setting also given).
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
    rate_interval   interval        DEFAULT NULL,
    retain_done      interval       DEFAULT NULL,
    retain_failed    interval       DEFAULT NULL,
    retain_cancelled interval       DEFAULT NULL,
    keep_forever     text[]         DEFAULT NULL)
RETURNS jobq.queues
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    settings constant text[] := ARRAY['max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter',
                                      'lease_timeout', 'timeout', 'concurrency', 'key_concurrency',
                                      'key_order', 'rate_limit', 'rate_interval', 'retain_done',
                                      'retain_failed', 'retain_cancelled', 'keep_forever'];
    given    text[];
    retained text[];  -- the final states whose retain_<state> is given or unset
    bad      bigint;
    outcome  jobq.queues;
    backoff  record;  -- the backoff_base and backoff_max the queue will have
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
    IF configure_queue.retain_done < interval '0' OR configure_queue.retain_done > interval '10 years' THEN
        RAISE EXCEPTION 'retain_done must be an interval from 0 to 10 years, got %', configure_queue.retain_done
            USING ERRCODE = '22023', HINT = 'To keep done jobs until purged: keep_forever => ''{done}''.';
    END IF;
    IF configure_queue.retain_failed < interval '0' OR configure_queue.retain_failed > interval '10 years' THEN
        RAISE EXCEPTION 'retain_failed must be an interval from 0 to 10 years, got %', configure_queue.retain_failed
            USING ERRCODE = '22023', HINT = 'To keep failed jobs until purged: keep_forever => ''{failed}''.';
    END IF;
    IF configure_queue.retain_cancelled < interval '0' OR configure_queue.retain_cancelled > interval '10 years' THEN
        RAISE EXCEPTION 'retain_cancelled must be an interval from 0 to 10 years, got %', configure_queue.retain_cancelled
            USING ERRCODE = '22023', HINT = 'To keep cancelled jobs until purged: keep_forever => ''{cancelled}''.';
    END IF;
    IF array_ndims(configure_queue.keep_forever) > 1 THEN
        RAISE EXCEPTION 'keep_forever must be a one-dimensional array, got % dimensions',
                        array_ndims(configure_queue.keep_forever)
            USING ERRCODE = '22023';
    END IF;
    SELECT k.position INTO bad
      FROM unnest(configure_queue.keep_forever) WITH ORDINALITY AS k (state, position)
     WHERE k.state IS NULL OR NOT k.state = ANY (ARRAY['done', 'failed', 'cancelled'])
     ORDER BY k.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'keep_forever[%] must be done, failed or cancelled, got %', bad,
                        quote_nullable(left(configure_queue.keep_forever[bad], 80))
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
                 CASE WHEN configure_queue.rate_interval IS NOT NULL THEN 'rate_interval' END,
                 CASE WHEN configure_queue.retain_done IS NOT NULL THEN 'retain_done' END,
                 CASE WHEN configure_queue.retain_failed IS NOT NULL THEN 'retain_failed' END,
                 CASE WHEN configure_queue.retain_cancelled IS NOT NULL THEN 'retain_cancelled' END,
                 CASE WHEN configure_queue.keep_forever IS NOT NULL THEN 'keep_forever' END], NULL);
    IF given && configure_queue.unset THEN
        RAISE EXCEPTION 'unset must not name a setting also given, got %',
                        array_to_string(ARRAY(SELECT unnest(given) INTERSECT SELECT unnest(configure_queue.unset)), ', ')
            USING ERRCODE = '22023';
    END IF;
    retained := ARRAY(SELECT substr(g, 8) FROM unnest(given || configure_queue.unset) AS g
                       WHERE g IN ('retain_done', 'retain_failed', 'retain_cancelled'));
    IF configure_queue.keep_forever && retained THEN
        RAISE EXCEPTION 'keep_forever must not name a state whose retention is also given or unset, got %',
                        array_to_string(ARRAY(SELECT unnest(configure_queue.keep_forever)
                                              INTERSECT SELECT unnest(retained)), ', ')
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.rate_interval IS NOT NULL AND configure_queue.rate_limit IS NULL
       AND NOT EXISTS (SELECT FROM jobq.queue_settings AS s
                        WHERE s.queue = configure_queue.queue AND s.rate_limit IS NOT NULL
                          AND NOT 'rate_limit' = ANY (configure_queue.unset)) THEN
        RAISE EXCEPTION 'rate_interval needs a rate_limit: queue % has none', quote_literal(configure_queue.queue)
            USING ERRCODE = '22023';
    END IF;
    -- 0.10.0: a retry waits least(backoff_max, backoff_base * 2^attempts), so a base above the
    -- max would be ignored.  Compared: the values the queue will have (given, else kept unless
    -- unset, else the defaults 1 second and 300 seconds).
    SELECT coalesce(configure_queue.backoff_base,
                    CASE WHEN NOT 'backoff_base' = ANY (configure_queue.unset) THEN s.backoff_base END,
                    interval '1 second') AS base,
           coalesce(configure_queue.backoff_max,
                    CASE WHEN NOT 'backoff_max' = ANY (configure_queue.unset) THEN s.backoff_max END,
                    interval '300 seconds') AS max
      INTO backoff
      FROM (SELECT) AS one
      LEFT JOIN jobq.queue_settings AS s ON s.queue = configure_queue.queue;
    IF backoff.base > backoff.max THEN
        IF configure_queue.backoff_base IS NOT NULL THEN
            RAISE EXCEPTION 'backoff_base must be at most backoff_max (%), got %', backoff.max, backoff.base
                USING ERRCODE = '22023',
                      HINT = 'A retry waits least(backoff_max, backoff_base * 2^attempts): give a longer backoff_max too.';
        END IF;
        RAISE EXCEPTION 'backoff_max must be at least backoff_base (%), got %', backoff.base, backoff.max
            USING ERRCODE = '22023',
                  HINT = 'A retry waits least(backoff_max, backoff_base * 2^attempts): give a shorter backoff_base too.';
    END IF;

    INSERT INTO jobq.queue_settings AS s (queue, max_attempts, backoff_base, backoff_max, backoff_jitter,
                                          lease_timeout, timeout, concurrency, key_concurrency, key_order,
                                          rate_limit, rate_interval, retain_done, retain_failed,
                                          retain_cancelled, keep_forever)
    VALUES (configure_queue.queue, configure_queue.max_attempts, configure_queue.backoff_base,
            configure_queue.backoff_max, configure_queue.backoff_jitter, configure_queue.lease_timeout,
            configure_queue.timeout, configure_queue.concurrency, configure_queue.key_concurrency,
            configure_queue.key_order, configure_queue.rate_limit,
            CASE WHEN configure_queue.rate_limit IS NOT NULL
                 THEN coalesce(configure_queue.rate_interval, interval '1 second') END,
            configure_queue.retain_done, configure_queue.retain_failed, configure_queue.retain_cancelled,
            nullif(ARRAY(SELECT DISTINCT k FROM unnest(configure_queue.keep_forever) AS k ORDER BY k), '{}'))
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
           retain_done    = CASE WHEN 'retain_done' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.retain_done, s.retain_done) END,
           retain_failed  = CASE WHEN 'retain_failed' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.retain_failed, s.retain_failed) END,
           retain_cancelled = CASE WHEN 'retain_cancelled' = ANY (configure_queue.unset) THEN NULL
                                   ELSE coalesce(excluded.retain_cancelled, s.retain_cancelled) END,
           -- the list given, or the one stored; either way without the states whose retention was
           -- given or unset (the last word on a state wins)
           keep_forever   = CASE WHEN 'keep_forever' = ANY (configure_queue.unset) THEN NULL
                                 ELSE nullif(ARRAY(SELECT k FROM unnest(coalesce(configure_queue.keep_forever, s.keep_forever)) AS k
                                                    WHERE NOT k = ANY (retained) ORDER BY k), '{}') END,
           updated_at     = statement_timestamp();

    SELECT q.* INTO outcome FROM jobq.queues AS q WHERE q.queue = configure_queue.queue;
    RETURN outcome;
END
$$;
COMMENT ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval, interval, interval, interval, text[]) IS
    'Set a queue''s policy: max_attempts, backoff_base, backoff_max, backoff_jitter, lease_timeout, timeout, its limits concurrency, key_concurrency, key_order, rate_limit per rate_interval, and how long finished jobs are kept: retain_done, retain_failed, retain_cancelled, keep_forever (NULL: unchanged; unset: back to the default). Returns its row of jobq.queues.';
REVOKE ALL ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval, interval, interval, interval, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval, interval, interval, interval, text[]) TO @extowner@;

/*
 * jobq.pause(queue): returns nothing.  From its commit on, no claim (in any
 * language) hands out the queue's jobs: claim reads the flag in every call,
 * so a claim that starts after the commit gets nothing, until jobq.resume.
 * Jobs already running finish normally; enqueues go on.  Stored in
 * jobq.queue_settings, so it survives restarts and dumps.  A queue may be
 * paused before its first job (so that its jobs wait from the first one
 * on); a queue with no settings, no job in any state and no schedule
 * is paused all the same, with a NOTICE naming it (0.10.0: a mistyped
 * name pauses nothing that exists).  Locks the queue's settings row.
 * Raises 22004/22023 for a bad queue name.
 */
CREATE FUNCTION jobq.pause(queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_queue(pause.queue);
    -- known: configured, with jobs (one probe per index: the claim index for
    -- the queued ones, jobs_status_idx for the others, jobq.job_waits for the
    -- waiting ones), or the queue of a schedule
    IF NOT EXISTS (SELECT FROM jobq.queue_settings AS s WHERE s.queue = pause.queue)
       AND NOT EXISTS (SELECT FROM jobq.jobs AS j WHERE j.status = 'queued' AND j.queue = pause.queue)
       AND NOT EXISTS (SELECT FROM jobq.jobs AS j
                        WHERE j.status = ANY (ARRAY['running', 'done', 'failed', 'cancelled'])
                          AND j.queue = pause.queue)
       AND NOT EXISTS (SELECT FROM jobq.job_waits AS w
                        WHERE (SELECT j.queue FROM jobq.jobs AS j WHERE j.id = w.id) = pause.queue)
       AND NOT EXISTS (SELECT FROM jobq.schedule_settings AS s WHERE s.queue = pause.queue) THEN
        RAISE NOTICE 'queue % has no settings, jobs or schedules yet: paused all the same',
                     quote_literal(pause.queue)
            USING HINT = 'Its jobs wait from the first one on; for a mistyped name, delete its row of jobq.queue_settings.';
    END IF;
    INSERT INTO jobq.queue_settings AS s (queue, paused)
    VALUES (pause.queue, true)
    ON CONFLICT ON CONSTRAINT queue_settings_pkey DO UPDATE
       SET paused = true, updated_at = statement_timestamp();
END
$$;
COMMENT ON FUNCTION jobq.pause(text) IS
    'Pause a queue: from the commit on, claims hand out none of its jobs (running jobs finish). Survives restarts. A queue without settings, jobs or schedules is paused too, with a NOTICE.';
REVOKE ALL ON FUNCTION jobq.pause(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.pause(text) TO @extowner@;

/*
 * jobq.resume(queue): returns nothing.  Undoes jobq.pause and notifies
 * jobq_<queue>, so that waiting workers claim at once (polling workers find
 * the jobs at their next poll).  Locks the queue's settings row.  Raises
 * 22004/22023 for a bad queue name.
 */
CREATE FUNCTION jobq.resume(queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_queue(resume.queue);
    UPDATE jobq.queue_settings AS s
       SET paused = false, updated_at = statement_timestamp()
     WHERE s.queue = resume.queue AND s.paused;
    PERFORM pg_notify('jobq_' || resume.queue, '');
END
$$;
COMMENT ON FUNCTION jobq.resume(text) IS 'Resume a paused queue and wake its waiting workers.';
REVOKE ALL ON FUNCTION jobq.resume(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.resume(text) TO @extowner@;
