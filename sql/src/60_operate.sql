----------------------------------------------------------------------------
-- Operating: recovery, redrive, retention, and what to watch
----------------------------------------------------------------------------

-- When the workers' reaps last ran (jobq.reap given at_most_every): one
-- row.  Unlogged and never dumped: a crash forgets it, and the next
-- worker's reap runs and writes it again.
CREATE UNLOGGED TABLE jobq._last_reap (
    one boolean     NOT NULL DEFAULT true,
    at  timestamptz NOT NULL,
    CONSTRAINT _last_reap_pkey PRIMARY KEY (one),
    CONSTRAINT _last_reap_one CHECK (one)
);
COMMENT ON TABLE jobq._last_reap IS
    'Internal: when a reap given at_most_every last ran (one row), so that a fleet of workers reaps about once per interval.';
COMMENT ON COLUMN jobq._last_reap.one IS 'Always true: the table has one row.';
COMMENT ON COLUMN jobq._last_reap.at IS 'When that reap ran (its statement''s time).';
REVOKE ALL ON TABLE jobq._last_reap FROM PUBLIC;

/*
 * jobq.reap(stale, at_most_every): the recovered jobs (rows of jobq.jobs, task last), by
 * id: running jobs whose lease has expired (lease_expires_at, set by claim
 * from its lease_timeout and moved on
 * by every heartbeat, never past the job's deadline) go back to queued
 * (after the queue's retry backoff), or to failed when out of attempts, or
 * to cancelled when jobq.cancel asked their worker to stop; a note naming
 * the lost lease, or the timeout that passed, is appended to last_error.  Each job is judged by its own lease, so workers with
 * different lease lengths never reap each other's live jobs.  stale (default
 * NULL) only ever holds reaping back: given, a job must also have been
 * claimed or extended more than stale ago (kept from 0.3.0, where stale was
 * the whole test; no longer needed).  Locks: FOR NO KEY UPDATE SKIP LOCKED,
 * so two reapers, or a reaper and a completing worker, never wait on each
 * other.  0.10.0: also marks the xid clock (jobq._mark_xid_clock), at
 * most once every 10 seconds.
 *
 * at_most_every (0.10.0, default NULL: reap now), for the workers, which
 * each reap every few seconds: given, the reap runs only when no reap given
 * at_most_every ran in the last at_most_every (jobq._last_reap) and none is
 * running; otherwise it returns no rows at once.  So a fleet of workers
 * reaps about once per interval instead of once per worker: each reap walks
 * every running entry of jobs_status_idx, and while a long-open transaction
 * keeps vacuum from removing them, the versions of every job run since stay
 * there, so that every reap costs in proportion to the jobs done since.
 * Locks the advisory lock (hashtext('jobq.reap'), 0) with
 * pg_try_advisory_xact_lock, never waiting.  Raises 22023 (stale or
 * at_most_every not positive, or over 10 years, 1 day).
 */
