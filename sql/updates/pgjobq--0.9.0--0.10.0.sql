/* sql/updates/pgjobq--0.9.0--0.10.0.sql: pgjobq 0.9.0 -> 0.10.0.
 * Storage that cannot fill the disk: retention per queue and per final
 * state, on by default, enforced by jobq.tick; and the correctness fixes
 * of the 0.8 review.  Written once; it never changes after 0.10.0 is
 * released.  The definitions are copied from sql/src/ as 0.10.0 has them. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.10.0'" to load this file. \quit

----------------------------------------------------------------------------
-- First, the index of running and failed jobs comes to cover the finished
-- jobs too, by finished_at, for retention (section 1 below).  Built under
-- jobq.jobs' ACCESS EXCLUSIVE lock, taken before anything else: dropping
-- the old index needs it, and a step that took a weaker lock first (the
-- SHARE lock of CREATE INDEX) and this one later could deadlock with a
-- worker's statement waiting in between.  Enqueues, claims, settlements and
-- reads of jobq.jobs wait while the index is built (bench/upgrade_lock.py,
-- make bench-upgrade, measures how long on a million finished jobs).
----------------------------------------------------------------------------

LOCK TABLE jobq.jobs IN ACCESS EXCLUSIVE MODE;
DROP INDEX jobq.jobs_running_failed_idx;
CREATE INDEX jobs_status_idx ON jobq.jobs (status, queue, finished_at)
    WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['running', 'done', 'failed', 'cancelled']::text[]);
COMMENT ON INDEX jobq.jobs_status_idx IS
    'Serves jobq.reap (the running jobs), the dead-letter queue (the failed jobs) and retention (the finished jobs by finished_at), by status and queue (keys heartbeats do not change).';

-- Autovacuum of jobq.jobs runs at the server's cost delay (it ran with
-- none): under a long-open transaction it can remove nothing, yet runs
-- again at every visit, and unthrottled it took a core from the workers.
ALTER TABLE jobq.jobs RESET (autovacuum_vacuum_cost_delay);

----------------------------------------------------------------------------
-- Correctness fixes of the review (issue 25, section 5)
----------------------------------------------------------------------------

-- jobq.wait(queue, worker, up_to), the registration of a waiting worker,
-- shared its name with jobq.wait(id, timeout), the wait for a job's
-- outcome: it becomes jobq.register_waiter; the old name stays one version
-- as a deprecated alias that calls it (0.9.0's workers keep registering
-- while the database is upgraded under them)
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
 * jobq.wait(queue, worker, up_to): deprecated since 0.10.0, removed in
 * 0.11.0: the name of jobq.register_waiter until 0.9.0, which it calls
 * (same arguments, same result, same errors).  It shared its name with
 * jobq.wait(id, timeout), which waits for a job's outcome; so that a
 * worker of the previous release keeps working while the database is
 * upgraded, it stays for one version.
 */
CREATE OR REPLACE FUNCTION jobq.wait(queue text, worker text, up_to interval,
                          OUT registered boolean, OUT next_run_at timestamptz)
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT r.registered, r.next_run_at FROM jobq.register_waiter(wait.queue, wait.worker, wait.up_to) AS r
$$;
COMMENT ON FUNCTION jobq.wait(text, text, interval) IS
    'Deprecated since 0.10.0, removed in 0.11.0: use jobq.register_waiter, which this calls.';

COMMENT ON FUNCTION jobq.channel(text) IS
    'The LISTEN channel of a queue: jobq_<queue>. Enqueues notify it (empty payload) while a worker waits (jobq.register_waiter).';
COMMENT ON TABLE jobq._waiters IS
    'Internal: workers waiting for a notification on a queue (jobq.register_waiter), until when. Enqueues notify only while one waits.';

-- on_conflict or unique_scope without a unique key: refused (22023), no
-- longer ignored
/*
 * jobq._raise_keyless(on_conflict, unique_scope, argument): never returns.
 * Called by jobq.enqueue and enqueue_many when on_conflict or unique_scope
 * other than the default came without a key (0.10.0: what happens to a
 * key's holder means nothing without a key); raises 22023 naming the option
 * given and argument, the key argument missing (unique_key, unique_keys).
 */
