----------------------------------------------------------------------------
-- Settling: what a worker reports for the jobs it holds.  Every call presents
-- the job's lease (its fencing token): a lease that is no longer current is
-- refused, so a worker whose job was reaped and claimed again cannot change
-- it.
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
           -- "IS TRUE" keeps the planner from matching jobs_status_idx's predicate:
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
 * results): rows of jobq.jobs (task last, as jobq.claim returns them):
 * first the jobs acknowledged, by ascending id, as jobq.complete_many
 * would (status 'done': now done, with the results
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
 * jobq.fail(id, error, lease, retry_in, retry): the job's row after the
 * failure (every column of jobq.jobs, task last): queued again with run_at
 * = now + retry_in, or + the queue's backoff (jobq._retry_delay: by default
 * 2^attempts seconds, at most 300), or failed once attempts reached
 * max_attempts; with retry => false (0.9.0: an error that no retry can
 * mend) failed at once, whatever attempts are left, exactly as at
 * max_attempts (finished_at set, the dead-letter queue, a watched job
 * notified, its dependents and concurrency key settled).  Cancelled
 * instead, never retried, when jobq.cancel asked its worker to stop
 * (notifying "jobq.done" then, for a watched job).  error is kept in
 * last_error, cut to 2,000 characters.  Locks the job's row, and what
 * jobq._finish_linked locks for a job with dependents.  Raises 22004 (NULL
 * id, lease, error or retry), 22023 (retry_in negative or over 10 years),
 * JQ002, JQ001 like jobq.complete (a repeated fail is refused: the job is
 * no longer held).
 */
CREATE FUNCTION jobq.fail(id bigint, error text, lease bigint, retry_in interval DEFAULT NULL,
                          retry boolean DEFAULT true)
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
    IF fail.retry IS NULL THEN
        RAISE EXCEPTION 'retry must not be NULL'
            USING ERRCODE = '22004',
                  HINT = 'retry => false fails the job at once; true, the default, retries it while attempts are left.';
    END IF;
    IF fail.retry_in < interval '0' OR fail.retry_in > interval '10 years' THEN
        RAISE EXCEPTION 'retry_in must be an interval between 0 and 10 years, got %', fail.retry_in
            USING ERRCODE = '22023';
    END IF;
    -- retry => false takes the path of the last attempt: "NOT fail.retry OR"
    -- before each test of attempts against max_attempts
    UPDATE jobq.jobs AS j
       SET status      = CASE WHEN j.control & 1 <> 0 THEN 'cancelled'  -- a cancel was requested
                              WHEN NOT fail.retry
                                   OR j.attempts >= coalesce(j.max_attempts, jobq._max_attempts(j.queue)) THEN 'failed'
                              ELSE 'queued' END,
           run_at      = CASE WHEN coalesce(j.control & 1 = 0, true) AND fail.retry
                                   AND j.attempts < coalesce(j.max_attempts, jobq._max_attempts(j.queue))
                              THEN statement_timestamp()
                                   + coalesce(fail.retry_in, jobq._retry_delay(j.queue, j.attempts))
                              ELSE j.run_at END,
           finished_at = CASE WHEN j.control & 1 <> 0 OR NOT fail.retry
                                   OR j.attempts >= coalesce(j.max_attempts, jobq._max_attempts(j.queue))
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
COMMENT ON FUNCTION jobq.fail(bigint, text, bigint, interval, boolean) IS
    'Record a failure of a running job: back to queued after retry_in or the queue''s backoff, failed at max_attempts or at once with retry => false, cancelled if a cancel was requested. Returns its row. Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.fail(bigint, text, bigint, interval, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.fail(bigint, text, bigint, interval, boolean) TO @extowner@;

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
REVOKE ALL ON FUNCTION jobq.snooze(bigint, bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.snooze(bigint, bigint, interval) TO @extowner@;

/*
 * jobq.hand_back(id, lease, delay, error, fail_after): the job's new status.
 * A worker that cannot run a job (its task is one the worker does not know,
 * as during a rolling deploy) hands it back for another: the job goes back to
 * queued, runnable after delay, without spending an attempt, as by
 * jobq.snooze, and error is kept as its last_error; once the job is older
 * than fail_after (since created_at) it fails for good with error instead, as
 * by jobq.fail(..., retry => false).  'queued', 'failed', or 'cancelled' when
 * a cancel was requested.  Locks the job's row.  Raises 22004 (NULL
 * argument), 22023 (delay or fail_after negative or over 10 years), JQ002,
 * JQ001 like jobq.complete.
 */
CREATE FUNCTION jobq.hand_back(id bigint, lease bigint, delay interval, error text, fail_after interval)
RETURNS text
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers settle jobs without UPDATE on jobq.jobs; the lease
-- decides which rows they may change.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    created timestamptz;
BEGIN
    PERFORM jobq._check_lease(hand_back.id, hand_back.lease);
    IF hand_back.error IS NULL OR hand_back.fail_after IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN hand_back.error IS NULL THEN 'error' ELSE 'fail_after' END
            USING ERRCODE = '22004';
    END IF;
    IF hand_back.fail_after < interval '0' OR hand_back.fail_after > interval '10 years' THEN
        RAISE EXCEPTION 'fail_after must be an interval between 0 and 10 years, got %', hand_back.fail_after
            USING ERRCODE = '22023';
    END IF;
    SELECT j.created_at INTO created
      FROM jobq.jobs AS j
     WHERE j.id = hand_back.id AND j.lease = hand_back.lease AND j.status = 'running'
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(hand_back.id, hand_back.lease);
    END IF;
    IF created < statement_timestamp() - hand_back.fail_after THEN
        RETURN (jobq.fail(hand_back.id, hand_back.error, hand_back.lease, NULL, false)).status;
    END IF;
    IF jobq.snooze(hand_back.id, hand_back.lease, hand_back.delay) IS NULL THEN  -- checks delay
        RETURN 'cancelled';
    END IF;
    UPDATE jobq.jobs AS j SET last_error = left(hand_back.error, 2000) WHERE j.id = hand_back.id;
    RETURN 'queued';
END
$$;
COMMENT ON FUNCTION jobq.hand_back(bigint, bigint, interval, text, interval) IS
    'Hand a running job back to its queue for another worker (one that knows its task): queued after delay without spending an attempt, or failed for good with error once older than fail_after. Returns its new status. Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.hand_back(bigint, bigint, interval, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.hand_back(bigint, bigint, interval, text, interval) TO @extowner@;

/*
 * jobq.heartbeat(id, lease): the new locked_at.  Extends a running job's
 * lease by its own length (the lease_timeout it was claimed with):
 * locked_at becomes now and lease_expires_at now + that length, but never
 * past the job's deadline, so the reaper leaves the job alone.  Locks the
 * job's row.  Raises 22004, JQ002, JQ001 like jobq.complete, and JQ003 once
 * the deadline has passed (the attempt timed out: jobq.reap recovers it).
 */
CREATE FUNCTION jobq.heartbeat(id bigint, lease bigint)
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
REVOKE ALL ON FUNCTION jobq.heartbeat(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.heartbeat(bigint, bigint) TO @extowner@;

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
CREATE FUNCTION jobq.heartbeat_many(ids bigint[], leases bigint[])
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
REVOKE ALL ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) TO @extowner@;

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
CREATE FUNCTION jobq.release(id bigint, lease bigint)
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
REVOKE ALL ON FUNCTION jobq.release(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.release(bigint, bigint) TO @extowner@;
