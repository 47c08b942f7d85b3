/* sql/updates/pgjobq--0.5.0--0.6.0.sql: pgjobq 0.5.0 -> 0.6.0.
 * Job control from plain SQL: unique jobs, cancel, snooze, results with
 * job/wait/watch, pause and resume, per-queue settings (jobq.queue_settings
 * and the view jobq.queues), headers and timeouts.  Written by hand, once;
 * it never changes after 0.6.0 is released.  The definitions are copied
 * from sql/src/ as 0.6.0 has them.
 *
 * Functions that gain arguments are created beside the old ones, given the
 * old ones' grants, and the old ones dropped at the end; jobq.stats, whose
 * result gains a column, is renamed aside first.  Adding the columns does
 * not rewrite jobq.jobs. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.6.0'" to load this file. \quit

----------------------------------------------------------------------------
-- The jobs table: two columns of job control, NULL for a plain job; unique
-- keys, results and deadlines in tables of their own.
----------------------------------------------------------------------------

ALTER TABLE jobq.jobs
    ALTER COLUMN max_attempts DROP NOT NULL,
    ALTER COLUMN max_attempts DROP DEFAULT,
    ADD COLUMN headers jsonb,
    ADD COLUMN control smallint;

COMMENT ON TABLE jobq.jobs IS
    'One row per job.  status: queued -> running -> done | failed | cancelled; failed rows are the dead-letter queue.';
COMMENT ON COLUMN jobq.jobs.status IS 'queued, running, done, failed or cancelled.';
COMMENT ON COLUMN jobq.jobs.max_attempts IS 'After this many attempts a failure or a stale lease makes the job failed. NULL: the queue''s max_attempts (jobq.configure_queue), else 3; a claim from a queue with settings writes the value it applies.';
COMMENT ON COLUMN jobq.jobs.finished_at IS 'When the job became done, failed or cancelled.';
COMMENT ON COLUMN jobq.jobs.headers IS 'Metadata for the worker (trace context, for example): a JSON object of at most 1 MiB, returned by claim.';
COMMENT ON COLUMN jobq.jobs.control IS 'Job control, as bits: 1, a cancel was requested (jobq.cancel) while it ran; 2, it is watched (jobq.watch); 4, it was enqueued with a unique key (jobq.unique_keys). NULL: none of these.';

-- Unique jobs, one row per queue and key: the job that holds the key.  Its
-- primary key is the unique index that decides between concurrent
-- enqueues of one key (jobq._take_key).  A table of its own, not an index
-- on jobq.jobs: an index there would be opened and its predicate evaluated
-- by every insert and every status change of every job, keyed or not, which
-- cost plain queues 6% of a claim and its completion
-- (bench/results/instructions.md); here only jobs with a key pay.  The row
-- is not kept in step with its job: whether the holder still counts (it is
-- queued or running, or done when until_done) is judged when
-- another job wants the key, under the row's lock, so finishing, failing,
-- retrying or cancelling a job never touches this table.  jobq.purge
-- deletes the rows of the jobs it deletes.
CREATE TABLE jobq.unique_keys (
    queue      text    NOT NULL,
    unique_key text    NOT NULL,
    job_id     bigint  NOT NULL,
    until_done boolean NOT NULL,
    CONSTRAINT unique_keys_pkey PRIMARY KEY (queue, unique_key)
);
-- a job's key, for jobq.retry_failed and jobq.purge
CREATE INDEX unique_keys_job_idx ON jobq.unique_keys (job_id);
COMMENT ON INDEX jobq.unique_keys_job_idx IS 'The key a job holds, for redrives and purges.';
COMMENT ON TABLE jobq.unique_keys IS
    'Unique jobs: for each queue and key, the job that holds the key (it counts while queued or running, or done when until_done).';
COMMENT ON COLUMN jobq.unique_keys.queue IS 'The queue.';
COMMENT ON COLUMN jobq.unique_keys.unique_key IS 'The key.';
COMMENT ON COLUMN jobq.unique_keys.job_id IS 'The job that holds the key, or held it last.';
COMMENT ON COLUMN jobq.unique_keys.until_done IS 'The holder was enqueued with unique_scope until_done: it counts while done too, until purged.';
SELECT pg_catalog.pg_extension_config_dump('jobq.unique_keys', '');
REVOKE ALL ON TABLE jobq.unique_keys FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.unique_keys TO @extowner@;

-- Results, one row per job that returned one (jobq.complete(result => ...)):
-- a table of its own, so that results, which may be large, never widen the
-- rows claims scan, and plain jobs never write one.  jobq.purge deletes the
-- results of the jobs it deletes.
CREATE TABLE jobq.results (
    id     bigint NOT NULL,
    result jsonb  NOT NULL,
    CONSTRAINT results_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE jobq.results IS 'What handlers returned: one row per done job that returned a result (read it with jobq.job).';
COMMENT ON COLUMN jobq.results.id IS 'The job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.results.result IS 'Any JSON value of at most 1 MiB.';
SELECT pg_catalog.pg_extension_config_dump('jobq.results', '');
REVOKE ALL ON TABLE jobq.results FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.results TO @extowner@;

-- Deadlines, one row per job claimed from a queue with a timeout
-- (jobq.configure_queue(timeout => ...)), for the lease it was claimed
-- under: heartbeats never extend that lease past the deadline, so
-- jobq.reap recovers a hung attempt even though it heartbeats.  A row of an
-- older lease is ignored.  jobq.purge deletes the rows of the jobs it
-- deletes.
CREATE TABLE jobq.deadlines (
    id       bigint      NOT NULL,
    lease    bigint      NOT NULL,
    deadline timestamptz NOT NULL,
    CONSTRAINT deadlines_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE jobq.deadlines IS 'The deadline of the current attempt of jobs claimed from a queue with a timeout.';
COMMENT ON COLUMN jobq.deadlines.id IS 'The job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.deadlines.lease IS 'The lease the deadline belongs to; a row of an older lease is ignored.';
COMMENT ON COLUMN jobq.deadlines.deadline IS 'The lease is not extended past it: claim time + the queue''s timeout.';
SELECT pg_catalog.pg_extension_config_dump('jobq.deadlines', '');
REVOKE ALL ON TABLE jobq.deadlines FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.deadlines TO @extowner@;

----------------------------------------------------------------------------
-- Queues: each queue's policy (sql/src/15_queues.sql, all new).
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
               timeout interval, configured boolean)
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
           s.queue IS NOT NULL
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
 * backoff_jitter, lease_timeout, timeout, unset): the queue's row of
 * jobq.queues after the change.  A NULL argument leaves its setting as it
 * is; unset names settings to put back to their defaults.  Takes effect for
 * the claims and failures that start after the commit; a job already claimed
 * keeps the max_attempts, lease and deadline it was claimed with.  Locks the
 * queue's settings row.  Raises 22004 (NULL queue), 22023 (bad queue name;
 * max_attempts outside 1..1000; backoff_base not positive or over 1 day;
 * backoff_max not positive or over 10 years; backoff_jitter outside 0..1;
 * lease_timeout not positive or over 1 day; timeout not positive or over 30
 * days; unset naming anything else, or a setting also given).
 */
CREATE FUNCTION jobq.configure_queue(
    queue          text,
    max_attempts   integer          DEFAULT NULL,
    backoff_base   interval         DEFAULT NULL,
    backoff_max    interval         DEFAULT NULL,
    backoff_jitter double precision DEFAULT NULL,
    lease_timeout  interval         DEFAULT NULL,
    timeout        interval         DEFAULT NULL,
    unset          text[]           DEFAULT '{}')
RETURNS jobq.queues
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    settings constant text[] := ARRAY['max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter',
                                      'lease_timeout', 'timeout'];
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
                 CASE WHEN configure_queue.timeout IS NOT NULL THEN 'timeout' END], NULL);
    IF given && configure_queue.unset THEN
        RAISE EXCEPTION 'unset must not name a setting also given, got %',
                        array_to_string(ARRAY(SELECT unnest(given) INTERSECT SELECT unnest(configure_queue.unset)), ', ')
            USING ERRCODE = '22023';
    END IF;

    INSERT INTO jobq.queue_settings AS s (queue, max_attempts, backoff_base, backoff_max, backoff_jitter,
                                          lease_timeout, timeout)
    VALUES (configure_queue.queue, configure_queue.max_attempts, configure_queue.backoff_base,
            configure_queue.backoff_max, configure_queue.backoff_jitter, configure_queue.lease_timeout,
            configure_queue.timeout)
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
           updated_at     = statement_timestamp();

    SELECT q.* INTO outcome FROM jobq.queues AS q WHERE q.queue = configure_queue.queue;
    RETURN outcome;
