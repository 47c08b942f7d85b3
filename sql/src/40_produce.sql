----------------------------------------------------------------------------
-- Producing: enqueue in the caller's transaction, atomically with its data
----------------------------------------------------------------------------

/*
 * jobq._take_key(queue, unique_key, until_done, job_id): NULL when the key
 * now belongs to job_id (it was free, or held by a job that no longer
 * counts: done without until_done, failed, cancelled or purged), else the
 * id of the job that holds it and counts (queued or running, or done when
 * the key was taken until_done).  The primary key of jobq.unique_keys
 * decides, never a look before the insert: INSERT ... ON CONFLICT DO
 * NOTHING waits for a conflicting insert in flight and yields to it once
 * it commits (inserts, if it rolls back).  Locks the key's row (FOR NO KEY
 * UPDATE, waiting) before it judges the holder, until the transaction
 * ends: enqueues of one key follow each other, and a redrive of the holder
 * (jobq.retry_failed, which locks the row too) is seen.  Raises 40001
 * under REPEATABLE READ when the key's row changed after the snapshot
 * (PostgreSQL's own error), or when the row was purged 5 times over.
 */
CREATE FUNCTION jobq._take_key(queue text, unique_key text, until_done boolean, job_id bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    holder         bigint;
    holder_done_ok boolean;  -- the holder took the key until_done
BEGIN
    FOR round IN 1..5 LOOP
        INSERT INTO jobq.unique_keys (queue, unique_key, job_id, until_done)
        VALUES (_take_key.queue, _take_key.unique_key, _take_key.job_id, _take_key.until_done)
        ON CONFLICT ON CONSTRAINT unique_keys_pkey DO NOTHING;
        IF FOUND THEN
            RETURN NULL;
        END IF;
        SELECT k.job_id, k.until_done INTO holder, holder_done_ok
          FROM jobq.unique_keys AS k
         WHERE k.queue = _take_key.queue AND k.unique_key = _take_key.unique_key
           FOR NO KEY UPDATE;
        CONTINUE WHEN NOT FOUND;  -- purged meanwhile: insert again
        -- the holder as it is now (a statement of its own: a fresh snapshot)
        IF holder = _take_key.job_id
           OR NOT EXISTS (SELECT FROM jobq.jobs AS j
                           WHERE j.id = holder
                             AND (j.status = ANY (ARRAY['queued', 'running'])
                                  OR (j.status = 'done' AND holder_done_ok))) THEN
            UPDATE jobq.unique_keys AS k
               SET job_id = _take_key.job_id, until_done = _take_key.until_done
             WHERE k.queue = _take_key.queue AND k.unique_key = _take_key.unique_key;
            RETURN NULL;
        END IF;
        RETURN holder;
    END LOOP;
    RAISE EXCEPTION 'unique key % of queue % changed hands too often to settle', quote_literal(_take_key.unique_key),
                    quote_literal(_take_key.queue)
        USING ERRCODE = '40001',
              HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._take_key(text, text, boolean, bigint) IS
    'Internal: give a unique key to a job unless a job that still counts holds it; returns that holder, or NULL.';
REVOKE ALL ON FUNCTION jobq._take_key(text, text, boolean, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._take_key(text, text, boolean, bigint) TO @extowner@;

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
 * jobq._traced_headers(headers): headers with the caller's trace context.
 * When the session's setting pgjobq.traceparent holds a W3C traceparent
 * (SET LOCAL pgjobq.traceparent = '00-<trace id>-<span id>-<flags>', and
 * optionally pgjobq.tracestate) and headers has no "traceparent" of its
 * own, returns headers (or {}) with "traceparent" (and "tracestate") added,
 * so that a job enqueued from SQL, a trigger for one, joins the trace of
 * the application that set it; otherwise headers unchanged (a headers that
 * is not an object is left for jobq._check_job_options to refuse).  Locks
 * nothing.  Raises 22023 when the setting is not a traceparent, or
 * pgjobq.tracestate is over 512 characters.
 */
CREATE FUNCTION jobq._traced_headers(headers jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    parent text := nullif(current_setting('pgjobq.traceparent', true), '');
    state  text := nullif(current_setting('pgjobq.tracestate', true), '');
BEGIN
    IF parent IS NULL
       OR (_traced_headers.headers IS NOT NULL
           AND (jsonb_typeof(_traced_headers.headers) <> 'object' OR _traced_headers.headers ? 'traceparent')) THEN
        RETURN _traced_headers.headers;
    END IF;
    IF parent !~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$' OR parent ~ '^ff'
       OR parent ~ '^..-0{32}-' OR parent ~ '-0{16}-..$' THEN
        RAISE EXCEPTION 'setting pgjobq.traceparent must be a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>, not all zeros), got %',
                        quote_literal(left(parent, 80))
            USING ERRCODE = '22023',
                  HINT = 'RESET pgjobq.traceparent, or set it from the application''s current span.';
    END IF;
    IF length(state) > 512 THEN
        RAISE EXCEPTION 'setting pgjobq.tracestate must be at most 512 characters, got %', length(state)
            USING ERRCODE = '22023';
    END IF;
    RETURN coalesce(_traced_headers.headers, '{}'::jsonb)
           || jsonb_build_object('traceparent', parent)
           || CASE WHEN state IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('tracestate', state) END;
END
$$;
COMMENT ON FUNCTION jobq._traced_headers(jsonb) IS
    'Internal: headers with traceparent and tracestate from the settings pgjobq.traceparent and pgjobq.tracestate, when set and headers has none.';
REVOKE ALL ON FUNCTION jobq._traced_headers(jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._traced_headers(jsonb) TO @extowner@;

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
 * hold (0.11.0): the job is inserted waiting, held until jobq.unhold
 * releases it (57_durable.sql), and wakes no worker; it cannot have a
 * unique_key, concurrency_key or depends_on.
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
    task              text     DEFAULT NULL,
    hold              boolean  DEFAULT false)
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
       AND enqueue.hold = false
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
        IF enqueue.hold IS DISTINCT FROM false THEN
            -- 0.11.0: held until jobq.unhold (57_durable.sql); no wake-up
            RETURN jobq._enqueue_held(enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at,
                                      enqueue.max_attempts, enqueue.headers, enqueue.task, enqueue.hold,
                                      CASE WHEN enqueue.unique_key IS NOT NULL THEN 'unique_key'
                                           WHEN enqueue.concurrency_key IS NOT NULL THEN 'concurrency_key'
                                           WHEN enqueue.depends_on IS NOT NULL
                                                OR enqueue.on_parent_failure IS DISTINCT FROM 'cancel'
                                           THEN 'depends_on' END);
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
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text, boolean) IS
    'Enqueue one job; returns its id. Options: priority, run_at, max_attempts, headers; unique_key with unique_scope (active, until_done) and on_conflict (return, skip, raise, replace); concurrency_key; depends_on (parent job ids) with on_parent_failure (cancel, run); task (the job type a worker dispatches on); hold (waiting until jobq.unhold). Notifies jobq_<queue> when a worker waits.';
REVOKE ALL ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text, boolean) TO @extowner@;

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
REVOKE ALL ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[], text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[], text) TO @extowner@;
