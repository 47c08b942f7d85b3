-- The statements the Python client sends.  Each starts with "-- name: NAME";
-- pgjobq._queries loads them.  All queue logic lives in the extension: these
-- only call its functions.

-- name: enqueue
SELECT jobq.enqueue(%(queue)s, %(payload)s::jsonb, priority => %(priority)s,
                    run_at => coalesce(%(run_at)s::timestamptz, now()),
                    max_attempts => %(max_attempts)s::integer,
                    unique_key => %(unique_key)s::text, unique_scope => %(unique_scope)s::text,
                    on_conflict => %(on_conflict)s::text, headers => %(headers)s::jsonb,
                    concurrency_key => %(concurrency_key)s::text, depends_on => %(depends_on)s::bigint[],
                    on_parent_failure => %(on_parent_failure)s::text)

-- name: enqueue_task
-- enqueue with a task (extension 0.9.0): a statement of its own, so that enqueue
-- itself still runs on 0.8.0, whose jobq.enqueue has no task parameter
SELECT jobq.enqueue(%(queue)s, %(payload)s::jsonb, priority => %(priority)s,
                    run_at => coalesce(%(run_at)s::timestamptz, now()),
                    max_attempts => %(max_attempts)s::integer,
                    unique_key => %(unique_key)s::text, unique_scope => %(unique_scope)s::text,
                    on_conflict => %(on_conflict)s::text, headers => %(headers)s::jsonb,
                    concurrency_key => %(concurrency_key)s::text, depends_on => %(depends_on)s::bigint[],
                    on_parent_failure => %(on_parent_failure)s::text, task => %(task)s::text)

-- name: enqueue_many
-- the payloads travel as one JSON array, parsed once, and become the jsonb[]
-- jobq.enqueue_many takes (an array parameter would be adapted element by element)
SELECT jobq.enqueue_many(%(queue)s,
                         ARRAY(SELECT e.payload
                                 FROM jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS e(payload, i)
                                ORDER BY e.i),
                         priority => %(priority)s,
                         run_at => coalesce(%(run_at)s::timestamptz, now()),
                         max_attempts => %(max_attempts)s::integer,
                         unique_keys => %(unique_keys)s::text[], unique_scope => %(unique_scope)s::text,
                         on_conflict => %(on_conflict)s::text, headers => %(headers)s::jsonb,
                         concurrency_keys => %(concurrency_keys)s::text[])

-- name: enqueue_many_task
-- enqueue_many with a task for every job (extension 0.9.0; see enqueue_task)
SELECT jobq.enqueue_many(%(queue)s,
                         ARRAY(SELECT e.payload
                                 FROM jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS e(payload, i)
                                ORDER BY e.i),
                         priority => %(priority)s,
                         run_at => coalesce(%(run_at)s::timestamptz, now()),
                         max_attempts => %(max_attempts)s::integer,
                         unique_keys => %(unique_keys)s::text[], unique_scope => %(unique_scope)s::text,
                         on_conflict => %(on_conflict)s::text, headers => %(headers)s::jsonb,
                         concurrency_keys => %(concurrency_keys)s::text[], task => %(task)s::text)

-- name: enqueue_flow
-- the steps travel as one JSON array; the ids come back in step order
SELECT jobq.enqueue_flow(%(queue)s, %(steps)s::jsonb)

-- name: claim
-- lease_timeout NULL: the queue's.  max_attempts is NULL for a job enqueued
-- without one on a queue without settings (claim writes the queue's value only
-- for a configured queue): 3 then, the value fail and reap apply.  Then the
-- lease's length as claimed, in seconds, by the database's clock alone (a
-- queue's timeout may cut it short: the deadline itself is the database's, in
-- jobq.deadlines, and the worker learns from heartbeat_status that it has
-- passed); then how long the job had been runnable when claimed (locked_at -
-- run_at, in seconds, by the database's clock: Job._waited, for the observers);
-- then headers (NULL for most jobs: the client reads {} then, rather than parse
-- an empty object for each), the task (extension 0.9.0; NULL for a plain
-- job) and the job's control bits (bit 64, extension 0.11.0: it recorded
-- steps, which its worker reads before the first step of this run).  The
-- columns are Job's fields in order (pgjobq._client.proto.jobs).
SELECT id, queue, payload, priority, attempts, coalesce(max_attempts, 3), lease,
       extract(epoch FROM lease_expires_at - locked_at)::float8,
       extract(epoch FROM locked_at - run_at)::float8,
       headers, task, control
  FROM jobq.claim(%(queue)s, %(n)s, %(worker)s, %(lease_timeout)s::interval)

