----------------------------------------------------------------------------
-- Producing: enqueue in the caller's transaction, atomically with its data
----------------------------------------------------------------------------

/*
 * jobq.enqueue(queue, payload, priority, run_at, max_attempts): the new job's
 * id.  Runs in the caller's transaction: rolled back, the job never existed.
 * Inserts one row and takes no other lock.  Raises 22004, 22023, 54000 (see
 * jobq._check_*).
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
BEGIN
    PERFORM jobq._check_queue(enqueue.queue);
    PERFORM jobq._check_payload(enqueue.payload, 'payload');
    PERFORM jobq._check_options(enqueue.priority, enqueue.run_at, enqueue.max_attempts);
    INSERT INTO jobq.jobs (queue, payload, priority, run_at, max_attempts)
    VALUES (enqueue.queue, enqueue.payload, enqueue.priority, enqueue.run_at, enqueue.max_attempts)
    RETURNING jobq.jobs.id INTO new_id;
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer) IS
    'Enqueue one job; returns its id. Options: priority (higher first, default 0), run_at (default now), max_attempts (default 3).';
REVOKE ALL ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer) TO @extowner@;

/*
 * jobq.enqueue_many(queue, payloads, priority, run_at, max_attempts): the new
 * ids, in the order of payloads; one INSERT, so one notification.  Raises
 * like jobq.enqueue, naming the first bad element by its own subscript
 * (payloads[i]), and 22023 for a multidimensional array; inserts nothing
 * then.
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
        PERFORM jobq._check_payload(bad_payload, format('payloads[%s]', bad_position));
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
    RETURN new_ids;
END
$$;
COMMENT ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer) IS
    'Enqueue many jobs in one statement; returns their ids in the order of payloads. Same options as jobq.enqueue.';
REVOKE ALL ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer) TO @extowner@;
