/* sql/pgjobq--0.1.0.sql: pgjobq 0.1.0, the job queue in schema jobq */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION pgjobq" to load this file. \quit

/*
 * Notes for readers of this script.
 *
 * - State machine: queued -> running -> done | failed; a failure with attempts
 *   left, or a running job whose lease went stale, goes back to queued.
 * - Every function pins search_path to pg_catalog, pg_temp and writes its own
 *   objects as jobq.<name>.  DDL expressions below spell their operators as
 *   OPERATOR(pg_catalog.x), because CREATE EXTENSION runs this script with the
 *   caller's first schema on the search_path.
 * - Errors: 22004 (a NULL argument), 22023 (an argument out of its domain),
 *   54000 (a payload over 1 MiB), JQ001 (the lease given is not the job's
 *   current lease), JQ002 (no job has that id).
 * - Clocks: created_at and the default run_at use now() (the enqueueing
 *   transaction); everything a worker does (claim, locked_at, heartbeat,
 *   backoff, reaping) uses statement_timestamp(), so a long transaction never
 *   makes a fresh lease look stale.
 */

CREATE SCHEMA jobq;
COMMENT ON SCHEMA jobq IS 'pgjobq: a job queue living in PostgreSQL';

REVOKE ALL ON SCHEMA jobq FROM PUBLIC;
GRANT USAGE ON SCHEMA jobq TO @extowner@;

----------------------------------------------------------------------------
-- The jobs table
----------------------------------------------------------------------------

CREATE SEQUENCE jobq.jobs_id_seq AS bigint;

CREATE TABLE jobq.jobs (
    id           bigint      NOT NULL
                 DEFAULT pg_catalog.nextval('jobq.jobs_id_seq'::pg_catalog.regclass),
    queue        text        NOT NULL,
    payload      jsonb       NOT NULL,
    status       text        NOT NULL DEFAULT 'queued',
    priority     integer     NOT NULL DEFAULT 0,
    run_at       timestamptz NOT NULL DEFAULT pg_catalog.now(),
    attempts     integer     NOT NULL DEFAULT 0,
    max_attempts integer     NOT NULL DEFAULT 3,
    lease        bigint      NOT NULL DEFAULT 0,
    locked_by    text,
    locked_at    timestamptz,
    last_error   text,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    finished_at  timestamptz,
    CONSTRAINT jobs_pkey PRIMARY KEY (id),
    CONSTRAINT jobs_queue_check
        CHECK (queue OPERATOR(pg_catalog.~) '^[a-z0-9_]{1,58}$'),
    CONSTRAINT jobs_status_check
        CHECK (status OPERATOR(pg_catalog.=) ANY (ARRAY['queued', 'running', 'done', 'failed'])),
    CONSTRAINT jobs_payload_check
        CHECK (pg_catalog.jsonb_typeof(payload) OPERATOR(pg_catalog.=) 'object'),
    CONSTRAINT jobs_attempts_check
        CHECK (attempts OPERATOR(pg_catalog.>=) 0),
    CONSTRAINT jobs_max_attempts_check
        CHECK (max_attempts OPERATOR(pg_catalog.>=) 1),
    CONSTRAINT jobs_running_lock_check
        CHECK (status OPERATOR(pg_catalog.<>) 'running'
               OR (locked_by IS NOT NULL AND locked_at IS NOT NULL))
);
ALTER SEQUENCE jobq.jobs_id_seq OWNED BY jobq.jobs.id;

COMMENT ON TABLE jobq.jobs IS
    'One row per job.  status: queued -> running -> done | failed; failed rows are the dead-letter queue.';
