----------------------------------------------------------------------------
-- Wake-ups.  A worker about to sleep registers as a waiter of its queue
-- (jobq.register_waiter); an enqueue notifies the queue's channel only while some
-- worker waits, so a queue whose workers are busy pays no NOTIFY (whose
-- commit takes a cluster-wide lock and holds it through the WAL flush).
-- A notification is a hint; workers poll underneath, so nothing correct
-- depends on one arriving.
--
-- Why no wake-up is lost for a committed enqueue while a worker waits.  A
-- worker registers (jobq.register_waiter) in a short transaction of its own, holding
-- the queue's advisory lock exclusively, taken with pg_try_advisory_xact_lock
-- (it never waits), and after that commits it claims once more before it
-- sleeps.  A producer (jobq.enqueue, enqueue_many) takes the same lock
-- shared, also without waiting, and holds it to its commit; then, in a
-- statement that starts after it, so with a snapshot taken after it, it
-- looks for waiters.  So:
--   - the producer's lock came first: the registration fails, and the worker
--     claims again shortly, until it succeeds after the producer's commit,
--     when the claim sees the job;
--   - the registration came first: its row is visible once its lock is
--     released, so the producer sees the waiter and notifies;
--   - a producer that cannot take its lock at once (a registration is under
--     way), or whose snapshot is older than its statement (REPEATABLE READ,
--     SERIALIZABLE), notifies without looking.
-- tests/isolation/specs/wait_vs_enqueue.spec plays the interleavings.
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
    'The LISTEN channel of a queue: jobq_<queue>. Enqueues notify it (empty payload) while a worker waits (jobq.register_waiter).';
REVOKE ALL ON FUNCTION jobq.channel(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.channel(text) TO @extowner@;

-- The workers waiting for a notification, per queue, until when.  Unlogged
-- and never dumped: a crash or a restore forgets them, and a worker
-- registers again before its next sleep.  No index: producers read it at
-- every enqueue, and a sequential scan of a few rows costs less than
-- opening an index.
CREATE UNLOGGED TABLE jobq._waiters (
    queue  text        NOT NULL,
    worker text        NOT NULL,
    until  timestamptz NOT NULL
);
COMMENT ON TABLE jobq._waiters IS
    'Internal: workers waiting for a notification on a queue (jobq.register_waiter), until when. Enqueues notify only while one waits.';
REVOKE ALL ON TABLE jobq._waiters FROM PUBLIC;

/*
 * jobq.register_waiter(queue, worker, up_to): registers worker as waiting
 * on queue for up_to (a positive interval of at most 1 day), so that
 * enqueues committed from now on notify jobq_<queue>.  (0.10.0: named
 * jobq.wait until 0.9.0, which is also the name of the wait for a job's
 * outcome, jobq.wait(id, timeout).)  Returns registered: false when a
 * producer of the queue has a transaction in flight (or another worker is
 * registering), in which case nothing was registered and the caller should
 * claim again shortly; true otherwise, and then the caller must claim once
 * more before it sleeps (jobs committed before the registration are not
 * notified).  Also returns next_run_at: the earliest run_at still in the
 * future among the queue's queued jobs (NULL when none), so that a worker
 * sleeps until then at most.
 *
 * Call it in a transaction of its own (autocommit): the registration counts
 * from its commit.  Locks: pg_try_advisory_xact_lock on the queue (never
 * waits); the worker's row of jobq._waiters.  Expired registrations of the
 * queue older than a minute are deleted.  Raises 22004 (NULL argument) and
 * 22023 (bad queue name, worker empty or over 200 characters, up_to not
 * positive or over 1 day).
 */
CREATE FUNCTION jobq.register_waiter(queue text, worker text, up_to interval,
                                     OUT registered boolean, OUT next_run_at timestamptz)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers register without privileges on jobq._waiters and
-- read the queue's next run_at without SELECT on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    level integer;  -- a priority of the queue's queued jobs, highest first
BEGIN
    PERFORM jobq._check_queue(register_waiter.queue);
    IF register_waiter.worker IS NULL THEN
        RAISE EXCEPTION 'worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF length(register_waiter.worker) < 1 OR length(register_waiter.worker) > 200 THEN
        RAISE EXCEPTION 'worker must be 1 to 200 characters, got %', length(register_waiter.worker)
            USING ERRCODE = '22023';
    END IF;
    IF register_waiter.up_to IS NULL THEN
        RAISE EXCEPTION 'up_to must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF register_waiter.up_to <= interval '0' OR register_waiter.up_to > interval '1 day' THEN
        RAISE EXCEPTION 'up_to must be a positive interval of at most 1 day, got %', register_waiter.up_to
            USING ERRCODE = '22023';
    END IF;

    registered := pg_try_advisory_xact_lock(hashtext('jobq._waiters'), hashtext(register_waiter.queue));
    IF registered THEN
        UPDATE jobq._waiters AS w
           SET until = statement_timestamp() + register_waiter.up_to
         WHERE w.queue = register_waiter.queue AND w.worker = register_waiter.worker;
        IF NOT FOUND THEN
            INSERT INTO jobq._waiters (queue, worker, until)
            VALUES (register_waiter.queue, register_waiter.worker, statement_timestamp() + register_waiter.up_to);
        END IF;
        DELETE FROM jobq._waiters AS w
         WHERE w.queue = register_waiter.queue AND w.until < statement_timestamp() - interval '1 minute';
    END IF;

    -- the earliest future run_at: per priority, the claim index is in run_at
    -- order, so one probe per priority present (highest first) finds it
    SELECT j.priority INTO level
      FROM jobq.jobs AS j
     WHERE j.queue = register_waiter.queue AND j.status = 'queued'
     ORDER BY j.priority DESC
     LIMIT 1;
    WHILE level IS NOT NULL LOOP
        next_run_at := least(next_run_at,
                             (SELECT j.run_at
                                FROM jobq.jobs AS j
                               WHERE j.queue = register_waiter.queue AND j.status = 'queued' AND j.priority = level
                                 AND j.run_at > statement_timestamp()
                               ORDER BY j.priority DESC, j.run_at
                               LIMIT 1));
        level := (SELECT j.priority
                    FROM jobq.jobs AS j
                   WHERE j.queue = register_waiter.queue AND j.status = 'queued' AND j.priority < level
                   ORDER BY j.priority DESC
                   LIMIT 1);
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq.register_waiter(text, text, interval) IS
    'Register a worker as waiting on a queue for up_to, so enqueues notify jobq_<queue>; returns whether it registered (else claim again shortly) and the earliest future run_at of the queue.';
REVOKE ALL ON FUNCTION jobq.register_waiter(text, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.register_waiter(text, text, interval) TO @extowner@;

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