CREATE FUNCTION jobq._raise_keyless(on_conflict text, unique_scope text, argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION '% needs %, got % without it',
                    CASE WHEN on_conflict <> 'return' THEN 'on_conflict' ELSE 'unique_scope' END, argument,
                    quote_literal(CASE WHEN on_conflict <> 'return' THEN on_conflict ELSE unique_scope END)
        USING ERRCODE = '22023',
              HINT = format('Give %s, or leave on_conflict and unique_scope out: without a key every enqueue inserts a job.',
                            argument);
END
$$;
COMMENT ON FUNCTION jobq._raise_keyless(text, text, text) IS
    'Internal: raises 22023 for on_conflict or unique_scope given without a unique key.';
REVOKE ALL ON FUNCTION jobq._raise_keyless(text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._raise_keyless(text, text, text) TO @extowner@;

/*
 * jobq.enqueue(queue, payload, priority, run_at, max_attempts, unique_key,
 * unique_scope, on_conflict, headers, concurrency_key, depends_on,
 * on_parent_failure, task): the new job's id.  Runs in the
 * caller's transaction: rolled back, the job never existed.  Inserts one
 * row; holds the queue's wake-up advisory lock shared (never waiting for
 * it) until the transaction ends, and notifies jobq_<queue> when a worker
 * waits (see 30_notify.sql).
 *
 * Options: priority (higher first), run_at (not before), max_attempts (NULL:
 * the queue's, else 3), headers (a JSON object the worker receives with the
 * payload; the session's pgjobq.traceparent, when set, is added to it:
 * jobq._traced_headers).  With unique_key, while a job of the queue holding that key is
 * queued or running (or done, with unique_scope => 'until_done', until
 * purged), no second one is created; on_conflict decides what happens
 * instead: return (the holder's id), skip (NULL), raise (JQ004), replace (a
 * queued holder takes this call's payload, priority, run_at, max_attempts,
 * headers and task, and its id is returned; a running holder gives up the key
 * and is asked to stop, as by jobq.cancel, and a new job is inserted; a done holder is
 * returned).  A conflicting enqueue still in flight is waited for.
 * concurrency_key: the key the queue's key_concurrency limits (52_limits.sql).
 * depends_on: parent job ids; the job waits (status 'waiting') until every
 * parent is done, and a parent ending failed or cancelled cancels it, or
 * with on_parent_failure => 'run' counts as ended (45_flow.sql); the parents
 * stay locked until the transaction ends.
 * task (0.9.0; NULL: a plain job): the named job type of the Python client
 * that the worker dispatches on, stored with the job and returned by claim
 * and jobq.job; last, so that every call written for 0.8.0 still means
 * what it did.
 *
 * Raises 22004 (NULL argument), 22023 (bad queue name, payload not a JSON
 * object, priority outside -32768..32767, run_at not within 10 years of
 * now, max_attempts outside 1..1000, a bad task name (jobq._check_task),
 * on_conflict or unique_scope other than the default without a unique_key
 * (0.10.0; before, ignored), and what jobq._check_job_options and
 * jobq._enqueue_linked refuse), 54000
 * (payload or headers over 1 MiB), JQ002 (a parent that does not exist),
 * JQ004, 40001.
 *
 * The hot path of producers: the checks are inline (a helper is called
 * only to raise, or to measure a payload that may be compressed), the work
 * is the wake-up lock and one INSERT, which also looks at jobq._waiters.
 * A task alone keeps to that INSERT: in 0.9.0 an enqueue with a task cost
 * 3.5% more server instructions than a plain one, the check of its name
 * included (bench/instructions.py's machinery).
 */
CREATE OR REPLACE FUNCTION jobq.enqueue(
    queue        text,
    payload      jsonb,
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT NULL,
    unique_key   text        DEFAULT NULL,
    unique_scope text        DEFAULT 'active',
    on_conflict  text        DEFAULT 'return',
    headers      jsonb       DEFAULT NULL,
    concurrency_key   text     DEFAULT NULL,
    depends_on        bigint[] DEFAULT NULL,
    on_parent_failure text     DEFAULT 'cancel',
    task              text     DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers insert jobs without INSERT on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id  bigint;
    locked  boolean;
    waiting boolean;  -- a worker waits for the queue
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
       -- within 3,650 days is within 10 years; outside, _check_options decides on the calendar
       OR NOT (enqueue.run_at - now() BETWEEN interval '-3650 days' AND interval '3650 days')
       OR enqueue.max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM jobq._check_options(enqueue.priority, enqueue.run_at, enqueue.max_attempts);  -- raises if bad
    END IF;
    -- a task, as jobq._check_task checks it (a plain job pays the one test of a NULL)
    IF enqueue.task IS NOT NULL THEN
        IF enqueue.task !~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' OR length(enqueue.task) > 200 THEN
            PERFORM jobq._check_task(enqueue.task);  -- raises
        END IF;
    END IF;

    -- the wake-up (30_notify.sql): the lock first, then, in the INSERT, so
    -- with a snapshot taken after it, the look at the waiters
    locked := pg_try_advisory_xact_lock_shared(hashtext('jobq._waiters'), hashtext(enqueue.queue));
    IF enqueue.unique_key IS NULL AND enqueue.headers IS NULL
       AND enqueue.on_conflict = 'return' AND enqueue.unique_scope = 'active'
       AND enqueue.concurrency_key IS NULL AND enqueue.depends_on IS NULL AND enqueue.on_parent_failure = 'cancel'
       -- no trace context to carry (jobq._traced_headers): unset, or reset to '' after a SET LOCAL
       AND coalesce(current_setting('pgjobq.traceparent', true), '') = '' THEN
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, task)
        VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts,
                enqueue.task)
        RETURNING jobq.jobs.id,
                  EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now())
             INTO new_id, waiting;
    ELSE
        enqueue.headers := jobq._traced_headers(enqueue.headers);
        -- the options of job control, checked by their helper
        PERFORM jobq._check_job_options(enqueue.unique_key, enqueue.unique_scope, enqueue.on_conflict,
                                        enqueue.headers);
        -- 0.10.0: what happens to a key's holder means nothing without a key
        IF enqueue.unique_key IS NULL AND (enqueue.on_conflict <> 'return' OR enqueue.unique_scope <> 'active') THEN
            PERFORM jobq._raise_keyless(enqueue.on_conflict, enqueue.unique_scope, 'unique_key');
        END IF;
        IF enqueue.concurrency_key IS NOT NULL OR enqueue.depends_on IS NOT NULL
           OR enqueue.on_parent_failure IS DISTINCT FROM 'cancel' THEN
            -- a concurrency key or parents (45_flow.sql)
            SELECT l.id, l.runnable INTO new_id, waiting
              FROM jobq._enqueue_linked(enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at,
                                        enqueue.max_attempts, enqueue.unique_key, enqueue.unique_scope,
                                        enqueue.on_conflict, enqueue.headers, enqueue.concurrency_key,
                                        enqueue.depends_on, enqueue.on_parent_failure, enqueue.task) AS l;
            IF NOT waiting THEN
                RETURN new_id;  -- nothing new to run (yet): no wake-up
            END IF;
            waiting := EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now());
        ELSIF enqueue.unique_key IS NULL THEN
            -- the INSERT above with headers (kept apart so that the plain one keeps its plan)
            INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, task)
            VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts,
                    enqueue.headers, enqueue.task)
            RETURNING jobq.jobs.id,
                      EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now())
                 INTO new_id, waiting;
        ELSE
            SELECT u.id, u.changed INTO new_id, waiting
              FROM jobq._enqueue_unique(enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at,
                                        enqueue.max_attempts, enqueue.unique_key, enqueue.unique_scope,
                                        enqueue.on_conflict, enqueue.headers, enqueue.task) AS u;
            IF NOT waiting THEN
                RETURN new_id;  -- nothing new to run: no wake-up
            END IF;
            waiting := EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue.queue AND w.until > now());
        END IF;
    END IF;
    IF waiting OR NOT locked OR current_setting('transaction_isolation') <> 'read committed' THEN
        PERFORM pg_notify('jobq_' || enqueue.queue, '');
    END IF;
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text) IS
    'Enqueue one job; returns its id. Options: priority, run_at, max_attempts, headers; unique_key with unique_scope (active, until_done) and on_conflict (return, skip, raise, replace); concurrency_key; depends_on (parent job ids) with on_parent_failure (cancel, run); task (the job type a worker dispatches on). Notifies jobq_<queue> when a worker waits.';

/*
 * jobq.enqueue_many(queue, payloads, priority, run_at, max_attempts,
 * unique_keys, unique_scope, on_conflict, headers, concurrency_keys, task):
 * the ids, in the order of payloads; without unique_keys one INSERT, and at
 * most one notification (as jobq.enqueue).  unique_keys, when given, is
 * aligned with payloads (NULL: no key for that job), and each job is
 * enqueued as jobq.enqueue would, in order: of equal keys the first wins,
 * and the ids returned follow on_conflict (NULL for skip).
 * concurrency_keys, when given, is aligned with payloads too (NULL: none).
 * headers, task (0.9.0: one task for every job) and the other options
 * apply to every job.  Locks: the queue's wake-up advisory lock, shared,
 * as jobq.enqueue, and for each job with a unique or concurrency key what
 * jobq.enqueue locks for it.  Raises like
 * jobq.enqueue, naming the first bad element by its own subscript
 * (payloads[i], unique_keys[i], concurrency_keys[i]), and 22023 for a
 * multidimensional array or keys of another length, or on_conflict or
 * unique_scope other than the default without unique_keys (0.10.0);
 * inserts nothing then.
 */
