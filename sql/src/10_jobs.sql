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
    -- 0.6.0: job control.  Every column costs every statement that writes
    -- the table, NULL or not (about 1,700 instructions an enqueue, 2,900 a
    -- claim and its completion: bench/results/instructions.md), so job
    -- control keeps to two; the rest lives in tables of its own
    -- (jobq.unique_keys, jobq.results, jobq.deadlines), which only the jobs
    -- that use it touch.
    headers          jsonb,
    control          smallint,
    -- 0.9.0: the job's task, the named job type of the Python client that
    -- its worker dispatches on.  A column although every column costs (see
    -- above): claims return it with every job, and from a table of its own
    -- each claim would have to join it in.
    task             text,
    CONSTRAINT jobs_pkey PRIMARY KEY (id)
)
-- Every job inserts one row, updates it twice and is eventually deleted:
-- vacuum after 1% churn (at least 1,000 rows).  At the server's cost delay
-- (0.10.0; it was none): under a long-open transaction vacuum can remove
-- nothing, yet runs again at every visit, and unthrottled it took a core
-- from the workers for no gain (the soak of bench/, docs/explanation/
-- performance.md).  Claims need no vacuum to stay cheap (jobq.claim).
WITH (
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_insert_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02
);
ALTER SEQUENCE jobq.jobs_id_seq OWNED BY jobq.jobs.id;

COMMENT ON TABLE jobq.jobs IS
    'One row per job.  status: (waiting ->) queued -> running -> done | failed | cancelled; failed rows are the dead-letter queue.';
COMMENT ON SEQUENCE jobq.jobs_id_seq IS 'Ids of jobq.jobs; dumped by pg_dump with the table.';
COMMENT ON COLUMN jobq.jobs.id IS 'Job id, from jobq.jobs_id_seq.';
COMMENT ON COLUMN jobq.jobs.queue IS 'Queue name: 1 to 58 characters of a-z, 0-9 and _ (checked by the functions). Workers listen on channel jobq_<queue>.';
COMMENT ON COLUMN jobq.jobs.payload IS 'The job''s arguments: a JSON object of at most 1 MiB.';
COMMENT ON COLUMN jobq.jobs.status IS 'waiting (for parent jobs), queued, running, done, failed or cancelled.';
COMMENT ON COLUMN jobq.jobs.priority IS 'Higher runs first; between -32768 and 32767.';
COMMENT ON COLUMN jobq.jobs.run_at IS 'The job is not claimed before this time (delays and retry backoff).';
COMMENT ON COLUMN jobq.jobs.attempts IS 'Claims so far; reset by jobq.retry_failed.';
COMMENT ON COLUMN jobq.jobs.max_attempts IS 'After this many attempts a failure or a stale lease makes the job failed. NULL: the queue''s max_attempts (jobq.configure_queue), else 3; a claim from a queue with settings writes the value it applies.';
COMMENT ON COLUMN jobq.jobs.lease IS 'Fencing token: incremented at every claim and never reset. complete, fail, heartbeat and release must present the current one.';
COMMENT ON COLUMN jobq.jobs.locked_by IS 'The worker that claimed the job last.';
COMMENT ON COLUMN jobq.jobs.locked_at IS 'When the current lease was taken or last extended by a heartbeat.';
COMMENT ON COLUMN jobq.jobs.lease_expires_at IS 'When the current lease expires unless extended: locked_at + the lease_timeout given to claim. jobq.reap recovers running jobs past it.';
COMMENT ON COLUMN jobq.jobs.last_error IS 'The last failure (at most 2,000 characters), with notes from the reaper.';
COMMENT ON COLUMN jobq.jobs.created_at IS 'When the job was enqueued (the enqueueing transaction''s clock).';
COMMENT ON COLUMN jobq.jobs.finished_at IS 'When the job became done, failed or cancelled.';
COMMENT ON COLUMN jobq.jobs.headers IS 'Metadata for the worker (trace context, for example): a JSON object of at most 1 MiB, returned by claim.';
COMMENT ON COLUMN jobq.jobs.control IS 'Job control, as bits: 1, a cancel was requested (jobq.cancel) while it ran; 2, it is watched (jobq.watch); 4, it was enqueued with a unique key (jobq.unique_keys); 8, jobs depend on it (jobq.job_deps); 16, it has a concurrency key (jobq.concurrency_keys); 32, it depends on jobs. NULL: none of these.';
COMMENT ON COLUMN jobq.jobs.task IS 'The task: the named job type a worker dispatches on (for example send_welcome), 1 to 200 characters matching ^[A-Za-z_][A-Za-z0-9_.:-]*$ (checked by the functions); NULL for a plain job. Returned by claim and jobq.job.';

-- Serves jobq.claim exactly: its WHERE (queue, status, run_at) and its ORDER BY.
CREATE INDEX jobs_claim_idx ON jobq.jobs (queue, priority DESC, run_at, id)
    WHERE status OPERATOR(pg_catalog.=) 'queued';
COMMENT ON INDEX jobq.jobs_claim_idx IS 'Serves jobq.claim: queued jobs by queue, priority desc, run_at, id.';

-- Serves jobq.reap: the running jobs, whose leases it judges one by one;
-- the failed ones, the dead-letter queue (0.8.0: jobq.metrics,
-- jobq.health and jobq.retry_failed count and find them without walking the
-- done ones); and retention (0.10.0: jobq.tick finds the finished jobs of
-- each queue and state whose retention ended, oldest first, by
-- finished_at).  Keyed by status, queue and finished_at, none of which a
-- heartbeat changes (not by lease_expires_at, which every heartbeat moves):
-- so a heartbeat changes no indexed column and can be a HOT update, and a
-- running entry lives only while a worker holds its job.  One index for
-- all, not several: every partial index costs each INSERT and status
-- change of jobq.jobs the setting up of its predicate, also where it does
-- not match.  Queued and waiting jobs are not in it.
CREATE INDEX jobs_status_idx ON jobq.jobs (status, queue, finished_at)
    WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'done', 'failed', 'cancelled']::text[]);
COMMENT ON INDEX jobq.jobs_status_idx IS
    'Serves jobq.reap (the running jobs), the dead-letter queue (the failed jobs) and retention (the finished jobs by finished_at), by status and queue (keys heartbeats do not change).';

-- pg_dump keeps every job and the id sequence's position.
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs_id_seq', '');

REVOKE ALL ON TABLE jobq.jobs FROM PUBLIC;
REVOKE ALL ON SEQUENCE jobq.jobs_id_seq FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.jobs TO @extowner@;
GRANT USAGE, SELECT ON SEQUENCE jobq.jobs_id_seq TO @extowner@;

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
