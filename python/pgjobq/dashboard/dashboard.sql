-- The statements the dashboard sends.  Each starts with "-- name: NAME";
-- pgjobq.dashboard._queries loads them.  Every statement is bounded: it
-- walks a partial index of unfinished jobs (jobs_claim_idx, jobs_reap_idx,
-- jobs_failed_idx), a primary key range or a page of LIMIT rows, and every
-- connection runs under a statement_timeout (set_timeout below).

-- name: set_timeout
-- run once on each new connection of the pool: no statement runs longer
SELECT set_config('statement_timeout', %(milliseconds)s, false),
       set_config('application_name', 'pgjobq dashboard', false)

-- name: who
-- the role, the extension's version, and whether the role may run every
-- action (the admin level has EXECUTE on all of them)
SELECT current_user AS role,
       (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pgjobq') AS version,
       coalesce(has_function_privilege(to_regprocedure('jobq.retry_failed(text, bigint[])'), 'EXECUTE')
                AND has_function_privilege(to_regprocedure('jobq.cancel(bigint[], boolean)'), 'EXECUTE')
                AND has_function_privilege(to_regprocedure('jobq.pause(text)'), 'EXECUTE')
                AND has_function_privilege(to_regprocedure('jobq.resume(text)'), 'EXECUTE')
                AND has_function_privilege(to_regprocedure('jobq.purge(interval, integer, boolean)'), 'EXECUTE'),
                false) AS admin

-- name: snapshot
-- the sampler's transaction: one snapshot for all its statements, writing nothing
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: queue_counts
-- per queue: queued jobs runnable now and scheduled later, running, waiting
-- (for parent jobs) and failed, the wait of the oldest runnable job, and the
-- lowest id that may finish within %(horizon)s (running, or queued and due by
-- then), where the next sample's count of finished jobs starts.  Each part
-- walks a partial index or jobq.job_waits, never the finished jobs.
SELECT c.queue,
       sum(c.runnable)::bigint AS runnable,
       sum(c.scheduled)::bigint AS scheduled,
       sum(c.running)::bigint AS running,
       sum(c.waiting)::bigint AS waiting,
       sum(c.failed)::bigint AS failed,
       max(c.oldest) AS oldest_runnable_age,
       min(c.low) AS low
  FROM (SELECT j.queue,
               count(*) FILTER (WHERE j.run_at <= now()) AS runnable,
               count(*) FILTER (WHERE j.run_at > now()) AS scheduled,
               0 AS running, 0 AS waiting, 0 AS failed,
               now() - min(j.run_at) FILTER (WHERE j.run_at <= now()) AS oldest,
               min(j.id) FILTER (WHERE j.run_at <= now() + %(horizon)s::interval) AS low
          FROM jobq.jobs AS j
         WHERE j.status = 'queued'
         GROUP BY j.queue
        UNION ALL
        SELECT j.queue, 0, 0, count(*), 0, 0, NULL, min(j.id)
          FROM jobq.jobs AS j
         WHERE j.status = 'running'
         GROUP BY j.queue
        UNION ALL
        SELECT j.queue, 0, 0, 0, count(*), 0, NULL, NULL
          FROM jobq.job_waits AS w
          JOIN jobq.jobs AS j ON j.id = w.id
         WHERE j.status = 'waiting'
         GROUP BY j.queue
        UNION ALL
        SELECT j.queue, 0, 0, 0, 0, count(*), NULL, NULL
          FROM jobq.jobs AS j
         WHERE j.status = 'failed'
         GROUP BY j.queue) AS c
 GROUP BY c.queue
 ORDER BY c.queue

-- name: queue_settings
-- every queue that is configured or has queued or running jobs, with its
-- limits, its retention and whether it is paused (the view skips through
-- the indexes).  The retention (extension 0.10.0) is read from the row as
-- JSON, by name, so that this one statement serves older versions too (NULL
-- there: they keep finished jobs until purged)
SELECT q.queue, q.paused, q.max_attempts, q.concurrency, q.key_concurrency, q.key_order,
       q.rate_limit, extract(epoch FROM q.rate_interval)::float8 AS rate_interval_seconds,
       extract(epoch FROM q.timeout)::float8 AS timeout_seconds,
       extract(epoch FROM (to_jsonb(q) ->> 'retain_done')::interval)::float8 AS retain_done_seconds,
       extract(epoch FROM (to_jsonb(q) ->> 'retain_failed')::interval)::float8 AS retain_failed_seconds,
       extract(epoch FROM (to_jsonb(q) ->> 'retain_cancelled')::interval)::float8 AS retain_cancelled_seconds
  FROM jobq.queues AS q
 ORDER BY q.queue

-- name: top_id
-- the newest job's id (a backward step of the primary key) and the clock
SELECT now() AS at, (SELECT max(j.id) FROM jobq.jobs AS j) AS top

-- name: finished_since
-- the jobs that finished after %(since)s, among ids from %(low)s on (a range
-- of the primary key: the sampler bounds it), by queue and outcome
SELECT j.queue,
       count(*) FILTER (WHERE j.status = 'done') AS done,
       count(*) FILTER (WHERE j.status = 'failed') AS failed,
       count(*) FILTER (WHERE j.status = 'cancelled') AS cancelled
  FROM jobq.jobs AS j
 WHERE j.id >= %(low)s
   AND j.finished_at > %(since)s
   AND j.finished_at <= now()
 GROUP BY j.queue

-- name: jobs_page
-- one page of jobs, newest first, before the id %(before)s (keyset paging),
-- filtered by status, queue, task, id, a key (concurrency key or unique key)
-- and text in the last error; a filter given as NULL is not applied.  From
-- extension 0.9.0 on (jobs_page_before_tasks: the same without the task)
SELECT j.id, j.queue, j.task, j.status, j.priority, j.attempts, j.run_at, j.created_at, j.finished_at,
       right(j.last_error, 300) AS last_error  -- its end: the exception's line, the reaper's notes
  FROM jobq.jobs AS j
 WHERE (%(status)s::text IS NULL OR j.status = %(status)s::text)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
   AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
   AND (%(id)s::bigint IS NULL OR j.id = %(id)s::bigint)
   AND (%(before)s::bigint IS NULL OR j.id < %(before)s::bigint)
   AND (%(error)s::text IS NULL OR strpos(lower(j.last_error), lower(%(error)s::text)) > 0)
   AND (%(key)s::text IS NULL
        OR j.id = ANY (ARRAY(SELECT k.id FROM jobq.concurrency_keys AS k
                              WHERE k.concurrency_key = %(key)s::text))
        OR j.id = ANY (ARRAY(SELECT u.job_id FROM jobq.unique_keys AS u
                              WHERE u.unique_key = %(key)s::text)))
 ORDER BY j.id DESC
 LIMIT %(limit)s

-- name: jobs_page_before_tasks
-- jobs_page on an extension before 0.9.0, whose jobs have no task column
SELECT j.id, j.queue, j.status, j.priority, j.attempts, j.run_at, j.created_at, j.finished_at,
       right(j.last_error, 300) AS last_error  -- its end: the exception's line, the reaper's notes
  FROM jobq.jobs AS j
 WHERE (%(status)s::text IS NULL OR j.status = %(status)s::text)
   AND (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
   AND (%(id)s::bigint IS NULL OR j.id = %(id)s::bigint)
   AND (%(before)s::bigint IS NULL OR j.id < %(before)s::bigint)
   AND (%(error)s::text IS NULL OR strpos(lower(j.last_error), lower(%(error)s::text)) > 0)
   AND (%(key)s::text IS NULL
        OR j.id = ANY (ARRAY(SELECT k.id FROM jobq.concurrency_keys AS k
                              WHERE k.concurrency_key = %(key)s::text))
        OR j.id = ANY (ARRAY(SELECT u.job_id FROM jobq.unique_keys AS u
                              WHERE u.unique_key = %(key)s::text)))
 ORDER BY j.id DESC
 LIMIT %(limit)s

-- name: job
-- one job: its public state (jobq.job, with depends_on and, from 0.9.0 on,
-- task; from 0.11.0 on, its latest progress and what it waits for), and
-- what only the table has: payload, headers, lease, keys, and its parents'
-- and dependents' statuses (at most 100 dependents).  The task, progress
-- and waiting_for are read from the state as JSON, by name, so that this
-- one statement serves 0.8.0 too (NULL there), at the cost of one row's
-- conversion
SELECT s.id, s.queue, s.status, s.attempts, s.max_attempts, s.result, s.last_error, s.run_at,
       s.created_at, s.finished_at, s.cancel_requested, s.depends_on, to_jsonb(s) ->> 'task' AS task,
       to_jsonb(s) -> 'progress' AS progress, to_jsonb(s) -> 'waiting_for' AS waiting_for,
       j.payload, j.headers, j.priority, j.locked_by, j.locked_at, j.lease_expires_at, j.lease,
       (SELECT k.concurrency_key FROM jobq.concurrency_keys AS k WHERE k.id = j.id) AS concurrency_key,
       (SELECT u.unique_key FROM jobq.unique_keys AS u WHERE u.job_id = j.id LIMIT 1) AS unique_key,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('id', p.id, 'status', p.status) ORDER BY p.id), '[]')
          FROM jobq.jobs AS p
         WHERE p.id = ANY (s.depends_on)) AS parents,
       (SELECT coalesce(jsonb_agg(jsonb_build_object('id', c.id, 'status', c.status) ORDER BY c.id), '[]')
          FROM (SELECT d.child FROM jobq.job_deps AS d WHERE d.parent = j.id ORDER BY d.child LIMIT 100) AS dc
          JOIN jobq.jobs AS c ON c.id = dc.child) AS dependents
  FROM jobq.job(%(id)s) AS s
  JOIN jobq.jobs AS j ON j.id = s.id

