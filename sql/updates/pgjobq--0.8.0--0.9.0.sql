/* sql/updates/pgjobq--0.8.0--0.9.0.sql: pgjobq 0.8.0 -> 0.9.0.
 * Tasks, and failing for good: jobq.jobs gains task (the named job type of
 * the Python client that a worker dispatches on; NULL for a plain job),
 * which jobq.enqueue, enqueue_many, enqueue_flow (a step's "task") and
 * jobq.schedule (for every occurrence) take, and which claim, claim_any,
 * complete_and_claim, fail and reap return as the last column of the rows
 * of jobq.jobs, and jobq.job (wait, watch) as the last attribute of
 * jobq.job_state; jobq.fail(..., retry => false) fails a job at once,
 * whatever attempts are left.  Written once; it never changes after 0.9.0
 * is released.  The definitions are copied from sql/src/ as 0.9.0 has them.
 *
 * Functions that gain an argument (last, with a default, so that every call
 * made to 0.8.0 means what it did) are created beside the old ones, given
 * the old ones' grants, and the old ones dropped at the end.  The columns
 * are added NULL, without a default: no table is rewritten, but ALTER
 * TABLE holds jobq.jobs' ACCESS EXCLUSIVE lock for a moment (enqueues and
 * claims wait meanwhile, and it waits for every open transaction that has
 * touched the table). */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.9.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Types and views: task, added last.  jobq.jobs gains it at the very end
-- of this script (see there).
----------------------------------------------------------------------------

ALTER TYPE jobq.job_state ADD ATTRIBUTE task text;
COMMENT ON TYPE jobq.job_state IS
    'A job''s public state, as jobq.job, jobq.wait and jobq.watch return it (max_attempts with the queue''s default filled in; task NULL for a plain job).';

ALTER TABLE jobq.schedule_settings ADD COLUMN task text;
COMMENT ON COLUMN jobq.schedule_settings.task IS 'The task of its jobs (the job type a worker dispatches on); NULL: plain jobs.';

-- the view gains task at its end (CREATE OR REPLACE VIEW may only add columns there)
CREATE OR REPLACE VIEW jobq.schedules AS
SELECT s.name, s.queue, s.payload, s.cron, s.timezone, s.every, s.priority, s.max_attempts, s.headers,
       s.catch_up, jobq._schedule_next(s.cron, s.timezone, s.every, pg_catalog.now()) AS next_run,
       s.next_at, s.created_at, s.updated_at, s.task
  FROM jobq.schedule_settings AS s;
COMMENT ON COLUMN jobq.schedules.task IS 'The task of its jobs (NULL: plain jobs).';

----------------------------------------------------------------------------
-- New functions, as sql/src/ has them in 0.9.0: the task check, and the
-- functions that take a task or retry (beside the old ones until the end)
----------------------------------------------------------------------------

/*
 * jobq._check_task(task): returns nothing; raises 22023 unless task is 1 to
 * 200 characters matching ^[A-Za-z_][A-Za-z0-9_.:-]*$ (a task names a job
 * type of the Python client: send_welcome, billing.invoice:v2).  NULL, a
 * job without a task, passes: STRICT, and the functions that take a task
 * call it only for one that is not NULL (jobq.enqueue, a hot path, only to
 * raise: it tests the same inline), so a plain job never pays for it.  The
 * length is tested apart: a bound in the pattern ({0,199}) made each match
 * cost some 100,000 instructions, PostgreSQL's regular expressions
 * expanding it into as many states.
 */
