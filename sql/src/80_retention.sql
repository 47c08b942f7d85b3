----------------------------------------------------------------------------
-- Retention: finished jobs leave after their queue's retention for their
-- final state (jobq.configure_queue: retain_done, retain_failed,
-- retain_cancelled, keep_forever; the defaults in jobq._retention), in
-- bounded batches, from the tick every worker already runs
----------------------------------------------------------------------------

/*
 * jobq._retain(at, max_rows): how many finished jobs it deleted, as the
 * tick at the time at (tests drive the clock through it).  For each final
 * state (done, failed, cancelled) and each queue with jobs finished in it
 * (jobq._finished_queues: one probe of jobs_status_idx per queue), the
 * jobs that finished before at minus the queue's retention for the state,
 * oldest first, in turns of at most 1,000 per queue and state, until
 * max_rows are deleted or none is left; with their results, keys,
 * deadlines and dependency rows (jobq._delete_jobs, one call per turn, so
 * at most one subtransaction each: it keeps a job that a foreign key of a
 * user's table still references, and the next turn goes on past it).
 * Never reads a queued or running job, nor a finished one whose retention
 * has not ended.
 * Locks: FOR UPDATE SKIP LOCKED on the jobs it deletes (never waits for a
 * job's lock: ticks at once share the work, and claims never lock finished
 * jobs), until the caller's transaction ends.  Raises 22023 (max_rows
 * outside 1..100000).
 */
CREATE FUNCTION jobq._retain(at timestamptz, max_rows integer)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    chunk constant integer := 1000;  -- per queue and state in one turn, so that one queue cannot starve the others
    pairs   text[][];                -- {status, queue} of each queue and state whose retention can end
    cutoffs timestamptz[];
    after   timestamptz[];           -- per pair, where the next turn goes on (finished_at, id): the jobs
    after_id bigint[];               -- before it were deleted, or kept by a foreign key
    ids     bigint[];
    picked  bigint[];
    last    record;
    deleted bigint := 0::bigint;
    more    boolean;
BEGIN
    IF _retain.max_rows NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'max_rows must be between 1 and 100000, got %', _retain.max_rows USING ERRCODE = '22023';
    END IF;
    SELECT coalesce(array_agg(ARRAY[k.status, k.queue] ORDER BY k.status, k.queue), '{}'),
           coalesce(array_agg(_retain.at - k.retention ORDER BY k.status, k.queue), '{}')
      INTO pairs, cutoffs
      FROM jobq._finished_queues() AS k
     WHERE k.retention IS NOT NULL;
    after := array_fill('-infinity'::timestamptz, ARRAY[cardinality(cutoffs)]);
    after_id := array_fill(0::bigint, ARRAY[cardinality(cutoffs)]);

    LOOP
        -- one turn: up to a chunk of each queue and state, deleted in one call (one subtransaction at most)
        ids := '{}';
        more := false;
        FOR i IN 1 .. cardinality(cutoffs) LOOP
            EXIT WHEN deleted + cardinality(ids) >= _retain.max_rows;
            picked := ARRAY(SELECT j.id
                              FROM jobq.jobs AS j
                             WHERE j.status = pairs[i][1] AND j.status IN ('done', 'failed', 'cancelled')
                               AND j.queue = pairs[i][2]
                               AND j.finished_at < cutoffs[i]
                               AND j.finished_at >= after[i]  -- where the last turn stopped, as a bound of the index scan
                               AND (j.finished_at, j.id) > (after[i], after_id[i])
                             ORDER BY j.finished_at, j.id
                             LIMIT least(chunk, _retain.max_rows - deleted - cardinality(ids))
                               FOR UPDATE SKIP LOCKED);
            CONTINUE WHEN cardinality(picked) = 0;
            SELECT j.finished_at, j.id INTO last FROM jobq.jobs AS j WHERE j.id = picked[cardinality(picked)];
            after[i] := last.finished_at;
            after_id[i] := last.id;
            ids := ids || picked;
            -- a full chunk: there may be more of this queue and state for the next turn
            more := more OR cardinality(picked) = chunk;
        END LOOP;
        EXIT WHEN cardinality(ids) = 0;
        deleted := deleted + jobq._delete_jobs(ids);
        EXIT WHEN NOT more OR deleted >= _retain.max_rows;
    END LOOP;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION jobq._retain(timestamptz, integer) IS
    'Internal: retention as the tick at a given time: delete up to max_rows finished jobs whose queue''s retention for their state ended, oldest first, queues in turns.';
REVOKE ALL ON FUNCTION jobq._retain(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._retain(timestamptz, integer) TO @extowner@;

/*
 * jobq.tick(): how many jobs it enqueued: the schedules' due occurrences
 * (jobq._tick(statement_timestamp())); then (0.11.0) the waits for a
 * signal whose timeout passed end, and expired signals are deleted
 * (jobq._end_waits(statement_timestamp(), 10000)); then retention: at most 100,000
 * finished jobs whose retention ended are deleted
 * (jobq._retain(statement_timestamp(), 100000); about 0.2 s where the
 * table is quiet: one worker's ticks keep up with 10,000 finished jobs a
 * second at the default reap interval), in the same transaction,
 * in a subtransaction of its own: should it fail (a user's trigger, a
 * deadlock with a purge), a WARNING says so and the schedules' jobs are
 * enqueued all the same.
 * Every worker runs it each reap interval (or pg_cron does, every minute
 * or more often); ticks at once share the work (a schedule or a job one
 * holds, the others skip).  With nothing due it costs one probe of
 * schedule_settings_next_idx and one of jobs_status_idx per queue and
 * final state.
 */
CREATE FUNCTION jobq.tick()
RETURNS integer
LANGUAGE plpgsql VOLATILE
-- SECURITY DEFINER: workers run it, and have no privilege on the schedules
-- table or the jobs table; it only does what the schedules and the queues'
-- retention say.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    enqueued integer;
BEGIN
    enqueued := jobq._tick(statement_timestamp());
    -- 0.11.0: waits for a signal past their timeout, and expired signals
    PERFORM jobq._end_waits(statement_timestamp(), 10000);
    BEGIN
        PERFORM jobq._retain(statement_timestamp(), 100000);
    EXCEPTION WHEN OTHERS THEN
        -- a user's trigger or foreign key action raising, a deadlock with a
        -- purge: retention waits for the next tick, the schedules' jobs stay
        RAISE WARNING 'pgjobq retention failed, the next tick tries again: %', SQLERRM
            USING ERRCODE = SQLSTATE;
    END;
    RETURN enqueued;
END
$$;
COMMENT ON FUNCTION jobq.tick() IS
    'Enqueue the occurrences of schedules due within the next minute (and missed ones, by catch_up), end the waits for a signal past their timeout, then delete up to 100,000 finished jobs whose retention ended; returns how many jobs it enqueued. Run by workers or pg_cron.';
REVOKE ALL ON FUNCTION jobq.tick() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.tick() TO @extowner@;
