----------------------------------------------------------------------------
-- Claiming: the one statement that hands runnable jobs to a worker, under a
-- lease of the worker's chosen length
----------------------------------------------------------------------------

-- What every claim of a queue reads first, one row per queue claimed in
-- the last minute or so: the queue's settings, copied from
-- jobq.queue_settings (paused, lease_timeout, timeout, max_attempts, and
-- whether it has limits; NULL for a plain queue) until cached_until, and
-- forward mode's position (priority, run_at, id) until until, if the queue
-- is in forward mode (see jobq.claim).  So a claim reads one small table,
-- which it read anyway for forward mode, instead of probing
-- jobq.queue_settings too (a probe cost 3% of a claim and its completion;
-- a claim of a queue with limits reads them there, after its gate's lock).  Unlogged and never dumped: a
-- cache and a hint, lost without harm in a crash or a restore, after which
-- claims fill it again from jobq.queue_settings.  Shared by every session
-- claiming the queue, so nothing is kept in a session, where a
-- transaction-pooling PgBouncer would hand it to other clients.  Written
-- only under the queue's advisory lock (hashtext('jobq._claim_hints'),
-- hashtext(queue)), so a queue never has two rows, and a change of the
-- queue's settings (the trigger jobq._queue_settings_changed) waits for a
-- claim filling the row and deletes it, so the next claim reads the new
-- settings.  No index: every claim reads it, and a sequential scan of a few
-- rows costs less than opening an index (about 10,000 instructions per
-- claim, bench/instructions.py).
CREATE UNLOGGED TABLE jobq._claim_hints (
    queue         text        NOT NULL,
    priority      integer,
    run_at        timestamptz,
    id            bigint,
    until         timestamptz,
    paused        boolean,
    lease_timeout interval,
    timeout       interval,
    max_attempts  integer,
    cached_until  timestamptz NOT NULL DEFAULT '-infinity',  -- settings not cached
    limited       boolean  -- 0.7.0: the queue has limits (52_limits.sql reads them)
);
COMMENT ON TABLE jobq._claim_hints IS
    'Internal: per queue claimed lately, its settings (from jobq.queue_settings, until cached_until) and where claims in forward mode scan from (priority, run_at, id, until until). A cache and a hint only.';
REVOKE ALL ON TABLE jobq._claim_hints FROM PUBLIC;

/*
 * jobq._claim_settings(queue): the queue's row of jobq._claim_hints, its
 * settings read afresh from jobq.queue_settings, for a claim that found no
 * row or an expired one.  Stores the row (cached for a minute) when it can
 * take the queue's advisory lock at once, the transaction is READ
 * COMMITTED (an older snapshot could store settings already changed) and
 * the claim is the transaction's first statement (so that the lock, which
 * a change of the settings waits for, and which forward mode's position
 * needs too, is held for a moment, not for a long transaction's life);
 * otherwise only returns it, and a claim in a longer transaction reads the
 * settings afresh each time.  Deletes the rows of queues not claimed for a
 * minute.  Locks: the queue's advisory lock (pg_try_advisory_xact_lock,
 * never waiting), held to the end of the transaction.
 */
CREATE FUNCTION jobq._claim_settings(queue text)
RETURNS jobq._claim_hints
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cached jobq._claim_hints;
    stored boolean;
BEGIN
    -- stored only by a claim that is its transaction's first statement (an
    -- autocommit claim: the lock is held for a moment), under READ COMMITTED
    stored := current_setting('transaction_isolation') = 'read committed'
              AND transaction_timestamp() = statement_timestamp()
              AND pg_try_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext(_claim_settings.queue));
    -- read after the lock, with a snapshot of its own
    SELECT _claim_settings.queue, h.priority, h.run_at, h.id, h.until, s.paused, s.lease_timeout, s.timeout,
           s.max_attempts, statement_timestamp() + interval '1 minute',
           s.concurrency IS NOT NULL OR s.key_concurrency IS NOT NULL OR s.rate_limit IS NOT NULL
      INTO cached
      FROM (SELECT) AS one
      LEFT JOIN jobq.queue_settings AS s ON s.queue = _claim_settings.queue
      LEFT JOIN jobq._claim_hints AS h ON h.queue = _claim_settings.queue;
    IF stored THEN
        DELETE FROM jobq._claim_hints AS h
         WHERE h.queue = _claim_settings.queue
            OR (h.cached_until < statement_timestamp() - interval '1 minute'
                AND (h.until IS NULL OR h.until < statement_timestamp()));
        INSERT INTO jobq._claim_hints SELECT (cached).*;
    END IF;
    RETURN cached;