CREATE FUNCTION jobq._check_task(task text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _check_task.task !~ '^[A-Za-z_][A-Za-z0-9_.:-]*$' OR length(_check_task.task) > 200 THEN
        RAISE EXCEPTION 'task must be 1 to 200 characters of A-Z, a-z, 0-9, _, ., : and -, starting with a letter or _, got %',
                        quote_literal(left(_check_task.task, 80))
            USING ERRCODE = '22023',
                  HINT = 'A task names a job type, such as send_welcome or billing.invoice:v2.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_task(text) IS 'Internal: raises 22023 unless task is a valid task name (NULL passes).';
REVOKE ALL ON FUNCTION jobq._check_task(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_task(text) TO @extowner@;

/*
 * jobq._enqueue_unique(queue, payload, priority, run_at, max_attempts,
 * unique_key, unique_scope, on_conflict, headers, task): enqueues a job
 * with a unique key, or resolves the conflict with the job that holds the
 * key (see jobq.enqueue).  Returns id (the new job, the holder, or NULL for
 * skip) and changed (whether a job was inserted or replaced, so that the
 * caller wakes the queue's workers).  The key is taken by jobq._take_key;
 * replace locks the holder (FOR NO KEY UPDATE, waiting), so a claim in
 * flight finishes first and the holder's status is current.  The caller
 * checks the arguments.  Raises JQ004 (on_conflict raise), 40001 (as
 * jobq._take_key, or 5 rounds of holders leaving).
 */
CREATE FUNCTION jobq._enqueue_unique(
    queue text, payload jsonb, priority integer, run_at timestamptz, max_attempts integer,
    unique_key text, unique_scope text, on_conflict text, headers jsonb, task text,
    OUT id bigint, OUT changed boolean)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id        bigint := nextval('jobq.jobs_id_seq'::regclass);
    holder_id     bigint;
    holder_status text;
BEGIN
    FOR round IN 1..5 LOOP
        holder_id := jobq._take_key(_enqueue_unique.queue, _enqueue_unique.unique_key,
                                    _enqueue_unique.unique_scope = 'until_done', new_id);
        IF holder_id IS NULL THEN
            INSERT INTO jobq.jobs (id, queue, payload, priority, run_at, max_attempts, headers, control, task)
            VALUES (new_id, _enqueue_unique.queue, _enqueue_unique.payload, _enqueue_unique.priority,
                    _enqueue_unique.run_at, _enqueue_unique.max_attempts, _enqueue_unique.headers,
                    4,  -- enqueued with a unique key
                    _enqueue_unique.task);
            id := new_id;
            changed := true;
            RETURN;
        END IF;

        changed := false;
        IF _enqueue_unique.on_conflict = 'return' THEN
            id := holder_id;
            RETURN;
        ELSIF _enqueue_unique.on_conflict = 'skip' THEN
            id := NULL;
            RETURN;
        ELSIF _enqueue_unique.on_conflict = 'raise' THEN
            SELECT j.status INTO holder_status FROM jobq.jobs AS j WHERE j.id = holder_id;
            RAISE EXCEPTION 'unique key % of queue % is held by job %', quote_literal(_enqueue_unique.unique_key),
                            quote_literal(_enqueue_unique.queue), holder_id
                USING ERRCODE = 'JQ004',
                      DETAIL = format('Job %s is %s.', holder_id, holder_status),
                      HINT = 'on_conflict => ''return'' returns its id instead.';
        END IF;

        -- replace (debounce): the holder, locked, as it is now
        SELECT j.status INTO holder_status FROM jobq.jobs AS j WHERE j.id = holder_id FOR NO KEY UPDATE;
        IF holder_status = 'queued' THEN
            UPDATE jobq.jobs AS j
               SET payload = _enqueue_unique.payload, priority = _enqueue_unique.priority,
                   run_at = _enqueue_unique.run_at, max_attempts = _enqueue_unique.max_attempts,
                   headers = _enqueue_unique.headers, task = _enqueue_unique.task
             WHERE j.id = holder_id;
            id := holder_id;
            changed := true;
            RETURN;
        ELSIF holder_status = 'running' THEN
            -- the running job is asked to stop, as by jobq.cancel (it ends
            -- done if it completes, cancelled whatever else happens to it:
            -- it never runs again), and the next round gives the key to
            -- the new job
            UPDATE jobq.jobs AS j
               SET control = coalesce(j.control, 0) | 1
             WHERE j.id = holder_id;
            PERFORM pg_notify('jobq_' || _enqueue_unique.queue, 'cancel:' || holder_id);
            UPDATE jobq.unique_keys AS k  -- locked by jobq._take_key
               SET job_id = new_id, until_done = _enqueue_unique.unique_scope = 'until_done'
             WHERE k.queue = _enqueue_unique.queue AND k.unique_key = _enqueue_unique.unique_key;
        ELSIF holder_status = 'done'
              AND EXISTS (SELECT FROM jobq.unique_keys AS k  -- locked by jobq._take_key
                           WHERE k.queue = _enqueue_unique.queue AND k.unique_key = _enqueue_unique.unique_key
                             AND k.job_id = holder_id AND k.until_done) THEN
            id := holder_id;  -- done, and it counts (until_done): nothing left to replace
            RETURN;
        END IF;
        -- the holder left the scope meanwhile, or gave up the key: take it again
    END LOOP;
    RAISE EXCEPTION 'unique key % of queue % changed hands too often to settle', quote_literal(_enqueue_unique.unique_key),
                    quote_literal(_enqueue_unique.queue)
        USING ERRCODE = '40001',
              HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text) IS
    'Internal: enqueue a job with a unique key, or resolve the conflict with the job holding it.';
REVOKE ALL ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text) TO @extowner@;

/*
 * jobq._enqueue_linked(queue, payload, priority, run_at, max_attempts,
 * unique_key, unique_scope, on_conflict, headers, concurrency_key,
 * depends_on, on_parent_failure, task): for jobq.enqueue, a job with a
 * concurrency key or parents: its id, and runnable (it is queued, and new
 * or changed: worth a wake-up).  The job is 'waiting' while a parent has not
 * ended, 'cancelled' at once when a parent already ended failed or
 * cancelled (and on_parent_failure is 'cancel'), else 'queued'.  The caller
 * has checked the other options.  Locks: the parents FOR NO KEY UPDATE, in
 * id order, until the transaction ends (so a parent finishing meanwhile
 * waits, then sees its new dependent); the rows of jobq.enqueue otherwise.
 * Raises what jobq._check_link_options raises, and JQ002 (a parent that
 * does not exist).
 */
CREATE FUNCTION jobq._enqueue_linked(
    queue text, payload jsonb, priority integer, run_at timestamptz, max_attempts integer,
    unique_key text, unique_scope text, on_conflict text, headers jsonb,
    concurrency_key text, depends_on bigint[], on_parent_failure text, task text,
    OUT id bigint, OUT runnable boolean)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parent_ids      bigint[] := '{}'::bigint[];
    parent_statuses text[] := '{}'::text[];
    missing         bigint;
    failed_parent   bigint;
    failed_status   text;
    open_parents    bigint[];
    new_status      text := 'queued';
    control_bits    smallint;