-- name: claim_any
-- one claim over several queues, with claim's columns (see claim)
SELECT id, queue, payload, priority, attempts, coalesce(max_attempts, 3), lease,
       extract(epoch FROM lease_expires_at - locked_at)::float8,
       extract(epoch FROM locked_at - run_at)::float8,
       headers, task, control
  FROM jobq.claim_any(%(queues)s::text[], %(n)s, %(worker)s, %(lease_timeout)s::interval)

-- name: complete_and_claim
-- acknowledged jobs first (status done: only their id is needed, so neither
-- payload, headers, task nor the lease's length is sent), then the claimed ones
-- (status running), with claim's columns (max_attempts as there); results NULL
-- when no job of the batch has one
SELECT status, id, queue, CASE WHEN status = 'running' THEN payload END AS payload,
       priority, attempts, coalesce(max_attempts, 3), lease,
       CASE WHEN status = 'running' THEN extract(epoch FROM lease_expires_at - locked_at)::float8 END,
       CASE WHEN status = 'running' THEN extract(epoch FROM locked_at - run_at)::float8 END,
       CASE WHEN status = 'running' THEN headers END AS headers,
       CASE WHEN status = 'running' THEN task END AS task,
       CASE WHEN status = 'running' THEN control END AS control
  FROM jobq.complete_and_claim(%(ids)s::bigint[], %(leases)s::bigint[], %(queue)s, %(n)s, %(worker)s,
                               %(lease_timeout)s::interval, results => %(results)s::jsonb[])

-- name: complete
SELECT jobq.complete(%(id)s, %(lease)s, result => %(result)s::jsonb)

-- name: complete_many
SELECT id FROM jobq.complete_many(%(ids)s::bigint[], %(leases)s::bigint[], %(results)s::jsonb[]) AS id

-- name: fail
SELECT status, run_at FROM jobq.fail(%(id)s, %(error)s, %(lease)s, retry_in => %(retry_in)s::interval)

-- name: fail_for_good
-- extension 0.9.0: failed at once, whatever attempts are left (pgjobq.Discard)
SELECT status, run_at FROM jobq.fail(%(id)s, %(error)s, %(lease)s, retry_in => NULL, retry => false)

-- name: hand_back
-- extension 0.9.0: back to queued after delay, the attempt not counted, unless
-- the job is older than fail_after (then failed for good with error); the new
-- status (a job whose task the worker does not know: pgjobq.UnknownTask)
SELECT jobq.hand_back(%(id)s, %(lease)s, delay => %(delay)s::interval, error => %(error)s::text,
                      fail_after => %(fail_after)s::interval)

-- name: checkpoint
-- durable execution (extension 0.11.0): a step's result, recorded (the first
-- one recorded, when the step was recorded before)
SELECT jobq.checkpoint(%(id)s, %(lease)s, %(step)s, %(result)s::jsonb)

-- name: sleep
-- a durable sleep of delay from now, or of what the first call recorded:
-- whether it is over (extension 0.11.0)
SELECT jobq.sleep(%(id)s, %(lease)s, %(step)s, statement_timestamp() + %(delay)s::interval)

-- name: sleep_until
SELECT jobq.sleep(%(id)s, %(lease)s, %(step)s, %(until)s::timestamptz)

-- name: await_signal
-- parked: the job waits for the signal (a payload may be JSON null, so the
-- NULL that means "parked" is told apart here)
SELECT p IS NULL AS parked, p AS payload
  FROM jobq.await_signal(%(id)s, %(lease)s, %(key)s, %(timeout)s::interval) AS p