END
$$;
COMMENT ON FUNCTION jobq._claim_settings(text) IS
    'Internal: read a queue''s settings for jobq.claim and cache them in jobq._claim_hints.';
REVOKE ALL ON FUNCTION jobq._claim_settings(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._claim_settings(text) TO @extowner@;

/*
 * jobq._queue_settings_changed(): the trigger of jobq.queue_settings: after
 * a row changes, deletes the queue's cached row of jobq._claim_hints (for a
 * TRUNCATE, every row), waiting first for a claim that is filling it, so
 * that the claims that start after the change's commit read the new
 * settings.  Locks: the queue's advisory lock (pg_advisory_xact_lock,
 * waiting), held to the end of the transaction.
 */
CREATE FUNCTION jobq._queue_settings_changed()
RETURNS trigger
LANGUAGE plpgsql
-- SECURITY DEFINER: an admin changing settings (jobq.configure_queue, pause,
-- resume) has no privileges on jobq._claim_hints; this only deletes the
-- cached rows of the queues changed.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    changed text;
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        DELETE FROM jobq._claim_hints;
        RETURN NULL;
    END IF;
    FOR changed IN
        SELECT DISTINCT q FROM unnest(ARRAY[CASE WHEN TG_OP <> 'INSERT' THEN OLD.queue END,
                                            CASE WHEN TG_OP <> 'DELETE' THEN NEW.queue END]) AS q
         WHERE q IS NOT NULL
    LOOP
        PERFORM pg_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext(changed));
        DELETE FROM jobq._claim_hints AS h WHERE h.queue = changed;
    END LOOP;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._queue_settings_changed() IS
    'Internal: a change of jobq.queue_settings drops the queue''s cached settings, so the next claim reads them anew.';
REVOKE ALL ON FUNCTION jobq._queue_settings_changed() FROM PUBLIC;

CREATE TRIGGER queue_settings_changed_trg
    AFTER INSERT OR UPDATE OR DELETE ON jobq.queue_settings
    FOR EACH ROW EXECUTE FUNCTION jobq._queue_settings_changed();
CREATE TRIGGER queue_settings_truncated_trg
    AFTER TRUNCATE ON jobq.queue_settings
    FOR EACH STATEMENT EXECUTE FUNCTION jobq._queue_settings_changed();
COMMENT ON TRIGGER queue_settings_changed_trg ON jobq.queue_settings IS
    'Drops the queue''s cached settings (jobq._claim_hints) when its row changes.';
COMMENT ON TRIGGER queue_settings_truncated_trg ON jobq.queue_settings IS
    'Drops every queue''s cached settings (jobq._claim_hints) when the table is truncated.';

