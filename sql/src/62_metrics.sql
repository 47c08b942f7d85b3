----------------------------------------------------------------------------
-- Metrics: the queue's state for a scraper, cheap enough to read every few
-- seconds on a table of millions of finished jobs
----------------------------------------------------------------------------

/*
 * jobq.metrics(): one row per (metric, queue), queue NULL for the rows about
 * the table as a whole; every value a double precision.  Per queue (every
 * queue that has queued, running, waiting or finished jobs, or settings, so
 * that a drained queue reads 0 instead of vanishing):
 *   jobs_runnable                queued jobs whose run_at has come
 *   jobs_scheduled               queued jobs due later (run_at in the future)
 *   jobs_running                 jobs held under a lease
 *   jobs_waiting                 jobs waiting for parent jobs
 *   jobs_failed                  the dead-letter queue
 *   oldest_runnable_age_seconds  how long the oldest runnable job has waited (0: none)
 *   paused                       1 while the queue is paused (jobq.pause), else 0
 *   jobs_past_retention          finished jobs whose retention ended, not deleted yet
 *                                (counted up to 100,000 per state; jobq.tick deletes them)
 *   oldest_finished_age_seconds  how long ago its oldest finished job (done, failed or
 *                                cancelled) finished (0: none)
 * For the table (queue NULL):
 *   live_tuples, dead_tuples     pg_stat_user_tables' estimates for jobq.jobs
 *   table_bytes                  jobq.jobs with its indexes and TOAST
 *   index_bytes                  jobq.jobs' indexes alone
 *   last_vacuum_timestamp_seconds  the last vacuum, manual or automatic, as a Unix time (absent: never)
 *   oldest_transaction_age_seconds the oldest open transaction of another session, of any
 *                                role (jobq._oldest_transaction_age; 0: none)
 *   oldest_xmin_age              in transactions: how far the oldest snapshot holds back vacuum
 * Every count walks a partial index (jobs_claim_idx, jobs_status_idx) or
 * jobq.job_waits, and of the finished jobs reads only those past their
 * retention (at most 100,000 per queue and state) and the oldest, so the
 * cost follows the unfinished jobs and what retention has yet to delete,
 * not the table.  Takes no row locks;
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
    ), finished AS (
        -- per queue, from one probe of jobs_status_idx per state and queue
        -- and an index range of the rows past retention, at most 100,000
        SELECT f.queue,
               sum((SELECT count(*)
                      FROM (SELECT FROM jobq.jobs AS j
                             WHERE j.status = f.status AND j.status IN ('done', 'failed', 'cancelled')
                               AND j.queue = f.queue AND j.finished_at < statement_timestamp() - f.retention
                             LIMIT 100000) AS past)) AS past,
               extract(epoch FROM statement_timestamp()
                                  - min((SELECT min(j.finished_at) FROM jobq.jobs AS j
                                          WHERE j.status = f.status AND j.status IN ('done', 'failed', 'cancelled')
                                            AND j.queue = f.queue))) AS oldest
          FROM jobq._finished_queues() AS f
         GROUP BY f.queue
    ), queues AS (
        SELECT q.queue FROM queued AS q
        UNION SELECT r.queue FROM running AS r
        UNION SELECT f.queue FROM failed AS f
        UNION SELECT w.queue FROM waiting AS w
        UNION SELECT d.queue FROM finished AS d
        UNION SELECT s.queue FROM jobq.queue_settings AS s
    ), per_queue AS (
        SELECT q.queue, coalesce(qd.runnable, 0) AS runnable, coalesce(qd.scheduled, 0) AS scheduled,
               coalesce(r.n, 0) AS running, coalesce(w.n, 0) AS waiting, coalesce(f.n, 0) AS failed,
               coalesce(qd.oldest, 0) AS oldest, coalesce(s.paused, false) AS paused,
               coalesce(d.past, 0) AS past_retention, coalesce(d.oldest, 0) AS oldest_finished
          FROM queues AS q
          LEFT JOIN queued AS qd ON qd.queue = q.queue
          LEFT JOIN running AS r ON r.queue = q.queue
          LEFT JOIN failed AS f ON f.queue = q.queue
          LEFT JOIN waiting AS w ON w.queue = q.queue
          LEFT JOIN finished AS d ON d.queue = q.queue
          LEFT JOIN jobq.queue_settings AS s ON s.queue = q.queue
    ), activity AS (
        SELECT extract(epoch FROM jobq._oldest_transaction_age()) AS oldest_transaction,
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
                                ('paused', CASE WHEN p.paused THEN 1 ELSE 0 END::float8),
                                ('jobs_past_retention', p.past_retention::float8),
                                ('oldest_finished_age_seconds', p.oldest_finished::float8)) AS m(metric, value)
    UNION ALL
    SELECT m.metric, NULL, m.value
      FROM pg_stat_user_tables AS s
     CROSS JOIN activity AS a
     CROSS JOIN LATERAL (VALUES ('live_tuples', s.n_live_tup::float8),
                                ('dead_tuples', s.n_dead_tup::float8),
                                ('table_bytes', pg_total_relation_size('jobq.jobs'::regclass)::float8),
                                ('index_bytes', pg_indexes_size('jobq.jobs'::regclass)::float8),
                                ('last_vacuum_timestamp_seconds',
                                 extract(epoch FROM greatest(s.last_autovacuum, s.last_vacuum))::float8),
                                ('oldest_transaction_age_seconds', coalesce(a.oldest_transaction, 0)::float8),
                                ('oldest_xmin_age', coalesce(a.oldest_xmin, 0)::float8)) AS m(metric, value)
     WHERE s.relid = 'jobq.jobs'::regclass
       AND m.value IS NOT NULL
$$;
COMMENT ON FUNCTION jobq.metrics() IS
    'The queue''s state for a scraper, per queue: jobs_runnable, jobs_scheduled, jobs_running, jobs_waiting, jobs_failed, oldest_runnable_age_seconds, paused, jobs_past_retention, oldest_finished_age_seconds; for the table (queue NULL): live_tuples, dead_tuples, table_bytes, index_bytes, last_vacuum_timestamp_seconds, oldest_transaction_age_seconds, oldest_xmin_age. Reads partial indexes only, never the finished jobs.';
REVOKE ALL ON FUNCTION jobq.metrics() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.metrics() TO @extowner@;
