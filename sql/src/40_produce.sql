----------------------------------------------------------------------------
-- Producing: enqueue in the caller's transaction, atomically with its data
----------------------------------------------------------------------------

/*
 * jobq._enqueue_unique(queue, payload, priority, run_at, max_attempts,
 * unique_key, unique_scope, on_conflict, headers, timeout, enqueued_by):
 * enqueues a job with a unique key, or resolves the conflict with the job
 * that holds the key (see jobq.enqueue).  Returns id (the new job, the
 * holder, or NULL for skip) and changed (whether a job was inserted or
 * replaced, so that the caller wakes the queue's workers).
 *
 * The unique index decides, never a look before the insert: INSERT ... ON
 * CONFLICT DO NOTHING waits for a conflicting insert in flight and yields
 * to it once it commits (or inserts, if it rolls back).  The holder is then
 * read with a fresh snapshot; one that left the scope in between (finished,
 * cancelled) makes it try again, up to 5 rounds.  replace locks the holder
 * (FOR NO KEY UPDATE, waiting), so a claim in flight finishes first and the
 * holder's status is current.  The caller checks the arguments.  Raises
 * JQ004 (on_conflict raise), 40001 (5 rounds lost to jobs leaving the
 * scope; also raised by PostgreSQL under REPEATABLE READ when the holder
 * committed after the snapshot).
 */
CREATE FUNCTION jobq._enqueue_unique(
    queue text, payload jsonb, priority integer, run_at timestamptz, max_attempts integer,
    unique_key text, unique_scope text, on_conflict text, headers jsonb, timeout interval, enqueued_by text,
    OUT id bigint, OUT changed boolean)
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    holder_id     bigint;
    holder_status text;
BEGIN
    FOR round IN 1..5 LOOP
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, unique_key, unique_scope,
                               headers, timeout, enqueued_by)
        VALUES (_enqueue_unique.queue, _enqueue_unique.payload, _enqueue_unique.priority,
                _enqueue_unique.run_at, _enqueue_unique.max_attempts, _enqueue_unique.unique_key,
                nullif(_enqueue_unique.unique_scope, 'active'), _enqueue_unique.headers,
                _enqueue_unique.timeout, _enqueue_unique.enqueued_by)
        ON CONFLICT DO NOTHING
        RETURNING jobq.jobs.id INTO _enqueue_unique.id;
        IF FOUND THEN
            changed := true;
            RETURN;
        END IF;

        -- the holder: the job the unique index counts (its predicate, spelled out)
        IF _enqueue_unique.on_conflict = 'replace' THEN
            SELECT j.id, j.status INTO holder_id, holder_status
              FROM jobq.jobs AS j
             WHERE j.queue = _enqueue_unique.queue AND j.unique_key = _enqueue_unique.unique_key
               AND (j.status = ANY (ARRAY['queued', 'running']) OR (j.status = 'done' AND j.unique_scope = 'until_done'))
               FOR NO KEY UPDATE;
        ELSE
            SELECT j.id, j.status INTO holder_id, holder_status
              FROM jobq.jobs AS j
             WHERE j.queue = _enqueue_unique.queue AND j.unique_key = _enqueue_unique.unique_key
               AND (j.status = ANY (ARRAY['queued', 'running']) OR (j.status = 'done' AND j.unique_scope = 'until_done'));
        END IF;
        CONTINUE WHEN NOT FOUND;  -- it left the scope meanwhile: insert again

        changed := false;
        IF _enqueue_unique.on_conflict = 'return' THEN
            id := holder_id;
            RETURN;
        ELSIF _enqueue_unique.on_conflict = 'skip' THEN
            id := NULL;
            RETURN;
        ELSIF _enqueue_unique.on_conflict = 'raise' THEN
            RAISE EXCEPTION 'unique key % of queue % is held by job %', quote_literal(_enqueue_unique.unique_key),
                            quote_literal(_enqueue_unique.queue), holder_id
                USING ERRCODE = 'JQ004',
                      DETAIL = format('Job %s is %s.', holder_id, holder_status),
                      HINT = 'on_conflict => ''return'' returns its id instead.';
        END IF;

        -- replace (debounce)
        IF holder_status = 'queued' THEN
            UPDATE jobq.jobs AS j
               SET payload = _enqueue_unique.payload, priority = _enqueue_unique.priority,
                   run_at = _enqueue_unique.run_at, max_attempts = _enqueue_unique.max_attempts,
                   headers = _enqueue_unique.headers, timeout = _enqueue_unique.timeout
             WHERE j.id = holder_id;
            id := holder_id;
            changed := true;
            RETURN;
        ELSIF holder_status = 'running' THEN
            -- the running job runs on, but gives up the key and its retries
            -- (a failure ends it failed), and the new job takes the key
            UPDATE jobq.jobs AS j
               SET unique_key = NULL, unique_scope = NULL, max_attempts = j.attempts
             WHERE j.id = holder_id;
        ELSE
            id := holder_id;  -- done (until_done): nothing left to replace
            RETURN;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'unique key % of queue % changed hands too often to settle', quote_literal(_enqueue_unique.unique_key),
                    quote_literal(_enqueue_unique.queue)
        USING ERRCODE = '40001',
              HINT = 'Retry the transaction.';