END
$$;
COMMENT ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[]) IS
    'Set a queue''s policy: max_attempts, backoff_base, backoff_max, backoff_jitter, lease_timeout, timeout (NULL: unchanged; unset: back to the default). Returns its row of jobq.queues.';
REVOKE ALL ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[]) TO @extowner@;

/*
 * jobq.pause(queue): returns nothing.  From its commit on, no claim (in any
 * language) hands out the queue's jobs: claim reads the flag in every call,
 * so a claim that starts after the commit gets nothing, until jobq.resume.
 * Jobs already running finish normally; enqueues go on.  Stored in
 * jobq.queue_settings, so it survives restarts and dumps.  Locks the queue's
 * settings row.  Raises 22004/22023 for a bad queue name.
 */
CREATE FUNCTION jobq.pause(queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_queue(pause.queue);
    INSERT INTO jobq.queue_settings AS s (queue, paused)
    VALUES (pause.queue, true)
    ON CONFLICT ON CONSTRAINT queue_settings_pkey DO UPDATE
       SET paused = true, updated_at = statement_timestamp();
END
$$;
COMMENT ON FUNCTION jobq.pause(text) IS
    'Pause a queue: from the commit on, claims hand out none of its jobs (running jobs finish). Survives restarts.';
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

----------------------------------------------------------------------------
-- Checks: max_attempts may be NULL (the queue's); results, unique and
-- headers options.
----------------------------------------------------------------------------

/*
 * jobq._check_options(priority, run_at, max_attempts): returns nothing;
 * raises 22004 for a NULL priority or run_at and 22023 for a value out of
 * range (max_attempts may be NULL: the queue's).
 */
CREATE OR REPLACE FUNCTION jobq._check_options(priority integer, run_at timestamptz, max_attempts integer)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF priority IS NULL THEN
        RAISE EXCEPTION 'priority must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF priority < -32768 OR priority > 32767 THEN
        RAISE EXCEPTION 'priority must be between -32768 and 32767, got %', priority
            USING ERRCODE = '22023';
    END IF;
    IF run_at IS NULL THEN
        RAISE EXCEPTION 'run_at must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT isfinite(run_at)
       OR run_at > now() + interval '10 years'
       OR run_at < now() - interval '10 years' THEN
        RAISE EXCEPTION 'run_at must be within 10 years of now, got %', run_at
            USING ERRCODE = '22023';
    END IF;
    IF max_attempts < 1 OR max_attempts > 1000 THEN  -- NULL: the queue's
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000, got %', max_attempts
            USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_options(integer, timestamptz, integer) IS 'Internal: raises 22004/22023 unless the enqueue options are in range.';

/*
 * jobq._check_result(result, argument): returns nothing; raises 54000 when
 * result (any JSON value; NULL is no result) is over 1 MiB.  argument names
 * the caller's argument in the message.
 */
CREATE FUNCTION jobq._check_result(result jsonb, argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_column_size(result) > 1048576 THEN
        RAISE EXCEPTION '% must be at most 1 MiB, got % bytes', argument, pg_column_size(result)
            USING ERRCODE = '54000',
                  HINT = 'Store large results in a table and return their key.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_result(jsonb, text) IS 'Internal: raises 54000 when a result is over 1 MiB.';
REVOKE ALL ON FUNCTION jobq._check_result(jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_result(jsonb, text) TO @extowner@;

/*
 * jobq._check_results(ids, results): returns nothing; raises 22023 unless
 * results is NULL (no results) or a one-dimensional array as long as ids,
 * and 54000 for an element over 1 MiB (naming it results[i]).
 */
CREATE FUNCTION jobq._check_results(ids bigint[], results jsonb[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad_position bigint;
    bad_result   jsonb;
BEGIN
    IF results IS NULL THEN
        RETURN;
    END IF;
    IF array_ndims(results) > 1 THEN
        RAISE EXCEPTION 'results must be a one-dimensional array, got % dimensions', array_ndims(results)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(results) <> cardinality(ids) THEN
        RAISE EXCEPTION 'results must have as many elements as ids, got % and %', cardinality(results), cardinality(ids)
            USING ERRCODE = '22023',
                  HINT = 'Pass NULL for a job without a result.';
    END IF;
    SELECT r.position + array_lower(results, 1) - 1, r.result INTO bad_position, bad_result
      FROM unnest(results) WITH ORDINALITY AS r (result, position)
     WHERE pg_column_size(r.result) > 1048576
     ORDER BY r.position
     LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_result(bad_result, format('results[%s]', bad_position));  -- raises
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_results(bigint[], jsonb[]) IS
    'Internal: raises 22023/54000 unless results is NULL or an array of results of at most 1 MiB, one per id.';
REVOKE ALL ON FUNCTION jobq._check_results(bigint[], jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_results(bigint[], jsonb[]) TO @extowner@;

/*
 * jobq._check_job_options(unique_key, unique_scope, on_conflict, headers):
 * returns nothing; raises 22004 for a NULL unique_scope or on_conflict,
 * 22023 for a unique_key that is not 1 to 512 characters, a unique_scope
 * other than active or until_done, an on_conflict other than return, skip,
 * raise or replace, headers that are not a JSON object, and 54000 for
 * headers over 1 MiB.
 */
CREATE FUNCTION jobq._check_job_options(unique_key text, unique_scope text, on_conflict text, headers jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF length(unique_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'unique_key must be 1 to 512 characters, got %', length(unique_key)
            USING ERRCODE = '22023';
    END IF;
    IF unique_scope IS NULL THEN
        RAISE EXCEPTION 'unique_scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF unique_scope <> ALL (ARRAY['active', 'until_done']) THEN
        RAISE EXCEPTION 'unique_scope must be active or until_done, got %', quote_literal(left(unique_scope, 80))
            USING ERRCODE = '22023';
    END IF;
    IF on_conflict IS NULL THEN
        RAISE EXCEPTION 'on_conflict must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF on_conflict <> ALL (ARRAY['return', 'skip', 'raise', 'replace']) THEN
        RAISE EXCEPTION 'on_conflict must be return, skip, raise or replace, got %', quote_literal(left(on_conflict, 80))
            USING ERRCODE = '22023';
    END IF;
    IF headers IS NOT NULL THEN
        PERFORM jobq._check_payload(headers, 'headers');
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_job_options(text, text, text, jsonb) IS
    'Internal: raises 22004/22023/54000 unless the unique and headers options of an enqueue are valid.';
REVOKE ALL ON FUNCTION jobq._check_job_options(text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_job_options(text, text, text, jsonb) TO @extowner@;

----------------------------------------------------------------------------
-- Wake-ups: "jobq.done" for watched jobs.
----------------------------------------------------------------------------

/*
 * jobq._notify_finished(id): true, after notifying channel "jobq.done"
 * with the id (jobq.watch).  The functions that finish a job call it for a
 * watched one, in the statement that finishes it: written as
 * "watched AND ... AND jobq._notify_finished(id)", so that an unwatched
 * job costs one test of a NULL.
 */
CREATE FUNCTION jobq._notify_finished(id bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('jobq.done', _notify_finished.id::text);
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._notify_finished(bigint) IS 'Internal: notify "jobq.done" that the job finished; returns true.';
REVOKE ALL ON FUNCTION jobq._notify_finished(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._notify_finished(bigint) TO @extowner@;

----------------------------------------------------------------------------
-- Producing: unique keys and headers.
----------------------------------------------------------------------------

/*
 * jobq._take_key(queue, unique_key, until_done, job_id): NULL when the key
 * now belongs to job_id (it was free, or held by a job that no longer
 * counts: done without until_done, failed, cancelled or purged), else the
 * id of the job that holds it and counts (queued or running, or done when
 * the key was taken until_done).  The primary key of jobq.unique_keys
 * decides, never a look before the insert: INSERT ... ON CONFLICT DO
 * NOTHING waits for a conflicting insert in flight and yields to it once
 * it commits (inserts, if it rolls back).  Locks the key's row (FOR NO KEY
 * UPDATE, waiting) before it judges the holder, until the transaction
 * ends: enqueues of one key follow each other, and a redrive of the holder
 * (jobq.retry_failed, which locks the row too) is seen.  Raises 40001
 * under REPEATABLE READ when the key's row changed after the snapshot
 * (PostgreSQL's own error), or when the row was purged 5 times over.
 */
CREATE FUNCTION jobq._take_key(queue text, unique_key text, until_done boolean, job_id bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    holder         bigint;
    holder_done_ok boolean;  -- the holder took the key until_done
BEGIN
    FOR round IN 1..5 LOOP
        INSERT INTO jobq.unique_keys (queue, unique_key, job_id, until_done)
        VALUES (_take_key.queue, _take_key.unique_key, _take_key.job_id, _take_key.until_done)
        ON CONFLICT ON CONSTRAINT unique_keys_pkey DO NOTHING;
        IF FOUND THEN
            RETURN NULL;
        END IF;
        SELECT k.job_id, k.until_done INTO holder, holder_done_ok
          FROM jobq.unique_keys AS k
         WHERE k.queue = _take_key.queue AND k.unique_key = _take_key.unique_key
           FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;  -- purged meanwhile: insert again
        -- the holder as it is now (a statement of its own: a fresh snapshot)
        IF holder = _take_key.job_id
           OR NOT EXISTS (SELECT FROM jobq.jobs AS j
                           WHERE j.id = holder
                             AND (j.status = ANY (ARRAY['queued', 'running'])
                                  OR (j.status = 'done' AND holder_done_ok))) THEN
            UPDATE jobq.unique_keys AS k
               SET job_id = _take_key.job_id, until_done = _take_key.until_done
             WHERE k.queue = _take_key.queue AND k.unique_key = _take_key.unique_key;
            RETURN NULL;
        END IF;
        RETURN holder;
    END LOOP;
    RAISE EXCEPTION 'unique key % of queue % changed hands too often to settle', quote_literal(_take_key.unique_key),
                    quote_literal(_take_key.queue)
        USING ERRCODE = '40001',
              HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._take_key(text, text, boolean, bigint) IS
    'Internal: give a unique key to a job unless a job that still counts holds it; returns that holder, or NULL.';
REVOKE ALL ON FUNCTION jobq._take_key(text, text, boolean, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._take_key(text, text, boolean, bigint) TO @extowner@;

/*
 * jobq._enqueue_unique(queue, payload, priority, run_at, max_attempts,
 * unique_key, unique_scope, on_conflict, headers): enqueues a job with a
 * unique key, or resolves the conflict with the job that holds the key
 * (see jobq.enqueue).  Returns id (the new job, the holder, or NULL for
 * skip) and changed (whether a job was inserted or replaced, so that the
 * caller wakes the queue's workers).  The key is taken by jobq._take_key;
 * replace locks the holder (FOR NO KEY UPDATE, waiting), so a claim in
 * flight finishes first and the holder's status is current.  The caller
 * checks the arguments.  Raises JQ004 (on_conflict raise), 40001 (as
 * jobq._take_key, or 5 rounds of holders leaving).
 */
CREATE FUNCTION jobq._enqueue_unique(
    queue text, payload jsonb, priority integer, run_at timestamptz, max_attempts integer,
    unique_key text, unique_scope text, on_conflict text, headers jsonb,
    OUT id bigint, OUT changed boolean)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id        bigint := nextval('jobq.jobs_id_seq'::regclass);
    holder_id     bigint;
    holder_status text;
BEGIN
    FOR round IN 1..5 LOOP
        holder_id := jobq._take_key(_enqueue_unique.queue, _enqueue_unique.unique_key,
                                    _enqueue_unique.unique_scope = 'until_done', new_id);
        IF holder_id IS NULL THEN
            INSERT INTO jobq.jobs (id, queue, payload, priority, run_at, max_attempts, headers, control)
            VALUES (new_id, _enqueue_unique.queue, _enqueue_unique.payload, _enqueue_unique.priority,
                    _enqueue_unique.run_at, _enqueue_unique.max_attempts, _enqueue_unique.headers,
                    4);  -- enqueued with a unique key
            id := new_id;
            changed := true;
            RETURN;
        END IF;

        changed := false;
        IF _enqueue_unique.on_conflict = 'return' THEN
            id := holder_id;
            RETURN;
        ELSIF _enqueue_unique.on_conflict = 'skip' THEN
            id := NULL;
            RETURN;
        ELSIF _enqueue_unique.on_conflict = 'raise' THEN
            SELECT j.status INTO holder_status FROM jobq.jobs AS j WHERE j.id = holder_id;
            RAISE EXCEPTION 'unique key % of queue % is held by job %', quote_literal(_enqueue_unique.unique_key),
                            quote_literal(_enqueue_unique.queue), holder_id
                USING ERRCODE = 'JQ004',
                      DETAIL = format('Job %s is %s.', holder_id, holder_status),
                      HINT = 'on_conflict => ''return'' returns its id instead.';
        END IF;

        -- replace (debounce): the holder, locked, as it is now
        SELECT j.status INTO holder_status FROM jobq.jobs AS j WHERE j.id = holder_id FOR NO KEY UPDATE;
        IF holder_status = 'queued' THEN
            UPDATE jobq.jobs AS j
               SET payload = _enqueue_unique.payload, priority = _enqueue_unique.priority,
                   run_at = _enqueue_unique.run_at, max_attempts = _enqueue_unique.max_attempts,
                   headers = _enqueue_unique.headers
             WHERE j.id = holder_id;
            id := holder_id;
            changed := true;
            RETURN;
        ELSIF holder_status = 'running' THEN
            -- the running job is asked to stop, as by jobq.cancel (it ends
            -- done if it completes, cancelled whatever else happens to it:
            -- it never runs again), and the next round gives the key to
            -- the new job
            UPDATE jobq.jobs AS j
               SET control = coalesce(j.control, 0) | 1
             WHERE j.id = holder_id;
            PERFORM pg_notify('jobq_' || _enqueue_unique.queue, 'cancel:' || holder_id);
            UPDATE jobq.unique_keys AS k  -- locked by jobq._take_key
               SET job_id = new_id, until_done = _enqueue_unique.unique_scope = 'until_done'
             WHERE k.queue = _enqueue_unique.queue AND k.unique_key = _enqueue_unique.unique_key;
        ELSIF holder_status = 'done'
              AND EXISTS (SELECT FROM jobq.unique_keys AS k  -- locked by jobq._take_key
                           WHERE k.queue = _enqueue_unique.queue AND k.unique_key = _enqueue_unique.unique_key
                             AND k.job_id = holder_id AND k.until_done) THEN
            id := holder_id;  -- done, and it counts (until_done): nothing left to replace
            RETURN;
        END IF;
        -- the holder left the scope meanwhile, or gave up the key: take it again
    END LOOP;
    RAISE EXCEPTION 'unique key % of queue % changed hands too often to settle', quote_literal(_enqueue_unique.unique_key),
                    quote_literal(_enqueue_unique.queue)
        USING ERRCODE = '40001',
              HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb) IS
    'Internal: enqueue a job with a unique key, or resolve the conflict with the job holding it.';
REVOKE ALL ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb) TO @extowner@;

/*
 * jobq.enqueue(queue, payload, priority, run_at, max_attempts, unique_key,
 * unique_scope, on_conflict, headers): the new job's id.  Runs in the
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
 *
 * Raises 22004 (NULL argument), 22023 (bad queue name, payload not a JSON
 * object, priority outside -32768..32767, run_at not within 10 years of
 * now, max_attempts outside 1..1000, and what jobq._check_job_options
 * refuses), 54000 (payload or headers over 1 MiB), JQ004, 40001.
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
    headers      jsonb       DEFAULT NULL)
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
       AND enqueue.on_conflict = 'return' AND enqueue.unique_scope = 'active' THEN
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts)
        VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts)
        RETURNING jobq.jobs.id,
                  EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now())
             INTO new_id, waiting;
    ELSE
        -- the options of job control, checked by their helper
        PERFORM jobq._check_job_options(enqueue.unique_key, enqueue.unique_scope, enqueue.on_conflict,
                                        enqueue.headers);
        IF enqueue.unique_key IS NULL THEN
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
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb) IS
    'Enqueue one job; returns its id. Options: priority, run_at, max_attempts, headers; unique_key with unique_scope (active, until_done) and on_conflict (return, skip, raise, replace). Notifies jobq_<queue> when a worker waits.';
REVOKE ALL ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb) TO @extowner@;

/*
 * jobq.enqueue_many(queue, payloads, priority, run_at, max_attempts,
 * unique_keys, unique_scope, on_conflict, headers): the ids, in the
 * order of payloads; without unique_keys one INSERT, and at most one
 * notification (as jobq.enqueue).  unique_keys, when given, is aligned with
 * payloads (NULL: no key for that job), and each job is enqueued as
 * jobq.enqueue would, in order: of equal keys the first wins, and the ids
 * returned follow on_conflict (NULL for skip).  headers and the other
 * options apply to every job.  Raises like jobq.enqueue, naming the first
 * bad element by its own subscript (payloads[i], unique_keys[i]), and 22023
 * for a multidimensional array or unique_keys of another length; inserts
 * nothing then.
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
    headers      jsonb       DEFAULT NULL)
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

    IF enqueue_many.unique_keys IS NULL THEN
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
        IF array_ndims(enqueue_many.unique_keys) > 1 THEN
            RAISE EXCEPTION 'unique_keys must be a one-dimensional array, got % dimensions',
                            array_ndims(enqueue_many.unique_keys)
                USING ERRCODE = '22023';
        END IF;
        IF cardinality(enqueue_many.unique_keys) <> cardinality(enqueue_many.payloads) THEN
            RAISE EXCEPTION 'unique_keys must have as many elements as payloads, got % and %',
                            cardinality(enqueue_many.unique_keys), cardinality(enqueue_many.payloads)
                USING ERRCODE = '22023',
                      HINT = 'Pass NULL for a job without a key.';
        END IF;
        SELECT k.position + array_lower(enqueue_many.unique_keys, 1) - 1 INTO bad_position
          FROM unnest(enqueue_many.unique_keys) WITH ORDINALITY AS k(unique_key, position)
         WHERE length(k.unique_key) NOT BETWEEN 1 AND 512
         ORDER BY k.position
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'unique_keys[%] must be 1 to 512 characters, got %', bad_position,
                            length(enqueue_many.unique_keys[bad_position])
                USING ERRCODE = '22023';
        END IF;
        new_ids := '{}';
        FOR one IN
            SELECT p.payload, p.unique_key
              FROM unnest(enqueue_many.payloads, enqueue_many.unique_keys) WITH ORDINALITY
                   AS p(payload, unique_key, position)
             ORDER BY p.position
        LOOP
            IF one.unique_key IS NULL THEN
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
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb) IS
    'Enqueue many jobs in one call; returns their ids in the order of payloads. Same options as jobq.enqueue, with unique_keys aligned with payloads.';
REVOKE ALL ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb) TO @extowner@;

----------------------------------------------------------------------------
-- Claiming: the queue's settings, cached with forward mode's position
-- (whose old rows, hints only, start afresh); pause, lease, timeout.
----------------------------------------------------------------------------

DROP TABLE jobq._claim_hints;

CREATE UNLOGGED TABLE jobq._claim_hints (
    queue         text        NOT NULL,
    priority      integer,
    run_at        timestamptz,
    id            bigint,
    until         timestamptz,
    paused        boolean,
    lease_timeout interval,
    timeout       interval,
    max_attempts  integer,
    cached_until  timestamptz NOT NULL DEFAULT '-infinity'  -- settings not cached
);
COMMENT ON TABLE jobq._claim_hints IS
    'Internal: per queue claimed lately, its settings (from jobq.queue_settings, until cached_until) and where claims in forward mode scan from (priority, run_at, id, until until). A cache and a hint only.';
REVOKE ALL ON TABLE jobq._claim_hints FROM PUBLIC;

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
CREATE FUNCTION jobq._claim_settings(queue text)
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
           s.max_attempts, statement_timestamp() + interval '1 minute'
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
REVOKE ALL ON FUNCTION jobq._claim_settings(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._claim_settings(text) TO @extowner@;

/*
 * jobq._queue_settings_changed(): the trigger of jobq.queue_settings: after
 * a row changes, deletes the queue's cached row of jobq._claim_hints (for a
 * TRUNCATE, every row), waiting first for a claim that is filling it, so
 * that the claims that start after the change's commit read the new
 * settings.  Locks: the queue's advisory lock (pg_advisory_xact_lock,
 * waiting), held to the end of the transaction.
 */
CREATE FUNCTION jobq._queue_settings_changed()
RETURNS trigger
LANGUAGE plpgsql
-- SECURITY DEFINER: an admin changing settings (jobq.configure_queue, pause,
-- resume) has no privileges on jobq._claim_hints; this only deletes the
-- cached rows of the queues changed.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    changed text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM jobq._claim_hints;
        RETURN NULL;
    END IF;
    FOR changed IN
        SELECT DISTINCT q FROM unnest(ARRAY[CASE WHEN TG_OP <> 'INSERT' THEN OLD.queue END,
                                            CASE WHEN TG_OP <> 'DELETE' THEN NEW.queue END]) AS q
         WHERE q IS NOT NULL
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext(changed));
        DELETE FROM jobq._claim_hints AS h WHERE h.queue = changed;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._queue_settings_changed() IS
    'Internal: a change of jobq.queue_settings drops the queue''s cached settings, so the next claim reads them anew.';
REVOKE ALL ON FUNCTION jobq._queue_settings_changed() FROM PUBLIC;

CREATE TRIGGER queue_settings_changed_trg
    AFTER INSERT OR UPDATE OR DELETE ON jobq.queue_settings
    FOR EACH ROW EXECUTE FUNCTION jobq._queue_settings_changed();
CREATE TRIGGER queue_settings_truncated_trg
    AFTER TRUNCATE ON jobq.queue_settings
    FOR EACH STATEMENT EXECUTE FUNCTION jobq._queue_settings_changed();
COMMENT ON TRIGGER queue_settings_changed_trg ON jobq.queue_settings IS
    'Drops the queue''s cached settings (jobq._claim_hints) when its row changes.';
COMMENT ON TRIGGER queue_settings_truncated_trg ON jobq.queue_settings IS
    'Drops every queue''s cached settings (jobq._claim_hints) when the table is truncated.';

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
    IF hint.until > statement_timestamp() THEN
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
    IF cardinality(picked) IS DISTINCT FROM claim.n THEN
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
              - cardinality(picked);
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
               locked_at        = statement_timestamp(),
               lease_expires_at = least(statement_timestamp()
                                        + coalesce(claim.lease_timeout, hint.lease_timeout, interval '60 seconds'),
                                        statement_timestamp() + hint.timeout),
               max_attempts     = coalesce(j.max_attempts, hint.max_attempts, 3),
               attempts         = j.attempts + 1,
               lease            = j.lease + 1
         WHERE j.id = ANY ((SELECT picked)::bigint[])
        RETURNING j.*
    ), timed AS (
        INSERT INTO jobq.deadlines (id, lease, deadline)
        SELECT c.id, c.lease, statement_timestamp() + hint.timeout
          FROM claimed AS c
         WHERE (SELECT hint.timeout) IS NOT NULL  -- a sub-select, so the plan cache keeps one plan
        ON CONFLICT ON CONSTRAINT deadlines_pkey DO UPDATE SET lease = excluded.lease, deadline = excluded.deadline
    )
    SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;
COMMENT ON FUNCTION jobq.claim(text, integer, text, interval) IS
    'Claim up to n runnable jobs of a queue for worker (FOR NO KEY UPDATE SKIP LOCKED), each under a new lease that expires lease_timeout (default: the queue''s, else 60 s) from now; returns them running. A paused queue gives none.';

----------------------------------------------------------------------------
-- Settling: results, retry_in, snooze, deadlines, cancel requests.
----------------------------------------------------------------------------

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
CREATE FUNCTION jobq._acknowledge(ids bigint[], leases bigint[], results jsonb[])
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
            -- every row passes; a watched one notifies "jobq.done" on its way
            SELECT d.* FROM acknowledged AS d WHERE d.control & 2 = 0 OR jobq._notify_finished(d.id);
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
        SELECT d.* FROM acknowledged AS d WHERE d.control IS NULL OR d.control & 2 = 0 OR jobq._notify_finished(d.id);
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
REVOKE ALL ON FUNCTION jobq._acknowledge(bigint[], bigint[], jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._acknowledge(bigint[], bigint[], jsonb[]) TO @extowner@;

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
CREATE FUNCTION jobq.complete(id bigint, lease bigint, result jsonb DEFAULT NULL)
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
REVOKE ALL ON FUNCTION jobq.complete(bigint, bigint, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.complete(bigint, bigint, jsonb) TO @extowner@;

/*
 * jobq.complete_many(ids, leases, results): the ids of the pairs
 * acknowledged, in ascending order: jobs now done (storing the result at
 * the same position of results, when given; NULL elements: no result), or
 * already done under that same lease.  A pair whose lease is not current
 * (or whose id is unknown) is left out, not raised, so one stale job cannot
 * fail a batch.  One UPDATE (jobq._acknowledge); locks the rows it changes.
 * Raises like jobq._check_pairs and jobq._check_results.
 */
CREATE FUNCTION jobq.complete_many(ids bigint[], leases bigint[], results jsonb[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 50
-- SECURITY DEFINER: workers acknowledge without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_pairs(complete_many.ids, complete_many.leases);
    PERFORM jobq._check_results(complete_many.ids, complete_many.results);
    RETURN QUERY
    SELECT a.id
      FROM jobq._acknowledge(complete_many.ids, complete_many.leases, complete_many.results) AS a
     ORDER BY a.id;
END
$$;
COMMENT ON FUNCTION jobq.complete_many(bigint[], bigint[], jsonb[]) IS
    'Mark many running jobs done in one statement, with their results (optional, aligned with ids); returns the ids acknowledged. Pairs with a stale lease or unknown id are left out of the result.';
REVOKE ALL ON FUNCTION jobq.complete_many(bigint[], bigint[], jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.complete_many(bigint[], bigint[], jsonb[]) TO @extowner@;

/*
 * jobq.complete_and_claim(ids, leases, queue, n, worker, lease_timeout,
 * results): first the jobs acknowledged, by ascending id, as
 * jobq.complete_many would (status 'done': now done, with the results
 * given, or already done under that same lease; stale pairs are left out),
 * then up to n newly claimed jobs of queue (status 'running', each with its
 * new lease of lease_timeout, default the queue's, else 60 seconds), as
 * jobq.claim would.  Empty arrays claim only; to acknowledge without
 * claiming, use jobq.complete_many.  One statement: if any argument is
 * refused, nothing is acknowledged and nothing claimed.  Locks: the rows it
 * marks done, and FOR NO KEY UPDATE SKIP LOCKED on the rows it claims.
 * Raises 22004 (NULL argument), 22023 (arrays of different lengths or with
 * NULL elements, and what jobq.claim refuses), 54000 (a result over 1 MiB).
 */
CREATE FUNCTION jobq.complete_and_claim(ids bigint[], leases bigint[], queue text, n integer, worker text,
                                        lease_timeout interval DEFAULT NULL, results jsonb[] DEFAULT NULL)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 20
-- SECURITY DEFINER: like claim and complete_many, for workers without
-- privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- the worker's hot path: the checks inline, the helper called only to raise
    IF complete_and_claim.ids IS NULL OR complete_and_claim.leases IS NULL
       OR array_ndims(complete_and_claim.ids) > 1 OR array_ndims(complete_and_claim.leases) > 1
       OR cardinality(complete_and_claim.ids) <> cardinality(complete_and_claim.leases)
       OR array_position(complete_and_claim.ids, NULL) IS NOT NULL OR array_position(complete_and_claim.leases, NULL) IS NOT NULL THEN
        PERFORM jobq._check_pairs(complete_and_claim.ids, complete_and_claim.leases);  -- raises, naming the fault
    END IF;
    IF complete_and_claim.results IS NOT NULL THEN
        PERFORM jobq._check_results(complete_and_claim.ids, complete_and_claim.results);
    END IF;
    IF cardinality(complete_and_claim.ids) > 0 THEN
        -- should jobq.claim below refuse its arguments, the error undoes these
        -- acknowledgements with the rest of the statement
        RETURN QUERY
        SELECT a.*
          FROM jobq._acknowledge(complete_and_claim.ids, complete_and_claim.leases, complete_and_claim.results) AS a
         ORDER BY a.id;
    END IF;
    RETURN QUERY
    SELECT c.* FROM jobq.claim(complete_and_claim.queue, complete_and_claim.n,
                               complete_and_claim.worker, complete_and_claim.lease_timeout) AS c;
END
$$;
COMMENT ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval, jsonb[]) IS
    'Acknowledge finished jobs with their results (returned with status done) and claim up to n more (returned running, under leases of lease_timeout), in one statement.';
REVOKE ALL ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval, jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval, jsonb[]) TO @extowner@;

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
CREATE FUNCTION jobq.fail(id bigint, error text, lease bigint, retry_in interval DEFAULT NULL)
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
    RETURN failed_job;
END
$$;
COMMENT ON FUNCTION jobq.fail(bigint, text, bigint, interval) IS
    'Record a failure of a running job: back to queued after retry_in or the queue''s backoff, failed at max_attempts, cancelled if a cancel was requested. Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.fail(bigint, text, bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.fail(bigint, text, bigint, interval) TO @extowner@;

/*
 * jobq.snooze(id, lease, delay): the job's new run_at, now + delay: the
 * running job goes back to queued without spending an attempt (a handler
 * waiting on something outside); the lease is spent all the same.  A job
 * whose worker was asked to cancel it becomes cancelled instead, and NULL is
 * returned.  Locks the job's row.  Raises 22004 (NULL argument), 22023
 * (delay negative or over 10 years), JQ002, JQ001 like jobq.complete.
 */
CREATE FUNCTION jobq.snooze(id bigint, lease bigint, delay interval)
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
    RETURNING j.status, j.run_at, j.control & 2 <> 0 INTO new_status, new_run_at, watched;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(snooze.id, snooze.lease);
    END IF;
    IF watched AND new_status = 'cancelled' THEN
        PERFORM jobq._notify_finished(snooze.id);
    END IF;
    RETURN CASE WHEN new_status = 'queued' THEN new_run_at END;
END
$$;
COMMENT ON FUNCTION jobq.snooze(bigint, bigint, interval) IS
    'Put a running job back to queued, runnable after delay, without spending an attempt; returns its run_at (NULL: cancelled, as requested). Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.snooze(bigint, bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.snooze(bigint, bigint, interval) TO @extowner@;

/*
 * jobq.heartbeat(id, lease): the new locked_at.  Extends a running job's
 * lease by its own length (the lease_timeout it was claimed with):
 * locked_at becomes now and lease_expires_at now + that length, but never
 * past the job's deadline, so the reaper leaves the job alone.  Locks the
 * job's row.  Raises 22004, JQ002, JQ001 like jobq.complete, and JQ003 once
 * the deadline has passed (the attempt timed out: jobq.reap recovers it).
 */
CREATE OR REPLACE FUNCTION jobq.heartbeat(id bigint, lease bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers extend leases without UPDATE on jobq.jobs; the lease
-- decides which rows they may change.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_locked_at timestamptz;
    passed        timestamptz;  -- the deadline of the lease, if its queue has a timeout
BEGIN
    PERFORM jobq._check_lease(heartbeat.id, heartbeat.lease);
    SELECT d.deadline INTO passed
      FROM jobq.deadlines AS d
     WHERE d.id = heartbeat.id AND d.lease = heartbeat.lease;
    UPDATE jobq.jobs AS j
       SET locked_at        = statement_timestamp(),
           lease_expires_at = least(statement_timestamp() + (j.lease_expires_at - j.locked_at), passed)
     WHERE j.id = heartbeat.id AND j.lease = heartbeat.lease AND j.status = 'running'
       AND (passed IS NULL OR passed > statement_timestamp())
    RETURNING j.locked_at INTO new_locked_at;
    IF NOT FOUND THEN
        PERFORM FROM jobq.jobs AS j
          WHERE j.id = heartbeat.id AND j.lease = heartbeat.lease AND j.status = 'running';
        IF FOUND THEN  -- held, but past its deadline
            RAISE EXCEPTION 'job % timed out at %', heartbeat.id, passed
                USING ERRCODE = 'JQ003',
                      HINT = 'Its lease is not extended past its deadline; jobq.reap recovers it.';
        END IF;
        PERFORM jobq._raise_not_held(heartbeat.id, heartbeat.lease);
    END IF;
    RETURN new_locked_at;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat(bigint, bigint) IS
    'Extend the lease of a running job by its own length (locked_at = now; never past its deadline) so jobq.reap leaves it alone; returns the new locked_at. Refuses a stale lease with JQ001, a timed-out attempt with JQ003.';

/*
 * jobq._extend(ids, leases): the jobs of the (id, lease) pairs still running
 * under that lease, their leases extended as jobq.heartbeat does (never
 * past the deadline; one whose deadline has passed is returned as it is,
 * its lease expired), in no particular order.  The caller checks the
 * arrays.  One UPDATE; locks the rows it changes.
 */
CREATE FUNCTION jobq._extend(ids bigint[], leases bigint[])
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 20
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    UPDATE jobq.jobs AS j
       -- past the deadline the lease stays as it is, expired
       SET locked_at        = CASE WHEN a.deadline <= statement_timestamp() THEN j.locked_at
                                   ELSE statement_timestamp() END,
           lease_expires_at = CASE WHEN a.deadline <= statement_timestamp() THEN j.lease_expires_at
                                   ELSE least(statement_timestamp() + (j.lease_expires_at - j.locked_at), a.deadline) END
      -- the pairs drive the join, as in jobq._acknowledge
      FROM (SELECT p.id, p.lease, d.deadline
              FROM unnest((SELECT _extend.ids), (SELECT _extend.leases)) AS p(id, lease)
              LEFT JOIN jobq.deadlines AS d ON d.id = p.id AND d.lease = p.lease) AS a
     WHERE j.id = a.id AND j.lease = a.lease
       AND (j.status = 'running') IS TRUE  -- by primary key, as in jobq._acknowledge
    RETURNING j.*;
END
$$;
COMMENT ON FUNCTION jobq._extend(bigint[], bigint[]) IS
    'Internal: extend the leases of the (id, lease) pairs still running under that lease; returns their jobs.';
REVOKE ALL ON FUNCTION jobq._extend(bigint[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._extend(bigint[], bigint[]) TO @extowner@;

/*
 * jobq.heartbeat_many(ids, leases): the ids whose lease was extended by its
 * own length, as jobq.heartbeat does, ascending: the jobs still running
 * under the lease given, but for those past their deadline (which
 * jobq.heartbeat refuses with JQ003).  A pair whose
 * lease is not current, or whose job is no longer running, is left out, not
 * raised, so a worker extends every job in hand with one statement and
 * learns which it lost.  One UPDATE; locks the rows it changes.  Raises like
 * jobq._check_pairs.
 */
CREATE OR REPLACE FUNCTION jobq.heartbeat_many(ids bigint[], leases bigint[])
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
    SELECT h.id
      FROM jobq._extend(heartbeat_many.ids, heartbeat_many.leases) AS h
     WHERE h.lease_expires_at > statement_timestamp()  -- past its deadline: refused, as by jobq.heartbeat
     ORDER BY h.id;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) IS
    'Extend the leases of many running jobs by their own lengths in one statement; returns the ids extended. Stale pairs are left out.';

/*
 * jobq.heartbeat_status(ids, leases): for each pair still running under the
 * lease given, by ascending id: its lease extended as jobq.heartbeat_many
 * does, the new lease_expires_at (not after now once the job's deadline has
 * passed: it is about to be reaped) and cancel_requested (jobq.cancel asked
 * its worker to stop it).  Stale pairs are left out.  One UPDATE; locks the
 * rows it changes.  Raises like jobq._check_pairs.
 */
CREATE FUNCTION jobq.heartbeat_status(ids bigint[], leases bigint[])
RETURNS TABLE (id bigint, lease_expires_at timestamptz, cancel_requested boolean)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 20
-- SECURITY DEFINER: like heartbeat, for workers without privileges on
-- jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_pairs(heartbeat_status.ids, heartbeat_status.leases);
    RETURN QUERY
    SELECT h.id, h.lease_expires_at, coalesce(h.control & 1 <> 0, false)
      FROM jobq._extend(heartbeat_status.ids, heartbeat_status.leases) AS h
     ORDER BY h.id;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat_status(bigint[], bigint[]) IS
    'Extend the leases of many running jobs like heartbeat_many; returns, per job still held, its new lease_expires_at and whether a cancel was requested.';
REVOKE ALL ON FUNCTION jobq.heartbeat_status(bigint[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.heartbeat_status(bigint[], bigint[]) TO @extowner@;

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
BEGIN
    PERFORM jobq._check_lease(release.id, release.lease);
    UPDATE jobq.jobs AS j
       SET status      = CASE WHEN j.control & 1 <> 0 THEN 'cancelled' ELSE 'queued' END,
           attempts    = CASE WHEN j.control & 1 <> 0 THEN j.attempts ELSE j.attempts - 1 END,
           finished_at = CASE WHEN j.control & 1 <> 0 THEN statement_timestamp() END
     WHERE j.id = release.id AND j.lease = release.lease AND j.status = 'running'
    RETURNING j.control & 3 = 3 INTO cancelled_watched;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(release.id, release.lease);
    END IF;
    IF cancelled_watched THEN
        PERFORM jobq._notify_finished(release.id);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq.release(bigint, bigint) IS
    'Hand a claimed, unstarted job back to the queue without counting the attempt (cancelled, if a cancel was requested). Refuses a stale lease with JQ001.';

----------------------------------------------------------------------------
-- Operating: reap by the queue's backoff and deadlines, redrive around
-- unique keys, purge cancelled jobs, results and keys, stats with a
-- cancelled count.
----------------------------------------------------------------------------

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
    -- every row passes; a watched one that finished notifies "jobq.done" on its way
    SELECT r.* FROM reaped AS r
     WHERE r.status = 'queued' OR r.control IS NULL OR r.control & 2 = 0 OR jobq._notify_finished(r.id)
     ORDER BY r.id;
END
$$;
COMMENT ON FUNCTION jobq.reap(interval) IS
    'Recover running jobs whose lease expired or whose timeout passed: back to queued, failed when out of attempts, cancelled when a cancel was requested. Returns them. stale, when given, also requires the lease to be older than stale.';

/*
 * jobq.retry_failed(queue, ids): the ids redriven, ascending.  Failed jobs
 * (of queue, and among ids, when given) go back to queued, runnable now, with
 * attempts reset; their lease counter is kept, so old leases stay refused.
 * last_error is kept.  A failed job enqueued with a unique key goes back
 * only while its key is still its own (jobq.unique_keys): once a newer job
 * took the key, it stays failed (a notice says so), so a redrive never
 * makes two holders.  Notifies the queues concerned.  Locks the rows it
 * redrives and their keys.  Raises 22023 for a bad queue name.
 */
CREATE OR REPLACE FUNCTION jobq.retry_failed(queue text DEFAULT NULL, ids bigint[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    redriven_ids    bigint[];
    redriven_queues text[];
    keyed           record;
BEGIN
    IF retry_failed.queue IS NOT NULL THEN
        PERFORM jobq._check_queue(retry_failed.queue);
    END IF;
    -- jobs enqueued without a unique key, all at once
    WITH redriven AS (
        UPDATE jobq.jobs AS j
           SET status = 'queued', attempts = 0, run_at = statement_timestamp(), finished_at = NULL
         WHERE j.status = 'failed' AND coalesce(j.control & 4 = 0, true)
           AND (retry_failed.queue IS NULL OR j.queue = retry_failed.queue)
           AND (retry_failed.ids IS NULL OR j.id = ANY (retry_failed.ids))
        RETURNING j.id, j.queue
    )
    SELECT coalesce(array_agg(r.id), '{}'), coalesce(array_agg(DISTINCT r.queue), '{}')
      INTO redriven_ids, redriven_queues
      FROM redriven AS r;
    -- jobs enqueued with one, one by one: a job whose key row still names
    -- it (no newer job took the key) goes back, keeping its key, its row
    -- locked meanwhile; the others stay failed
    FOR keyed IN
        SELECT j.id, j.queue, k.unique_key
          FROM jobq.jobs AS j
          LEFT JOIN jobq.unique_keys AS k ON k.job_id = j.id
         WHERE j.status = 'failed' AND j.control & 4 <> 0
           AND (retry_failed.queue IS NULL OR j.queue = retry_failed.queue)
           AND (retry_failed.ids IS NULL OR j.id = ANY (retry_failed.ids))
         ORDER BY j.id
    LOOP
        PERFORM FROM jobq.unique_keys AS k
          WHERE k.queue = keyed.queue AND k.unique_key = keyed.unique_key AND k.job_id = keyed.id
            FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RAISE NOTICE 'job % stays failed: a newer job of queue % took its unique key', keyed.id,
                         quote_literal(keyed.queue);
            CONTINUE;
        END IF;
        UPDATE jobq.jobs AS j
           SET status = 'queued', attempts = 0, run_at = statement_timestamp(), finished_at = NULL
         WHERE j.id = keyed.id AND j.status = 'failed';
        IF FOUND THEN
            redriven_ids := redriven_ids || keyed.id;
            redriven_queues := redriven_queues || keyed.queue;
        END IF;
    END LOOP;
    PERFORM pg_notify(jobq.channel(q.queue), '') FROM (SELECT DISTINCT unnest(redriven_queues)) AS q(queue);
    RETURN QUERY SELECT r.id FROM unnest(redriven_ids) AS r(id) ORDER BY r.id;
END
$$;
COMMENT ON FUNCTION jobq.retry_failed(text, bigint[]) IS
    'Dead-letter redrive: failed jobs (optionally of one queue, optionally only these ids) back to queued with attempts reset. Returns their ids; a job whose unique key a newer job holds stays failed.';

/*
 * jobq.purge(older_than, max_rows): the number of jobs deleted: done and
 * cancelled jobs (and failed ones too when include_failed) that finished more than
 * older_than ago, at most max_rows of them, so a large backlog can be purged
 * in short transactions, with their results, deadlines and keys.
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
        RETURNING j.id
    ), keys AS (
        -- the keys these jobs held: free now
        DELETE FROM jobq.unique_keys AS k USING gone AS g WHERE k.job_id = g.id
    ), results AS (
        DELETE FROM jobq.results AS r USING gone AS g WHERE r.id = g.id
    ), deadlines AS (
        DELETE FROM jobq.deadlines AS d USING gone AS g WHERE d.id = g.id
    )
    SELECT count(*) INTO deleted FROM gone;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION jobq.purge(interval, integer, boolean) IS
    'Delete done and cancelled jobs (and failed ones with include_failed) finished more than older_than ago, at most max_rows; returns how many.';

-- its result gains a column: the old one steps aside until its grants are copied
ALTER FUNCTION jobq.stats() RENAME TO _stats_0_5_0;

/*
 * jobq.stats(): one row per queue: how many jobs are queued (of which
 * runnable now), running, done and failed, how long the oldest runnable
 * queued job has been waiting, and how many jobs are cancelled.  Reads the
 * whole table; takes no row locks.
 */
CREATE FUNCTION jobq.stats()
RETURNS TABLE (queue text, queued bigint, runnable bigint, running bigint, done bigint,
               failed bigint, oldest_queued_age interval, cancelled bigint)
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
           count(*) FILTER (WHERE j.status = 'cancelled')
      FROM jobq.jobs AS j
     GROUP BY j.queue
     ORDER BY j.queue
$$;
COMMENT ON FUNCTION jobq.stats() IS
    'Per queue: counts of queued (and runnable now), running, done and failed jobs, the wait of the oldest runnable job, and the count of cancelled jobs.';
REVOKE ALL ON FUNCTION jobq.stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.stats() TO @extowner@;

----------------------------------------------------------------------------
-- Job control: cancel, job, wait, watch (sql/src/65_control.sql, all new).
----------------------------------------------------------------------------

/*
 * jobq.cancel(ids, force): one row per known id, by id, with its status
 * after the call: 'cancelled' (it was queued, scheduled or already
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
CREATE FUNCTION jobq.cancel(ids bigint[], force boolean DEFAULT false)
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known_ids bigint[];
    queues    text[];
    were      text[];  -- each job's status before
    statuses  text[];  -- and after
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
           SET status              = CASE WHEN t.was = 'queued' OR cancel.force THEN 'cancelled' ELSE j.status END,
               finished_at         = CASE WHEN t.was = 'queued' OR cancel.force THEN statement_timestamp()
                                          ELSE j.finished_at END,
               control             = CASE WHEN t.was = 'running' THEN coalesce(j.control, 0) | 1  -- cancel requested
                                          ELSE j.control END
          FROM target AS t
         WHERE j.id = t.id AND t.was = ANY (ARRAY['queued', 'running'])
        RETURNING j.id, j.queue, j.status,
                  j.control & 2 <> 0 AND j.status = 'cancelled' AND jobq._notify_finished(j.id) AS notified
    )
    SELECT array_agg(t.id ORDER BY t.id), array_agg(c.queue ORDER BY t.id), array_agg(t.was ORDER BY t.id),
           array_agg(coalesce(c.status, t.was) ORDER BY t.id)
      INTO known_ids, queues, were, statuses
      FROM target AS t
      LEFT JOIN changed AS c ON c.id = t.id;

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
REVOKE ALL ON FUNCTION jobq.cancel(bigint[], boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.cancel(bigint[], boolean) TO @extowner@;

CREATE TYPE jobq.job_state AS (
    id               bigint,
    queue            text,
    status           text,
    attempts         integer,
    max_attempts     integer,
    result           jsonb,
    last_error       text,
    run_at           timestamptz,
    created_at       timestamptz,
    finished_at      timestamptz,
    cancel_requested boolean
);
COMMENT ON TYPE jobq.job_state IS
    'A job''s public state, as jobq.job, jobq.wait and jobq.watch return it (max_attempts with the queue''s default filled in).';

/*
 * jobq.job(id): the job's public state (jobq.job_state), its result read
 * from jobq.results.  Reads the rows without locking them.  Raises 22004
 * (NULL id), JQ002 (no such job).
 */
CREATE FUNCTION jobq.job(id bigint)
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
           j.last_error, j.run_at, j.created_at, j.finished_at, coalesce(j.control & 1 <> 0, false)
      INTO state.id, state.queue, state.status, state.attempts, state.max_attempts, state.result,
           state.last_error, state.run_at, state.created_at, state.finished_at, state.cancel_requested
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
    'A job''s public state: queue, status, attempts, max_attempts, result, last_error, run_at, created_at, finished_at, cancel_requested (not its payload). JQ002: no such job.';
REVOKE ALL ON FUNCTION jobq.job(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.job(bigint) TO @extowner@;

/*
 * jobq.wait(id, timeout): the job's state (jobq.job) once it is done, failed
 * or cancelled; NULL if it is not by the end of timeout (default 10
 * seconds, at most 60).  Polls inside the database: it reads the job, then
 * sleeps 10 ms, doubling to at most 200 ms between reads.  While it waits,
 * the calling statement holds its snapshot, and so holds back vacuum (and,
 * behind a pooler, its server connection), which is why the timeout is
 * bounded; a client that can LISTEN should use jobq.watch instead, as the
 * Python client's wait does, and hold nothing while it waits.  Takes no
 * locks.  Raises 22004 (NULL argument), 22023 (timeout negative or over 60
 * seconds), JQ002 like jobq.job.
 */
CREATE FUNCTION jobq.wait(id bigint, timeout interval DEFAULT '10 seconds')
RETURNS jobq.job_state
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: like jobq.job, for producers without SELECT on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    state    jobq.job_state;
    deadline timestamptz;
    pause    double precision := 0.01::double precision;
BEGIN
    IF wait.timeout IS NULL THEN
        RAISE EXCEPTION 'timeout must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF wait.timeout < interval '0' OR wait.timeout > interval '60 seconds' THEN
        RAISE EXCEPTION 'timeout must be an interval between 0 and 60 seconds, got %', wait.timeout
            USING ERRCODE = '22023',
                  HINT = 'A waiting call holds back vacuum; wait again, or LISTEN with jobq.watch.';
    END IF;
    deadline := clock_timestamp() + wait.timeout;
    LOOP
        state := jobq.job(wait.id);  -- each read a statement of its own, with a fresh snapshot
        IF state.status = ANY (ARRAY['done', 'failed', 'cancelled']) THEN
            RETURN state;
        END IF;
        EXIT WHEN clock_timestamp() >= deadline;
        PERFORM pg_sleep(least(pause, extract(epoch FROM deadline - clock_timestamp())::double precision));
        pause := least(pause * 2, 0.2::double precision);
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq.wait(bigint, interval) IS
    'Wait up to timeout (at most 60 s) for a job to be done, failed or cancelled; returns its state then, NULL at the timeout. Polls; holds its snapshot while it waits.';
REVOKE ALL ON FUNCTION jobq.wait(bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.wait(bigint, interval) TO @extowner@;

/*
 * jobq.watch(id): the job's state (jobq.job), after asking for one
 * notification on channel "jobq.done" (its payload: the id) when the job
 * becomes done, failed or cancelled (by the functions of pgjobq: a direct
 * UPDATE of the table notifies nobody).  LISTEN "jobq.done" first (the
 * name is quoted: it holds a dot, so it is no queue's channel), then watch,
 * then wait for the id or poll: a job that finishes between the two is
 * either returned finished or notified.  Locks the job's row briefly (FOR NO KEY
 * UPDATE, waiting for a claim or an acknowledgement in flight) when it is
 * not finished.  Raises 22004, JQ002 like jobq.job.
 */
CREATE FUNCTION jobq.watch(id bigint)
RETURNS jobq.job_state
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: like jobq.job; it changes only the job's watched bit.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    state jobq.job_state := jobq.job(watch.id);  -- raises for an unknown job
BEGIN
    IF state.status = ANY (ARRAY['done', 'failed', 'cancelled']) THEN
        RETURN state;
    END IF;
    UPDATE jobq.jobs AS j
       SET control = coalesce(j.control, 0) | 2  -- watched
     WHERE j.id = watch.id AND j.status = ANY (ARRAY['queued', 'running']) AND coalesce(j.control & 2 = 0, true);
    RETURN jobq.job(watch.id);
END
$$;
COMMENT ON FUNCTION jobq.watch(bigint) IS
    'Ask for a notification on channel "jobq.done" (payload: the id) when the job finishes; returns its state now.';
REVOKE ALL ON FUNCTION jobq.watch(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.watch(bigint) TO @extowner@;

----------------------------------------------------------------------------
-- Access levels: the new functions and tables in each level.
----------------------------------------------------------------------------

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
                'jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb)',
                'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'worker' THEN
        RETURN ARRAY[
                'jobq.claim(text, integer, text, interval)',
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
                                     'jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[])',
                                     'jobq._queues()',
                                     'jobq._notify_finished(bigint)',
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
 * jobq.unique_keys, jobq.results and jobq.deadlines, and SELECT
 * on the views jobq.health and jobq.queues.  Runs with the caller's rights.
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
                       ' jobq.results, jobq.deadlines TO %I', grantee);
        EXECUTE format('GRANT SELECT ON TABLE jobq.queues TO %I', grantee);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._grant_level(regrole, text) IS
    'Internal: grants the privileges of one access level (producer, worker, admin).';

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
                   ' jobq.results, jobq.deadlines FROM %I', grantee);
    EXECUTE format('REVOKE SELECT ON TABLE jobq.queues FROM %I', grantee);
END
$$;
COMMENT ON FUNCTION jobq.revoke_all(regrole) IS
    'Take back from role every privilege that grant_producer, grant_worker or grant_admin gave. Owner or superuser only.';

-- see_jobs: the producer level no longer includes looking jobs up by id
DROP FUNCTION jobq.grant_producer(regrole);

/*
 * jobq.grant_producer(role, see_jobs): returns nothing.  Grants the
 * producer level, and with see_jobs the observer level too: jobq.job, wait
 * and watch, which show any job's state and result by its id (ids are
 * sequential, so a producer given them can read every job's outcome; not
 * its payload).  Raises like jobq._grantee, and 22004 for a NULL see_jobs.
 */
CREATE FUNCTION jobq.grant_producer(role regrole, see_jobs boolean DEFAULT false)
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
    'Let role enqueue jobs (jobq.enqueue, jobq.enqueue_many), and with see_jobs look any job up (jobq.job, wait, watch); no access to the jobs table. Owner or superuser only.';
REVOKE ALL ON FUNCTION jobq.grant_producer(regrole, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.grant_producer(regrole, boolean) TO @extowner@;

COMMENT ON FUNCTION jobq.grant_worker(regrole) IS
    'Let role work jobs (claim, heartbeat, complete, fail, snooze, release and their batch forms), recover expired leases (reap) and look jobs up (job, wait, watch); no access to the jobs table. Owner or superuser only.';
COMMENT ON FUNCTION jobq.grant_admin(regrole) IS
    'Let role do everything with the queue: every function, retry_failed, purge, stats, cancel, pause, resume, configure_queue, jobq.health, jobq.queues, and read and write jobq.jobs, jobq.queue_settings, jobq.unique_keys, jobq.results and jobq.deadlines. Owner or superuser only.';

----------------------------------------------------------------------------
-- Grants: each role keeps its level.  A new function is granted to every
-- role that may execute the function it replaces, or a function of the
-- same level; the admins (EXECUTE on jobq.retry_failed) get the new tables
-- and the view.  Producers do not get jobq.job, wait and watch: ids are
-- sequential (jobq.grant_producer(role, see_jobs => true) gives them).
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
                ('jobq.enqueue(text, jsonb, integer, timestamptz, integer)',
                 'jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb)', 'f'),
                ('jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer)',
                 'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb)', 'f'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.job(bigint)', 'f'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.wait(bigint, interval)', 'f'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.watch(bigint)', 'f'),
                ('jobq.complete(bigint, bigint)', 'jobq.complete(bigint, bigint, jsonb)', 'f'),
                ('jobq.complete_many(bigint[], bigint[])', 'jobq.complete_many(bigint[], bigint[], jsonb[])', 'f'),
                ('jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval)',
                 'jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval, jsonb[])', 'f'),
                ('jobq.fail(bigint, text, bigint)', 'jobq.fail(bigint, text, bigint, interval)', 'f'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.snooze(bigint, bigint, interval)', 'f'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.heartbeat_status(bigint[], bigint[])', 'f'),
                ('jobq._stats_0_5_0()', 'jobq.stats()', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.cancel(bigint[], boolean)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.pause(text)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.resume(text)', 'f'),
                ('jobq.retry_failed(text, bigint[])',
                 'jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[])', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._queues()', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._retry_delay(text, integer)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.queue_settings', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.unique_keys', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._notify_finished(bigint)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.results', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.deadlines', 't'),
                ('jobq.retry_failed(text, bigint[])', 'jobq.queues', 'v')) AS c(old, new, kind)
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
        RAISE WARNING 'pgjobq 0.6.0 granted % the new jobq.enqueue, enqueue_many, complete, complete_many, '
                      'complete_and_claim, fail, snooze, heartbeat_status, job, wait, watch, stats, cancel, pause, '
                      'resume, configure_queue, jobq.queues and the tables of job control',
                      pg_catalog.array_to_string(kept, ', ')
            USING DETAIL = 'An upgrade not run by a superuser records its grants as initial privileges, which '
                           'pg_dump leaves out.',
                  HINT = 'After restoring a dump of this database, run jobq.grant_producer, grant_worker or '
                         'grant_admin again for these roles.';
    END IF;
END
$$;

DROP FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer);
DROP FUNCTION jobq.complete(bigint, bigint);
DROP FUNCTION jobq.complete_many(bigint[], bigint[]);
DROP FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval);
DROP FUNCTION jobq.fail(bigint, text, bigint);
DROP FUNCTION jobq._acknowledge(bigint[], bigint[]);
DROP FUNCTION jobq._stats_0_5_0();
DROP FUNCTION jobq._backoff(integer);
