----------------------------------------------------------------------------
-- Producing: enqueue in the caller's transaction, atomically with its data
----------------------------------------------------------------------------

/*
 * jobq.enqueue(queue, payload, priority, run_at, max_attempts): the new job's
 * id.  Runs in the caller's transaction: rolled back, the job never existed.
 * Inserts one row; holds the queue's wake-up advisory lock shared (never
 * waiting for it) until the transaction ends, and notifies jobq_<queue>
 * when a worker waits (see 30_notify.sql).  Raises 22004 (NULL argument),
 * 22023 (bad queue name, payload not a JSON object, priority outside
 * -32768..32767, run_at not within 10 years of now, max_attempts outside
 * 1..1000), 54000 (payload over 1 MiB).
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
REVOKE ALL ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer) TO @extowner@;

/*
 * jobq.enqueue_many(queue, payloads, priority, run_at, max_attempts): the new
 * ids, in the order of payloads; one INSERT, and at most one notification
 * (as jobq.enqueue).  Raises like jobq.enqueue, naming the first bad element
 * by its own subscript (payloads[i]), and 22023 for a multidimensional
 * array; inserts nothing then.
 */
CREATE FUNCTION jobq.enqueue_many(
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
REVOKE ALL ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer) TO @extowner@;
