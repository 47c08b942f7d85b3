----------------------------------------------------------------------------
-- The jobs table: one row per job, its id sequence and its two indexes
----------------------------------------------------------------------------

-- A lease belongs to its job: claim stores when it expires (lease_expires_at,
-- locked_at + the lease's length), heartbeats move both forward by that same
-- length, and jobq.reap recovers exactly the jobs whose lease expired.
--
-- A lean row: the table has no CHECK constraint.  Every value is checked
-- once, by the function that writes it (queue names, payloads, options and
-- the state machine: sql/src/40_produce.sql to 60_operate.sql), instead of
-- at every row version: PostgreSQL re-reads and re-prepares each CHECK
-- expression for every statement that writes the table, which cost a fifth
-- of a claim and its completion (bench/results/instructions.md).  Only the
-- admin level may write the table directly; what it writes is its own to
-- get right.

CREATE SEQUENCE jobq.jobs_id_seq AS bigint;

CREATE TABLE jobq.jobs (
    id               bigint      NOT NULL
                     DEFAULT pg_catalog.nextval('jobq.jobs_id_seq'::pg_catalog.regclass),
    queue            text        NOT NULL,
    payload          jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'queued',
    priority         integer     NOT NULL DEFAULT 0,
    run_at           timestamptz NOT NULL DEFAULT pg_catalog.now(),
    attempts         integer     NOT NULL DEFAULT 0,
    max_attempts     integer,
    lease            bigint      NOT NULL DEFAULT 0,
    locked_by        text,
    locked_at        timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at      timestamptz,
    lease_expires_at timestamptz,
    -- 0.6.0: job control.  NULL for a plain job, except enqueued_by.
    unique_key          text,
    unique_scope        text,
    headers             jsonb,
    result              jsonb,
    cancel_requested_at timestamptz,
    timeout             interval,
    deadline            timestamptz,
    watched             boolean,
    enqueued_by         text,
    CONSTRAINT jobs_pkey PRIMARY KEY (id)
)
-- Every job inserts one row, updates it twice and is eventually purged:
-- vacuum after 1% churn (at least 1,000 rows) without cost-based throttling,
-- so that dead tuples are cleared before they slow the claim index down.
WITH (
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
ALTER SEQUENCE jobq.jobs_id_seq OWNED BY jobq.jobs.id;

COMMENT ON TABLE jobq.jobs IS
    'One row per job.  status: queued -> running -> done | failed | cancelled; failed rows are the dead-letter queue.';
COMMENT ON SEQUENCE jobq.jobs_id_seq IS 'Ids of jobq.jobs; dumped by pg_dump with the table.';
COMMENT ON COLUMN jobq.jobs.id IS 'Job id, from jobq.jobs_id_seq.';
COMMENT ON COLUMN jobq.jobs.queue IS 'Queue name: 1 to 58 characters of a-z, 0-9 and _ (checked by the functions). Workers listen on channel jobq_<queue>.';
COMMENT ON COLUMN jobq.jobs.payload IS 'The job''s arguments: a JSON object of at most 1 MiB.';
COMMENT ON COLUMN jobq.jobs.status IS 'queued, running, done, failed or cancelled.';
COMMENT ON COLUMN jobq.jobs.priority IS 'Higher runs first; between -32768 and 32767.';
COMMENT ON COLUMN jobq.jobs.run_at IS 'The job is not claimed before this time (delays and retry backoff).';
COMMENT ON COLUMN jobq.jobs.attempts IS 'Claims so far; reset by jobq.retry_failed.';
COMMENT ON COLUMN jobq.jobs.max_attempts IS 'After this many attempts a failure or a stale lease makes the job failed. NULL until claimed: the queue''s max_attempts (jobq.configure_queue), else 3; claim writes the value it applies.';
COMMENT ON COLUMN jobq.jobs.lease IS 'Fencing token: incremented at every claim and never reset. complete, fail, heartbeat and release must present the current one.';
COMMENT ON COLUMN jobq.jobs.locked_by IS 'The worker that claimed the job last.';
COMMENT ON COLUMN jobq.jobs.locked_at IS 'When the current lease was taken or last extended by a heartbeat.';
COMMENT ON COLUMN jobq.jobs.lease_expires_at IS 'When the current lease expires unless extended: locked_at + the lease_timeout given to claim. jobq.reap recovers running jobs past it.';
COMMENT ON COLUMN jobq.jobs.last_error IS 'The last failure (at most 2,000 characters), with notes from the reaper.';
COMMENT ON COLUMN jobq.jobs.created_at IS 'When the job was enqueued (the enqueueing transaction''s clock).';
COMMENT ON COLUMN jobq.jobs.finished_at IS 'When the job became done, failed or cancelled.';
COMMENT ON COLUMN jobq.jobs.unique_key IS 'With jobq.enqueue(unique_key => ...): at most one job of the queue holds the key while queued or running (or done, with unique_scope until_done). 1 to 512 characters.';
COMMENT ON COLUMN jobq.jobs.unique_scope IS 'NULL (the key counts while the job is queued or running) or until_done (also while done, until purged).';
COMMENT ON COLUMN jobq.jobs.headers IS 'Metadata for the worker (trace context, for example): a JSON object of at most 1 MiB, returned by claim.';
COMMENT ON COLUMN jobq.jobs.result IS 'What the handler returned: any JSON value of at most 1 MiB, stored by complete (result => ...).';
COMMENT ON COLUMN jobq.jobs.cancel_requested_at IS 'When jobq.cancel asked the worker of this running job to stop; the job then ends cancelled unless it completes.';
COMMENT ON COLUMN jobq.jobs.timeout IS 'The longest an attempt may run (enqueue(timeout => ...)); NULL: the queue''s timeout, else none.';
COMMENT ON COLUMN jobq.jobs.deadline IS 'Set by claim from the timeout: the lease is never extended past it, so jobq.reap recovers a hung attempt even though it heartbeats.';
COMMENT ON COLUMN jobq.jobs.watched IS 'Set by jobq.watch: the job notifies channel "jobq.done" (payload: its id) when it becomes done, failed or cancelled.';
COMMENT ON COLUMN jobq.jobs.enqueued_by IS 'The role that enqueued the job (its SET ROLE, else its session user); producers see only jobs of roles they are members of (jobq.job).';

-- Serves jobq.claim exactly: its WHERE (queue, status, run_at) and its ORDER BY.
CREATE INDEX jobs_claim_idx ON jobq.jobs (queue, priority DESC, run_at, id)
    WHERE status OPERATOR(pg_catalog.=) 'queued';
COMMENT ON INDEX jobq.jobs_claim_idx IS 'Serves jobq.claim: queued jobs by queue, priority desc, run_at, id.';

-- Serves jobq.reap: the running jobs, whose leases it judges one by one.
-- Keyed by queue, which never changes, not by lease_expires_at, which every
-- heartbeat moves: so a heartbeat changes no indexed column and can be a
-- HOT update, and there are only as many running jobs as workers hold.
CREATE INDEX jobs_reap_idx ON jobq.jobs (queue)
    WHERE status OPERATOR(pg_catalog.=) 'running';
COMMENT ON INDEX jobq.jobs_reap_idx IS 'Serves jobq.reap: the running jobs, by queue (a key heartbeats do not change).';

-- Serves unique jobs (jobq.enqueue(unique_key => ...)): at most one job per
-- queue and key while it counts.  Partial on unique_key, so plain jobs have
-- no entry; enqueue's INSERT ... ON CONFLICT DO NOTHING waits for a
-- conflicting insert still in flight, then yields to it.  Retries, reaps and
-- snoozes keep a job in the scope, so they never collide; a redrive
-- (jobq.retry_failed) may, and skips the job.
CREATE UNIQUE INDEX jobs_unique_idx ON jobq.jobs (queue, unique_key)
    WHERE unique_key IS NOT NULL
      AND (status OPERATOR(pg_catalog.=) ANY (ARRAY['queued', 'running']::text[])
           OR (status OPERATOR(pg_catalog.=) 'done' AND unique_scope OPERATOR(pg_catalog.=) 'until_done'));
COMMENT ON INDEX jobq.jobs_unique_idx IS 'Unique jobs: one job per queue and unique_key while queued or running (or done, for unique_scope until_done).';

-- pg_dump keeps every job and the id sequence's position.
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs_id_seq', '');

REVOKE ALL ON TABLE jobq.jobs FROM PUBLIC;
REVOKE ALL ON SEQUENCE jobq.jobs_id_seq FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.jobs TO @extowner@;
GRANT USAGE, SELECT ON SEQUENCE jobq.jobs_id_seq TO @extowner@;