CREATE OR REPLACE FUNCTION jobq.enqueue_many(
    queue        text,
    payloads     jsonb[],
    priority     integer     DEFAULT 0,
    run_at       timestamptz DEFAULT pg_catalog.now(),
    max_attempts integer     DEFAULT NULL,
    unique_keys  text[]      DEFAULT NULL,
    unique_scope text        DEFAULT 'active',
    on_conflict  text        DEFAULT 'return',
    headers      jsonb       DEFAULT NULL,
    concurrency_keys text[]  DEFAULT NULL,
    task         text        DEFAULT NULL)
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
    one          record;
    one_id       bigint;
    any_changed  boolean := false;
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
    IF enqueue_many.task IS NOT NULL THEN
        PERFORM jobq._check_task(enqueue_many.task);
    END IF;
    enqueue_many.headers := jobq._traced_headers(enqueue_many.headers);
    PERFORM jobq._check_job_options(NULL, enqueue_many.unique_scope, enqueue_many.on_conflict,
                                    enqueue_many.headers);
    IF enqueue_many.unique_keys IS NOT NULL THEN
        PERFORM jobq._check_keys(enqueue_many.unique_keys, cardinality(enqueue_many.payloads), 'unique_keys');
    ELSIF enqueue_many.on_conflict <> 'return' OR enqueue_many.unique_scope <> 'active' THEN
        -- 0.10.0: what happens to a key's holder means nothing without keys
        PERFORM jobq._raise_keyless(enqueue_many.on_conflict, enqueue_many.unique_scope, 'unique_keys');
    END IF;
    IF enqueue_many.concurrency_keys IS NOT NULL THEN
        PERFORM jobq._check_keys(enqueue_many.concurrency_keys, cardinality(enqueue_many.payloads),
                                 'concurrency_keys');
    END IF;

    IF enqueue_many.unique_keys IS NULL AND enqueue_many.concurrency_keys IS NOT NULL THEN
        -- with concurrency keys: the keyed jobs marked (control bit 16), their keys stored
        WITH inserted AS (
            INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, control, task)
            SELECT enqueue_many.queue, p.payload, enqueue_many.priority, enqueue_many.run_at,
                   enqueue_many.max_attempts, enqueue_many.headers,
                   CASE WHEN p.concurrency_key IS NOT NULL THEN 16 END, enqueue_many.task
              FROM unnest(enqueue_many.payloads, enqueue_many.concurrency_keys) WITH ORDINALITY
                   AS p(payload, concurrency_key, position)
             ORDER BY p.position
            RETURNING jobq.jobs.id
        )
        SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}') INTO new_ids
          FROM inserted AS i;
        INSERT INTO jobq.concurrency_keys (id, queue, concurrency_key, priority)
        SELECT k.id, enqueue_many.queue, k.concurrency_key, enqueue_many.priority
          FROM unnest(new_ids, enqueue_many.concurrency_keys) AS k(id, concurrency_key)
         WHERE k.concurrency_key IS NOT NULL;
        any_changed := cardinality(new_ids) > 0;
    ELSIF enqueue_many.unique_keys IS NULL THEN
        WITH inserted AS (
            INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, task)
            SELECT enqueue_many.queue, p.payload, enqueue_many.priority, enqueue_many.run_at,
                   enqueue_many.max_attempts, enqueue_many.headers, enqueue_many.task
              FROM unnest(enqueue_many.payloads) WITH ORDINALITY AS p(payload, position)
             ORDER BY p.position
            RETURNING jobq.jobs.id
        )
        -- ids come from one session's sequence in insertion order, so sorting
        -- them restores the order of payloads
        SELECT coalesce(array_agg(i.id ORDER BY i.id), '{}') INTO new_ids
          FROM inserted AS i;
        any_changed := cardinality(new_ids) > 0;
    ELSE
        new_ids := '{}';
        FOR one IN
            SELECT p.payload, p.unique_key, p.concurrency_key
              FROM unnest(enqueue_many.payloads, enqueue_many.unique_keys,
                          coalesce(enqueue_many.concurrency_keys, '{}')) WITH ORDINALITY
                   AS p(payload, unique_key, concurrency_key, position)
             ORDER BY p.position
        LOOP
            IF one.concurrency_key IS NOT NULL THEN
                SELECT new_ids || l.id, any_changed OR l.runnable INTO new_ids, any_changed
                  FROM jobq._enqueue_linked(enqueue_many.queue, one.payload, enqueue_many.priority,
                                            enqueue_many.run_at, enqueue_many.max_attempts, one.unique_key,
                                            enqueue_many.unique_scope, enqueue_many.on_conflict,
                                            enqueue_many.headers, one.concurrency_key, NULL, 'cancel',
                                            enqueue_many.task) AS l;
            ELSIF one.unique_key IS NULL THEN
                INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, task)
                VALUES (enqueue_many.queue, one.payload, enqueue_many.priority, enqueue_many.run_at,
                        enqueue_many.max_attempts, enqueue_many.headers, enqueue_many.task)
                RETURNING jobq.jobs.id INTO one_id;
                new_ids := new_ids || one_id;
                any_changed := true;
            ELSE
                SELECT new_ids || u.id, any_changed OR u.changed INTO new_ids, any_changed
                  FROM jobq._enqueue_unique(enqueue_many.queue, one.payload, enqueue_many.priority,
                                            enqueue_many.run_at, enqueue_many.max_attempts, one.unique_key,
                                            enqueue_many.unique_scope, enqueue_many.on_conflict,
                                            enqueue_many.headers, enqueue_many.task) AS u;
            END IF;
        END LOOP;
    END IF;

    -- the wake-up, as in jobq.enqueue
    locked := pg_try_advisory_xact_lock_shared(hashtext('jobq._waiters'), hashtext(enqueue_many.queue));
    IF any_changed
       AND (NOT locked OR current_setting('transaction_isolation') <> 'read committed'
            OR EXISTS (SELECT FROM jobq._waiters AS w WHERE w.queue = enqueue_many.queue AND w.until > now())) THEN
        PERFORM pg_notify('jobq_' || enqueue_many.queue, '');
    END IF;
    RETURN new_ids;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[], text) IS
    'Enqueue many jobs in one call; returns their ids in the order of payloads. Same options as jobq.enqueue, with unique_keys and concurrency_keys aligned with payloads; task, headers and the others apply to every job.';

-- pausing a queue nothing knows yet says so (a NOTICE), and pauses it
-- (configure_queue's check of backoff_base against backoff_max is in its
-- new definition, in the retention section below)
/*
 * jobq.pause(queue): returns nothing.  From its commit on, no claim (in any
 * language) hands out the queue's jobs: claim reads the flag in every call,
 * so a claim that starts after the commit gets nothing, until jobq.resume.
 * Jobs already running finish normally; enqueues go on.  Stored in
 * jobq.queue_settings, so it survives restarts and dumps.  A queue may be
 * paused before its first job (so that its jobs wait from the first one
 * on); a queue with no settings, no job in any state and no schedule
 * is paused all the same, with a NOTICE naming it (0.10.0: a mistyped
 * name pauses nothing that exists).  Locks the queue's settings row.
 * Raises 22004/22023 for a bad queue name.
 */
CREATE OR REPLACE FUNCTION jobq.pause(queue text)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_queue(pause.queue);
    -- known: configured, with jobs (one probe per index: the claim index for
    -- the queued ones, jobs_status_idx for the others, jobq.job_waits for the
    -- waiting ones), or the queue of a schedule
    IF NOT EXISTS (SELECT FROM jobq.queue_settings AS s WHERE s.queue = pause.queue)
       AND NOT EXISTS (SELECT FROM jobq.jobs AS j WHERE j.status = 'queued' AND j.queue = pause.queue)
       AND NOT EXISTS (SELECT FROM jobq.jobs AS j
                        WHERE j.status = ANY (ARRAY['running', 'done', 'failed', 'cancelled'])
                          AND j.queue = pause.queue)
       AND NOT EXISTS (SELECT FROM jobq.job_waits AS w
                        WHERE (SELECT j.queue FROM jobq.jobs AS j WHERE j.id = w.id) = pause.queue)
       AND NOT EXISTS (SELECT FROM jobq.schedule_settings AS s WHERE s.queue = pause.queue) THEN
        RAISE NOTICE 'queue % has no settings, jobs or schedules yet: paused all the same',
                     quote_literal(pause.queue)
            USING HINT = 'Its jobs wait from the first one on; for a mistyped name, delete its row of jobq.queue_settings.';
    END IF;
    INSERT INTO jobq.queue_settings AS s (queue, paused)
    VALUES (pause.queue, true)
    ON CONFLICT ON CONSTRAINT queue_settings_pkey DO UPDATE
       SET paused = true, updated_at = statement_timestamp();
END
$$;
COMMENT ON FUNCTION jobq.pause(text) IS
    'Pause a queue: from the commit on, claims hand out none of its jobs (running jobs finish). Survives restarts. A queue without settings, jobs or schedules is paused too, with a NOTICE.';

-- The oldest transaction's age, also where pg_stat_activity hides other
-- roles' transactions from the extension's owner: the xid clock, marked by
-- jobq.reap, dates them; never negative
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

-- jobq.reap gains at_most_every, for the workers' reaps: created beside the
-- old signature, which is dropped once its grants are copied (below)
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

-- Written fully qualified (OPERATOR(pg_catalog.x), pg_catalog.f): a view is
-- parsed once, here, with the installing session's search_path.
CREATE OR REPLACE VIEW jobq.health AS
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
COMMENT ON COLUMN jobq.health.oldest_transaction_age IS 'Age of the oldest open transaction of another session, of any role (never negative; NULL: none); vacuum cannot clear rows it may still see.';

-- A user's table with a foreign key to jobq.jobs(id) no longer fails a
-- purge whole: jobq._delete_jobs deletes what it can and keeps the jobs a
-- row references (retention, below, uses it too)
/*
 * jobq._delete_rows(ids): how many jobs of ids it deleted, with their side
 * rows: the unique keys they hold, their results, deadlines and
 * concurrency keys, and their rows of jobq.job_deps (as the child) and
 * jobq.job_waits.  One statement; the work of jobq._delete_jobs, which
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
    )
    SELECT count(*) INTO deleted FROM gone;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION jobq._delete_rows(bigint[]) IS
    'Internal: delete these jobs and their side rows (keys, results, deadlines, concurrency keys, dependency rows) in one statement; returns how many jobs.';
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
CREATE OR REPLACE FUNCTION jobq.purge(older_than interval, max_rows integer DEFAULT 100000,
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

-- The access levels name the new functions (the retention section below
-- may replace this definition again, with its own; the last is 0.10.0's)
/*
 * jobq._level_functions(level): the functions a level may execute, for
 * level 'producer', 'observer', 'worker', 'monitor' or 'admin'; NULL for any other
 * level.
 */