BEGIN
    PERFORM jobq._check_link_options(_enqueue_linked.concurrency_key, _enqueue_linked.depends_on,
                                     _enqueue_linked.on_parent_failure, _enqueue_linked.unique_key);

    IF cardinality(_enqueue_linked.depends_on) > 0 THEN
        -- the parents, locked in id order: one finishing now waits for this
        -- transaction, and then sees the dependent (jobq._finish_linked)
        SELECT coalesce(array_agg(p.id ORDER BY p.id), '{}'), coalesce(array_agg(p.status ORDER BY p.id), '{}')
          INTO parent_ids, parent_statuses
          FROM (SELECT j.id, j.status
                  FROM jobq.jobs AS j
                 WHERE j.id = ANY (_enqueue_linked.depends_on)
                 ORDER BY j.id
                   FOR NO KEY UPDATE) AS p;
        SELECT d.id INTO missing
          FROM unnest(_enqueue_linked.depends_on) WITH ORDINALITY AS d(id, step_no)
         WHERE NOT d.id = ANY (parent_ids)
         ORDER BY d.step_no
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'depends_on names job %, which does not exist', missing
                USING ERRCODE = 'JQ002';
        END IF;
        open_parents := ARRAY(SELECT p.id FROM unnest(parent_ids, parent_statuses) AS p(id, status)
                               WHERE p.status IN ('queued', 'waiting', 'running') ORDER BY p.id);
        SELECT p.id, p.status INTO failed_parent, failed_status
          FROM unnest(parent_ids, parent_statuses) AS p(id, status)
         WHERE p.status IN ('failed', 'cancelled')
         ORDER BY p.id
         LIMIT 1;
        IF failed_parent IS NOT NULL AND _enqueue_linked.on_parent_failure = 'cancel' THEN
            new_status := 'cancelled';
        ELSIF cardinality(open_parents) > 0 THEN
            new_status := 'waiting';
        END IF;
    END IF;
    control_bits := (CASE WHEN _enqueue_linked.concurrency_key IS NOT NULL THEN 16 ELSE 0 END
                     | CASE WHEN cardinality(parent_ids) > 0 THEN 32 ELSE 0 END)::smallint;

    IF _enqueue_linked.unique_key IS NULL THEN
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, status, control,
                               finished_at, last_error, task)
        VALUES (_enqueue_linked.queue, _enqueue_linked.payload, _enqueue_linked.priority, _enqueue_linked.run_at,
                _enqueue_linked.max_attempts, _enqueue_linked.headers, new_status, nullif(control_bits, 0),
                CASE WHEN new_status = 'cancelled' THEN statement_timestamp() END,
                CASE WHEN new_status = 'cancelled'
                     THEN format('cancelled: parent job %s had ended %s', failed_parent, failed_status) END,
                _enqueue_linked.task)
        RETURNING jobq.jobs.id INTO id;
        runnable := new_status = 'queued';
    ELSE
        -- a unique job with a concurrency key: the key goes with the job
        -- inserted or replaced, not with a holder returned as it is
        SELECT u.id, u.changed INTO id, runnable
          FROM jobq._enqueue_unique(_enqueue_linked.queue, _enqueue_linked.payload, _enqueue_linked.priority,
                                    _enqueue_linked.run_at, _enqueue_linked.max_attempts, _enqueue_linked.unique_key,
                                    _enqueue_linked.unique_scope, _enqueue_linked.on_conflict,
                                    _enqueue_linked.headers, _enqueue_linked.task) AS u;
        IF NOT runnable THEN
            RETURN;
        END IF;
        UPDATE jobq.jobs AS j SET control = coalesce(j.control, 0) | 16 WHERE j.id = _enqueue_linked.id;
    END IF;

    IF _enqueue_linked.concurrency_key IS NOT NULL THEN
        INSERT INTO jobq.concurrency_keys (id, queue, concurrency_key, priority)
        VALUES (_enqueue_linked.id, _enqueue_linked.queue, _enqueue_linked.concurrency_key, _enqueue_linked.priority)
        ON CONFLICT ON CONSTRAINT concurrency_keys_pkey DO UPDATE
           SET concurrency_key = excluded.concurrency_key, priority = excluded.priority;
    END IF;
    IF cardinality(parent_ids) > 0 THEN
        INSERT INTO jobq.job_deps (parent, child, settled)
        SELECT p.id, _enqueue_linked.id, NOT p.id = ANY (open_parents)
          FROM unnest(parent_ids) AS p(id);
        IF new_status = 'waiting' THEN
            INSERT INTO jobq.job_waits (id, pending, on_parent_failure)
            VALUES (_enqueue_linked.id, cardinality(open_parents), _enqueue_linked.on_parent_failure);
            UPDATE jobq.jobs AS j
               SET control = coalesce(j.control, 0) | 8
             WHERE j.id = ANY (open_parents) AND coalesce(j.control & 8 = 0, true);
        END IF;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._enqueue_linked(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text) IS
    'Internal: jobq.enqueue for a job with a concurrency key or parents.';
REVOKE ALL ON FUNCTION jobq._enqueue_linked(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._enqueue_linked(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text) TO @extowner@;

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
 * and what jobq._check_job_options and jobq._enqueue_linked refuse), 54000
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
CREATE FUNCTION jobq.enqueue(
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
REVOKE ALL ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text) TO @extowner@;

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
 * multidimensional array or keys of another length; inserts nothing then.
 */
