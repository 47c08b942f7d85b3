/* sql/updates/pgjobq--0.4.0--0.5.0.sql: pgjobq 0.4.0 -> 0.5.0.
 * A hot path faster than the naive SQL it replaces: a lean row (no CHECK
 * constraints: the functions check each value once), checks inline in the
 * hot functions, plans the plan cache keeps, a reap index that heartbeats do
 * not touch, and wake-ups only while a worker waits (jobq.wait) instead of
 * the NOTIFY trigger.  Written by hand, once; it never changes after 0.5.0
 * is released.  The definitions are copied from sql/src/ as 0.5.0 has them. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.5.0'" to load this file. \quit

----------------------------------------------------------------------------
-- The lean row: the functions check every value they write, once.
----------------------------------------------------------------------------

ALTER TABLE jobq.jobs
    DROP CONSTRAINT jobs_queue_check,
    DROP CONSTRAINT jobs_status_check,
    DROP CONSTRAINT jobs_payload_check,
    DROP CONSTRAINT jobs_attempts_check,
    DROP CONSTRAINT jobs_max_attempts_check,
    DROP CONSTRAINT jobs_running_lock_check;

COMMENT ON COLUMN jobq.jobs.queue IS 'Queue name: 1 to 58 characters of a-z, 0-9 and _ (checked by the functions). Workers listen on channel jobq_<queue>.';

-- The reap index keyed by a column heartbeats do not change.
DROP INDEX jobq.jobs_reap_idx;
CREATE INDEX jobs_reap_idx ON jobq.jobs (queue)
    WHERE status OPERATOR(pg_catalog.=) 'running';
COMMENT ON INDEX jobq.jobs_reap_idx IS 'Serves jobq.reap: the running jobs, by queue (a key heartbeats do not change).';

----------------------------------------------------------------------------
-- Wake-ups while a worker waits, instead of the NOTIFY trigger.
----------------------------------------------------------------------------

DROP TRIGGER jobs_notify_trg ON jobq.jobs;
DROP FUNCTION jobq._notify_inserted();

CREATE UNLOGGED TABLE jobq._waiters (
    queue  text        NOT NULL,
    worker text        NOT NULL,
    until  timestamptz NOT NULL
);
COMMENT ON TABLE jobq._waiters IS
    'Internal: workers waiting for a notification on a queue (jobq.wait), until when. Enqueues notify only while one waits.';
REVOKE ALL ON TABLE jobq._waiters FROM PUBLIC;

CREATE FUNCTION jobq.wait(queue text, worker text, up_to interval,
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
    PERFORM jobq._check_queue(wait.queue);
    IF wait.worker IS NULL THEN
        RAISE EXCEPTION 'worker must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF length(wait.worker) < 1 OR length(wait.worker) > 200 THEN
        RAISE EXCEPTION 'worker must be 1 to 200 characters, got %', length(wait.worker)
            USING ERRCODE = '22023';
    END IF;
    IF wait.up_to IS NULL THEN
        RAISE EXCEPTION 'up_to must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF wait.up_to <= interval '0' OR wait.up_to > interval '1 day' THEN
        RAISE EXCEPTION 'up_to must be a positive interval of at most 1 day, got %', wait.up_to
            USING ERRCODE = '22023';
    END IF;

    registered := pg_try_advisory_xact_lock(hashtext('jobq._waiters'), hashtext(wait.queue));
    IF registered THEN
        UPDATE jobq._waiters AS w
           SET until = statement_timestamp() + wait.up_to
         WHERE w.queue = wait.queue AND w.worker = wait.worker;
        IF NOT FOUND THEN
            INSERT INTO jobq._waiters (queue, worker, until)
            VALUES (wait.queue, wait.worker, statement_timestamp() + wait.up_to);
        END IF;
        DELETE FROM jobq._waiters AS w
         WHERE w.queue = wait.queue AND w.until < statement_timestamp() - interval '1 minute';
    END IF;

    -- the earliest future run_at: per priority, the claim index is in run_at
    -- order, so one probe per priority present (highest first) finds it
    SELECT j.priority INTO level
      FROM jobq.jobs AS j
     WHERE j.queue = wait.queue AND j.status = 'queued'
     ORDER BY j.priority DESC
     LIMIT 1;
    WHILE level IS NOT NULL LOOP
        next_run_at := least(next_run_at,
                             (SELECT j.run_at
                                FROM jobq.jobs AS j
                               WHERE j.queue = wait.queue AND j.status = 'queued' AND j.priority = level
                                 AND j.run_at > statement_timestamp()
                               ORDER BY j.priority DESC, j.run_at
                               LIMIT 1));
        level := (SELECT j.priority
                    FROM jobq.jobs AS j
                   WHERE j.queue = wait.queue AND j.status = 'queued' AND j.priority < level
                   ORDER BY j.priority DESC
                   LIMIT 1);
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq.wait(text, text, interval) IS
    'Register a worker as waiting on a queue for up_to, so enqueues notify jobq_<queue>; returns whether it registered (else claim again shortly) and the earliest future run_at of the queue.';
REVOKE ALL ON FUNCTION jobq.wait(text, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.wait(text, text, interval) TO @extowner@;

-- Roles that could claim (the worker and admin levels, or grants made by
-- hand) may wait.  As in the 0.4.0 step: when the upgrading role may (a
-- superuser), the initial privileges are put back as a fresh install has
-- them, so that a dump keeps the grants; otherwise a warning says what to
-- grant again after restoring a dump.
DO $$
DECLARE
    initial aclitem[];
    grantee text;
    kept    text[] := '{}';  -- grantees whose grants a dump would leave out
BEGIN
    SELECT i.initprivs INTO initial
      FROM pg_catalog.pg_init_privs AS i
     WHERE i.objoid OPERATOR(pg_catalog.=) 'jobq.wait(text, text, interval)'::pg_catalog.regprocedure
       AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass;
    FOR grantee IN
        SELECT a.grantee::pg_catalog.regrole::text
          FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
         WHERE p.oid OPERATOR(pg_catalog.=) 'jobq.claim(text, integer, text, interval)'::pg_catalog.regprocedure
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
           AND a.grantee OPERATOR(pg_catalog.<>) 0
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION jobq.wait(text, text, interval) TO %s', grantee);
        kept := kept OPERATOR(pg_catalog.||) grantee;
    END LOOP;
    IF pg_catalog.has_table_privilege('pg_catalog.pg_init_privs', 'UPDATE') THEN
        UPDATE pg_catalog.pg_init_privs AS i
           SET initprivs = initial
         WHERE i.objoid OPERATOR(pg_catalog.=) 'jobq.wait(text, text, interval)'::pg_catalog.regprocedure
           AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass;
        kept := '{}';
    END IF;
    IF pg_catalog.cardinality(kept) OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING 'pgjobq 0.5.0 granted % the new jobq.wait', pg_catalog.array_to_string(kept, ', ')
            USING DETAIL = 'An upgrade not run by a superuser records its grants as initial privileges, which '
                           'pg_dump leaves out.',
                  HINT = 'After restoring a dump of this database, run jobq.grant_worker (or grant_admin) '
                         'again for these roles.';
    END IF;
END
$$;

----------------------------------------------------------------------------
-- The functions, restated: checks inline, plans the plan cache keeps.
----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.channel(queue text)
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
    'The LISTEN channel of a queue: jobq_<queue>. Enqueues notify it (empty payload) while a worker waits (jobq.wait).';

CREATE OR REPLACE FUNCTION jobq.enqueue(
    queue        text,
    payload      jsonb,
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT 3)
RETURNS bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers insert jobs without INSERT on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
    locked boolean;
BEGIN
    IF enqueue.queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF enqueue.queue !~ '^[a-z0-9_]{1,58}$' THEN
        RAISE EXCEPTION 'queue must be 1 to 58 characters of a-z, 0-9 and _, got %',
                        quote_literal(left(enqueue.queue, 80))
            USING ERRCODE = '22023',
                  HINT = 'Queue names become notification channels jobq_<queue>.';
    END IF;
    -- a payload read from a table may arrive compressed, and the limit is on
    -- its full size: one that could be compressed (over 1,000 bytes as it
    -- is) is measured by jobq._check_payload, which sees it whole
    IF enqueue.payload IS NULL OR jsonb_typeof(enqueue.payload) <> 'object'
       OR pg_column_size(enqueue.payload) > 1000 THEN
        PERFORM jobq._check_payload(enqueue.payload, 'payload');  -- raises if it is bad
    END IF;
    IF enqueue.priority IS NULL OR enqueue.priority NOT BETWEEN -32768 AND 32767
       OR enqueue.run_at IS NULL OR NOT isfinite(enqueue.run_at)
       OR enqueue.run_at NOT BETWEEN now() - interval '10 years' AND now() + interval '10 years'
       OR enqueue.max_attempts IS NULL OR enqueue.max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM jobq._check_options(enqueue.priority, enqueue.run_at, enqueue.max_attempts);  -- raises
    END IF;

    INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts)
    VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts)
    RETURNING jobq.jobs.id INTO new_id;

    -- the wake-up (30_notify.sql): the lock first, then, in a statement of
    -- its own and so with a snapshot taken after it, the look at the waiters
    locked := pg_try_advisory_xact_lock_shared(hashtext('jobq._waiters'), hashtext(enqueue.queue));
    IF NOT locked OR current_setting('transaction_isolation') <> 'read committed'
       OR EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now()) THEN
        PERFORM pg_notify('jobq_' || enqueue.queue, '');
    END IF;
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer) IS
    'Enqueue one job; returns its id. Options: priority (higher first, default 0), run_at (default now), max_attempts (default 3). Notifies jobq_<queue> when a worker waits.';

CREATE OR REPLACE FUNCTION jobq.enqueue_many(
    queue        text,
    payloads     jsonb[],
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT 3)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers insert jobs without INSERT on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad_position bigint;
    bad_payload  jsonb;
    new_ids      bigint[];
    locked       boolean;
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
    -- name the element by the array's own subscript, which need not start at 1
    SELECT p.position + array_lower(enqueue_many.payloads, 1) - 1, p.payload INTO bad_position, bad_payload
      FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, position)
     WHERE p.payload IS NULL
        OR jsonb_typeof(p.payload) <> 'object'
        OR pg_column_size(p.payload) > 1048576
     ORDER BY p.position
     LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_payload(bad_payload, format('payloads[%s]', bad_position));  -- raises
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

    -- the wake-up, as in jobq.enqueue
    locked := pg_try_advisory_xact_lock_shared(hashtext('jobq._waiters'), hashtext(enqueue_many.queue));
    IF cardinality(new_ids) > 0
       AND (NOT locked OR current_setting('transaction_isolation') <> 'read committed'
            OR EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue_many.queue AND w.until > now())) THEN
        PERFORM pg_notify('jobq_' || enqueue_many.queue, '');
    END IF;
    RETURN new_ids;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer) IS
    'Enqueue many jobs in one statement; returns their ids in the order of payloads. Same options as jobq.enqueue.';

CREATE OR REPLACE FUNCTION jobq.claim(queue text, n integer, worker text,
                           lease_timeout interval DEFAULT '60 seconds')
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 10
-- SECURITY DEFINER: workers claim without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hint          jobq._claim_hints;
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
    IF claim.lease_timeout IS NULL THEN
        RAISE EXCEPTION 'lease_timeout must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF claim.lease_timeout <= interval '0' OR claim.lease_timeout > interval '1 day' THEN
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
               lease_expires_at = statement_timestamp() + claim.lease_timeout,
               attempts         = j.attempts + 1,
               lease            = j.lease + 1
         WHERE j.id = ANY ((SELECT picked)::bigint[])
        RETURNING j.*
    )
    SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;
COMMENT ON FUNCTION jobq.claim(text, integer, text, interval) IS
    'Claim up to n runnable jobs of a queue for worker (FOR NO KEY UPDATE SKIP LOCKED), each under a new lease that expires lease_timeout (default 60 s) from now; returns them running.';

CREATE OR REPLACE FUNCTION jobq._acknowledge(ids bigint[], leases bigint[])
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE STRICT ROWS 50
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    marked bigint;
BEGIN
    RETURN QUERY
    UPDATE jobq.jobs AS j
       SET status = 'done', finished_at = statement_timestamp()
      -- the arrays through sub-selects, so that the plan cache keeps one
      -- generic plan (see jobq.claim); the pairs drive the join, one probe
      -- of the primary key each (with j.id = ANY (ids) as well, the planner
      -- scanned all the pairs again for every job: n^2 at batch n)
      FROM unnest((SELECT _acknowledge.ids), (SELECT _acknowledge.leases)) AS a(id, lease)
     WHERE j.id = a.id AND j.lease = a.lease
       -- "IS TRUE" keeps the planner from matching jobs_reap_idx's predicate:
       -- by primary key, the cost stays flat while dead entries pile up there
       AND (j.status = 'running') IS TRUE
    RETURNING j.*;
    GET DIAGNOSTICS marked = ROW_COUNT;
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
COMMENT ON FUNCTION jobq._acknowledge(bigint[], bigint[]) IS
    'Internal: mark done the jobs of the (id, lease) pairs still running under that lease; returns them and those already done under it.';

CREATE OR REPLACE FUNCTION jobq.complete(id bigint, lease bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers settle jobs without UPDATE on jobq.jobs; the lease
-- decides which rows they may change.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- a hot path: the check inline, the helper called only to raise
    IF complete.id IS NULL OR complete.lease IS NULL THEN
        PERFORM jobq._check_lease(complete.id, complete.lease);  -- raises, naming the NULL
    END IF;
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

CREATE OR REPLACE FUNCTION jobq.complete_and_claim(ids bigint[], leases bigint[], queue text, n integer, worker text,
                                        lease_timeout interval DEFAULT '60 seconds')
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
    IF cardinality(complete_and_claim.ids) > 0 THEN
        -- should jobq.claim below refuse its arguments, the error undoes these
        -- acknowledgements with the rest of the statement
        RETURN QUERY
        SELECT a.* FROM jobq._acknowledge(complete_and_claim.ids, complete_and_claim.leases) AS a
         ORDER BY a.id;
    END IF;
    RETURN QUERY
    SELECT c.* FROM jobq.claim(complete_and_claim.queue, complete_and_claim.n,
                               complete_and_claim.worker, complete_and_claim.lease_timeout) AS c;
END
$$;
COMMENT ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval) IS
    'Acknowledge finished jobs (returned with status done) and claim up to n more (returned running, under leases of lease_timeout), in one statement.';

CREATE OR REPLACE FUNCTION jobq.heartbeat_many(ids bigint[], leases bigint[])
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
    WITH extended AS (
        UPDATE jobq.jobs AS j
           SET locked_at        = statement_timestamp(),
               lease_expires_at = statement_timestamp() + (j.lease_expires_at - j.locked_at)
          -- the pairs drive the join, as in jobq._acknowledge
          FROM unnest((SELECT heartbeat_many.ids), (SELECT heartbeat_many.leases)) AS a(id, lease)
         WHERE j.id = a.id AND j.lease = a.lease
           AND (j.status = 'running') IS TRUE  -- by primary key, as in jobq._acknowledge
        RETURNING j.id
    )
    SELECT e.id FROM extended AS e ORDER BY e.id;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) IS
    'Extend the leases of many running jobs by their own lengths in one statement; returns the ids extended. Stale pairs are left out.';

----------------------------------------------------------------------------
-- Access levels: the worker level gains wait.
----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq._level_functions(level text)
RETURNS regprocedure[]
LANGUAGE plpgsql STABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- one branch per level, so that planning one never plans the others
    IF _level_functions.level = 'producer' THEN
        RETURN ARRAY[
                'jobq.enqueue(text, jsonb, integer, timestamptz, integer)',
                'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'worker' THEN
        RETURN ARRAY[
                'jobq.claim(text, integer, text, interval)',
                'jobq.complete(bigint, bigint)',
                'jobq.complete_many(bigint[], bigint[])',
                'jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval)',
                'jobq.fail(bigint, text, bigint)',
                'jobq.heartbeat(bigint, bigint)',
                'jobq.heartbeat_many(bigint[], bigint[])',
                'jobq.release(bigint, bigint)',
                'jobq.reap(interval)',
                'jobq.wait(text, text, interval)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'admin' THEN
        -- both levels above, and what operating the queue takes
        RETURN ARRAY(
                SELECT DISTINCT f
                  FROM unnest(jobq._level_functions('producer') || jobq._level_functions('worker')
                              || ARRAY[
                                     'jobq.retry_failed(text, bigint[])',
                                     'jobq.purge(interval, integer, boolean)',
                                     'jobq.stats()',
                                     'jobq._check_payload(jsonb, text)',
                                     'jobq._check_options(integer, timestamptz, integer)',
                                     'jobq._check_lease(bigint, bigint)',
                                     'jobq._raise_not_held(bigint, bigint)',
                                     'jobq._backoff(integer)']::regprocedure[]) AS f
                 ORDER BY f);
    END IF;
    RETURN NULL;
END
$$;