COMMENT ON SEQUENCE jobq.jobs_id_seq IS 'Ids of jobq.jobs; dumped by pg_dump with the table.';
COMMENT ON COLUMN jobq.jobs.id IS 'Job id, from jobq.jobs_id_seq.';
COMMENT ON COLUMN jobq.jobs.queue IS 'Queue name: 1 to 58 characters of a-z, 0-9 and _. Workers listen on channel jobq_<queue>.';
COMMENT ON COLUMN jobq.jobs.payload IS 'The job''s arguments: a JSON object of at most 1 MiB.';
COMMENT ON COLUMN jobq.jobs.status IS 'queued, running, done or failed.';
COMMENT ON COLUMN jobq.jobs.priority IS 'Higher runs first; between -32768 and 32767.';
COMMENT ON COLUMN jobq.jobs.run_at IS 'The job is not claimed before this time (delays and retry backoff).';
COMMENT ON COLUMN jobq.jobs.attempts IS 'Claims so far; reset by jobq.retry_failed.';
COMMENT ON COLUMN jobq.jobs.max_attempts IS 'After this many attempts a failure or a stale lease makes the job failed.';
COMMENT ON COLUMN jobq.jobs.lease IS 'Fencing token: incremented at every claim and never reset. complete, fail, heartbeat and release must present the current one.';
COMMENT ON COLUMN jobq.jobs.locked_by IS 'The worker that claimed the job last.';
COMMENT ON COLUMN jobq.jobs.locked_at IS 'When the current lease was taken or last extended by a heartbeat.';
COMMENT ON COLUMN jobq.jobs.last_error IS 'The last failure (at most 2,000 characters), with notes from the reaper.';
COMMENT ON COLUMN jobq.jobs.created_at IS 'When the job was enqueued (the enqueueing transaction''s clock).';
COMMENT ON COLUMN jobq.jobs.finished_at IS 'When the job became done or failed.';

-- Serves jobq.claim exactly: its WHERE (queue, status, run_at) and its ORDER BY.
CREATE INDEX jobs_claim_idx ON jobq.jobs (queue, priority DESC, run_at, id)
    WHERE status OPERATOR(pg_catalog.=) 'queued';
COMMENT ON INDEX jobq.jobs_claim_idx IS 'Serves jobq.claim: queued jobs by queue, priority desc, run_at, id.';

-- Serves jobq.reap: running jobs by the age of their lease.
CREATE INDEX jobs_reap_idx ON jobq.jobs (locked_at)
    WHERE status OPERATOR(pg_catalog.=) 'running';
COMMENT ON INDEX jobq.jobs_reap_idx IS 'Serves jobq.reap: running jobs by locked_at.';

-- pg_dump keeps every job and the id sequence's position.
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('jobq.jobs_id_seq', '');

----------------------------------------------------------------------------
-- Internal checks and helpers
----------------------------------------------------------------------------

/*
 * jobq._check_queue(queue): returns nothing; raises 22004 for NULL and 22023
 * for a name that is not 1 to 58 characters of a-z, 0-9 and _ (so that
 * 'jobq_' || queue is always a valid, unquoted notification channel).
 */