CREATE OR REPLACE FUNCTION jobq._level_functions(level text)
RETURNS regprocedure[]
LANGUAGE plpgsql STABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- one branch per level, so that planning one never plans the others
    IF _level_functions.level = 'producer' THEN
        RETURN ARRAY[
                'jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text)',
                'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[], text)',
                'jobq.enqueue_flow(text, jsonb)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'worker' THEN
        RETURN ARRAY[
                'jobq.claim(text, integer, text, interval)',
                'jobq.claim_any(text[], integer, text, interval)',
                'jobq.complete(bigint, bigint, jsonb)',
                'jobq.complete_many(bigint[], bigint[], jsonb[])',
                'jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval, jsonb[])',
                'jobq.fail(bigint, text, bigint, interval, boolean)',
                'jobq.snooze(bigint, bigint, interval)',
                'jobq.hand_back(bigint, bigint, interval, text, interval)',
                'jobq.heartbeat(bigint, bigint)',
                'jobq.heartbeat_many(bigint[], bigint[])',
                'jobq.heartbeat_status(bigint[], bigint[])',
                'jobq.release(bigint, bigint)',
                'jobq.reap(interval, interval)',
                'jobq.tick()',
                'jobq.metrics()',
                'jobq.register_waiter(text, text, interval)',
                'jobq.wait(text, text, interval)',
                'jobq.job(bigint)',
                'jobq.wait(bigint, interval)',
                'jobq.watch(bigint)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'observer' THEN
        RETURN ARRAY[
                'jobq.job(bigint)',
                'jobq.wait(bigint, interval)',
                'jobq.watch(bigint)',
                'jobq.channel(text)',
                'jobq.version()']::regprocedure[];
    ELSIF _level_functions.level = 'monitor' THEN
        -- what reading every table and view of the queue takes (the views
        -- call these helpers with the reader's rights)
        RETURN ARRAY[
                'jobq.metrics()',
                'jobq.stats()',
                'jobq.job(bigint)',
                'jobq.wait(bigint, interval)',
                'jobq.watch(bigint)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)',
                'jobq._queues()',
                'jobq._retention(interval, text[], text)',
                'jobq._oldest_transaction_age()',
                'jobq._schedule_next(text, text, interval, timestamptz)',
                'jobq._every_next(interval, timestamptz)',
                'jobq._cron_parse(text)',
                'jobq._cron_field(text, text, integer)',
                'jobq._cron_walk(jobq._cron, text, timestamptz)',
                'jobq._cron_day(jobq._cron, date)',
                'jobq._cron_time(jobq._cron, integer)',
                'jobq._check_timezone(text, boolean)']::regprocedure[];
    ELSIF _level_functions.level = 'admin' THEN
        -- the levels above, and what operating the queue takes
        RETURN ARRAY(
                SELECT DISTINCT f
                  FROM unnest(jobq._level_functions('producer') || jobq._level_functions('worker')
                              || jobq._level_functions('monitor')
                              || ARRAY[
                                     'jobq.retry_failed(text, bigint[])',
                                     'jobq.purge(interval, integer, boolean)',
                                     'jobq._delete_jobs(bigint[])',
                                     'jobq._delete_rows(bigint[])',
                                     'jobq.stats()',
                                     'jobq.cancel(bigint[], boolean)',
                                     'jobq.pause(text)',
                                     'jobq.resume(text)',
                                     'jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval, interval, interval, interval, text[])',
                                     'jobq._queues()',
                                     'jobq._retention(interval, text[], text)',
                                     'jobq._notify_finished(bigint)',
                                     'jobq._finish_linked(bigint, text, smallint)',
                                     'jobq._settle_dependents(bigint, text)',
                                     'jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text, text)',
                                     'jobq.unschedule(text)',
                                     'jobq._schedule_next(text, text, interval, timestamptz)',
                                     'jobq._every_next(interval, timestamptz)',
                                     'jobq._cron_parse(text)',
                                     'jobq._cron_field(text, text, integer)',
                                     'jobq._cron_walk(jobq._cron, text, timestamptz)',
                                     'jobq._cron_day(jobq._cron, date)',
                                     'jobq._cron_time(jobq._cron, integer)',
                                     'jobq._check_timezone(text, boolean)',
                                     'jobq._cancel_occurrences(text, text)',
                                     'jobq._check_job_options(text, text, text, jsonb)',
                                     'jobq._check_task(text)',
                                     'jobq._check_payload(jsonb, text)',
                                     'jobq._check_options(integer, timestamptz, integer)',
                                     'jobq._check_lease(bigint, bigint)',
                                     'jobq._raise_not_held(bigint, bigint)',
                                     'jobq._retry_delay(text, integer)']::regprocedure[]) AS f
                 ORDER BY f);
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._level_functions(text) IS
    'Internal: the functions that the producer, observer, worker, monitor or admin level may execute.';

----------------------------------------------------------------------------
-- Retention (issue 25, sections 1 and 2)
----------------------------------------------------------------------------

-- Settings: how long each queue keeps its finished jobs, per final state
ALTER TABLE jobq.queue_settings
    ADD COLUMN retain_done interval,
    ADD COLUMN retain_failed interval,
    ADD COLUMN retain_cancelled interval,
    ADD COLUMN keep_forever text[];
COMMENT ON COLUMN jobq.queue_settings.retain_done IS 'How long a done job is kept after it finished; default 1 day.';
COMMENT ON COLUMN jobq.queue_settings.retain_failed IS 'How long a failed job (the dead-letter queue) is kept after it failed; default 14 days.';
COMMENT ON COLUMN jobq.queue_settings.retain_cancelled IS 'How long a cancelled job is kept after it was cancelled; default 7 days.';
COMMENT ON COLUMN jobq.queue_settings.keep_forever IS 'The final states (done, failed, cancelled) whose jobs are kept until purged, whatever retain_* says; NULL: none.';

/*
 * jobq._retention(retain, keep_forever, state): how long a job of a queue
 * that finished in state (done, failed or cancelled) is kept, given the
 * queue's settings retain (its retain_<state>) and keep_forever: NULL when
 * the state is kept forever, else retain, else the default (done 1 day,
 * failed 14 days, cancelled 7 days).  The one place the defaults are
 * written; jobq.queues shows them and jobq.tick applies them.
 */
CREATE FUNCTION jobq._retention(retain interval, keep_forever text[], state text)
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN _retention.state = ANY (_retention.keep_forever) THEN NULL
                ELSE coalesce(_retention.retain,
                              CASE _retention.state WHEN 'done' THEN interval '1 day'
                                                    WHEN 'failed' THEN interval '14 days'
                                                    WHEN 'cancelled' THEN interval '7 days' END) END
$$;
COMMENT ON FUNCTION jobq._retention(interval, text[], text) IS
    'Internal: how long a job that finished in the state is kept, by the queue''s retain_<state> and keep_forever (NULL: forever); the defaults are 1 day done, 14 days failed, 7 days cancelled.';
REVOKE ALL ON FUNCTION jobq._retention(interval, text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._retention(interval, text[], text) TO @extowner@;

/*
 * jobq._finished_queues(): one row per final state (done, failed,
 * cancelled) and queue that has jobs finished in that state, with how long
 * the queue keeps them (jobq._retention; NULL: until purged).  Found by
 * skipping through jobs_status_idx, one probe per queue and state, so the
 * finished jobs themselves are never read (the constant list of states
 * lets the planner use the partial index for a state given as a value).  For retention (jobq._retain)
 * and jobq.metrics.
 */
CREATE FUNCTION jobq._finished_queues()
RETURNS TABLE (status text, queue text, retention interval)
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE finished (status, queue) AS (
        SELECT s.status,
               (SELECT j.queue FROM jobq.jobs AS j
                 WHERE j.status = s.status AND j.status IN ('done', 'failed', 'cancelled')
                 ORDER BY j.queue LIMIT 1)
          FROM unnest(ARRAY['done', 'failed', 'cancelled']) AS s (status)
        UNION ALL
        SELECT f.status,
               (SELECT j.queue FROM jobq.jobs AS j
                 WHERE j.status = f.status AND j.status IN ('done', 'failed', 'cancelled') AND j.queue > f.queue
                 ORDER BY j.queue LIMIT 1)
          FROM finished AS f
         WHERE f.queue IS NOT NULL
    )
    SELECT f.status, f.queue,
           jobq._retention(CASE f.status WHEN 'done' THEN s.retain_done
                                         WHEN 'failed' THEN s.retain_failed
                                         ELSE s.retain_cancelled END,
                           s.keep_forever, f.status)
      FROM finished AS f
      LEFT JOIN jobq.queue_settings AS s ON s.queue = f.queue
     WHERE f.queue IS NOT NULL
$$;
COMMENT ON FUNCTION jobq._finished_queues() IS
    'Internal: each final state and queue with jobs finished in it, and how long the queue keeps them (NULL: until purged).';
REVOKE ALL ON FUNCTION jobq._finished_queues() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._finished_queues() TO @extowner@;

-- jobq.queues gains the effective retention of each final state, last
CREATE OR REPLACE VIEW jobq.queues AS
SELECT q.*,
       jobq._retention(s.retain_done, s.keep_forever, 'done') AS retain_done,
       jobq._retention(s.retain_failed, s.keep_forever, 'failed') AS retain_failed,
       jobq._retention(s.retain_cancelled, s.keep_forever, 'cancelled') AS retain_cancelled
  FROM jobq._queues() AS q
  LEFT JOIN jobq.queue_settings AS s ON s.queue = q.queue;
COMMENT ON VIEW jobq.queues IS
    'Every queue that is configured or has queued or running jobs, with its effective settings (defaults filled in).';
COMMENT ON COLUMN jobq.queues.queue IS 'The queue.';
COMMENT ON COLUMN jobq.queues.paused IS 'No claim hands out its jobs (jobq.pause, jobq.resume).';
COMMENT ON COLUMN jobq.queues.max_attempts IS 'Attempts of a job enqueued without max_attempts.';
COMMENT ON COLUMN jobq.queues.backoff_base IS 'Retry delay after attempt a: least(backoff_max, backoff_base * 2^a), shortened by up to backoff_jitter.';
COMMENT ON COLUMN jobq.queues.backoff_max IS 'The longest retry delay.';
COMMENT ON COLUMN jobq.queues.backoff_jitter IS 'The fraction by which a retry delay is shortened at random, at most.';
COMMENT ON COLUMN jobq.queues.lease_timeout IS 'The lease of a claim that names none.';
COMMENT ON COLUMN jobq.queues.timeout IS 'The longest an attempt of one of its jobs may run once claimed; NULL: no limit.';
COMMENT ON COLUMN jobq.queues.configured IS 'Whether the queue has a row in jobq.queue_settings.';
COMMENT ON COLUMN jobq.queues.concurrency IS 'At most this many of its jobs run at once; NULL: no limit.';
COMMENT ON COLUMN jobq.queues.key_concurrency IS 'At most this many jobs of one concurrency key run at once; NULL: no limit.';
COMMENT ON COLUMN jobq.queues.key_order IS 'How claims choose among concurrency keys: priority or round_robin.';
COMMENT ON COLUMN jobq.queues.rate_limit IS 'At most this many claims per rate_interval; NULL: no limit.';
COMMENT ON COLUMN jobq.queues.rate_interval IS 'The window of rate_limit.';
COMMENT ON COLUMN jobq.queues.retain_done IS 'How long a done job is kept after it finished; NULL: until purged.';
COMMENT ON COLUMN jobq.queues.retain_failed IS 'How long a failed job is kept after it failed; NULL: until purged.';
COMMENT ON COLUMN jobq.queues.retain_cancelled IS 'How long a cancelled job is kept after it was cancelled; NULL: until purged.';

-- configure_queue gains the retention arguments, last: created beside the old
-- signature, which is dropped once its grants are copied (below)
/*
 * jobq.configure_queue(queue, max_attempts, backoff_base, backoff_max,
 * backoff_jitter, lease_timeout, timeout, unset, concurrency,
 * key_concurrency, key_order, rate_limit, rate_interval, retain_done,
 * retain_failed, retain_cancelled, keep_forever): the queue's row of
 * jobq.queues after the change.  A NULL argument leaves its setting as it
 * is; unset names settings to put back to their defaults (unsetting
 * rate_limit unsets rate_interval too).  Takes effect for the claims and
 * failures that start after the commit; a job already claimed keeps the
 * max_attempts, lease and deadline it was claimed with, and a lowered limit
 * lets the jobs already running finish.  The limits (52_limits.sql):
 * concurrency, the most jobs of the queue running at once; key_concurrency,
 * the most per concurrency key; key_order, 'priority' or 'round_robin';
 * rate_limit claims per rate_interval (1 second when rate_limit is set
 * without it).  Retention (80_retention.sql): how long a job that
 * finished done, failed or cancelled is kept before jobq.tick deletes it
 * (0: at the next tick); keep_forever names the final states kept until
 * purged, and replaces the list stored (a retain_<state> given or unset
 * takes its state off the list).  A change applies to every finished job
 * of the queue at the next tick, those finished before it too.  Locks the
 * queue's settings row.  Raises 22004 (NULL queue),
 * 22023 (bad queue name; max_attempts outside 1..1000; backoff_base not
 * positive or over 1 day; backoff_max not positive or over 10 years;
 * backoff_jitter outside 0..1; lease_timeout not positive or over 1 day;
 * timeout not positive or over 30 days; concurrency or key_concurrency
 * outside 1..100000; key_order neither 'priority' nor 'round_robin';
 * rate_limit outside 1..10000; rate_interval not positive or over 1 day,
 * or given without rate_limit on a queue that has none; backoff_base
 * above backoff_max, as the queue would have them (given, else kept unless
 * unset, else the defaults: 0.10.0); retain_done,
 * retain_failed or retain_cancelled negative or over 10 years;
 * keep_forever naming anything but done, failed and cancelled, or a state
 * whose retain_<state> is also given or unset; unset naming anything
 * else, or a setting also given).
 */
CREATE FUNCTION jobq.configure_queue(
    queue          text,
    max_attempts   integer          DEFAULT NULL,
    backoff_base   interval         DEFAULT NULL,
    backoff_max    interval         DEFAULT NULL,
    backoff_jitter double precision DEFAULT NULL,
    lease_timeout  interval         DEFAULT NULL,
    timeout        interval         DEFAULT NULL,
    unset          text[]           DEFAULT '{}',
    concurrency     integer         DEFAULT NULL,
    key_concurrency integer         DEFAULT NULL,
    key_order       text            DEFAULT NULL,
    rate_limit      integer         DEFAULT NULL,
    rate_interval   interval        DEFAULT NULL,
    retain_done      interval       DEFAULT NULL,
    retain_failed    interval       DEFAULT NULL,
    retain_cancelled interval       DEFAULT NULL,
    keep_forever     text[]         DEFAULT NULL)
RETURNS jobq.queues
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    settings constant text[] := ARRAY['max_attempts', 'backoff_base', 'backoff_max', 'backoff_jitter',
                                      'lease_timeout', 'timeout', 'concurrency', 'key_concurrency',
                                      'key_order', 'rate_limit', 'rate_interval', 'retain_done',
                                      'retain_failed', 'retain_cancelled', 'keep_forever'];
    given    text[];
    retained text[];  -- the final states whose retain_<state> is given or unset
    bad      bigint;
    outcome  jobq.queues;
    backoff  record;  -- the backoff_base and backoff_max the queue will have
BEGIN
    PERFORM jobq._check_queue(configure_queue.queue);
    IF configure_queue.max_attempts NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000, got %', configure_queue.max_attempts
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.backoff_base <= interval '0' OR configure_queue.backoff_base > interval '1 day' THEN
        RAISE EXCEPTION 'backoff_base must be a positive interval of at most 1 day, got %', configure_queue.backoff_base
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.backoff_max <= interval '0' OR configure_queue.backoff_max > interval '10 years' THEN
        RAISE EXCEPTION 'backoff_max must be a positive interval of at most 10 years, got %', configure_queue.backoff_max
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.backoff_jitter < 0 OR configure_queue.backoff_jitter > 1 THEN  -- NaN > 1 too
        RAISE EXCEPTION 'backoff_jitter must be between 0 and 1, got %', configure_queue.backoff_jitter
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.lease_timeout <= interval '0' OR configure_queue.lease_timeout > interval '1 day' THEN
        RAISE EXCEPTION 'lease_timeout must be a positive interval of at most 1 day, got %', configure_queue.lease_timeout
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.timeout <= interval '0' OR configure_queue.timeout > interval '30 days' THEN
        RAISE EXCEPTION 'timeout must be a positive interval of at most 30 days, got %', configure_queue.timeout
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.concurrency NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'concurrency must be between 1 and 100000, got %', configure_queue.concurrency
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.key_concurrency NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'key_concurrency must be between 1 and 100000, got %', configure_queue.key_concurrency
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.key_order NOT IN ('priority', 'round_robin') THEN
        RAISE EXCEPTION 'key_order must be priority or round_robin, got %', quote_literal(left(configure_queue.key_order, 80))
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.rate_limit NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'rate_limit must be between 1 and 10000, got %', configure_queue.rate_limit
            USING ERRCODE = '22023',
                  HINT = 'For more claims, make rate_interval longer.';
    END IF;
    IF configure_queue.rate_interval <= interval '0' OR configure_queue.rate_interval > interval '1 day' THEN
        RAISE EXCEPTION 'rate_interval must be a positive interval of at most 1 day, got %', configure_queue.rate_interval
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.retain_done < interval '0' OR configure_queue.retain_done > interval '10 years' THEN
        RAISE EXCEPTION 'retain_done must be an interval from 0 to 10 years, got %', configure_queue.retain_done
            USING ERRCODE = '22023', HINT = 'To keep done jobs until purged: keep_forever => ''{done}''.';
    END IF;
    IF configure_queue.retain_failed < interval '0' OR configure_queue.retain_failed > interval '10 years' THEN
        RAISE EXCEPTION 'retain_failed must be an interval from 0 to 10 years, got %', configure_queue.retain_failed
            USING ERRCODE = '22023', HINT = 'To keep failed jobs until purged: keep_forever => ''{failed}''.';
    END IF;
    IF configure_queue.retain_cancelled < interval '0' OR configure_queue.retain_cancelled > interval '10 years' THEN
        RAISE EXCEPTION 'retain_cancelled must be an interval from 0 to 10 years, got %', configure_queue.retain_cancelled
            USING ERRCODE = '22023', HINT = 'To keep cancelled jobs until purged: keep_forever => ''{cancelled}''.';
    END IF;
    IF array_ndims(configure_queue.keep_forever) > 1 THEN
        RAISE EXCEPTION 'keep_forever must be a one-dimensional array, got % dimensions',
                        array_ndims(configure_queue.keep_forever)
            USING ERRCODE = '22023';
    END IF;
    SELECT k.position INTO bad
      FROM unnest(configure_queue.keep_forever) WITH ORDINALITY AS k (state, position)
     WHERE k.state IS NULL OR NOT k.state = ANY (ARRAY['done', 'failed', 'cancelled'])
     ORDER BY k.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'keep_forever[%] must be done, failed or cancelled, got %', bad,
                        quote_nullable(left(configure_queue.keep_forever[bad], 80))
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.unset IS NULL THEN
        RAISE EXCEPTION 'unset must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(configure_queue.unset) > 1 THEN
        RAISE EXCEPTION 'unset must be a one-dimensional array, got % dimensions', array_ndims(configure_queue.unset)
            USING ERRCODE = '22023';
    END IF;
    SELECT u.position INTO bad
      FROM unnest(configure_queue.unset) WITH ORDINALITY AS u (setting, position)
     WHERE u.setting IS NULL OR NOT u.setting = ANY (settings)
     ORDER BY u.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'unset[%] must name a setting (%), got %', bad, array_to_string(settings, ', '),
                        quote_nullable(configure_queue.unset[bad])
            USING ERRCODE = '22023';
    END IF;
    given := array_remove(ARRAY[
                 CASE WHEN configure_queue.max_attempts IS NOT NULL THEN 'max_attempts' END,
                 CASE WHEN configure_queue.backoff_base IS NOT NULL THEN 'backoff_base' END,
                 CASE WHEN configure_queue.backoff_max IS NOT NULL THEN 'backoff_max' END,
                 CASE WHEN configure_queue.backoff_jitter IS NOT NULL THEN 'backoff_jitter' END,
                 CASE WHEN configure_queue.lease_timeout IS NOT NULL THEN 'lease_timeout' END,
                 CASE WHEN configure_queue.timeout IS NOT NULL THEN 'timeout' END,
                 CASE WHEN configure_queue.concurrency IS NOT NULL THEN 'concurrency' END,
                 CASE WHEN configure_queue.key_concurrency IS NOT NULL THEN 'key_concurrency' END,
                 CASE WHEN configure_queue.key_order IS NOT NULL THEN 'key_order' END,
                 CASE WHEN configure_queue.rate_limit IS NOT NULL THEN 'rate_limit' END,
                 CASE WHEN configure_queue.rate_interval IS NOT NULL THEN 'rate_interval' END,
                 CASE WHEN configure_queue.retain_done IS NOT NULL THEN 'retain_done' END,
                 CASE WHEN configure_queue.retain_failed IS NOT NULL THEN 'retain_failed' END,
                 CASE WHEN configure_queue.retain_cancelled IS NOT NULL THEN 'retain_cancelled' END,
                 CASE WHEN configure_queue.keep_forever IS NOT NULL THEN 'keep_forever' END], NULL);
    IF given && configure_queue.unset THEN
        RAISE EXCEPTION 'unset must not name a setting also given, got %',
                        array_to_string(ARRAY(SELECT unnest(given) INTERSECT SELECT unnest(configure_queue.unset)), ', ')
            USING ERRCODE = '22023';
    END IF;
    retained := ARRAY(SELECT substr(g, 8) FROM unnest(given || configure_queue.unset) AS g
                       WHERE g IN ('retain_done', 'retain_failed', 'retain_cancelled'));
    IF configure_queue.keep_forever && retained THEN
        RAISE EXCEPTION 'keep_forever must not name a state whose retention is also given or unset, got %',
                        array_to_string(ARRAY(SELECT unnest(configure_queue.keep_forever)
                                              INTERSECT SELECT unnest(retained)), ', ')
            USING ERRCODE = '22023';
    END IF;
    IF configure_queue.rate_interval IS NOT NULL AND configure_queue.rate_limit IS NULL
       AND NOT EXISTS (SELECT FROM jobq.queue_settings AS s
                        WHERE s.queue = configure_queue.queue AND s.rate_limit IS NOT NULL
                          AND NOT 'rate_limit' = ANY (configure_queue.unset)) THEN
        RAISE EXCEPTION 'rate_interval needs a rate_limit: queue % has none', quote_literal(configure_queue.queue)
            USING ERRCODE = '22023';
    END IF;
    -- 0.10.0: a retry waits least(backoff_max, backoff_base * 2^attempts), so a base above the
    -- max would be ignored.  Compared: the values the queue will have (given, else kept unless
    -- unset, else the defaults 1 second and 300 seconds).
    SELECT coalesce(configure_queue.backoff_base,
                    CASE WHEN NOT 'backoff_base' = ANY (configure_queue.unset) THEN s.backoff_base END,
                    interval '1 second') AS base,
           coalesce(configure_queue.backoff_max,
                    CASE WHEN NOT 'backoff_max' = ANY (configure_queue.unset) THEN s.backoff_max END,
                    interval '300 seconds') AS max
      INTO backoff
      FROM (SELECT) AS one
      LEFT JOIN jobq.queue_settings AS s ON s.queue = configure_queue.queue;
    IF backoff.base > backoff.max THEN
        IF configure_queue.backoff_base IS NOT NULL THEN
            RAISE EXCEPTION 'backoff_base must be at most backoff_max (%), got %', backoff.max, backoff.base
                USING ERRCODE = '22023',
                      HINT = 'A retry waits least(backoff_max, backoff_base * 2^attempts): give a longer backoff_max too.';
        END IF;
        RAISE EXCEPTION 'backoff_max must be at least backoff_base (%), got %', backoff.base, backoff.max
            USING ERRCODE = '22023',
                  HINT = 'A retry waits least(backoff_max, backoff_base * 2^attempts): give a shorter backoff_base too.';
    END IF;

    INSERT INTO jobq.queue_settings AS s (queue, max_attempts, backoff_base, backoff_max, backoff_jitter,
                                          lease_timeout, timeout, concurrency, key_concurrency, key_order,
                                          rate_limit, rate_interval, retain_done, retain_failed,
                                          retain_cancelled, keep_forever)
    VALUES (configure_queue.queue, configure_queue.max_attempts, configure_queue.backoff_base,
            configure_queue.backoff_max, configure_queue.backoff_jitter, configure_queue.lease_timeout,
            configure_queue.timeout, configure_queue.concurrency, configure_queue.key_concurrency,
            configure_queue.key_order, configure_queue.rate_limit,
            CASE WHEN configure_queue.rate_limit IS NOT NULL
                 THEN coalesce(configure_queue.rate_interval, interval '1 second') END,
            configure_queue.retain_done, configure_queue.retain_failed, configure_queue.retain_cancelled,
            nullif(ARRAY(SELECT DISTINCT k FROM unnest(configure_queue.keep_forever) AS k ORDER BY k), '{}'))
    ON CONFLICT ON CONSTRAINT queue_settings_pkey DO UPDATE
       SET max_attempts   = CASE WHEN 'max_attempts' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.max_attempts, s.max_attempts) END,
           backoff_base   = CASE WHEN 'backoff_base' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.backoff_base, s.backoff_base) END,
           backoff_max    = CASE WHEN 'backoff_max' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.backoff_max, s.backoff_max) END,
           backoff_jitter = CASE WHEN 'backoff_jitter' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.backoff_jitter, s.backoff_jitter) END,
           lease_timeout  = CASE WHEN 'lease_timeout' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.lease_timeout, s.lease_timeout) END,
           timeout        = CASE WHEN 'timeout' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.timeout, s.timeout) END,
           concurrency    = CASE WHEN 'concurrency' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.concurrency, s.concurrency) END,
           key_concurrency = CASE WHEN 'key_concurrency' = ANY (configure_queue.unset) THEN NULL
                                  ELSE coalesce(excluded.key_concurrency, s.key_concurrency) END,
           key_order      = CASE WHEN 'key_order' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.key_order, s.key_order) END,
           rate_limit     = CASE WHEN 'rate_limit' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.rate_limit, s.rate_limit) END,
           -- the window goes with its limit: given, kept, or 1 second (for a new limit)
           rate_interval  = CASE WHEN 'rate_limit' = ANY (configure_queue.unset) THEN NULL
                                 WHEN 'rate_interval' = ANY (configure_queue.unset)
                                      AND coalesce(excluded.rate_limit, s.rate_limit) IS NOT NULL THEN interval '1 second'
                                 WHEN 'rate_interval' = ANY (configure_queue.unset) THEN NULL
                                 WHEN coalesce(excluded.rate_limit, s.rate_limit) IS NULL THEN NULL
                                 ELSE coalesce(configure_queue.rate_interval, s.rate_interval, interval '1 second') END,
           retain_done    = CASE WHEN 'retain_done' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.retain_done, s.retain_done) END,
           retain_failed  = CASE WHEN 'retain_failed' = ANY (configure_queue.unset) THEN NULL
                                 ELSE coalesce(excluded.retain_failed, s.retain_failed) END,
           retain_cancelled = CASE WHEN 'retain_cancelled' = ANY (configure_queue.unset) THEN NULL
                                   ELSE coalesce(excluded.retain_cancelled, s.retain_cancelled) END,
           -- the list given, or the one stored; either way without the states whose retention was
           -- given or unset (the last word on a state wins)
           keep_forever   = CASE WHEN 'keep_forever' = ANY (configure_queue.unset) THEN NULL
                                 ELSE nullif(ARRAY(SELECT k FROM unnest(coalesce(configure_queue.keep_forever, s.keep_forever)) AS k
                                                    WHERE NOT k = ANY (retained) ORDER BY k), '{}') END,
           updated_at     = statement_timestamp();

    SELECT q.* INTO outcome FROM jobq.queues AS q WHERE q.queue = configure_queue.queue;
    RETURN outcome;