-- name: job_steps
-- a job's steps, sleeps and waits for a signal, oldest first (extension
-- 0.11.0 on: the page asks only there)
SELECT t.name, t.kind, t.result, t.attempt, t.recorded_at FROM jobq.steps(%(id)s) AS t

-- name: waiting_jobs
-- the jobs that wait without a worker (extension 0.11.0 on), newest first:
-- held ones (enqueued with hold, until jobq.unhold: control bit 128), those
-- waiting for a signal (jobq.signal_waits) and those in a durable sleep
-- (queued until its end: control bit 64, run_at ahead), at most %(limit)s of
-- each kind, with what each waits for and its latest progress as jobq.job
-- tells them.  Held and sleeping jobs are found by a backward walk of the
-- primary key (bounded by LIMIT and the statement_timeout, as the jobs
-- page's status filter); the waits for a signal are a small table of their own
SELECT j.id, j.queue, j.task, j.status, j.run_at, j.created_at, s.waiting_for, s.progress
  FROM ((SELECT h.id FROM jobq.jobs AS h
          WHERE h.status = 'waiting' AND h.control & 128 <> 0
          ORDER BY h.id DESC LIMIT %(limit)s)
        UNION
        (SELECT w.id FROM jobq.signal_waits AS w ORDER BY w.id DESC LIMIT %(limit)s)
        UNION
        (SELECT q.id FROM jobq.jobs AS q
          WHERE q.status = 'queued' AND q.control & 64 <> 0 AND q.run_at > now()
          ORDER BY q.id DESC LIMIT %(limit)s)) AS c
  JOIN jobq.jobs AS j ON j.id = c.id
 CROSS JOIN LATERAL jobq.job(j.id) AS s
 WHERE s.waiting_for IS NOT NULL
 ORDER BY j.id DESC

-- name: schedules
-- every schedule with its next three occurrences after now (the view gives
-- the first; the next ones by the function it calls) and the first one not
-- yet enqueued
SELECT s.name, s.queue, s.cron, s.timezone, extract(epoch FROM s.every)::float8 AS every_seconds,
       s.priority, s.catch_up, s.next_run, s.next_at, s.payload,
       ARRAY(WITH RECURSIVE o (at, n) AS (
                 SELECT s.next_run, 1
                 UNION ALL
                 SELECT jobq._schedule_next(s.cron, s.timezone, s.every, o.at), o.n + 1
                   FROM o
                  WHERE o.n < 3 AND o.at IS NOT NULL)
             SELECT o.at FROM o WHERE o.at IS NOT NULL ORDER BY o.n) AS next_runs
  FROM jobq.schedules AS s
 ORDER BY s.name

-- name: retry_failed
SELECT count(*) AS n FROM jobq.retry_failed(%(queue)s::text, %(ids)s::bigint[])

-- name: cancel
SELECT c.id, c.status FROM jobq.cancel(%(ids)s::bigint[]) AS c

-- name: pause
SELECT jobq.pause(%(queue)s::text)

-- name: resume
SELECT jobq.resume(%(queue)s::text)

-- name: purge
SELECT jobq.purge(%(older_than)s::interval, 100000, %(include_failed)s::boolean) AS n