CREATE FUNCTION jobq.reap(stale interval DEFAULT NULL, at_most_every interval DEFAULT NULL)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: the worker level recovers expired leases without UPDATE
-- on jobq.jobs, so a fleet of workers needs no admin to recover a killed
-- worker's jobs.  It can touch nothing else: only jobs whose lease expired.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF reap.stale <= interval '0' OR reap.stale > interval '10 years' THEN
        RAISE EXCEPTION 'stale must be a positive interval of at most 10 years, got %', reap.stale
            USING ERRCODE = '22023';
    END IF;
    IF reap.at_most_every <= interval '0' OR reap.at_most_every > interval '1 day' THEN
        RAISE EXCEPTION 'at_most_every must be a positive interval of at most 1 day, got %', reap.at_most_every
            USING ERRCODE = '22023';
    END IF;
    IF reap.at_most_every IS NOT NULL THEN
        -- a worker's reap: none while another runs, none within at_most_every of the last
        IF NOT pg_try_advisory_xact_lock(hashtext('jobq.reap'), 0) THEN
            RETURN;
        END IF;
        INSERT INTO jobq._last_reap AS r (at) VALUES (statement_timestamp())
        ON CONFLICT ON CONSTRAINT _last_reap_pkey DO UPDATE SET at = excluded.at
         WHERE r.at <= excluded.at - reap.at_most_every;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    PERFORM jobq._mark_xid_clock();  -- every worker reaps every few seconds: it keeps the clock

    RETURN QUERY
    WITH expired AS MATERIALIZED (
        SELECT j.id, (SELECT d.deadline FROM jobq.deadlines AS d WHERE d.id = j.id AND d.lease = j.lease) AS deadline
          FROM jobq.jobs AS j
         WHERE j.status = 'running'
           AND j.lease_expires_at < statement_timestamp()
           AND (reap.stale IS NULL OR j.locked_at < statement_timestamp() - reap.stale)
           FOR NO KEY UPDATE SKIP LOCKED
    ), reaped AS (
        UPDATE jobq.jobs AS j
           SET status      = CASE WHEN j.control & 1 <> 0 THEN 'cancelled'  -- a cancel was requested
                                  WHEN j.attempts >= coalesce(j.max_attempts, jobq._max_attempts(j.queue)) THEN 'failed'
                                  ELSE 'queued' END,
               run_at      = CASE WHEN coalesce(j.control & 1 = 0, true) AND j.attempts < coalesce(j.max_attempts, jobq._max_attempts(j.queue))
                                  THEN statement_timestamp() + jobq._retry_delay(j.queue, j.attempts)
                                  ELSE j.run_at END,
               finished_at = CASE WHEN j.control & 1 <> 0 OR j.attempts >= coalesce(j.max_attempts, jobq._max_attempts(j.queue))
                                  THEN statement_timestamp() END,
               last_error  = right(concat_ws(E'\n', j.last_error,
                                             CASE WHEN expired.deadline <= statement_timestamp()
                                                  THEN format('reaped: lease %s of %s timed out at its deadline %s',
                                                              j.lease, j.locked_by, expired.deadline)
                                                  ELSE format('reaped: lease %s of %s went stale',
                                                              j.lease, j.locked_by) END),
                                   2000)
          FROM expired
         WHERE j.id = expired.id
        RETURNING j.*
    )
    -- every row passes; a watched one that finished notifies "jobq.done" on its
    -- way, and one with a concurrency key or dependents settles them
    SELECT r.* FROM reaped AS r
     WHERE r.status = 'queued' OR r.control IS NULL
        OR ((r.control & 2 = 0 OR jobq._notify_finished(r.id))
            AND (r.control & 24 = 0 OR jobq._finish_linked(r.id, r.status, r.control)))
     ORDER BY r.id;
END
$$;
COMMENT ON FUNCTION jobq.reap(interval, interval) IS
    'Recover running jobs whose lease expired or whose timeout passed: back to queued, failed when out of attempts, cancelled when a cancel was requested. Returns them. stale, when given, also requires the lease to be older than stale; at_most_every, when given, skips the reap (no rows) if one given it ran within that interval or is running.';