CREATE FUNCTION jobq._check_queue(queue text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF queue !~ '^[a-z0-9_]{1,58}$' THEN
        RAISE EXCEPTION 'queue must be 1 to 58 characters of a-z, 0-9 and _, got %',
                        quote_literal(left(queue, 80))
            USING ERRCODE = '22023',
                  HINT = 'Queue names become notification channels jobq_<queue>.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_queue(text) IS 'Internal: raises 22004/22023 unless queue is a valid queue name.';

/*
 * jobq._check_payload(payload, argument): returns nothing; raises 22004 for
 * NULL, 22023 for anything but a JSON object, 54000 above 1 MiB.  argument
 * names the caller's argument in the message.
 */
CREATE FUNCTION jobq._check_payload(payload jsonb, argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', argument
            USING ERRCODE = '22004';
    END IF;
    IF jsonb_typeof(payload) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object, got a JSON %', argument, jsonb_typeof(payload)
            USING ERRCODE = '22023',
                  HINT = 'Wrap the value in an object, for example {"value": ...}.';
    END IF;
    IF pg_column_size(payload) > 1048576 THEN
        RAISE EXCEPTION '% must be at most 1 MiB, got % bytes', argument, pg_column_size(payload)
            USING ERRCODE = '54000',
                  HINT = 'Store large data in a table and enqueue its key.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_payload(jsonb, text) IS 'Internal: raises 22004/22023/54000 unless payload is a JSON object of at most 1 MiB.';

/*
 * jobq._check_options(priority, run_at, max_attempts): returns nothing;
 * raises 22004 for a NULL and 22023 for a value out of range.
 */
CREATE FUNCTION jobq._check_options(priority integer, run_at timestamptz, max_attempts integer)
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
    IF max_attempts IS NULL THEN
        RAISE EXCEPTION 'max_attempts must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF max_attempts < 1 OR max_attempts > 1000 THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000, got %', max_attempts
            USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_options(integer, timestamptz, integer) IS 'Internal: raises 22004/22023 unless the enqueue options are in range.';

/*
 * jobq._check_lease(id, lease): returns nothing; raises 22004 when either is
 * NULL.
 */
CREATE FUNCTION jobq._check_lease(id bigint, lease bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF id IS NULL THEN
        RAISE EXCEPTION 'id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF lease IS NULL THEN
        RAISE EXCEPTION 'lease must not be NULL' USING ERRCODE = '22004';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_lease(bigint, bigint) IS 'Internal: raises 22004 when a job id or lease is NULL.';

/*
 * jobq._raise_not_held(id, lease): never returns.  Called after an update
 * guarded by (id, lease, status = running) matched nothing; raises JQ002 when
 * no job has that id, JQ001 otherwise (the lease is stale or the job is not
 * running).  Reads the row without locking it.
 */
CREATE FUNCTION jobq._raise_not_held(id bigint, lease bigint)
RETURNS void
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current_status text;
    current_lease  bigint;
BEGIN
    SELECT j.status, j.lease INTO current_status, current_lease
      FROM jobq.jobs AS j
     WHERE j.id = _raise_not_held.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'id %: no such job', _raise_not_held.id
            USING ERRCODE = 'JQ002';
    END IF;
    RAISE EXCEPTION 'lease % of job % is not current', _raise_not_held.lease, _raise_not_held.id
        USING ERRCODE = 'JQ001',
              DETAIL = format('The job is %s under lease %s.', current_status, current_lease),
              HINT = 'The job was reaped, finished or claimed again; discard this result.';
END
$$;
COMMENT ON FUNCTION jobq._raise_not_held(bigint, bigint) IS 'Internal: raises JQ002 (no such job) or JQ001 (lease not current).';

CREATE FUNCTION jobq._backoff(attempts integer)
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT make_interval(secs => least(300, 2 ^ attempts)) $$;
COMMENT ON FUNCTION jobq._backoff(integer) IS 'Internal: retry delay after the given number of attempts: 2^attempts seconds, at most 300.';

----------------------------------------------------------------------------
-- Notifications
----------------------------------------------------------------------------

/*
 * jobq.channel(queue): the notification channel for queue, 'jobq_' || queue.
 * Raises like jobq._check_queue.
 */
CREATE FUNCTION jobq.channel(queue text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_queue(channel.queue);
    RETURN 'jobq_' || channel.queue;
END
$$;
COMMENT ON FUNCTION jobq.channel(text) IS
    'The LISTEN channel of a queue: jobq_<queue>. Inserting jobs notifies it once per statement; the payload is empty.';

-- Statement-level: one notification per queue per statement, however many rows.
CREATE FUNCTION jobq._notify_inserted()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify(jobq.channel(q.queue), '')
       FROM (SELECT DISTINCT i.queue FROM inserted AS i) AS q;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._notify_inserted() IS 'Internal: trigger function of jobs_notify_trg.';

CREATE TRIGGER jobs_notify_trg
    AFTER INSERT ON jobq.jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobq._notify_inserted();
COMMENT ON TRIGGER jobs_notify_trg ON jobq.jobs IS
    'Wakes workers: NOTIFY jobq_<queue> once per queue per inserting statement.';

----------------------------------------------------------------------------
-- Producing
----------------------------------------------------------------------------

/*
 * jobq.enqueue(queue, payload, priority, run_at, max_attempts): the new job's
 * id.  Runs in the caller's transaction: rolled back, the job never existed.
 * Raises 22004, 22023, 54000 (see jobq._check_*).
 */
CREATE FUNCTION jobq.enqueue(
    queue        text,
    payload      jsonb,
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT 3)
RETURNS bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
BEGIN
    PERFORM jobq._check_queue(enqueue.queue);
    PERFORM jobq._check_payload(enqueue.payload, 'payload');
    PERFORM jobq._check_options(enqueue.priority, enqueue.run_at, enqueue.max_attempts);
    INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts)
    VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts)
    RETURNING jobq.jobs.id INTO new_id;
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer) IS
    'Enqueue one job; returns its id. Options: priority (higher first, default 0), run_at (default now), max_attempts (default 3).';

/*
 * jobq.enqueue_many(queue, payloads, priority, run_at, max_attempts): the new
 * ids, in the order of payloads; one INSERT, so one notification.  Raises
 * like jobq.enqueue, naming the first bad element (payloads[i]); inserts
 * nothing then.
 */
CREATE FUNCTION jobq.enqueue_many(
    queue        text,
    payloads     jsonb[],
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT 3)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad_position bigint;
    bad_payload  jsonb;
    new_ids      bigint[];
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
    SELECT p.position, p.payload INTO bad_position, bad_payload
      FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, position)
     WHERE p.payload IS NULL
        OR jsonb_typeof(p.payload) <> 'object'
        OR pg_column_size(p.payload) > 1048576
     ORDER BY p.position
     LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(bad_payload, format('payloads[%s]', bad_position));
    END IF;
    PERFORM jobq._check_options(enqueue_many.priority, enqueue_many.run_at, enqueue_many.max_attempts);

    WITH inserted AS (
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts)
        SELECT enqueue_many.queue, p.payload, enqueue_many.priority,
               enqueue_many.run_at, enqueue_many.max_attempts
          FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, position)
         ORDER BY p.position
        RETURNING jobq.jobs.id
    )
    -- ids come from one session's sequence in insertion order, so sorting
    -- them restores the order of payloads
    SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}') INTO new_ids
      FROM inserted AS i;
    RETURN new_ids;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer) IS
    'Enqueue many jobs in one statement; returns their ids in the order of payloads. Same options as jobq.enqueue.';