END
$$;
COMMENT ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval, interval, interval, interval, text[]) IS
    'Set a queue''s policy: max_attempts, backoff_base, backoff_max, backoff_jitter, lease_timeout, timeout, its limits concurrency, key_concurrency, key_order, rate_limit per rate_interval, and how long finished jobs are kept: retain_done, retain_failed, retain_cancelled, keep_forever (NULL: unchanged; unset: back to the default). Returns its row of jobq.queues.';
REVOKE ALL ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval, interval, interval, interval, text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval, interval, interval, interval, text[]) TO @extowner@;

-- its name in a comment of the acknowledgement
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
CREATE OR REPLACE FUNCTION jobq._acknowledge(ids bigint[], leases bigint[], results jsonb[])
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

-- metrics: the rows past retention, the oldest finished job, the index bytes
/*
 * jobq.metrics(): one row per (metric, queue), queue NULL for the rows about
 * the table as a whole; every value a double precision.  Per queue (every
 * queue that has queued, running, waiting or finished jobs, or settings, so
 * that a drained queue reads 0 instead of vanishing):
 *   jobs_runnable                queued jobs whose run_at has come
 *   jobs_scheduled               queued jobs due later (run_at in the future)
 *   jobs_running                 jobs held under a lease
 *   jobs_waiting                 jobs waiting for parent jobs
 *   jobs_failed                  the dead-letter queue
 *   oldest_runnable_age_seconds  how long the oldest runnable job has waited (0: none)
 *   paused                       1 while the queue is paused (jobq.pause), else 0
 *   jobs_past_retention          finished jobs whose retention ended, not deleted yet
 *                                (counted up to 100,000 per state; jobq.tick deletes them)
 *   oldest_finished_age_seconds  how long ago its oldest finished job (done, failed or
 *                                cancelled) finished (0: none)
 * For the table (queue NULL):
 *   live_tuples, dead_tuples     pg_stat_user_tables' estimates for jobq.jobs
 *   table_bytes                  jobq.jobs with its indexes and TOAST
 *   index_bytes                  jobq.jobs' indexes alone
 *   last_vacuum_timestamp_seconds  the last vacuum, manual or automatic, as a Unix time (absent: never)
 *   oldest_transaction_age_seconds the oldest open transaction of another session, of any
 *                                role (jobq._oldest_transaction_age; 0: none)
 *   oldest_xmin_age              in transactions: how far the oldest snapshot holds back vacuum
 * Every count walks a partial index (jobs_claim_idx, jobs_status_idx) or
 * jobq.job_waits, and of the finished jobs reads only those past their
 * retention (at most 100,000 per queue and state) and the oldest, so the
 * cost follows the unfinished jobs and what retention has yet to delete,
 * not the table.  Takes no row locks;
 * done totals are for counters (the worker's), not for this function.
 */