CREATE FUNCTION jobq.enqueue_many(
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
REVOKE ALL ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[], text) TO @extowner@;

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
 * jobq.schedule(name, queue, payload, cron, timezone, every, priority,
 * max_attempts, headers, catch_up, task): the schedule's row of
 * jobq.schedules (its task last).
 * Creates the schedule name, or replaces it: then the queued occurrences
 * of the old definition (not yet started: running ones finish) are
 * cancelled, and the new one starts afresh, its first occurrence the first
 * after now() (no catch-up at creation).  Exactly one of cron (five fields,
 * evaluated in timezone) and every (occurrences at the multiples of it
 * since the Unix epoch).  Each occurrence becomes a job of queue with
 * payload, priority, max_attempts, headers (plus "schedule": name and
 * "occurrence": its time) and task (0.9.0; NULL: plain jobs), enqueued by
 * jobq.tick.  Locks the schedule's row, and the queued jobs it cancels.
 * Raises 22004 (NULL name, queue, payload, timezone, priority or
 * catch_up), 22023 (name not 1 to 200 characters; bad queue name; payload
 * or headers not a JSON object; neither or both of cron and every; a bad
 * cron, naming the field, or one that never matches; an unknown timezone;
 * every not whole seconds from 1 second to 366 days, or with months;
 * priority or max_attempts out of range; catch_up not latest, all or skip;
 * a bad task name), 54000 (payload or headers over 1 MiB).
 */
CREATE FUNCTION jobq.schedule(
    name         text,
    queue        text,
    payload      jsonb    DEFAULT '{}',
    cron         text     DEFAULT NULL,
    timezone     text     DEFAULT 'UTC',
    every        interval DEFAULT NULL,
    priority     integer  DEFAULT 0,
    max_attempts integer  DEFAULT NULL,
    headers      jsonb    DEFAULT NULL,
    catch_up     text     DEFAULT 'latest',
    task         text     DEFAULT NULL)
RETURNS jobq.schedules
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    old_queue text;
    outcome   jobq.schedules;
BEGIN
    IF schedule.name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF length(schedule.name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'name must be 1 to 200 characters, got %', length(schedule.name) USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._check_queue(schedule.queue);
    PERFORM jobq._check_payload(schedule.payload, 'payload');
    IF (schedule.cron IS NULL) = (schedule.every IS NULL) THEN
        RAISE EXCEPTION 'exactly one of cron and every must be given, got %',
                        CASE WHEN schedule.cron IS NULL THEN 'neither' ELSE 'both' END
            USING ERRCODE = '22023';
    END IF;
    IF schedule.cron IS NOT NULL THEN
        PERFORM jobq._cron_parse(schedule.cron);
    END IF;
    PERFORM jobq._check_timezone(schedule.timezone, true);
    IF schedule.every IS NOT NULL
       AND (date_part('month', schedule.every) <> 0 OR date_part('year', schedule.every) <> 0
            OR extract(epoch FROM schedule.every) < 1 OR extract(epoch FROM schedule.every) > 366 * 86400
            OR extract(epoch FROM schedule.every) <> floor(extract(epoch FROM schedule.every))) THEN
        RAISE EXCEPTION 'every must be a whole number of seconds from 1 second to 366 days, without months, got %',
                        schedule.every
            USING ERRCODE = '22023';
    END IF;
    PERFORM jobq._check_options(schedule.priority, now(), schedule.max_attempts);
    IF schedule.headers IS NOT NULL THEN
        PERFORM jobq._check_job_options(NULL, 'until_done', 'skip', schedule.headers);
        -- with what each job adds
        PERFORM jobq._check_payload(schedule.headers || jsonb_build_object('schedule', schedule.name,
                                                                           'occurrence', '2000-01-01T00:00:00Z'),
                                    'headers');
    END IF;
    IF schedule.catch_up IS NULL THEN
        RAISE EXCEPTION 'catch_up must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF schedule.catch_up <> ALL (ARRAY['latest', 'all', 'skip']) THEN
        RAISE EXCEPTION 'catch_up must be latest, all or skip, got %', quote_literal(left(schedule.catch_up, 80))
            USING ERRCODE = '22023';
    END IF;
    IF schedule.task IS NOT NULL THEN
        PERFORM jobq._check_task(schedule.task);
    END IF;

    SELECT s.queue INTO old_queue FROM jobq.schedule_settings AS s WHERE s.name = schedule.name FOR UPDATE;
    INSERT INTO jobq.schedule_settings AS s (name, queue, payload, cron, timezone, every, priority, max_attempts,
                                             headers, catch_up, next_at, task)
    VALUES (schedule.name, schedule.queue, schedule.payload, schedule.cron, schedule.timezone, schedule.every,
            schedule.priority, schedule.max_attempts, schedule.headers, schedule.catch_up,
            jobq._schedule_next(schedule.cron, schedule.timezone, schedule.every, now()), schedule.task)
    ON CONFLICT ON CONSTRAINT schedule_settings_pkey DO UPDATE
       SET queue = excluded.queue, payload = excluded.payload, cron = excluded.cron,
           timezone = excluded.timezone, every = excluded.every, priority = excluded.priority,
           max_attempts = excluded.max_attempts, headers = excluded.headers, catch_up = excluded.catch_up,
           next_at = excluded.next_at, updated_at = now(), task = excluded.task;
    -- the row is ours until the commit (ticks skip it): whatever is queued
    -- for the name now belongs to an older definition
    PERFORM jobq._cancel_occurrences(schedule.name, schedule.queue);
    IF old_queue IS DISTINCT FROM schedule.queue AND old_queue IS NOT NULL THEN
        PERFORM jobq._cancel_occurrences(schedule.name, old_queue);
    END IF;

    SELECT v.* INTO outcome FROM jobq.schedules AS v WHERE v.name = schedule.name;
    RETURN outcome;
END
$$;
COMMENT ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text, text) IS
    'Create or replace a schedule: a cron expression in a time zone, or a period (every); jobq.tick enqueues its occurrences as jobs of queue, with its payload, priority, max_attempts, headers and task. A replace cancels the old definition''s queued occurrences. Returns its row of jobq.schedules.';