----------------------------------------------------------------------------
-- Working
----------------------------------------------------------------------------

/*
 * jobq.claim(queue, n, worker): up to n runnable jobs of queue, now running
 * under a new lease, in claim order (priority desc, run_at, id).
 * Locks: FOR NO KEY UPDATE SKIP LOCKED on at most n queued rows, taken in a
 * materialized CTE so the LIMIT bounds the locking; never waits on a lock.
 * Never claims a job whose run_at is in the future.  locked_at is the
 * statement's clock.  Raises 22004 (NULL argument), 22023 (bad queue name,
 * n outside 1..1000, worker empty or over 200 characters).
 */
CREATE FUNCTION jobq.claim(queue text, n integer, worker text)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 10
SET search_path = pg_catalog, pg_temp
AS $$
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

    RETURN QUERY
    WITH picked AS MATERIALIZED (
        SELECT j.id
          FROM jobq.jobs AS j
         WHERE j.queue = claim.queue
           AND j.status = 'queued'
           AND j.run_at <= statement_timestamp()
         ORDER BY j.priority DESC, j.run_at, j.id
         LIMIT claim.n
           FOR NO KEY UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE jobq.jobs AS j
           SET status    = 'running',
               locked_by = claim.worker,
               locked_at = statement_timestamp(),
               attempts  = j.attempts + 1,
               lease     = j.lease + 1
          FROM picked
         WHERE j.id = picked.id
        RETURNING j.*
    )
    SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;