END
$$;
COMMENT ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, interval, text) IS
    'Internal: enqueue a job with a unique key, or resolve the conflict with the job holding it.';
REVOKE ALL ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, interval, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._enqueue_unique(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, interval, text) TO @extowner@;

/*
 * jobq.enqueue(queue, payload, priority, run_at, max_attempts, unique_key,
 * unique_scope, on_conflict, headers, timeout): the new job's id.  Runs in
 * the caller's transaction: rolled back, the job never existed.  Inserts one
 * row; holds the queue's wake-up advisory lock shared (never waiting for it)
 * until the transaction ends, and notifies jobq_<queue> when a worker waits
 * (see 30_notify.sql).
 *
 * Options: priority (higher first), run_at (not before), max_attempts (NULL:
 * the queue's, else 3), headers (a JSON object the worker receives with the
 * payload), timeout (the longest an attempt may run; NULL: the queue's).
 * With unique_key, while a job of the queue holding that key is queued or
 * running (or done, with unique_scope => 'until_done', until purged), no
 * second one is created; on_conflict decides what happens instead: return
 * (the holder's id), skip (NULL), raise (JQ004), replace (a queued holder
 * takes this call's payload, priority, run_at, max_attempts, headers and
 * timeout, and its id is returned; a running holder runs on but gives up
 * the key and its retries, and a new job is inserted; a done holder is
 * returned).  A conflicting enqueue still in flight is waited for.
 *
 * Raises 22004 (NULL argument), 22023 (bad queue name, payload not a JSON
 * object, priority outside -32768..32767, run_at not within 10 years of
 * now, max_attempts outside 1..1000, and what jobq._check_job_options
 * refuses), 54000 (payload or headers over 1 MiB), JQ004, 40001.
 *
 * The hot path of producers: the checks are inline (a helper is called
 * only to raise, or to measure a payload that may be compressed), the work
 * is one INSERT and, for the wake-up, one lock and one look at
 * jobq._waiters.
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
    timeout      interval    DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers insert jobs without INSERT on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id  bigint;
    locked  boolean;
    changed boolean;
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
       OR enqueue.max_attempts NOT BETWEEN 1 AND 1000 THEN
        PERFORM jobq._check_options(enqueue.priority, enqueue.run_at, enqueue.max_attempts);  -- raises
    END IF;
    -- the options of job control, checked by their helper only when one is given
    IF enqueue.unique_key IS NOT NULL OR enqueue.unique_scope IS DISTINCT FROM 'active'
       OR enqueue.on_conflict IS DISTINCT FROM 'return' OR enqueue.headers IS NOT NULL
       OR enqueue.timeout IS NOT NULL THEN
        PERFORM jobq._check_job_options(enqueue.unique_key, enqueue.unique_scope, enqueue.on_conflict,
                                        enqueue.headers, enqueue.timeout);
    END IF;

    IF enqueue.unique_key IS NULL THEN
        INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, timeout, enqueued_by)
        VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts,
                enqueue.headers, enqueue.timeout, coalesce(nullif(current_setting('role'), 'none'), session_user))
        RETURNING jobq.jobs.id INTO new_id;
    ELSE
        SELECT u.id, u.changed INTO new_id, changed
          FROM jobq._enqueue_unique(enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at,
                                    enqueue.max_attempts, enqueue.unique_key, enqueue.unique_scope,
                                    enqueue.on_conflict, enqueue.headers, enqueue.timeout,
                                    coalesce(nullif(current_setting('role'), 'none'), session_user)) AS u;
        IF NOT changed THEN
            RETURN new_id;  -- nothing new to run
        END IF;
    END IF;

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
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, interval) IS
    'Enqueue one job; returns its id. Options: priority, run_at, max_attempts, headers, timeout; unique_key with unique_scope (active, until_done) and on_conflict (return, skip, raise, replace). Notifies jobq_<queue> when a worker waits.';
REVOKE ALL ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, interval) TO @extowner@;

/*
 * jobq.enqueue_many(queue, payloads, priority, run_at, max_attempts,
 * unique_keys, unique_scope, on_conflict, headers, timeout): the ids, in the
 * order of payloads; without unique_keys one INSERT, and at most one
 * notification (as jobq.enqueue).  unique_keys, when given, is aligned with
 * payloads (NULL: no key for that job), and each job is enqueued as
 * jobq.enqueue would, in order: of equal keys the first wins, and the ids
 * returned follow on_conflict (NULL for skip).  headers and the other
 * options apply to every job.  Raises like jobq.enqueue, naming the first
 * bad element by its own subscript (payloads[i], unique_keys[i]), and 22023
 * for a multidimensional array or unique_keys of another length; inserts
 * nothing then.
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
    timeout      interval    DEFAULT NULL)
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
    enqueuer     text := coalesce(nullif(current_setting('role'), 'none'), session_user);
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
    PERFORM jobq._check_job_options(NULL, enqueue_many.unique_scope, enqueue_many.on_conflict,
                                    enqueue_many.headers, enqueue_many.timeout);

    IF enqueue_many.unique_keys IS NULL THEN
        WITH inserted AS (
            INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, timeout, enqueued_by)
            SELECT enqueue_many.queue, p.payload, enqueue_many.priority, enqueue_many.run_at,
                   enqueue_many.max_attempts, enqueue_many.headers, enqueue_many.timeout, enqueuer
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
        IF array_ndims(enqueue_many.unique_keys) > 1 THEN
            RAISE EXCEPTION 'unique_keys must be a one-dimensional array, got % dimensions',
                            array_ndims(enqueue_many.unique_keys)
                USING ERRCODE = '22023';
        END IF;
        IF cardinality(enqueue_many.unique_keys) <> cardinality(enqueue_many.payloads) THEN
            RAISE EXCEPTION 'unique_keys must have as many elements as payloads, got % and %',
                            cardinality(enqueue_many.unique_keys), cardinality(enqueue_many.payloads)
                USING ERRCODE = '22023',
                      HINT = 'Pass NULL for a job without a key.';
        END IF;
        SELECT k.position + array_lower(enqueue_many.unique_keys, 1) - 1 INTO bad_position
          FROM unnest(enqueue_many.unique_keys) WITH ORDINALITY AS k(unique_key, position)
         WHERE length(k.unique_key) NOT BETWEEN 1 AND 512
         ORDER BY k.position
         LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION 'unique_keys[%] must be 1 to 512 characters, got %', bad_position,
                            length(enqueue_many.unique_keys[bad_position])
                USING ERRCODE = '22023';
        END IF;
        new_ids := '{}';
        FOR one IN
            SELECT p.payload, p.unique_key
              FROM unnest(enqueue_many.payloads, enqueue_many.unique_keys) WITH ORDINALITY
                   AS p(payload, unique_key, position)
             ORDER BY p.position
        LOOP
            IF one.unique_key IS NULL THEN
                INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts, headers, timeout, enqueued_by)
                VALUES (enqueue_many.queue, one.payload, enqueue_many.priority, enqueue_many.run_at,
                        enqueue_many.max_attempts, enqueue_many.headers, enqueue_many.timeout, enqueuer)
                RETURNING jobq.jobs.id INTO one_id;
                new_ids := new_ids || one_id;
                any_changed := true;
            ELSE
                SELECT new_ids || u.id, any_changed OR u.changed INTO new_ids, any_changed
                  FROM jobq._enqueue_unique(enqueue_many.queue, one.payload, enqueue_many.priority,
                                            enqueue_many.run_at, enqueue_many.max_attempts, one.unique_key,
                                            enqueue_many.unique_scope, enqueue_many.on_conflict,
                                            enqueue_many.headers, enqueue_many.timeout, enqueuer) AS u;
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
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, interval) IS
    'Enqueue many jobs in one call; returns their ids in the order of payloads. Same options as jobq.enqueue, with unique_keys aligned with payloads.';
REVOKE ALL ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, interval) TO @extowner@;
