----------------------------------------------------------------------------
-- Job control: cancelling jobs, and looking one up or waiting for it to
-- finish.  Job ids are sequential and so guessable: jobq.job, wait and
-- watch show any job's state and result (never its payload or headers), so
-- they are for workers and admins, and for the producers given them
-- (jobq.grant_producer(role, see_jobs => true)); cancelling is for admins.
----------------------------------------------------------------------------

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
    cancel_requested boolean,
    depends_on       bigint[],
    task             text,  -- 0.9.0
    -- 0.11.0, durable execution (57_durable.sql)
    steps            jsonb,
    step_attempts    jsonb,
    progress         jsonb,
    waiting_for      jsonb
);
COMMENT ON TYPE jobq.job_state IS
    'A job''s public state, as jobq.job, jobq.wait and jobq.watch return it (max_attempts with the queue''s default filled in; task NULL for a plain job; steps: name to result, step_attempts: name to the attempt that recorded it, progress: the latest report, waiting_for: what a held, waiting or sleeping job waits for; NULL when none).';

/*
 * jobq.job(id): the job's public state (jobq.job_state: its task NULL for a
 * plain job), its result read from jobq.results; for a durable job
 * (control bit 64) its steps and the attempt that recorded each
 * (jobq.job_steps), its latest progress (jobq.job_progress), and for a
 * held, waiting or sleeping job what it waits for (jobq._waiting_for).
 * Reads the rows without locking them.  Raises 22004 (NULL id), JQ002 (no
 * such job).
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
           j.last_error, j.run_at, j.created_at, j.finished_at, coalesce(j.control & 1 <> 0, false),
           CASE WHEN j.control & 32 <> 0
                THEN ARRAY(SELECT d.parent FROM jobq.job_deps AS d WHERE d.child = j.id ORDER BY d.parent) END,
           j.task,
           CASE WHEN j.control & 64 <> 0
                THEN (SELECT jsonb_object_agg(t.name, t.result) FROM jobq.job_steps AS t WHERE t.id = j.id) END,
           CASE WHEN j.control & 64 <> 0
                THEN (SELECT jsonb_object_agg(t.name, t.attempt) FROM jobq.job_steps AS t WHERE t.id = j.id) END,
           p.progress,
           CASE WHEN j.status = 'waiting' OR j.control & 64 <> 0
                THEN jobq._waiting_for(j.id, j.status, j.control, j.run_at) END
      INTO state.id, state.queue, state.status, state.attempts, state.max_attempts, state.result,
           state.last_error, state.run_at, state.created_at, state.finished_at, state.cancel_requested,
           state.depends_on, state.task, state.steps, state.step_attempts, state.progress, state.waiting_for
      FROM jobq.jobs AS j
      LEFT JOIN jobq.queue_settings AS s ON s.queue = j.queue
      LEFT JOIN jobq.results AS r ON r.id = j.id
      LEFT JOIN jobq.job_progress AS p ON p.id = j.id
     WHERE j.id = job.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'id %: no such job', job.id
            USING ERRCODE = 'JQ002';
    END IF;
    RETURN state;
END
$$;
COMMENT ON FUNCTION jobq.job(bigint) IS
    'A job''s public state: queue, status, attempts, max_attempts, result, last_error, run_at, created_at, finished_at, cancel_requested, depends_on (its parents), task, steps, step_attempts, progress, waiting_for (not its payload). JQ002: no such job.';
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