/*
 * jobq.claim(queue, n, worker, lease_timeout): up to n runnable jobs of
 * queue (rows of jobq.jobs: every column, task the last since 0.9.0, so
 * that readers by position find 0.8.0's where they were), now running
 * under a new lease that expires lease_timeout from now
 * (NULL, the default: the queue's lease_timeout, else 60 seconds;
 * heartbeats extend it by that length again), in claim order (priority
 * desc, run_at, id).  Never claims a job whose run_at is in the future, nor
 * any job of a paused queue.  locked_at is the statement's clock.  Applies
 * the queue's settings (jobq.queue_settings, as cached in
 * jobq._claim_hints): a job's deadline is now + the queue's timeout (NULL:
 * none), which its lease never outlasts (kept in jobq.deadlines for the
 * heartbeats), and a job enqueued without max_attempts gets the queue's,
 * written into its row (without settings it stays NULL, which means 3).
 *
 * Locks: FOR NO KEY UPDATE SKIP LOCKED on the jobs it picks (at most n, from
 * jobs_claim_idx), which it then updates by primary key; never waits on a
 * job's lock.  When it claims a job, deletes worker's registration as a
 * waiter of queue (jobq.wait), if any: that worker is busy.  Raises 22004 (NULL
 * queue, n or worker), 22023 (bad queue name, n outside 1..1000, worker empty
 * or over 200 characters, lease_timeout not positive or over 1 day).
 *
 * Forward mode, for a bloated claim index.  Every claimed job leaves a dead
 * entry at the start of jobs_claim_idx until vacuum clears it: each claim
 * walks all of them before reaching a queued job.  While a long-open
 * transaction anywhere keeps vacuum from clearing them, the claim visits
 * each one's row; otherwise the first scan that finds an entry's row dead
 * to every transaction marks it, and later scans skip it without the visit,
 * but still read every index page they fill (about 200 entries a page)
 * until vacuum runs.  A claim that walked more than 1,000 entries in vain
 * (dead ones, or rows locked by others; each index page read past the
 * first four counting as 100 entries, less the entries it claimed: 0.10.0)
 * puts the queue in forward mode: it records the last job it claimed in
 * jobq._claim_hints, and the claims of that queue that follow, from any
 * session, scan on from there, within that job's priority, instead of from
 * the start.  Forward mode lasts 1 millisecond per entry that scan walked in
 * vain, at least 2 and at most 30 seconds (0.10.0; 2 seconds before), so
 * that the scans from the start cost a small share of the time however far
 * the bloat reaches.  A forward scan that walks more than 1,000 entries in
 * vain moves the position on to its own last job; one that comes up short
 * scans from the start.  When forward mode ends, one claim (the one that
 * takes the queue's lock) scans from the start and decides anew: it puts the
 * queue in forward mode again, or out of it; the others go on forward
 * meanwhile (0.10.0; before, every claim of every session scanned from the
 * start until one of them had decided).  So in forward mode a job that
 * sorts before the position (a higher priority, an earlier run_at) waits up
 * to 2 seconds, or up to 30 while the bloat is deep; without bloat every
 * claim scans from the start, in exact order.  The position is written only
 * under the queue's transaction-level advisory lock taken with
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
    hint          jobq._claim_hints;  -- the queue's settings and forward mode's position
    picked        bigint[];
    walked        bigint;  -- the entries the scan walked in vain (index tuples returned, index pages read)
    pages         bigint;
    forward_until timestamptz;  -- forward mode lasts until then; NULL: the last scan was from the start
    deciding      boolean := false;  -- forward mode ended: this claim scans from the start and decides anew
    claimed_at    timestamptz;  -- a queue with limits: when its claim took the gate (52_limits.sql)
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

    -- The statements below read the arguments through sub-selects, written
    -- (SELECT claim.queue), (SELECT claim.n), (SELECT picked): the planner
    -- cannot see through them, so a plan made for one call's values costs
    -- the same as the generic plan and the plan cache keeps the generic one.
    -- Given the values themselves, it re-planned these statements at every
    -- call (a custom plan looks cheaper for a known queue, n or array), which
    -- was a third of a claim's instructions (bench/instructions.py).
    SELECT h.* INTO hint
      FROM jobq._claim_hints AS h
     WHERE h.queue = claim.queue AND h.cached_until >= statement_timestamp();
    IF NOT FOUND OR hint.paused THEN
        IF NOT FOUND THEN  -- none, or a minute old
            hint := jobq._claim_settings(claim.queue);
        END IF;
        IF hint.paused THEN
            RETURN;  -- a paused queue hands out nothing
        END IF;
    END IF;
    IF hint.limited THEN
        -- a queue with limits (52_limits.sql): its gate decides how many, and when
        SELECT g.picked, g.at INTO picked, claimed_at FROM jobq._claim_gated(claim.queue, claim.n) AS g;
    ELSIF hint.until IS NOT NULL THEN
        -- forward mode; once it has ended, the claim that takes the queue's
        -- lock decides anew (below), and the others go on forward meanwhile
        deciding := hint.until <= statement_timestamp()
                    AND pg_try_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext(claim.queue));
        IF NOT deciding THEN
            forward_until := hint.until;
            walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass);
            pages := pg_stat_get_xact_blocks_fetched('jobq.jobs_claim_idx'::regclass);
            picked := ARRAY(
                SELECT p.id
                  FROM jobq.jobs AS p
                 WHERE p.queue = (SELECT claim.queue)
                   AND p.status = 'queued'
                   AND p.priority = (SELECT hint.priority)
                   AND (p.run_at, p.id) > ((SELECT hint.run_at), (SELECT hint.id))
                   AND p.run_at <= statement_timestamp()
                 ORDER BY p.priority DESC, p.run_at, p.id
                 LIMIT (SELECT claim.n)
                   FOR NO KEY UPDATE SKIP LOCKED);
        END IF;
    END IF;
    IF cardinality(picked) IS DISTINCT FROM claim.n AND NOT hint.limited IS TRUE THEN
        -- from the start of the index
        forward_until := NULL;
        walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass);
        pages := pg_stat_get_xact_blocks_fetched('jobq.jobs_claim_idx'::regclass);
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

    -- the entries the scan walked in vain: those it returned but did not
    -- claim, or those of the pages it read past the first four (a descent and
    -- a leaf) whose entries were skipped unreturned (dead to every
    -- transaction), a page as 100 entries; NULL for a queue with limits: no
    -- forward mode
    walked := greatest(pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass) - walked,
                       (pg_stat_get_xact_blocks_fetched('jobq.jobs_claim_idx'::regclass) - pages - 4) * 100)
              - cardinality(picked);
    IF walked > 1000 AND cardinality(picked) > 0
       AND (deciding OR pg_try_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext(claim.queue))) THEN
        -- forward mode from this claim's last job: on, kept on, or moved on;
        -- a scan from the start sets how long it lasts
        forward_until := coalesce(forward_until, statement_timestamp()
                                  + least(interval '30 seconds',
                                          greatest(interval '2 seconds', walked * interval '1 millisecond')));
        UPDATE jobq._claim_hints AS h
           SET priority = p.priority, run_at = p.run_at, id = p.id, until = forward_until
          FROM jobq.jobs AS p
         WHERE h.queue = claim.queue AND p.id = picked[cardinality(picked)];
        IF NOT FOUND THEN  -- the settings were not cached: a row for the position alone
            INSERT INTO jobq._claim_hints (queue, priority, run_at, id, until)
            SELECT claim.queue, p.priority, p.run_at, p.id, forward_until
              FROM jobq.jobs AS p
             WHERE p.id = picked[cardinality(picked)];
        END IF;
    ELSIF deciding THEN
        -- forward mode ended, and the scan from the start found no bloat: out of it
        UPDATE jobq._claim_hints AS h
           SET priority = NULL, run_at = NULL, id = NULL, until = NULL
         WHERE h.queue = claim.queue;
    END IF;

    -- a worker that got jobs is busy, no longer waiting (30_notify.sql):
    -- enqueues stop notifying for it until it waits again.  One that got
    -- none stays registered: it is about to sleep.
    IF cardinality(picked) > 0 THEN
        DELETE FROM jobq._waiters AS w WHERE w.queue = claim.queue AND w.worker = claim.worker;
    END IF;

    IF hint.paused IS NULL THEN
        -- a plain queue (no settings): the lease asked for, else 60 seconds;
        -- max_attempts stays as enqueued (NULL: 3, which fail and reap apply)
        RETURN QUERY
        WITH claimed AS (
            UPDATE jobq.jobs AS j
               SET status           = 'running',
                   locked_by        = claim.worker,
                   locked_at        = statement_timestamp(),
                   lease_expires_at = statement_timestamp() + coalesce(claim.lease_timeout, interval '60 seconds'),
                   attempts         = j.attempts + 1,
                   lease            = j.lease + 1
             WHERE j.id = ANY ((SELECT picked)::bigint[])
            RETURNING j.*
        )
        SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
        RETURN;
    END IF;

    -- a queue with settings: its lease, its max_attempts, and its timeout,
    -- which the lease never outlasts (jobq.deadlines keeps the deadline for
    -- the heartbeats); a statement of its own, so the plain one keeps its
    -- short plan
    RETURN QUERY
    WITH claimed AS (
        UPDATE jobq.jobs AS j
           SET status           = 'running',
               locked_by        = claim.worker,
               locked_at        = coalesce(claimed_at, statement_timestamp()),
               lease_expires_at = least(coalesce(claimed_at, statement_timestamp())
                                        + coalesce(claim.lease_timeout, hint.lease_timeout, interval '60 seconds'),
                                        coalesce(claimed_at, statement_timestamp()) + hint.timeout),
               max_attempts     = coalesce(j.max_attempts, hint.max_attempts, 3),
               attempts         = j.attempts + 1,
               lease            = j.lease + 1
         WHERE j.id = ANY ((SELECT picked)::bigint[])
        RETURNING j.*
    ), timed AS (
        INSERT INTO jobq.deadlines (id, lease, deadline)
        SELECT c.id, c.lease, coalesce(claimed_at, statement_timestamp()) + hint.timeout
          FROM claimed AS c
         WHERE (SELECT hint.timeout) IS NOT NULL  -- a sub-select, so the plan cache keeps one plan
        ON CONFLICT ON CONSTRAINT deadlines_pkey DO UPDATE SET lease = excluded.lease, deadline = excluded.deadline
    )
    SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;
COMMENT ON FUNCTION jobq.claim(text, integer, text, interval) IS
    'Claim up to n runnable jobs of a queue for worker (FOR NO KEY UPDATE SKIP LOCKED), each under a new lease that expires lease_timeout (default: the queue''s, else 60 s) from now; returns them running. A paused queue gives none.';
REVOKE ALL ON FUNCTION jobq.claim(text, integer, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.claim(text, integer, text, interval) TO @extowner@;

/*
 * jobq.claim_any(queues, n, worker, lease_timeout): up to n runnable jobs
 * of any of queues (rows of jobq.jobs, task last, as jobq.claim returns
 * them), running under new leases, as jobq.claim hands them out
 * (each queue's pause, settings and limits apply), in claim order across
 * the queues: priority desc, run_at, id.  First it looks, without locking,
 * for the n best runnable jobs across the queues that are not paused, then
 * claims from each queue, in name order, as many as it has among those
 * (jobq.claim); when a queue gives fewer (its limits, or jobs another
 * worker took meanwhile), a second pass asks the other queues for the
 * rest.  So it may return fewer than n while more are runnable,
 * never more.  Locks what jobq.claim locks, queue by queue in name order
 * (so two such claims take the gates of queues with limits in the same
 * order).  Raises 22004 (NULL queues), 22023 (queues empty,
 * multidimensional, over 100 names, or holding a NULL or a bad name), and
 * what jobq.claim raises.
 */