REVOKE ALL ON FUNCTION jobq.reap(interval, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.reap(interval, interval) TO @extowner@;

/*
 * jobq.retry_failed(queue, ids): the ids redriven, ascending.  Failed jobs
 * (of queue, and among ids, when given) go back to queued, runnable now, with
 * attempts reset; their lease counter is kept, so old leases stay refused.
 * last_error is kept.  A failed job enqueued with a unique key goes back
 * only while its key is still its own (jobq.unique_keys): once a newer job
 * took the key, it stays failed (a notice says so), so a redrive never
 * makes two holders.  Notifies the queues concerned.  Locks the rows it
 * redrives and their keys.  Raises 22023 for a bad queue name.
 */
CREATE FUNCTION jobq.retry_failed(queue text DEFAULT NULL, ids bigint[] DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    redriven_ids    bigint[];
    redriven_queues text[];
    keyed           record;
BEGIN
    IF retry_failed.queue IS NOT NULL THEN
        PERFORM jobq._check_queue(retry_failed.queue);
    END IF;
    -- jobs enqueued without a unique key, all at once
    WITH redriven AS (
        UPDATE jobq.jobs AS j
           SET status = 'queued', attempts = 0, run_at = statement_timestamp(), finished_at = NULL
         WHERE j.status = 'failed' AND coalesce(j.control & 4 = 0, true)
           AND (retry_failed.queue IS NULL OR j.queue = retry_failed.queue)
           AND (retry_failed.ids IS NULL OR j.id = ANY (retry_failed.ids))
        RETURNING j.id, j.queue
    )
    SELECT coalesce(array_agg(r.id), '{}'), coalesce(array_agg(DISTINCT r.queue), '{}')
      INTO redriven_ids, redriven_queues
      FROM redriven AS r;
    -- jobs enqueued with one, one by one: a job whose key row still names
    -- it (no newer job took the key) goes back, keeping its key, its row
    -- locked meanwhile; the others stay failed
    FOR keyed IN
        SELECT j.id, j.queue, k.unique_key
          FROM jobq.jobs AS j
          LEFT JOIN jobq.unique_keys AS k ON k.job_id = j.id
         WHERE j.status = 'failed' AND j.control & 4 <> 0
           AND (retry_failed.queue IS NULL OR j.queue = retry_failed.queue)
           AND (retry_failed.ids IS NULL OR j.id = ANY (retry_failed.ids))
         ORDER BY j.id
    LOOP
        PERFORM FROM jobq.unique_keys AS k
          WHERE k.queue = keyed.queue AND k.unique_key = keyed.unique_key AND k.job_id = keyed.id
            FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            RAISE NOTICE 'job % stays failed: a newer job of queue % took its unique key', keyed.id,
                         quote_literal(keyed.queue);
            CONTINUE;
        END IF;
        UPDATE jobq.jobs AS j
           SET status = 'queued', attempts = 0, run_at = statement_timestamp(), finished_at = NULL
         WHERE j.id = keyed.id AND j.status = 'failed';
        IF FOUND THEN
            redriven_ids := redriven_ids || keyed.id;
            redriven_queues := redriven_queues || keyed.queue;
        END IF;
    END LOOP;
    PERFORM pg_notify(jobq.channel(q.queue), '') FROM (SELECT DISTINCT unnest(redriven_queues)) AS q(queue);
    RETURN QUERY SELECT r.id FROM unnest(redriven_ids) AS r(id) ORDER BY r.id;
END
$$;
COMMENT ON FUNCTION jobq.retry_failed(text, bigint[]) IS
    'Dead-letter redrive: failed jobs (optionally of one queue, optionally only these ids) back to queued with attempts reset. Returns their ids; a job whose unique key a newer job holds stays failed.';
REVOKE ALL ON FUNCTION jobq.retry_failed(text, bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.retry_failed(text, bigint[]) TO @extowner@;

/*
 * jobq._delete_rows(ids): how many jobs of ids it deleted, with their side
 * rows: the unique keys they hold, their results, deadlines and
 * concurrency keys, their rows of jobq.job_deps (as the child) and
 * jobq.job_waits, and (0.11.0) their steps, waits for a signal and
 * progress.  One statement; the work of jobq._delete_jobs, which
 * calls it and says what it locks and raises.
 */
CREATE FUNCTION jobq._delete_rows(ids bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    deleted bigint;
BEGIN
    WITH gone AS (
        DELETE FROM jobq.jobs AS j WHERE j.id = ANY (_delete_rows.ids)
        RETURNING j.id, j.control
    ), keys AS (
        -- the keys these jobs held: free now
        DELETE FROM jobq.unique_keys AS k USING gone AS g WHERE k.job_id = g.id
    ), results AS (
        DELETE FROM jobq.results AS r USING gone AS g WHERE r.id = g.id
    ), deadlines AS (
        DELETE FROM jobq.deadlines AS d USING gone AS g WHERE d.id = g.id
    ), concurrency_keys AS (
        DELETE FROM jobq.concurrency_keys AS k USING gone AS g WHERE k.id = g.id AND g.control & 16 <> 0
    ), parents AS (
        DELETE FROM jobq.job_deps AS d USING gone AS g WHERE d.child = g.id AND g.control & 32 <> 0
    ), waits AS (
        DELETE FROM jobq.job_waits AS w USING gone AS g WHERE w.id = g.id AND g.control & 32 <> 0
    ), steps AS (
        DELETE FROM jobq.job_steps AS s USING gone AS g WHERE s.id = g.id AND g.control & 64 <> 0
    ), signal_waits AS (
        DELETE FROM jobq.signal_waits AS w USING gone AS g WHERE w.id = g.id AND g.control & 64 <> 0
    ), progress AS (
        DELETE FROM jobq.job_progress AS p USING gone AS g WHERE p.id = g.id
    )
    SELECT count(*) INTO deleted FROM gone;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION jobq._delete_rows(bigint[]) IS
    'Internal: delete these jobs and their side rows (keys, results, deadlines, concurrency keys, dependency rows, steps, waits for a signal, progress) in one statement; returns how many jobs.';
REVOKE ALL ON FUNCTION jobq._delete_rows(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._delete_rows(bigint[]) TO @extowner@;

/*
 * jobq._delete_jobs(ids): how many of the jobs ids it deleted, with their
 * side rows (jobq._delete_rows), keeping those that a foreign key of a
 * user's table still references.  It deletes what it is given, whatever
 * the status, and skips an id whose job is gone: the caller chooses
 * finished jobs and locks them first (SELECT ... FOR UPDATE SKIP LOCKED,
 * in the caller's transaction; jobq.purge and retention in jobq.tick do),
 * so that no claim or settlement is under way on them and two deleters
 * never wait on each other.
 *
 * A foreign key to jobq.jobs(id) ON DELETE NO ACTION or RESTRICT (or a
 * cascade that ends at one) keeps the job it references, and its side
 * rows; ON DELETE CASCADE and SET NULL act as declared.  A DEFERRABLE one
 * is checked here, at once, not at the commit (SET CONSTRAINTS ...
 * IMMEDIATE for the call, then back to DEFERRED if it was initially
 * deferred), so that one child row never fails the caller's commit.
 *
 * The cost: while jobq.jobs has no trigger (a foreign key to it adds two),
 * one statement and no subtransaction, as jobq.purge was before 0.10.0.
 * With triggers, that statement runs in a subtransaction, which keeps one
 * subxid in the caller's transaction when it succeeds; when it fails with
 * 23503 (foreign_key_violation), the ids are bisected: each half is
 * deleted in a subtransaction of its own, and a half that fails is halved
 * again, down to the single jobs that are referenced.  A rolled-back
 * subtransaction keeps no subxid (PostgreSQL drops it from the backend's
 * cache of 64), so only the halves deleted count: about k log2(n/k) for k
 * referenced jobs among n.  Callers pass a batch (at most a few thousand
 * ids), not one id at a time.
 *
 * Locks: the jobs it deletes (the caller's already) and their side rows.
 * Raises what a user's trigger or constraint raises, but for 23503.
 */
CREATE FUNCTION jobq._delete_jobs(ids bigint[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    todo     bigint[];
    los      integer[];  -- the stack of slices of todo still to delete: todo[los[i]:his[i]]
    his      integer[];
    lo       integer;
    hi       integer;
    deleted  bigint := 0::bigint;
    deferred text[];     -- the deferrable foreign keys to jobq.jobs, made immediate for the call
    later    text[];     -- those of them initially deferred
BEGIN
    IF NOT (SELECT c.relhastriggers FROM pg_class AS c WHERE c.oid = 'jobq.jobs'::regclass) THEN
        RETURN jobq._delete_rows(_delete_jobs.ids);  -- no foreign key can reference a job
    END IF;

    SELECT coalesce(array_agg(format('%I.%I', n.nspname, c.conname)), '{}'),
           coalesce(array_agg(format('%I.%I', n.nspname, c.conname)) FILTER (WHERE c.condeferred), '{}')
      INTO deferred, later
      FROM pg_constraint AS c
      JOIN pg_namespace AS n ON n.oid = c.connamespace
     WHERE c.confrelid = 'jobq.jobs'::regclass AND c.contype = 'f' AND c.condeferrable;
    IF cardinality(deferred) > 0 THEN
        EXECUTE 'SET CONSTRAINTS ' || array_to_string(deferred, ', ') || ' IMMEDIATE';
    END IF;

    todo := ARRAY(SELECT DISTINCT i FROM unnest(_delete_jobs.ids) AS i WHERE i IS NOT NULL ORDER BY i);
    los := ARRAY[1];
    his := ARRAY[cardinality(todo)];
    WHILE cardinality(los) > 0 LOOP
        lo := los[cardinality(los)];
        hi := his[cardinality(his)];
        los := los[1:cardinality(los) - 1];
        his := his[1:cardinality(his) - 1];
        CONTINUE WHEN lo > hi;
        BEGIN
            deleted := deleted + jobq._delete_rows(todo[lo:hi]);
        EXCEPTION WHEN foreign_key_violation THEN
            IF lo < hi THEN  -- halve it: the left half first
                los := los || ARRAY[(lo + hi) / 2 + 1, lo];
                his := his || ARRAY[hi, (lo + hi) / 2];
            END IF;  -- else a single job that a foreign key references: kept
        END;
    END LOOP;

    IF cardinality(later) > 0 THEN
        EXECUTE 'SET CONSTRAINTS ' || array_to_string(later, ', ') || ' DEFERRED';
    END IF;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION jobq._delete_jobs(bigint[]) IS
    'Internal: delete these jobs (locked by the caller) and their side rows, keeping those a foreign key of a user''s table references; returns how many it deleted.';
REVOKE ALL ON FUNCTION jobq._delete_jobs(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._delete_jobs(bigint[]) TO @extowner@;

/*
 * jobq.purge(older_than, max_rows, include_failed): the number of jobs
 * deleted: done and cancelled jobs (and failed ones too when
 * include_failed) that finished more than older_than ago, at most max_rows
 * of them, so that a large backlog can be purged in short transactions,
 * with their results, deadlines, keys and dependency rows
 * (jobq._delete_jobs).  A job that a foreign key of a user's table still
 * references (ON DELETE NO ACTION or RESTRICT) is kept, with its side
 * rows, and not counted; the others are deleted (0.10.0: before, one such
 * job failed the whole call).  Locks the jobs it deletes, FOR UPDATE SKIP
 * LOCKED: skips rows locked by others.  Raises 22004 (NULL argument),
 * 22023 (older_than negative, max_rows outside 1..1000000).
 */
CREATE FUNCTION jobq.purge(older_than interval, max_rows integer DEFAULT 100000,
                           include_failed boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF purge.older_than IS NULL THEN
        RAISE EXCEPTION 'older_than must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF purge.older_than < interval '0' THEN
        RAISE EXCEPTION 'older_than must not be negative, got %', purge.older_than
            USING ERRCODE = '22023';
    END IF;
    IF purge.max_rows IS NULL THEN
        RAISE EXCEPTION 'max_rows must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF purge.max_rows < 1 OR purge.max_rows > 1000000 THEN
        RAISE EXCEPTION 'max_rows must be between 1 and 1000000, got %', purge.max_rows
            USING ERRCODE = '22023';
    END IF;
    IF purge.include_failed IS NULL THEN
        RAISE EXCEPTION 'include_failed must not be NULL' USING ERRCODE = '22004';
    END IF;

    RETURN jobq._delete_jobs(ARRAY(
        SELECT j.id
          FROM jobq.jobs AS j
         WHERE (j.status = ANY (ARRAY['done', 'cancelled']) OR (purge.include_failed AND j.status = 'failed'))
           AND j.finished_at < statement_timestamp() - purge.older_than
         LIMIT purge.max_rows
           FOR UPDATE SKIP LOCKED));
END
$$;
COMMENT ON FUNCTION jobq.purge(interval, integer, boolean) IS
    'Delete done and cancelled jobs (and failed ones with include_failed) finished more than older_than ago, at most max_rows, keeping those a foreign key of a user''s table references; returns how many it deleted.';
REVOKE ALL ON FUNCTION jobq.purge(interval, integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.purge(interval, integer, boolean) TO @extowner@;

/*
 * jobq.stats(): one row per queue: how many jobs are queued (of which
 * runnable now), running, done and failed, how long the oldest runnable
 * queued job has been waiting, how many jobs are cancelled, and how many
 * wait for parent jobs (waiting).  Reads the whole table; takes no row
 * locks.
 */
CREATE FUNCTION jobq.stats()
RETURNS TABLE (queue text, queued bigint, runnable bigint, running bigint, done bigint,
               failed bigint, oldest_queued_age interval, cancelled bigint, waiting bigint)
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
                                                         AND j.run_at <= statement_timestamp()),
           count(*) FILTER (WHERE j.status = 'cancelled'),
           count(*) FILTER (WHERE j.status = 'waiting')
      FROM jobq.jobs AS j
     GROUP BY j.queue
     ORDER BY j.queue
$$;
COMMENT ON FUNCTION jobq.stats() IS
    'Per queue: counts of queued (and runnable now), running, done and failed jobs, the wait of the oldest runnable job, and the counts of cancelled and waiting jobs.';
REVOKE ALL ON FUNCTION jobq.stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.stats() TO @extowner@;

-- The xid clock (0.10.0): when transaction ids were handed out, one mark
-- every 10 seconds or so, kept for a day.  The age of the oldest open
-- transaction is read from pg_stat_activity.xact_start, which PostgreSQL
-- shows for other roles' sessions only to superusers and members of
-- pg_read_all_stats; an extension installed by a database owner who is
-- neither saw none of them.  Every role sees every session's backend_xid
-- and backend_xmin, though: dated by this clock, they give the age of a
-- hidden transaction to within the interval between marks.  Unlogged and
-- never dumped: a crash forgets it, and it fills again within seconds.
CREATE UNLOGGED TABLE jobq._xid_clock (
    at  timestamptz NOT NULL,
    xid xid         NOT NULL,
    CONSTRAINT _xid_clock_pkey PRIMARY KEY (at)
);
COMMENT ON TABLE jobq._xid_clock IS
    'Internal: when transaction ids were handed out (a mark every 10 seconds, kept a day), to date the transactions of sessions whose start pg_stat_activity hides.';
COMMENT ON COLUMN jobq._xid_clock.at IS 'When the mark was made.';
COMMENT ON COLUMN jobq._xid_clock.xid IS 'The transaction id handed out then (the marking transaction''s own).';
REVOKE ALL ON TABLE jobq._xid_clock FROM PUBLIC;

/*
 * jobq._mark_xid_clock(): returns nothing.  Adds a mark to jobq._xid_clock,
 * its own transaction id and the time, unless a mark is less than 10
 * seconds old, or the transaction already had an id (handed out earlier,
 * so at an unknown time), or the server is read-only; deletes the marks
 * older than a day.  jobq.reap calls it.  Locks nothing of the queue.
 */
CREATE FUNCTION jobq._mark_xid_clock()
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_current_xact_id_if_assigned() IS NOT NULL OR pg_is_in_recovery()
       OR EXISTS (SELECT FROM jobq._xid_clock AS c WHERE c.at > clock_timestamp() - interval '10 seconds') THEN
        RETURN;
    END IF;
    INSERT INTO jobq._xid_clock (at, xid) VALUES (clock_timestamp(), xid(pg_current_xact_id()))
    ON CONFLICT ON CONSTRAINT _xid_clock_pkey DO NOTHING;
    DELETE FROM jobq._xid_clock AS c WHERE c.at < clock_timestamp() - interval '1 day';
END
$$;
COMMENT ON FUNCTION jobq._mark_xid_clock() IS
    'Internal: mark the xid clock (jobq._xid_clock) with this transaction''s id and the time, at most every 10 seconds.';
REVOKE ALL ON FUNCTION jobq._mark_xid_clock() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._mark_xid_clock() TO @extowner@;

/*
 * jobq._oldest_transaction_age(): how long the oldest transaction of
 * another session of this database (or of none: a standby's feedback) has
 * been open, never negative; NULL when no such session holds a
 * transaction open.  Sessions of other databases do not hold back the
 * vacuum of jobq.jobs, and are left out.  Counted: the sessions whose
 * xact_start pg_stat_activity shows to the extension's owner (all of them
 * for a superuser or a member of pg_read_all_stats), from it; the others,
 * by their transaction id or snapshot (backend_xid, backend_xmin, which
 * every role sees), dated by the latest mark of jobq._xid_clock made
 * before it (to within the 10 seconds between marks; a transaction older
 * than every mark counts from the oldest); and prepared transactions
 * (pg_prepared_xacts), from their PREPARE.  Of the hidden sessions, only
 * those that hold back vacuum count: a read-only transaction between two
 * statements at READ COMMITTED holds neither an id nor a snapshot.  Takes
 * no locks.
 */
CREATE FUNCTION jobq._oldest_transaction_age()
RETURNS interval
LANGUAGE sql VOLATILE
-- SECURITY DEFINER: the view jobq.health and jobq.metrics report what the
-- extension's owner sees of pg_stat_activity, whoever reads them, and read
-- the xid clock, on which no level is granted anything.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH others AS (
        -- the sessions of this database, and those of none (a standby's feedback holds every database back)
        SELECT a.xact_start, greatest(age(a.backend_xid), age(a.backend_xmin)) AS xids
          FROM pg_stat_activity AS a
         WHERE a.pid <> pg_backend_pid()
           AND (a.datid IS NULL OR a.datname = current_database())
    ), hidden AS (
        -- the oldest transaction id or snapshot of a session whose start is hidden
        SELECT max(o.xids) AS xids FROM others AS o WHERE o.xact_start IS NULL
    ), started (at) AS (
        SELECT min(o.xact_start) FROM others AS o
        UNION ALL
        SELECT coalesce(max(c.at) FILTER (WHERE age(c.xid) >= h.xids), min(c.at))
          FROM hidden AS h, jobq._xid_clock AS c
         WHERE h.xids IS NOT NULL
        UNION ALL
        SELECT min(p.prepared) FROM pg_prepared_xacts AS p WHERE p.database = current_database()
    )
    SELECT greatest(clock_timestamp() - min(s.at), interval '0') FROM started AS s
$$;
COMMENT ON FUNCTION jobq._oldest_transaction_age() IS
    'Internal: the age of the oldest open transaction of another session (never negative), also where pg_stat_activity hides its start from the extension''s owner.';
REVOKE ALL ON FUNCTION jobq._oldest_transaction_age() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._oldest_transaction_age() TO @extowner@;

-- Written fully qualified (OPERATOR(pg_catalog.x), pg_catalog.f): a view is
-- parsed once, here, with the installing session's search_path.
CREATE VIEW jobq.health AS
    SELECT (SELECT pg_catalog.count(*) FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'queued') AS queued,
           (SELECT pg_catalog.count(*) FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'queued'
               AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()) AS runnable,
           (SELECT pg_catalog.count(*) FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'running') AS running,
           (SELECT pg_catalog.count(*) FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'failed') AS failed,
           (SELECT pg_catalog.statement_timestamp() OPERATOR(pg_catalog.-) pg_catalog.min(j.run_at)
              FROM jobq.jobs AS j
             WHERE j.status OPERATOR(pg_catalog.=) 'queued'
               AND j.run_at OPERATOR(pg_catalog.<=) pg_catalog.statement_timestamp()) AS oldest_runnable_age,
           s.n_live_tup AS live_tuples,
           s.n_dead_tup AS dead_tuples,
           pg_catalog.pg_total_relation_size('jobq.jobs'::pg_catalog.regclass) AS total_bytes,
           GREATEST(s.last_autovacuum, s.last_vacuum) AS last_vacuum,
           GREATEST(s.last_autoanalyze, s.last_analyze) AS last_analyze,
           jobq._oldest_transaction_age() AS oldest_transaction_age,
           (SELECT pg_catalog.max(pg_catalog.age(a.backend_xmin))
              FROM pg_catalog.pg_stat_activity AS a
             WHERE a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()) AS oldest_xmin_age
      FROM pg_catalog.pg_stat_user_tables AS s
     WHERE s.relid OPERATOR(pg_catalog.=) 'jobq.jobs'::pg_catalog.regclass;
COMMENT ON VIEW jobq.health IS
    'One row: queue depth, oldest runnable job, dead tuples, table size, last vacuum and analyze, and the oldest open transaction (it holds vacuum back).';
COMMENT ON COLUMN jobq.health.queued IS 'Queued jobs, runnable now or later.';
COMMENT ON COLUMN jobq.health.runnable IS 'Queued jobs whose run_at has come.';
COMMENT ON COLUMN jobq.health.running IS 'Jobs held under a lease.';
COMMENT ON COLUMN jobq.health.failed IS 'The dead-letter queue.';
COMMENT ON COLUMN jobq.health.oldest_runnable_age IS 'How long the oldest runnable job has waited.';
COMMENT ON COLUMN jobq.health.live_tuples IS 'Estimated live rows of jobq.jobs (pg_stat_user_tables).';
COMMENT ON COLUMN jobq.health.dead_tuples IS 'Estimated dead rows not yet vacuumed: a steady climb means vacuum is held back.';
COMMENT ON COLUMN jobq.health.total_bytes IS 'jobq.jobs with its indexes and TOAST, in bytes.';
COMMENT ON COLUMN jobq.health.last_vacuum IS 'The last vacuum of jobq.jobs, manual or automatic.';
COMMENT ON COLUMN jobq.health.last_analyze IS 'The last analyze of jobq.jobs, manual or automatic.';
COMMENT ON COLUMN jobq.health.oldest_transaction_age IS 'Age of the oldest open transaction of another session, of any role (never negative; NULL: none); vacuum cannot clear rows it may still see.';
COMMENT ON COLUMN jobq.health.oldest_xmin_age IS 'In transactions: how far the oldest snapshot of another session holds back vacuum.';
REVOKE ALL ON TABLE jobq.health FROM PUBLIC;
GRANT SELECT ON TABLE jobq.health TO @extowner@;

/*
 * jobq.plain_install: the version of a plain-SQL install (one made without
 * the extension's files, by `pgjobq sql install | psql`, and upgraded by
 * `pgjobq sql upgrade | psql`, on a managed PostgreSQL), in its one row.
 * CREATE EXTENSION leaves it empty: pg_extension records that version.  A
 * plain install of a version older than 0.8.0 (made for tests of the upgrade
 * path) gets this table from the generator, with this very definition, so
 * an upgraded plain install ends with the catalog of a fresh one.
 */
CREATE TABLE jobq.plain_install (
    version  text NOT NULL,
    only_row boolean NOT NULL DEFAULT true,
    CONSTRAINT plain_install_pkey PRIMARY KEY (only_row),
    CONSTRAINT plain_install_only_row_check CHECK (only_row)
);
COMMENT ON TABLE jobq.plain_install IS
    'The version of a plain-SQL install (pgjobq sql install), in one row; empty for CREATE EXTENSION, which records it in pg_extension.';
REVOKE ALL ON TABLE jobq.plain_install FROM PUBLIC;

/*
 * jobq.version(): the version of pgjobq installed in this database: its
 * pg_extension row, else the row of a plain-SQL install (jobq.plain_install),
 * for clients that check what they talk to.
 */
CREATE FUNCTION jobq.version()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
-- SECURITY DEFINER: every access level may ask the version, and none is
-- granted jobq.plain_install; the function reads that one value and nothing else.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce((SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pgjobq'),
                    (SELECT i.version FROM jobq.plain_install AS i))
$$;
COMMENT ON FUNCTION jobq.version() IS
    'The installed version of pgjobq (for example 0.8.0): as in pg_extension, or, for a plain-SQL install, as jobq.plain_install records it.';
REVOKE ALL ON FUNCTION jobq.version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.version() TO @extowner@;
