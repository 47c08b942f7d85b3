----------------------------------------------------------------------------
-- Claiming: the one statement that hands runnable jobs to a worker, under a
-- lease of the worker's chosen length
----------------------------------------------------------------------------

-- Forward mode's position per queue (see jobq.claim).  Unlogged and never
-- dumped: a hint, lost without harm in a crash or a restore.  Shared by
-- every session claiming the queue, so nothing is kept in a session, where a
-- transaction-pooling PgBouncer would hand it to other clients.  One row per
-- queue that has been in forward mode, kept so by the advisory lock every
-- writer holds; no index: every claim reads it, and a sequential scan of a
-- few rows costs less than opening an index (about 10,000 instructions per
-- claim, bench/instructions.py).
CREATE UNLOGGED TABLE jobq._claim_hints (
    queue    text        NOT NULL,
    priority integer     NOT NULL,
    run_at   timestamptz NOT NULL,
    id       bigint      NOT NULL,
    until    timestamptz NOT NULL
);
COMMENT ON TABLE jobq._claim_hints IS
    'Internal: where claims of a queue in forward mode scan from (priority, run_at, id) and until when. A hint only.';
REVOKE ALL ON TABLE jobq._claim_hints FROM PUBLIC;

/*
 * jobq.claim(queue, n, worker, lease_timeout): up to n runnable jobs of
 * queue, now running under a new lease that expires lease_timeout from now
 * (NULL, the default: the queue's lease_timeout, else 60 seconds;
 * heartbeats extend it by that length again), in claim order (priority
 * desc, run_at, id).  Never claims a job whose run_at is in the future, nor
 * any job of a paused queue.  locked_at is the statement's clock.  Applies
 * the queue's settings (jobq.queue_settings, one primary-key probe): a job's
 * deadline is now + its timeout (else the queue's; NULL: none), which its
 * lease never outlasts, and a job enqueued without max_attempts gets the
 * queue's (else 3), written into its row.
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
CREATE FUNCTION jobq.claim(queue text, n integer, worker text,
                           lease_timeout interval DEFAULT NULL)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 10
-- SECURITY DEFINER: workers claim without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hint          jobq._claim_hints;
    settings      jobq.queue_settings;
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

    -- the queue's settings: none for a plain queue (a probe that finds nothing)
    SELECT s.* INTO settings FROM jobq.queue_settings AS s WHERE s.queue = claim.queue;
    IF settings.paused THEN
        RETURN;  -- a paused queue hands out nothing
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
     WHERE h.queue = claim.queue AND h.until > statement_timestamp();
    IF FOUND THEN
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
        IF NOT FOUND THEN
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

    RETURN QUERY
    WITH claimed AS (
        UPDATE jobq.jobs AS j
           SET status           = 'running',
               locked_by        = claim.worker,
               locked_at        = statement_timestamp(),
               lease_expires_at = least(statement_timestamp()
                                        + coalesce(claim.lease_timeout, settings.lease_timeout, interval '60 seconds'),
                                        statement_timestamp() + coalesce(j.timeout, settings.timeout)),
               deadline         = statement_timestamp() + coalesce(j.timeout, settings.timeout),
               max_attempts     = coalesce(j.max_attempts, settings.max_attempts, 3),
               attempts         = j.attempts + 1,
               lease            = j.lease + 1
         WHERE j.id = ANY ((SELECT picked)::bigint[])
        RETURNING j.*
    )
    SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;
COMMENT ON FUNCTION jobq.claim(text, integer, text, interval) IS
    'Claim up to n runnable jobs of a queue for worker (FOR NO KEY UPDATE SKIP LOCKED), each under a new lease that expires lease_timeout (default: the queue''s, else 60 s) from now; returns them running. A paused queue gives none.';
REVOKE ALL ON FUNCTION jobq.claim(text, integer, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.claim(text, integer, text, interval) TO @extowner@;