COMMENT ON FUNCTION jobq.claim(text, integer, text) IS
    'Claim up to n runnable jobs of a queue for worker (FOR NO KEY UPDATE SKIP LOCKED); returns them running, each with its new lease.';

/*
 * jobq.complete(id, lease): running -> done.  Locks the job's row (waits for
 * a concurrent reaper holding it).  Repeating a successful complete with the
 * same lease does nothing and succeeds.  Raises 22004 (NULL argument), JQ002
 * (no such job), JQ001 (the lease is not the job's current one, or the job is
 * not running: it was reaped, failed, finished or re-claimed).
 */
CREATE FUNCTION jobq.complete(id bigint, lease bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_lease(complete.id, complete.lease);
    UPDATE jobq.jobs AS j
       SET status = 'done', finished_at = statement_timestamp()
     WHERE j.id = complete.id AND j.lease = complete.lease AND j.status = 'running';
    IF FOUND THEN
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
COMMENT ON FUNCTION jobq.complete(bigint, bigint) IS
    'Mark a running job done. Refuses a lease that is not current with SQLSTATE JQ001 (JQ002: no such job); repeating a successful call is harmless.';

/*
 * jobq.complete_many(ids, leases): the ids of the pairs acknowledged, in
 * ascending order: jobs now done, or already done under that same lease.  A
 * pair whose lease is not current (or whose id is unknown) is left out, not
 * raised, so one stale job cannot fail a batch.  One UPDATE; locks the rows
 * it changes.  Raises 22004 (NULL array), 22023 (arrays of different
 * lengths or with NULL elements).
 */
CREATE FUNCTION jobq.complete_many(ids bigint[], leases bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 50
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF complete_many.ids IS NULL THEN
        RAISE EXCEPTION 'ids must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF complete_many.leases IS NULL THEN
        RAISE EXCEPTION 'leases must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF cardinality(complete_many.ids) <> cardinality(complete_many.leases) THEN
        RAISE EXCEPTION 'ids and leases must have the same length, got % and %',
                        cardinality(complete_many.ids), cardinality(complete_many.leases)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(complete_many.ids, NULL) IS NOT NULL
       OR array_position(complete_many.leases, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'ids and leases must not contain NULL' USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    WITH acks AS (
        SELECT a.id, a.lease FROM unnest(complete_many.ids, complete_many.leases) AS a(id, lease)
    ), done AS (
        UPDATE jobq.jobs AS j
           SET status = 'done', finished_at = statement_timestamp()
          FROM acks AS a
         WHERE j.id = a.id AND j.lease = a.lease AND j.status = 'running'
        RETURNING j.id
    )
    -- the outer query sees the rows as they were before "done" ran
    SELECT acknowledged.id
      FROM (SELECT d.id FROM done AS d
            UNION
            SELECT j.id FROM jobq.jobs AS j JOIN acks AS a ON j.id = a.id AND j.lease = a.lease
             WHERE j.status = 'done') AS acknowledged
     ORDER BY acknowledged.id;
END
$$;
COMMENT ON FUNCTION jobq.complete_many(bigint[], bigint[]) IS
    'Mark many running jobs done in one statement; returns the ids acknowledged. Pairs with a stale lease or unknown id are left out of the result.';

/*
 * jobq.fail(id, error, lease): the job's row after the failure: queued again
 * with run_at = now + least(300, 2^attempts) seconds, or failed once attempts
 * reached max_attempts.  error is kept in last_error, cut to 2,000
 * characters.  Locks the job's row.  Raises 22004 (NULL argument), JQ002, JQ001
 * like jobq.complete (a repeated fail is refused: the job is no longer held).
 */
CREATE FUNCTION jobq.fail(id bigint, error text, lease bigint)
RETURNS jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    failed_job jobq.jobs;
BEGIN
    PERFORM jobq._check_lease(fail.id, fail.lease);
    IF fail.error IS NULL THEN
        RAISE EXCEPTION 'error must not be NULL' USING ERRCODE = '22004';
    END IF;
    UPDATE jobq.jobs AS j
       SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
           run_at      = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                              ELSE statement_timestamp() + jobq._backoff(j.attempts) END,
           finished_at = CASE WHEN j.attempts >= j.max_attempts THEN statement_timestamp() END,
           last_error  = left(fail.error, 2000)
     WHERE j.id = fail.id AND j.lease = fail.lease AND j.status = 'running'
    RETURNING j.* INTO failed_job;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(fail.id, fail.lease);
    END IF;
    RETURN failed_job;
END
$$;
COMMENT ON FUNCTION jobq.fail(bigint, text, bigint) IS
    'Record a failure of a running job: back to queued after 2^attempts s (at most 300 s), or failed at max_attempts. Refuses a stale lease with JQ001.';

/*
 * jobq.heartbeat(id, lease): the new locked_at.  Extends a running job's
 * lease so the reaper leaves it alone.  Locks the job's row.  Raises 22004,
 * JQ002, JQ001 like jobq.complete.
 */
CREATE FUNCTION jobq.heartbeat(id bigint, lease bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_locked_at timestamptz;
BEGIN
    PERFORM jobq._check_lease(heartbeat.id, heartbeat.lease);
    UPDATE jobq.jobs AS j
       SET locked_at = statement_timestamp()
     WHERE j.id = heartbeat.id AND j.lease = heartbeat.lease AND j.status = 'running'
    RETURNING j.locked_at INTO new_locked_at;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(heartbeat.id, heartbeat.lease);
    END IF;
    RETURN new_locked_at;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat(bigint, bigint) IS
    'Extend the lease of a running job (locked_at = now) so jobq.reap leaves it alone. Refuses a stale lease with JQ001.';

/*
 * jobq.release(id, lease): hands a claimed job back unstarted (a worker
 * shutting down): running -> queued, run_at kept, the attempt not counted.
 * The lease is spent all the same.  Locks the job's row.  Raises 22004,
 * JQ002, JQ001 like jobq.complete.
 */
CREATE FUNCTION jobq.release(id bigint, lease bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_lease(release.id, release.lease);
    UPDATE jobq.jobs AS j
       SET status = 'queued', attempts = j.attempts - 1
     WHERE j.id = release.id AND j.lease = release.lease AND j.status = 'running';
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(release.id, release.lease);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq.release(bigint, bigint) IS
    'Hand a claimed, unstarted job back to the queue without counting the attempt. Refuses a stale lease with JQ001.';

----------------------------------------------------------------------------
-- Operating
----------------------------------------------------------------------------

/*
 * jobq.reap(stale): the recovered jobs, by id.  Running jobs whose lease is
 * older than stale go back to queued (after the retry backoff), or to failed
 * when out of attempts; a note naming the lost lease is appended to
 * last_error.  Locks: FOR NO KEY UPDATE SKIP LOCKED, so two reapers, or a
 * reaper and a completing worker, never wait on each other.  Raises 22004
 * (NULL), 22023 (stale not positive).
 */
CREATE FUNCTION jobq.reap(stale interval DEFAULT '60 seconds')
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF reap.stale IS NULL THEN
        RAISE EXCEPTION 'stale must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF reap.stale <= interval '0' THEN
        RAISE EXCEPTION 'stale must be a positive interval, got %', reap.stale
            USING ERRCODE = '22023';
    END IF;

    RETURN QUERY
    WITH expired AS MATERIALIZED (
        SELECT j.id
          FROM jobq.jobs AS j
         WHERE j.status = 'running'
           AND j.locked_at < statement_timestamp() - reap.stale
           FOR NO KEY UPDATE SKIP LOCKED
    ), reaped AS (
        UPDATE jobq.jobs AS j
           SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
               run_at      = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                                  ELSE statement_timestamp() + jobq._backoff(j.attempts) END,
               finished_at = CASE WHEN j.attempts >= j.max_attempts THEN statement_timestamp() END,
               last_error  = right(concat_ws(E'\n', j.last_error,
                                             format('reaped: lease %s of %s went stale', j.lease, j.locked_by)),
                                   2000)
          FROM expired
         WHERE j.id = expired.id
        RETURNING j.*
    )
    SELECT r.* FROM reaped AS r ORDER BY r.id;
END
$$;
COMMENT ON FUNCTION jobq.reap(interval) IS
    'Recover running jobs whose lease is older than stale (default 60 s): back to queued, or failed when out of attempts. Returns them.';

/*
 * jobq.retry_failed(queue, ids): the ids redriven, ascending.  Failed jobs
 * (of queue, and among ids, when given) go back to queued, runnable now, with
 * attempts reset; their lease counter is kept, so old leases stay refused.
 * last_error is kept.  Notifies the queues concerned.  Raises 22023 for a bad
 * queue name.
 */
CREATE FUNCTION jobq.retry_failed(queue text DEFAULT NULL, ids bigint[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    redriven_ids    bigint[];
    redriven_queues text[];
BEGIN
    IF retry_failed.queue IS NOT NULL THEN
        PERFORM jobq._check_queue(retry_failed.queue);
    END IF;
    WITH redriven AS (
        UPDATE jobq.jobs AS j
           SET status = 'queued', attempts = 0, run_at = statement_timestamp(), finished_at = NULL
         WHERE j.status = 'failed'
           AND (retry_failed.queue IS NULL OR j.queue = retry_failed.queue)
           AND (retry_failed.ids IS NULL OR j.id = ANY (retry_failed.ids))
        RETURNING j.id, j.queue
    )
    SELECT array_agg(r.id ORDER BY r.id), array_agg(DISTINCT r.queue)
      INTO redriven_ids, redriven_queues
      FROM redriven AS r;
    PERFORM pg_notify(jobq.channel(q.queue), '') FROM unnest(redriven_queues) AS q(queue);
    RETURN QUERY SELECT r.id FROM unnest(redriven_ids) AS r(id);
END
$$;
COMMENT ON FUNCTION jobq.retry_failed(text, bigint[]) IS
    'Dead-letter redrive: failed jobs (optionally of one queue, optionally only these ids) back to queued with attempts reset. Returns their ids.';

/*
 * jobq.stats(): one row per queue: how many jobs are queued (of which
 * runnable now), running, done and failed, and how long the oldest runnable
 * queued job has been waiting.  Reads the whole table; takes no row locks.
 */
CREATE FUNCTION jobq.stats()
RETURNS TABLE (queue text, queued bigint, runnable bigint, running bigint, done bigint,
               failed bigint, oldest_queued_age interval)
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
                                                         AND j.run_at <= statement_timestamp())
      FROM jobq.jobs AS j
     GROUP BY j.queue
     ORDER BY j.queue
$$;
COMMENT ON FUNCTION jobq.stats() IS
    'Per queue: counts of queued (and runnable now), running, done and failed jobs, and the wait of the oldest runnable job.';

----------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC; the role that created the extension gets
-- everything (for a trusted install the objects belong to the bootstrap
-- superuser, so the creator needs these grants to use them).
----------------------------------------------------------------------------

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA jobq FROM PUBLIC;
REVOKE ALL ON TABLE jobq.jobs FROM PUBLIC;
REVOKE ALL ON SEQUENCE jobq.jobs_id_seq FROM PUBLIC;

GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA jobq TO @extowner@;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.jobs TO @extowner@;
GRANT USAGE, SELECT ON SEQUENCE jobq.jobs_id_seq TO @extowner@;