CREATE OR REPLACE FUNCTION jobq.metrics()
RETURNS TABLE (metric text, queue text, value double precision)
LANGUAGE sql STABLE
-- SECURITY DEFINER: the worker level exports the queue's state (pgjobq
-- worker --metrics-port) without SELECT on jobq.jobs; it returns counts
-- only, and reads other sessions' transaction ages as the extension's owner.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH queued AS (
        SELECT j.queue,
               count(*) FILTER (WHERE j.run_at <= statement_timestamp()) AS runnable,
               count(*) FILTER (WHERE j.run_at > statement_timestamp()) AS scheduled,
               extract(epoch FROM statement_timestamp()
                                  - min(j.run_at) FILTER (WHERE j.run_at <= statement_timestamp())) AS oldest
          FROM jobq.jobs AS j
         WHERE j.status = 'queued'
         GROUP BY j.queue
    ), running AS (
        SELECT j.queue, count(*) AS n FROM jobq.jobs AS j WHERE j.status = 'running' GROUP BY j.queue
    ), failed AS (
        SELECT j.queue, count(*) AS n FROM jobq.jobs AS j WHERE j.status = 'failed' GROUP BY j.queue
    ), waiting AS (
        -- from jobq.job_waits, each job looked up by id (a scalar subquery
        -- is never turned into a join that could scan jobq.jobs)
        SELECT l.queue, count(*) AS n
          FROM (SELECT (SELECT j.queue FROM jobq.jobs AS j WHERE j.id = w.id AND j.status = 'waiting') AS queue
                  FROM jobq.job_waits AS w) AS l
         WHERE l.queue IS NOT NULL
         GROUP BY l.queue
    ), finished AS (
        -- per queue, from one probe of jobs_status_idx per state and queue
        -- and an index range of the rows past retention, at most 100,000
        SELECT f.queue,
               sum((SELECT count(*)
                      FROM (SELECT FROM jobq.jobs AS j
                             WHERE j.status = f.status AND j.status IN ('done', 'failed', 'cancelled')
                               AND j.queue = f.queue AND j.finished_at < statement_timestamp() - f.retention
                             LIMIT 100000) AS past)) AS past,
               extract(epoch FROM statement_timestamp()
                                  - min((SELECT min(j.finished_at) FROM jobq.jobs AS j
                                          WHERE j.status = f.status AND j.status IN ('done', 'failed', 'cancelled')
                                            AND j.queue = f.queue))) AS oldest
          FROM jobq._finished_queues() AS f
         GROUP BY f.queue
    ), queues AS (
        SELECT q.queue FROM queued AS q
        UNION SELECT r.queue FROM running AS r
        UNION SELECT f.queue FROM failed AS f
        UNION SELECT w.queue FROM waiting AS w
        UNION SELECT d.queue FROM finished AS d
        UNION SELECT s.queue FROM jobq.queue_settings AS s
    ), per_queue AS (
        SELECT q.queue, coalesce(qd.runnable, 0) AS runnable, coalesce(qd.scheduled, 0) AS scheduled,
               coalesce(r.n, 0) AS running, coalesce(w.n, 0) AS waiting, coalesce(f.n, 0) AS failed,
               coalesce(qd.oldest, 0) AS oldest, coalesce(s.paused, false) AS paused,
               coalesce(d.past, 0) AS past_retention, coalesce(d.oldest, 0) AS oldest_finished
          FROM queues AS q
          LEFT JOIN queued AS qd ON qd.queue = q.queue
          LEFT JOIN running AS r ON r.queue = q.queue
          LEFT JOIN failed AS f ON f.queue = q.queue
          LEFT JOIN waiting AS w ON w.queue = q.queue
          LEFT JOIN finished AS d ON d.queue = q.queue
          LEFT JOIN jobq.queue_settings AS s ON s.queue = q.queue
    ), activity AS (
        SELECT extract(epoch FROM jobq._oldest_transaction_age()) AS oldest_transaction,
               max(age(a.backend_xmin)) AS oldest_xmin
          FROM pg_stat_activity AS a
         WHERE a.pid <> pg_backend_pid()
    )
    SELECT m.metric, p.queue, m.value
      FROM per_queue AS p
     CROSS JOIN LATERAL (VALUES ('jobs_runnable', p.runnable::float8),
                                ('jobs_scheduled', p.scheduled::float8),
                                ('jobs_running', p.running::float8),
                                ('jobs_waiting', p.waiting::float8),
                                ('jobs_failed', p.failed::float8),
                                ('oldest_runnable_age_seconds', p.oldest::float8),
                                ('paused', CASE WHEN p.paused THEN 1 ELSE 0 END::float8),
                                ('jobs_past_retention', p.past_retention::float8),
                                ('oldest_finished_age_seconds', p.oldest_finished::float8)) AS m(metric, value)
    UNION ALL
    SELECT m.metric, NULL, m.value
      FROM pg_stat_user_tables AS s
     CROSS JOIN activity AS a
     CROSS JOIN LATERAL (VALUES ('live_tuples', s.n_live_tup::float8),
                                ('dead_tuples', s.n_dead_tup::float8),
                                ('table_bytes', pg_total_relation_size('jobq.jobs'::regclass)::float8),
                                ('index_bytes', pg_indexes_size('jobq.jobs'::regclass)::float8),
                                ('last_vacuum_timestamp_seconds',
                                 extract(epoch FROM greatest(s.last_autovacuum, s.last_vacuum))::float8),
                                ('oldest_transaction_age_seconds', coalesce(a.oldest_transaction, 0)::float8),
                                ('oldest_xmin_age', coalesce(a.oldest_xmin, 0)::float8)) AS m(metric, value)
     WHERE s.relid = 'jobq.jobs'::regclass
       AND m.value IS NOT NULL