-- name: progress
SELECT jobq.progress(%(id)s, %(lease)s, %(progress)s::jsonb)

-- name: fan_out
-- children and a continuation enqueued by a running job, recorded as its step
SELECT jobq.fan_out(%(id)s, %(lease)s, %(step)s, %(children)s::jsonb, %(continuation)s::jsonb)

-- name: parent_results
SELECT parent, status, result FROM jobq.parent_results(%(id)s)

-- The client's side of durable execution (extension 0.11.0): held jobs, signals, a job's steps.

-- name: enqueue_held
-- enqueue with hold (extension 0.11.0): the job waits until jobq.unhold releases it.  A statement of its
-- own, so that enqueue and enqueue_task still run on 0.10.0, whose jobq.enqueue has no hold; the task
-- NULL for a plain job
SELECT jobq.enqueue(%(queue)s, %(payload)s::jsonb, priority => %(priority)s,
                    run_at => coalesce(%(run_at)s::timestamptz, now()),
                    max_attempts => %(max_attempts)s::integer,
                    unique_key => %(unique_key)s::text, unique_scope => %(unique_scope)s::text,
                    on_conflict => %(on_conflict)s::text, headers => %(headers)s::jsonb,
                    concurrency_key => %(concurrency_key)s::text, depends_on => %(depends_on)s::bigint[],
                    on_parent_failure => %(on_parent_failure)s::text, task => %(task)s::text,
                    hold => %(hold)s::boolean)

-- name: signal
-- how many waiting jobs the signal released
SELECT jobq.signal(%(key)s::text, %(payload)s::jsonb, %(keep)s::interval)

-- name: unhold
-- how many held jobs it released
SELECT jobq.unhold(%(ids)s::bigint[])

-- name: job_steps
-- a job's steps, oldest first: for the client's steps(), and for a durable job's worker (its first three
-- columns)
SELECT name, kind, result, attempt, recorded_at FROM jobq.steps(%(id)s)

-- name: heartbeat
SELECT jobq.heartbeat(%(id)s, %(lease)s)

-- name: heartbeat_many
SELECT id FROM jobq.heartbeat_many(%(ids)s::bigint[], %(leases)s::bigint[]) AS id