CREATE FUNCTION jobq.claim_any(queues text[], n integer, worker text, lease_timeout interval DEFAULT NULL)
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 10
-- SECURITY DEFINER: workers claim without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    names   text[];
    shares  integer[];
    got     jobq.jobs[] := '{}'::jobq.jobs[];
    one     text;
    bad     bigint;
BEGIN
    IF claim_any.queues IS NULL THEN
        RAISE EXCEPTION 'queues must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(claim_any.queues) > 1 THEN
        RAISE EXCEPTION 'queues must be a one-dimensional array, got % dimensions', array_ndims(claim_any.queues)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(claim_any.queues) NOT BETWEEN 1 AND 100 THEN
        RAISE EXCEPTION 'queues must name 1 to 100 queues, got %', cardinality(claim_any.queues)
            USING ERRCODE = '22023';
    END IF;
    SELECT q.position INTO bad
      FROM unnest(claim_any.queues) WITH ORDINALITY AS q(queue, position)
     WHERE q.queue IS NULL OR q.queue !~ '^[a-z0-9_]{1,58}$'
     ORDER BY q.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'queues[%] must be 1 to 58 characters of a-z, 0-9 and _, got %', bad,
                        quote_nullable(left(claim_any.queues[bad], 80))
            USING ERRCODE = '22023';
    END IF;
    names := ARRAY(SELECT DISTINCT q FROM unnest(claim_any.queues) AS q ORDER BY q);
    IF cardinality(names) = 1 THEN
        RETURN QUERY SELECT c.* FROM jobq.claim(names[1], claim_any.n, claim_any.worker, claim_any.lease_timeout) AS c;
        RETURN;
    END IF;
    IF claim_any.n IS NULL OR claim_any.n NOT BETWEEN 1 AND 1000 THEN
        -- jobq.claim names the fault
        RETURN QUERY SELECT c.* FROM jobq.claim(names[1], claim_any.n, claim_any.worker, claim_any.lease_timeout) AS c;
        RETURN;
    END IF;

    -- each queue's share of the n best runnable jobs across them
    shares := ARRAY(
        SELECT count(b.queue) FILTER (WHERE b.queue IS NOT NULL)::integer
          FROM unnest(names) WITH ORDINALITY AS q(queue, position)
          LEFT JOIN (SELECT c.queue
                       FROM unnest(names) AS q(queue)
                      CROSS JOIN LATERAL (
                            SELECT p.queue, p.priority, p.run_at, p.id
                              FROM jobq.jobs AS p
                             WHERE p.queue = q.queue
                               AND p.status = 'queued'
                               AND p.run_at <= statement_timestamp()
                             ORDER BY p.priority DESC, p.run_at, p.id
                             LIMIT claim_any.n) AS c
                      WHERE NOT EXISTS (SELECT FROM jobq.queue_settings AS s WHERE s.queue = q.queue AND s.paused)
                      ORDER BY c.priority DESC, c.run_at, c.id
                      LIMIT claim_any.n) AS b ON b.queue = q.queue
         GROUP BY q.position
         ORDER BY q.position);

    -- first pass: each queue its share; second: what is left, to the queues
    -- that gave all they were asked for
    FOR i IN 1 .. cardinality(names) LOOP
        CONTINUE WHEN shares[i] = 0;
        one := names[i];
        got := got || ARRAY(SELECT c FROM jobq.claim(one, shares[i], claim_any.worker, claim_any.lease_timeout) AS c);
    END LOOP;
    IF cardinality(got) < claim_any.n THEN
        FOR i IN 1 .. cardinality(names) LOOP
            EXIT WHEN cardinality(got) >= claim_any.n;
            one := names[i];
            CONTINUE WHEN shares[i] > 0
                      AND (SELECT count(*) FROM unnest(got) AS g WHERE g.queue = one) < shares[i];
            got := got || ARRAY(SELECT c FROM jobq.claim(one, claim_any.n - cardinality(got), claim_any.worker,
                                                        claim_any.lease_timeout) AS c);
        END LOOP;
    END IF;
    RETURN QUERY SELECT g.* FROM unnest(got) AS g ORDER BY g.priority DESC, g.run_at, g.id;
END
$$;
COMMENT ON FUNCTION jobq.claim_any(text[], integer, text, interval) IS
    'Claim up to n runnable jobs from several queues at once, best first across them (priority desc, run_at, id), each queue''s pause and limits applied; returns them running.';
REVOKE ALL ON FUNCTION jobq.claim_any(text[], integer, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.claim_any(text[], integer, text, interval) TO @extowner@;