$$;
COMMENT ON FUNCTION jobq.metrics() IS
    'The queue''s state for a scraper, per queue: jobs_runnable, jobs_scheduled, jobs_running, jobs_waiting, jobs_failed, oldest_runnable_age_seconds, paused, jobs_past_retention, oldest_finished_age_seconds; for the table (queue NULL): live_tuples, dead_tuples, table_bytes, index_bytes, last_vacuum_timestamp_seconds, oldest_transaction_age_seconds, oldest_xmin_age. Reads partial indexes only, never the finished jobs.';

----------------------------------------------------------------------------
-- Retention from the tick
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
 * (jobq._tick(statement_timestamp())); then retention: at most 100,000
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
CREATE OR REPLACE FUNCTION jobq.tick()
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
    'Enqueue the occurrences of schedules due within the next minute (and missed ones, by catch_up), then delete up to 100,000 finished jobs whose retention ended; returns how many jobs it enqueued. Run by workers or pg_cron.';

----------------------------------------------------------------------------
-- The soak with a held snapshot (issue 25, section 3): forward mode lasts
-- in proportion to the bloat its scan met, and when it ends one claim
-- decides anew while the others go on forward (jobq.reap's at_most_every,
-- the workers' other half of it, is above)
----------------------------------------------------------------------------

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
CREATE OR REPLACE FUNCTION jobq.claim(queue text, n integer, worker text,
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

----------------------------------------------------------------------------
-- Grants: each role keeps its level.  A new function is granted to every
-- role that may execute the one it serves: jobq.register_waiter to those
-- that may execute jobq.wait(queue, worker, up_to) (the worker level),
-- jobq._delete_jobs and jobq._delete_rows, which jobq.purge calls with its
-- caller's rights, to those that may execute jobq.purge (the admin level),
-- jobq._oldest_transaction_age, which the view jobq.health calls with its
-- reader's rights, and jobq._retention, which the view jobq.queues calls
-- so, to those that may execute jobq._queues (the monitor and admin
-- levels), and the new jobq.configure_queue to those that may execute the
-- old one (the admin level).  An upgrade run by a superuser restores the initial
-- privileges its grants changed, so that pg_dump keeps them; otherwise it
-- says which roles a dump would leave without them.
DO $$
DECLARE
    change  record;
    initial aclitem[];
    grantee text;
    kept    text[] := '{}';  -- grantees whose grants a dump would leave out
BEGIN
    FOR change IN
        SELECT c.old::pg_catalog.regprocedure AS old, c.new::pg_catalog.regprocedure AS new
          FROM (VALUES
                ('jobq.wait(text, text, interval)', 'jobq.register_waiter(text, text, interval)'),
                ('jobq.purge(interval, integer, boolean)', 'jobq._delete_jobs(bigint[])'),
                ('jobq.purge(interval, integer, boolean)', 'jobq._delete_rows(bigint[])'),
                ('jobq._queues()', 'jobq._oldest_transaction_age()'),
                ('jobq._queues()', 'jobq._retention(interval, text[], text)'),
                ('jobq.reap(interval)', 'jobq.reap(interval, interval)'),
                ('jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval)',
                 'jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval, interval, interval, interval, text[])')) AS c(old, new)
    LOOP
        SELECT i.initprivs INTO initial
          FROM pg_catalog.pg_init_privs AS i
         WHERE i.objoid OPERATOR(pg_catalog.=) change.new::pg_catalog.oid
           AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
           AND i.objsubid OPERATOR(pg_catalog.=) 0;
        FOR grantee IN
            SELECT a.grantee::pg_catalog.regrole::text
              FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
             WHERE p.oid OPERATOR(pg_catalog.=) change.old
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
               AND a.grantee OPERATOR(pg_catalog.<>) 0
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', change.new, grantee);
            IF NOT grantee OPERATOR(pg_catalog.=) ANY (kept) THEN
                kept := kept OPERATOR(pg_catalog.||) grantee;
            END IF;
        END LOOP;
        IF pg_catalog.has_table_privilege('pg_catalog.pg_init_privs', 'UPDATE') THEN
            UPDATE pg_catalog.pg_init_privs AS i
               SET initprivs = initial
             WHERE i.objoid OPERATOR(pg_catalog.=) change.new::pg_catalog.oid
               AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
               AND i.objsubid OPERATOR(pg_catalog.=) 0;
            kept := '{}';
        END IF;
    END LOOP;
    IF pg_catalog.cardinality(kept) OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING 'pgjobq 0.10.0 granted % the new jobq.register_waiter, jobq.configure_queue and jobq.reap, and '
                      'the internal functions of purge, health and queues', pg_catalog.array_to_string(kept, ', ')
            USING DETAIL = 'An upgrade not run by a superuser records its grants as initial privileges, which '
                           'pg_dump leaves out.',
                  HINT = 'After restoring a dump of this database, run jobq.grant_worker, grant_monitor or '
                         'grant_admin again for these roles.';
    END IF;
END
$$;

-- the old signatures, replaced above
DROP FUNCTION jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval);
DROP FUNCTION jobq.reap(interval);