REVOKE ALL ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text, text) TO @extowner@;

----------------------------------------------------------------------------
-- Functions whose definitions change (grants kept)
----------------------------------------------------------------------------

/*
 * jobq.enqueue_flow(queue, steps): the ids of the jobs enqueued, one per
 * step, in the order of steps, all in the caller's transaction.  steps is
 * a JSON array of objects, each a job: payload (required), and optionally
 * name (1 to 200 characters, unique in the flow), queue (default: the
 * queue argument), priority, run_at, max_attempts, headers,
 * concurrency_key, on_parent_failure, task (0.9.0: the job type a worker
 * dispatches on, a string as jobq.enqueue takes it), and depends_on: an
 * array of the names of steps before this one and of ids of existing
 * jobs.  Each step is enqueued as jobq.enqueue would, once every step has
 * been checked: a bad one enqueues nothing.  Locks what jobq.enqueue locks.  Raises
 * 22004 (NULL argument), 22023 (steps not an array of 1 to 1,000 objects,
 * an unknown key, a value of the wrong JSON type, a name repeated or not
 * naming an earlier step, a bad task name), JQ002, and what jobq.enqueue
 * raises, each message prefixed with the step, as steps[0].
 */
CREATE OR REPLACE FUNCTION jobq.enqueue_flow(queue text, steps jsonb)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers enqueue without privileges on jobq.jobs; it
-- checks its steps and enqueues them with jobq.enqueue, nothing else.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    known_keys constant text[] := ARRAY['name', 'payload', 'queue', 'priority', 'run_at', 'max_attempts',
                                        'headers', 'concurrency_key', 'depends_on', 'on_parent_failure',
                                        'task'];
    step       jsonb;
    step_no   integer;
    ids        bigint[] := '{}'::bigint[];
    names      jsonb := '{}'::jsonb;   -- step name -> its position in steps
    parents    bigint[];
    parent     jsonb;
    bad        text;
    missing    bigint;
    problem    text;
    state      text;