-- name: heartbeat_status
-- the Worker's heartbeat: the pairs still held, whether a cancel was asked,
-- and whether the deadline has passed (the lease then reaches no further
-- than the statement's clock, by which it was extended)
SELECT h.id, h.cancel_requested, h.lease_expires_at <= statement_timestamp() AS overdue
  FROM jobq.heartbeat_status(%(ids)s::bigint[], %(leases)s::bigint[]) AS h

-- name: reap
SELECT id, queue, status FROM jobq.reap(%(stale)s::interval)

-- name: reap_spaced
-- a Worker's reap (0.10.0): none when another worker's reap ran within the
-- interval, or runs now, so that a fleet reaps about once per interval
SELECT id, queue, status FROM jobq.reap(NULL::interval, at_most_every => %(every)s::interval)

-- name: retry_failed
SELECT id FROM jobq.retry_failed(%(queue)s, %(ids)s::bigint[]) AS id

-- name: stats
SELECT queue, queued, runnable, running, done, failed, oldest_queued_age, cancelled, waiting FROM jobq.stats()

-- name: channel
SELECT jobq.channel(%(queue)s)

-- name: release
SELECT jobq.release(%(id)s, %(lease)s)

-- name: register_waiter
-- extension 0.10.0 on: also how far ahead next_run_at is by the database's clock
-- (the function's statement_timestamp() is this statement's), so that the
-- worker never compares the database's time with its own
SELECT w.registered, w.next_run_at, w.next_run_at - statement_timestamp() AS next_run_in
  FROM jobq.register_waiter(%(queue)s, %(worker)s, %(up_to)s::interval) AS w

-- name: register_waiter_any
-- register_waiter over several queues in one statement: registered only if on
-- every one (else register again shortly, as for one), the earliest
-- next_run_at of them
SELECT coalesce(bool_and(w.registered), false), min(w.next_run_at),
       min(w.next_run_at) - statement_timestamp() AS next_run_in
  FROM unnest(%(queues)s::text[]) AS q(queue)
 CROSS JOIN LATERAL jobq.register_waiter(q.queue, %(worker)s, %(up_to)s::interval) AS w

-- name: probe_notify
-- the worker's LISTEN probe: notifies a channel of its own listening connection
SELECT pg_notify(%(channel)s, '')

-- name: set_application_name
-- a worker's name for a connection its connect callable made (pgjobq._worker.connections.adopt)
SELECT pg_catalog.set_config('application_name', %(name)s, false)

-- name: purge
SELECT jobq.purge(%(older_than)s, max_rows => %(max_rows)s, include_failed => %(include_failed)s)

-- name: extension_version
-- read from the catalog, not jobq.version(), so that a database with an older
-- pgjobq, or none, is told apart from one with the right version
SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pgjobq'

-- name: health
SELECT queued, runnable, running, failed, oldest_runnable_age, live_tuples, dead_tuples, total_bytes,
       last_vacuum, last_analyze, oldest_transaction_age, oldest_xmin_age
  FROM jobq.health

-- name: snooze
SELECT jobq.snooze(%(id)s, %(lease)s, %(delay)s::interval)

-- name: cancel
SELECT id, status FROM jobq.cancel(%(ids)s::bigint[], force => %(force)s)

-- name: pause
SELECT jobq.pause(%(queue)s)

-- name: resume
SELECT jobq.resume(%(queue)s)

-- name: configure_queue
-- the retention (0.10.0) read from the row as JSON, by name, so that the statement also runs on 0.9.0,
-- whose jobq.queues has no retain_* (NULL there: it keeps finished jobs until purged); a change of
-- retention is configure_queue_retention
SELECT c.queue, c.paused, c.max_attempts, c.backoff_base, c.backoff_max, c.backoff_jitter, c.lease_timeout,
       c.timeout, c.configured, c.concurrency, c.key_concurrency, c.key_order, c.rate_limit, c.rate_interval,
       (to_jsonb(c) ->> 'retain_done')::interval AS retain_done,
       (to_jsonb(c) ->> 'retain_failed')::interval AS retain_failed,
       (to_jsonb(c) ->> 'retain_cancelled')::interval AS retain_cancelled
  FROM jobq.configure_queue(%(queue)s, max_attempts => %(max_attempts)s::integer,
                            backoff_base => %(backoff_base)s::interval,
                            backoff_max => %(backoff_max)s::interval,
                            backoff_jitter => %(backoff_jitter)s::double precision,
                            lease_timeout => %(lease_timeout)s::interval, timeout => %(timeout)s::interval,
                            unset => %(unset)s::text[],
                            concurrency => %(concurrency)s::integer,
                            key_concurrency => %(key_concurrency)s::integer,
                            key_order => %(key_order)s::text,
                            rate_limit => %(rate_limit)s::integer,
                            rate_interval => %(rate_interval)s::interval) AS c

-- name: configure_queue_retention
-- configure_queue with the retention settings (extension 0.10.0 on: on 0.9.0, no jobq.configure_queue
-- takes retain_done, and the client says retention needs 0.10.0)
SELECT c.queue, c.paused, c.max_attempts, c.backoff_base, c.backoff_max, c.backoff_jitter, c.lease_timeout,
       c.timeout, c.configured, c.concurrency, c.key_concurrency, c.key_order, c.rate_limit, c.rate_interval,
       c.retain_done, c.retain_failed, c.retain_cancelled
  FROM jobq.configure_queue(%(queue)s, max_attempts => %(max_attempts)s::integer,
                            backoff_base => %(backoff_base)s::interval,
                            backoff_max => %(backoff_max)s::interval,
                            backoff_jitter => %(backoff_jitter)s::double precision,
                            lease_timeout => %(lease_timeout)s::interval, timeout => %(timeout)s::interval,
                            unset => %(unset)s::text[],
                            concurrency => %(concurrency)s::integer,
                            key_concurrency => %(key_concurrency)s::integer,
                            key_order => %(key_order)s::text,
                            rate_limit => %(rate_limit)s::integer,
                            rate_interval => %(rate_interval)s::interval,
                            retain_done => %(retain_done)s::interval,
                            retain_failed => %(retain_failed)s::interval,
                            retain_cancelled => %(retain_cancelled)s::interval,
                            keep_forever => %(keep_forever)s::text[]) AS c

-- name: queues
-- the retention as in configure_queue (NULL on 0.9.0)
SELECT q.queue, q.paused, q.max_attempts, q.backoff_base, q.backoff_max, q.backoff_jitter, q.lease_timeout,
       q.timeout, q.configured, q.concurrency, q.key_concurrency, q.key_order, q.rate_limit, q.rate_interval,
       (to_jsonb(q) ->> 'retain_done')::interval AS retain_done,
       (to_jsonb(q) ->> 'retain_failed')::interval AS retain_failed,
       (to_jsonb(q) ->> 'retain_cancelled')::interval AS retain_cancelled
  FROM jobq.queues AS q
 ORDER BY q.queue

-- name: queue_overview
-- every queue of jobq.queues with its settings, limits and retention (as in queues), and how many of
-- its jobs are queued, running and waiting (jobq.stats has no row for a queue without jobs: 0 then)
SELECT q.queue, q.paused, q.max_attempts, q.backoff_base, q.backoff_max, q.backoff_jitter, q.lease_timeout,
       q.timeout, q.configured, q.concurrency, q.key_concurrency, q.key_order, q.rate_limit, q.rate_interval,
       (to_jsonb(q) ->> 'retain_done')::interval AS retain_done,
       (to_jsonb(q) ->> 'retain_failed')::interval AS retain_failed,
       (to_jsonb(q) ->> 'retain_cancelled')::interval AS retain_cancelled,
       coalesce(s.queued, 0) AS queued, coalesce(s.running, 0) AS running,
       coalesce(s.waiting, 0) AS waiting
  FROM jobq.queues AS q
  LEFT JOIN jobq.stats() AS s ON s.queue = q.queue
 ORDER BY q.queue

-- name: job
-- the task (0.9.0) read from the row as JSON, so that the statement also runs on
-- 0.8.0, whose jobq.job_state has no task (NULL there); likewise steps, step_attempts,
-- progress and waiting_for (0.11.0: NULL on 0.10.0)
SELECT id, queue, status, attempts, max_attempts, result, last_error, run_at, created_at, finished_at,
       cancel_requested, depends_on, to_jsonb(s) ->> 'task' AS task,
       to_jsonb(s) -> 'steps' AS steps, to_jsonb(s) -> 'step_attempts' AS step_attempts,
       to_jsonb(s) -> 'progress' AS progress, to_jsonb(s) -> 'waiting_for' AS waiting_for
  FROM jobq.job(%(id)s) AS s

-- name: watch
-- in FROM, so that the function runs once (not once per column); the task and the durable
-- execution's columns as in job
SELECT id, queue, status, attempts, max_attempts, result, last_error, run_at, created_at, finished_at,
       cancel_requested, depends_on, to_jsonb(s) ->> 'task' AS task,
       to_jsonb(s) -> 'steps' AS steps, to_jsonb(s) -> 'step_attempts' AS step_attempts,
       to_jsonb(s) -> 'progress' AS progress, to_jsonb(s) -> 'waiting_for' AS waiting_for
  FROM jobq.watch(%(id)s) AS s

-- name: listen_done
-- the channel of jobq.watch's notifications; quoted, for its dot
LISTEN "jobq.done"

-- name: unlisten_done
UNLISTEN "jobq.done"

-- name: schedule
-- the task (0.9.0) read from the row as JSON, so that the statement also runs on
-- 0.8.0, whose jobq.schedules has no task (NULL there)
SELECT name, queue, payload, cron, timezone, every, priority, max_attempts, headers, catch_up, next_at,
       next_run, created_at, updated_at, to_jsonb(s) ->> 'task' AS task
  FROM jobq.schedule(%(name)s, %(queue)s, payload => %(payload)s::jsonb, cron => %(cron)s::text,
                     timezone => %(timezone)s::text, every => %(every)s::interval,
                     priority => %(priority)s::integer, max_attempts => %(max_attempts)s::integer,
                     headers => %(headers)s::jsonb, catch_up => %(catch_up)s::text) AS s

-- name: schedule_task
-- schedule with a task for its jobs (extension 0.9.0; see enqueue_task)
SELECT name, queue, payload, cron, timezone, every, priority, max_attempts, headers, catch_up, next_at,
       next_run, created_at, updated_at, task
  FROM jobq.schedule(%(name)s, %(queue)s, payload => %(payload)s::jsonb, cron => %(cron)s::text,
                     timezone => %(timezone)s::text, every => %(every)s::interval,
                     priority => %(priority)s::integer, max_attempts => %(max_attempts)s::integer,
                     headers => %(headers)s::jsonb, catch_up => %(catch_up)s::text,
                     task => %(task)s::text)

-- name: unschedule
SELECT jobq.unschedule(%(name)s)

-- name: schedules
-- the task as in schedule
SELECT name, queue, payload, cron, timezone, every, priority, max_attempts, headers, catch_up, next_at,
       next_run, created_at, updated_at, to_jsonb(s) ->> 'task' AS task
  FROM jobq.schedules AS s
 ORDER BY name

-- name: tick
SELECT jobq.tick()

-- name: running_version
-- what a worker reads every reap_interval, to learn of an ALTER EXTENSION pgjobq UPDATE made while it runs
SELECT jobq.version()

-- The command line's and the plain-SQL install's statements (pgjobq._cli, pgjobq._install.plain),
-- from here to the end.

-- name: installed_version
-- the extension's version, and whether a plain-SQL install's record exists (then
-- plain_install_version reads it: a statement naming a table that may be missing cannot be planned)
SELECT (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pgjobq'),
       pg_catalog.to_regclass('jobq.plain_install') IS NOT NULL

-- name: plain_install_version
SELECT i.version FROM jobq.plain_install AS i

-- name: list_jobs
-- newest first, at most limit of them, below the id before when given (the next page);
-- statuses NULL: every status; task NULL: every job
SELECT j.id, j.queue, j.task, j.status, j.priority, j.attempts,
       coalesce(j.max_attempts, s.max_attempts, 3) AS max_attempts,
       j.run_at, j.created_at, j.finished_at, j.locked_by, j.last_error
  FROM jobq.jobs AS j
  LEFT JOIN jobq.queue_settings AS s ON s.queue = j.queue
 WHERE (%(queue)s::text IS NULL OR j.queue = %(queue)s::text)
   AND (%(statuses)s::text[] IS NULL OR j.status = ANY (%(statuses)s::text[]))
   AND (%(task)s::text IS NULL OR j.task = %(task)s::text)
   AND (%(before)s::bigint IS NULL OR j.id < %(before)s::bigint)
 ORDER BY j.id DESC
 LIMIT %(limit)s

-- name: show_job
-- jobq.job's state, and what only the row has: priority, payload, headers, the lease's holder; and
-- the task; and last the durable execution's steps, progress and waiting_for (extension 0.11.0, read
-- from the state as JSON, by name: NULL on 0.10.0)
SELECT s.id, s.queue, j.task, s.status, j.priority, s.attempts, s.max_attempts, j.payload, j.headers,
       s.result, s.last_error, s.depends_on, s.cancel_requested, s.run_at, s.created_at, s.finished_at,
       j.locked_by, j.locked_at, j.lease_expires_at,
       to_jsonb(s) -> 'steps' AS steps, to_jsonb(s) -> 'progress' AS progress,
       to_jsonb(s) -> 'waiting_for' AS waiting_for
  FROM jobq.job(%(id)s) AS s
  JOIN jobq.jobs AS j ON j.id = s.id