BEGIN
    PERFORM jobq._check_queue(enqueue_flow.queue);
    IF enqueue_flow.steps IS NULL THEN
        RAISE EXCEPTION 'steps must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF jsonb_typeof(enqueue_flow.steps) <> 'array' OR jsonb_array_length(enqueue_flow.steps) NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'steps must be a JSON array of 1 to 1000 objects, got %',
                        CASE WHEN jsonb_typeof(enqueue_flow.steps) = 'array'
                             THEN format('%s elements', jsonb_array_length(enqueue_flow.steps))
                             ELSE 'a JSON ' || jsonb_typeof(enqueue_flow.steps) END
            USING ERRCODE = '22023';
    END IF;
    -- first every step checked, so that a bad one enqueues nothing (and
    -- takes no id); then every step enqueued
    FOR step, step_no IN
        SELECT s.value, (s.ordinality - 1)::integer FROM jsonb_array_elements(enqueue_flow.steps) WITH ORDINALITY AS s
    LOOP
        IF jsonb_typeof(step) <> 'object' THEN
            RAISE EXCEPTION 'steps[%] must be a JSON object, got a JSON %', step_no, jsonb_typeof(step)
                USING ERRCODE = '22023';
        END IF;
        SELECT k INTO bad FROM jsonb_object_keys(step) AS k WHERE NOT k = ANY (known_keys) ORDER BY k LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'steps[%] has an unknown key %', step_no, quote_literal(left(bad, 80))
                USING ERRCODE = '22023',
                      HINT = 'A step may have: ' || array_to_string(known_keys, ', ') || '.';
        END IF;
        SELECT t.k INTO bad
          FROM (VALUES ('name', 'string'), ('queue', 'string'), ('priority', 'number'), ('run_at', 'string'),
                       ('max_attempts', 'number'), ('concurrency_key', 'string'), ('depends_on', 'array'),
                       ('on_parent_failure', 'string'), ('task', 'string')) AS t(k, kind)
         WHERE step ? t.k AND jsonb_typeof(step -> t.k) NOT IN (t.kind, 'null')
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'steps[%].% must be a JSON %, got a JSON %', step_no, bad,
                            CASE WHEN bad IN ('priority', 'max_attempts') THEN 'integer'
                                 WHEN bad = 'depends_on' THEN 'array' ELSE 'string' END,
                            jsonb_typeof(step -> bad)
                USING ERRCODE = '22023';
        END IF;
        IF jsonb_typeof(step -> 'name') = 'string' THEN
            IF length(step ->> 'name') NOT BETWEEN 1 AND 200 THEN
                RAISE EXCEPTION 'steps[%].name must be 1 to 200 characters, got %', step_no, length(step ->> 'name')
                    USING ERRCODE = '22023';
            END IF;
            IF names ? (step ->> 'name') THEN
                RAISE EXCEPTION 'steps[%].name % is the name of an earlier step', step_no,
                                quote_literal(step ->> 'name')
                    USING ERRCODE = '22023';
            END IF;
            names := names || jsonb_build_object(step ->> 'name', step_no);
        END IF;
        parents := '{}';
        FOR parent IN SELECT d.value FROM jsonb_array_elements(coalesce(nullif(step -> 'depends_on', 'null'), '[]')) AS d LOOP
            IF jsonb_typeof(parent) = 'string' AND names ? (parent #>> '{}')
               AND (names ->> (parent #>> '{}'))::integer < step_no THEN
                CONTINUE;  -- an earlier step
            ELSIF jsonb_typeof(parent) = 'string' THEN
                RAISE EXCEPTION 'steps[%].depends_on names %, which is not an earlier step', step_no,
                                quote_literal(left(parent #>> '{}', 80))
                    USING ERRCODE = '22023',
                          HINT = 'A step may depend on the steps before it (by name) and on existing jobs (by id).';
            ELSIF jsonb_typeof(parent) = 'number' AND (parent #>> '{}') ~ '^[0-9]{1,19}$'
                  AND (parent #>> '{}')::numeric <= 9223372036854775807 THEN
                parents := parents || (parent #>> '{}')::bigint;
            ELSE
                RAISE EXCEPTION 'steps[%].depends_on must hold step names and job ids, got %', step_no,
                                left(parent::text, 80)
                    USING ERRCODE = '22023';
            END IF;
        END LOOP;
        BEGIN
            PERFORM jobq._check_queue(coalesce(step ->> 'queue', enqueue_flow.queue));
            PERFORM jobq._check_payload(step -> 'payload', 'payload');
            PERFORM jobq._check_options(coalesce((step ->> 'priority')::integer, 0),
                                        coalesce((step ->> 'run_at')::timestamptz, now()),
                                        (step ->> 'max_attempts')::integer);
            PERFORM jobq._check_job_options(NULL, 'active', 'return', nullif(step -> 'headers', 'null'));
            PERFORM jobq._check_link_options(step ->> 'concurrency_key', parents,
                                             coalesce(step ->> 'on_parent_failure', 'cancel'), NULL);
            IF step ->> 'task' IS NOT NULL THEN
                PERFORM jobq._check_task(step ->> 'task');
            END IF;
            SELECT p.id INTO missing
              FROM unnest(parents) AS p(id)
             WHERE NOT EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = p.id)
             LIMIT 1;
            IF FOUND THEN
                RAISE EXCEPTION 'depends_on names job %, which does not exist', missing
                    USING ERRCODE = 'JQ002';
            END IF;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS problem = MESSAGE_TEXT, state = RETURNED_SQLSTATE;
            IF state IN ('22P02', '22003', '22007', '22008') THEN
                state := '22023';  -- a value that is not the number or time it should be
            END IF;
            RAISE EXCEPTION 'steps[%]: %', step_no, problem USING ERRCODE = state;
        END;
    END LOOP;

    FOR step, step_no IN
        SELECT s.value, (s.ordinality - 1)::integer FROM jsonb_array_elements(enqueue_flow.steps) WITH ORDINALITY AS s
    LOOP
        -- the parents: the earlier steps' new ids, and the jobs named by id
        parents := ARRAY(
            SELECT CASE WHEN jsonb_typeof(d.value) = 'string' THEN ids[(names ->> (d.value #>> '{}'))::integer + 1]
                        ELSE (d.value #>> '{}')::bigint END
              FROM jsonb_array_elements(coalesce(nullif(step -> 'depends_on', 'null'), '[]')) WITH ORDINALITY AS d
             ORDER BY d.ordinality);
        ids := ids || jobq.enqueue(
            queue             => coalesce(step ->> 'queue', enqueue_flow.queue),
            payload           => step -> 'payload',
            priority          => coalesce((step ->> 'priority')::integer, 0),
            run_at            => coalesce((step ->> 'run_at')::timestamptz, now()),
            max_attempts      => (step ->> 'max_attempts')::integer,
            headers           => nullif(step -> 'headers', 'null'),
            concurrency_key   => step ->> 'concurrency_key',
            depends_on        => nullif(parents, '{}'),
            on_parent_failure => coalesce(step ->> 'on_parent_failure', 'cancel'),
            task              => step ->> 'task');
    END LOOP;
    RETURN ids;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_flow(text, jsonb) IS
    'Enqueue a graph of jobs in one call: steps is a JSON array of jobs (payload, and optionally name, queue, priority, run_at, max_attempts, headers, concurrency_key, on_parent_failure, task) that may depend on earlier steps (by name) and on existing jobs (by id). Returns the ids, in the order of steps.';

/*
 * jobq.job(id): the job's public state (jobq.job_state: its task last, NULL
 * for a plain job), its result read from jobq.results.  Reads the rows
 * without locking them.  Raises 22004 (NULL id), JQ002 (no such job).
 */
CREATE OR REPLACE FUNCTION jobq.job(id bigint)
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
           j.task
      INTO state.id, state.queue, state.status, state.attempts, state.max_attempts, state.result,
           state.last_error, state.run_at, state.created_at, state.finished_at, state.cancel_requested,
           state.depends_on, state.task
      FROM jobq.jobs AS j
      LEFT JOIN jobq.queue_settings AS s ON s.queue = j.queue
      LEFT JOIN jobq.results AS r ON r.id = j.id
     WHERE j.id = job.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'id %: no such job', job.id
            USING ERRCODE = 'JQ002';
    END IF;
    RETURN state;
END
$$;
COMMENT ON FUNCTION jobq.job(bigint) IS
    'A job''s public state: queue, status, attempts, max_attempts, result, last_error, run_at, created_at, finished_at, cancel_requested, depends_on (its parents), task (not its payload). JQ002: no such job.';

/*
 * jobq._enqueue_occurrence(schedule, occurrence, run_at): 1 when it
 * enqueued the occurrence as a job (with the schedule's payload, priority,
 * max_attempts, headers and task), 0 when a job of it exists already (its
 * unique key 'cron:<name>:<epoch seconds>', kept until done).  Locks and
 * raises what jobq.enqueue does.
 */
CREATE OR REPLACE FUNCTION jobq._enqueue_occurrence(schedule jobq.schedule_settings, occurrence timestamptz, run_at timestamptz)
RETURNS integer
LANGUAGE sql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN jobq.enqueue(
                   queue        => (_enqueue_occurrence.schedule).queue,
                   payload      => (_enqueue_occurrence.schedule).payload,
                   priority     => (_enqueue_occurrence.schedule).priority,
                   -- within enqueue's bounds (10 years of now) whatever the occurrence
                   run_at       => least(greatest(_enqueue_occurrence.run_at, now() - interval '3650 days'),
                                         now() + interval '3650 days'),
                   max_attempts => (_enqueue_occurrence.schedule).max_attempts,
                   unique_key   => 'cron:' || (_enqueue_occurrence.schedule).name || ':'
                                   || floor(extract(epoch FROM _enqueue_occurrence.occurrence))::bigint,
                   unique_scope => 'until_done',
                   on_conflict  => 'skip',
                   headers      => coalesce((_enqueue_occurrence.schedule).headers, '{}'::jsonb)
                                   || jsonb_build_object(
                                          'schedule', (_enqueue_occurrence.schedule).name,
                                          'occurrence', to_char(_enqueue_occurrence.occurrence AT TIME ZONE 'UTC',
                                                                'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
                   task         => (_enqueue_occurrence.schedule).task)
                IS NULL THEN 0 ELSE 1 END
$$;
COMMENT ON FUNCTION jobq._enqueue_occurrence(jobq.schedule_settings, timestamptz, timestamptz) IS
    'Internal: enqueue one occurrence of a schedule as a unique job; 1 if enqueued, 0 if it was already.';

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
                'jobq.reap(interval)',
                'jobq.tick()',
                'jobq.metrics()',
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
                                     'jobq.stats()',
                                     'jobq.cancel(bigint[], boolean)',
                                     'jobq.pause(text)',
                                     'jobq.resume(text)',
                                     'jobq.configure_queue(text, integer, interval, interval, double precision, interval, interval, text[], integer, integer, text, integer, interval)',
                                     'jobq._queues()',
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
-- jobq.hand_back, new: a job handed back for a worker that knows its task
----------------------------------------------------------------------------

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

COMMENT ON FUNCTION jobq.grant_worker(regrole) IS
    'Let role work jobs (claim, claim_any, heartbeat, complete, fail, snooze, hand_back, release and their batch forms), recover expired leases (reap), advance schedules (tick) and look jobs up (job, wait, watch); no access to the jobs table. Owner or superuser only.';

----------------------------------------------------------------------------
-- Functions whose definitions do not change, defined again: they read rows of
-- jobq.jobs from other functions (jobq.claim, jobq._acknowledge), so their
-- plans do not depend on the table, and a session that ran them before the
-- upgrade would keep plans of 0.8.0's rows ("structure of query does not
-- match function result type").  Defining them again invalidates those plans.
----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.claim_any(queues text[], n integer, worker text, lease_timeout interval DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION jobq.complete_many(ids bigint[], leases bigint[], results jsonb[] DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION jobq.complete_and_claim(ids bigint[], leases bigint[], queue text, n integer, worker text,
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

----------------------------------------------------------------------------
-- Grants: each role keeps its level.  A new function is granted to every
-- role that may execute the function it replaces (jobq.hand_back: those
-- that may execute jobq.snooze, the worker level); the admins (EXECUTE on
-- jobq.retry_failed) get jobq._check_task, which jobq.schedule calls with
-- their rights.
-- An upgrade run by a superuser restores the initial privileges its grants
-- changed, so that pg_dump keeps them; otherwise it says which roles a
-- dump would leave without them.
----------------------------------------------------------------------------

DO $$
DECLARE
    change  record;
    initial aclitem[];
    grantee text;
    kept    text[] := '{}';  -- grantees whose grants a dump would leave out
BEGIN
    FOR change IN
        SELECT c.old::pg_catalog.regprocedure AS old, c.new AS new, c.kind
          FROM (VALUES
                ('jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text)',
                 'jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text)', 'f'),
                ('jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[])',
                 'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[], text)', 'f'),
                ('jobq.fail(bigint, text, bigint, interval)', 'jobq.fail(bigint, text, bigint, interval, boolean)', 'f'),
                ('jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text)',
                 'jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text, text)', 'f'),
                ('jobq.retry_failed(text, bigint[])', 'jobq._check_task(text)', 'f'),
                ('jobq.snooze(bigint, bigint, interval)',
                 'jobq.hand_back(bigint, bigint, interval, text, interval)', 'f')) AS c(old, new, kind)
    LOOP
        SELECT i.initprivs INTO initial
          FROM pg_catalog.pg_init_privs AS i
         WHERE i.objoid OPERATOR(pg_catalog.=) CASE WHEN change.kind OPERATOR(pg_catalog.=) 'f'
                                                    THEN change.new::pg_catalog.regprocedure::pg_catalog.oid
                                                    ELSE change.new::pg_catalog.regclass::pg_catalog.oid END
           AND i.classoid OPERATOR(pg_catalog.=) CASE WHEN change.kind OPERATOR(pg_catalog.=) 'f'
                                                      THEN 'pg_catalog.pg_proc'::pg_catalog.regclass
                                                      ELSE 'pg_catalog.pg_class'::pg_catalog.regclass END
           AND i.objsubid OPERATOR(pg_catalog.=) 0;
        FOR grantee IN
            SELECT a.grantee::pg_catalog.regrole::text
              FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
             WHERE p.oid OPERATOR(pg_catalog.=) change.old
               AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
               AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
               AND a.grantee OPERATOR(pg_catalog.<>) 0
        LOOP
            IF change.kind OPERATOR(pg_catalog.=) 'f' THEN
                EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s', change.new, grantee);
            ELSIF change.kind OPERATOR(pg_catalog.=) 't' THEN
                EXECUTE pg_catalog.format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %s TO %s', change.new, grantee);
            ELSE
                EXECUTE pg_catalog.format('GRANT SELECT ON TABLE %s TO %s', change.new, grantee);
            END IF;
            IF NOT grantee OPERATOR(pg_catalog.=) ANY (kept) THEN
                kept := kept OPERATOR(pg_catalog.||) grantee;
            END IF;
        END LOOP;
        IF pg_catalog.has_table_privilege('pg_catalog.pg_init_privs', 'UPDATE') THEN
            UPDATE pg_catalog.pg_init_privs AS i
               SET initprivs = initial
             WHERE i.objoid OPERATOR(pg_catalog.=) CASE WHEN change.kind OPERATOR(pg_catalog.=) 'f'
                                                        THEN change.new::pg_catalog.regprocedure::pg_catalog.oid
                                                        ELSE change.new::pg_catalog.regclass::pg_catalog.oid END
               AND i.classoid OPERATOR(pg_catalog.=) CASE WHEN change.kind OPERATOR(pg_catalog.=) 'f'
                                                          THEN 'pg_catalog.pg_proc'::pg_catalog.regclass
                                                          ELSE 'pg_catalog.pg_class'::pg_catalog.regclass END
               AND i.objsubid OPERATOR(pg_catalog.=) 0;
            kept := '{}';
        END IF;
    END LOOP;
    IF pg_catalog.cardinality(kept) OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING 'pgjobq 0.9.0 granted % the new jobq.enqueue, enqueue_many, fail, schedule and '
                      'hand_back, and jobq._check_task',
                      pg_catalog.array_to_string(kept, ', ')
            USING DETAIL = 'An upgrade not run by a superuser records its grants as initial privileges, which '
                           'pg_dump leaves out.',
                  HINT = 'After restoring a dump of this database, run jobq.grant_producer, grant_worker or '
                         'grant_admin again for these roles.';
    END IF;
END
$$;

-- the old signatures, replaced above
DROP FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text);
DROP FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[]);
DROP FUNCTION jobq.fail(bigint, text, bigint, interval);
DROP FUNCTION jobq.schedule(text, text, jsonb, text, text, interval, integer, integer, jsonb, text);
DROP FUNCTION jobq._enqueue_linked(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text);
DROP FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb);

----------------------------------------------------------------------------
-- jobq.jobs gains task, last (claims return the rows of jobq.jobs, so a
-- reader by position finds the columns of 0.8.0 where they were), and last
-- in this script: from the ALTER TABLE to the commit, every statement of
-- another session that reaches jobq.jobs waits for this one, and one that
-- had begun with plans for 0.8.0's rows fails after the commit with 42804
-- ("structure of query does not match function result type"), which a
-- worker of pgjobq-py 0.9.1 does not survive.  Here that wait lasts only as
-- long as the commit.
----------------------------------------------------------------------------

ALTER TABLE jobq.jobs ADD COLUMN task text;
COMMENT ON COLUMN jobq.jobs.task IS 'The task: the named job type a worker dispatches on (for example send_welcome), 1 to 200 characters matching ^[A-Za-z_][A-Za-z0-9_.:-]*$ (checked by the functions); NULL for a plain job. Returned by claim and jobq.job.';
