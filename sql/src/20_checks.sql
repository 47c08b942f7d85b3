----------------------------------------------------------------------------
-- Internal checks and helpers: each raises a specific SQLSTATE whose message
-- names the argument it refuses
----------------------------------------------------------------------------

/*
 * jobq._check_queue(queue): returns nothing; raises 22004 for NULL and 22023
 * for a name that is not 1 to 58 characters of a-z, 0-9 and _ (so that
 * 'jobq_' || queue is always a valid, unquoted notification channel).
 */
CREATE FUNCTION jobq._check_queue(queue text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be NULL'
            USING ERRCODE = '22004';
    END IF;
    IF queue !~ '^[a-z0-9_]{1,58}$' THEN
        RAISE EXCEPTION 'queue must be 1 to 58 characters of a-z, 0-9 and _, got %',
                        quote_literal(left(queue, 80))
            USING ERRCODE = '22023',
                  HINT = 'Queue names become notification channels jobq_<queue>.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_queue(text) IS 'Internal: raises 22004/22023 unless queue is a valid queue name.';
REVOKE ALL ON FUNCTION jobq._check_queue(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_queue(text) TO @extowner@;

/*
 * jobq._check_payload(payload, argument): returns nothing; raises 22004 for
 * NULL, 22023 for anything but a JSON object, 54000 above 1 MiB.  argument
 * names the caller's argument in the message.
 */
CREATE FUNCTION jobq._check_payload(payload jsonb, argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', argument
            USING ERRCODE = '22004';
    END IF;
    IF jsonb_typeof(payload) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object, got a JSON %', argument, jsonb_typeof(payload)
            USING ERRCODE = '22023',
                  HINT = 'Wrap the value in an object, for example {"value": ...}.';
    END IF;
    IF pg_column_size(payload) > 1048576 THEN
        RAISE EXCEPTION '% must be at most 1 MiB, got % bytes', argument, pg_column_size(payload)
            USING ERRCODE = '54000',
                  HINT = 'Store large data in a table and enqueue its key.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_payload(jsonb, text) IS 'Internal: raises 22004/22023/54000 unless payload is a JSON object of at most 1 MiB.';
REVOKE ALL ON FUNCTION jobq._check_payload(jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_payload(jsonb, text) TO @extowner@;

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
 * jobq._check_options(priority, run_at, max_attempts): returns nothing;
 * raises 22004 for a NULL priority or run_at and 22023 for a value out of
 * range (max_attempts may be NULL: the queue's).
 */
CREATE FUNCTION jobq._check_options(priority integer, run_at timestamptz, max_attempts integer)
RETURNS void
LANGUAGE plpgsql STABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF priority IS NULL THEN
        RAISE EXCEPTION 'priority must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF priority < -32768 OR priority > 32767 THEN
        RAISE EXCEPTION 'priority must be between -32768 and 32767, got %', priority
            USING ERRCODE = '22023';
    END IF;
    IF run_at IS NULL THEN
        RAISE EXCEPTION 'run_at must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT isfinite(run_at)
       OR run_at > now() + interval '10 years'
       OR run_at < now() - interval '10 years' THEN
        RAISE EXCEPTION 'run_at must be within 10 years of now, got %', run_at
            USING ERRCODE = '22023';
    END IF;
    IF max_attempts < 1 OR max_attempts > 1000 THEN  -- NULL: the queue's
        RAISE EXCEPTION 'max_attempts must be between 1 and 1000, got %', max_attempts
            USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_options(integer, timestamptz, integer) IS 'Internal: raises 22004/22023 unless the enqueue options are in range.';
REVOKE ALL ON FUNCTION jobq._check_options(integer, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_options(integer, timestamptz, integer) TO @extowner@;

/*
 * jobq._check_lease(id, lease): returns nothing; raises 22004 when either is
 * NULL.
 */
CREATE FUNCTION jobq._check_lease(id bigint, lease bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF id IS NULL THEN
        RAISE EXCEPTION 'id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF lease IS NULL THEN
        RAISE EXCEPTION 'lease must not be NULL' USING ERRCODE = '22004';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_lease(bigint, bigint) IS 'Internal: raises 22004 when a job id or lease is NULL.';
REVOKE ALL ON FUNCTION jobq._check_lease(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_lease(bigint, bigint) TO @extowner@;

/*
 * jobq._check_pairs(ids, leases): returns nothing; raises 22004 when either
 * array is NULL, 22023 when they differ in length, have more than one
 * dimension or hold a NULL (naming the array and the position).
 */
CREATE FUNCTION jobq._check_pairs(ids bigint[], leases bigint[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _check_pairs.ids IS NULL THEN
        RAISE EXCEPTION 'ids must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF _check_pairs.leases IS NULL THEN
        RAISE EXCEPTION 'leases must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(_check_pairs.ids) > 1 THEN
        RAISE EXCEPTION 'ids must be a one-dimensional array, got % dimensions', array_ndims(_check_pairs.ids)
            USING ERRCODE = '22023';
    END IF;
    IF array_ndims(_check_pairs.leases) > 1 THEN
        RAISE EXCEPTION 'leases must be a one-dimensional array, got % dimensions',
                        array_ndims(_check_pairs.leases)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(_check_pairs.ids) <> cardinality(_check_pairs.leases) THEN
        RAISE EXCEPTION 'ids and leases must have the same length, got % and %',
                        cardinality(_check_pairs.ids), cardinality(_check_pairs.leases)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(_check_pairs.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'ids must not contain NULL, found one at ids[%]', array_position(_check_pairs.ids, NULL)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(_check_pairs.leases, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'leases must not contain NULL, found one at leases[%]',
                        array_position(_check_pairs.leases, NULL)
            USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_pairs(bigint[], bigint[]) IS
    'Internal: raises 22004/22023 unless ids and leases are two NULL-free one-dimensional arrays of one length.';
REVOKE ALL ON FUNCTION jobq._check_pairs(bigint[], bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_pairs(bigint[], bigint[]) TO @extowner@;

/*
 * jobq._raise_not_held(id, lease): never returns.  Called after an update
 * guarded by (id, lease, status = running) matched nothing; raises JQ002 when
 * no job has that id, JQ001 otherwise (the lease is stale or the job is not
 * running).  Reads the row without locking it.
 */
CREATE FUNCTION jobq._raise_not_held(id bigint, lease bigint)
RETURNS void
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    current_status text;
    current_lease  bigint;
BEGIN
    SELECT j.status, j.lease INTO current_status, current_lease
      FROM jobq.jobs AS j
     WHERE j.id = _raise_not_held.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'id %: no such job', _raise_not_held.id
            USING ERRCODE = 'JQ002';
    END IF;
    RAISE EXCEPTION 'lease % of job % is not current', _raise_not_held.lease, _raise_not_held.id
        USING ERRCODE = 'JQ001',
              DETAIL = format('The job is %s under lease %s.', current_status, current_lease),
              HINT = 'The job was reaped, finished or claimed again; discard this result.';
END
$$;
COMMENT ON FUNCTION jobq._raise_not_held(bigint, bigint) IS 'Internal: raises JQ002 (no such job) or JQ001 (lease not current).';
REVOKE ALL ON FUNCTION jobq._raise_not_held(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._raise_not_held(bigint, bigint) TO @extowner@;

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
 * jobq._check_result(result, argument): returns nothing; raises 54000 when
 * result (any JSON value; NULL is no result) is over 1 MiB.  argument names
 * the caller's argument in the message.
 */
CREATE FUNCTION jobq._check_result(result jsonb, argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF pg_column_size(result) > 1048576 THEN
        RAISE EXCEPTION '% must be at most 1 MiB, got % bytes', argument, pg_column_size(result)
            USING ERRCODE = '54000',
                  HINT = 'Store large results in a table and return their key.';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_result(jsonb, text) IS 'Internal: raises 54000 when a result is over 1 MiB.';
REVOKE ALL ON FUNCTION jobq._check_result(jsonb, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_result(jsonb, text) TO @extowner@;

/*
 * jobq._check_results(ids, results): returns nothing; raises 22023 unless
 * results is NULL (no results) or a one-dimensional array as long as ids,
 * and 54000 for an element over 1 MiB (naming it results[i]).
 */
CREATE FUNCTION jobq._check_results(ids bigint[], results jsonb[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad_position bigint;
    bad_result   jsonb;
BEGIN
    IF results IS NULL THEN
        RETURN;
    END IF;
    IF array_ndims(results) > 1 THEN
        RAISE EXCEPTION 'results must be a one-dimensional array, got % dimensions', array_ndims(results)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(results) <> cardinality(ids) THEN
        RAISE EXCEPTION 'results must have as many elements as ids, got % and %', cardinality(results), cardinality(ids)
            USING ERRCODE = '22023',
                  HINT = 'Pass NULL for a job without a result.';
    END IF;
    SELECT r.position + array_lower(results, 1) - 1, r.result INTO bad_position, bad_result
      FROM unnest(results) WITH ORDINALITY AS r (result, position)
     WHERE pg_column_size(r.result) > 1048576
     ORDER BY r.position
     LIMIT 1;
    IF FOUND THEN
        PERFORM jobq._check_result(bad_result, format('results[%s]', bad_position));  -- raises
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_results(bigint[], jsonb[]) IS
    'Internal: raises 22023/54000 unless results is NULL or an array of results of at most 1 MiB, one per id.';
REVOKE ALL ON FUNCTION jobq._check_results(bigint[], jsonb[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_results(bigint[], jsonb[]) TO @extowner@;

/*
 * jobq._check_job_options(unique_key, unique_scope, on_conflict, headers):
 * returns nothing; raises 22004 for a NULL unique_scope or on_conflict,
 * 22023 for a unique_key that is not 1 to 512 characters, a unique_scope
 * other than active or until_done, an on_conflict other than return, skip,
 * raise or replace, headers that are not a JSON object, and 54000 for
 * headers over 1 MiB.
 */
CREATE FUNCTION jobq._check_job_options(unique_key text, unique_scope text, on_conflict text, headers jsonb)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF length(unique_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'unique_key must be 1 to 512 characters, got %', length(unique_key)
            USING ERRCODE = '22023';
    END IF;
    IF unique_scope IS NULL THEN
        RAISE EXCEPTION 'unique_scope must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF unique_scope <> ALL (ARRAY['active', 'until_done']) THEN
        RAISE EXCEPTION 'unique_scope must be active or until_done, got %', quote_literal(left(unique_scope, 80))
            USING ERRCODE = '22023';
    END IF;
    IF on_conflict IS NULL THEN
        RAISE EXCEPTION 'on_conflict must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF on_conflict <> ALL (ARRAY['return', 'skip', 'raise', 'replace']) THEN
        RAISE EXCEPTION 'on_conflict must be return, skip, raise or replace, got %', quote_literal(left(on_conflict, 80))
            USING ERRCODE = '22023';
    END IF;
    IF headers IS NOT NULL THEN
        PERFORM jobq._check_payload(headers, 'headers');
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_job_options(text, text, text, jsonb) IS
    'Internal: raises 22004/22023/54000 unless the unique and headers options of an enqueue are valid.';
REVOKE ALL ON FUNCTION jobq._check_job_options(text, text, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_job_options(text, text, text, jsonb) TO @extowner@;

/*
 * jobq._check_keys(keys, payloads, argument): returns nothing; raises 22023
 * when keys (the array passed as argument, aligned with payloads of that
 * many elements) is multidimensional, of another length, or holds a key that
 * is not 1 to 512 characters (naming it by its own subscript, as
 * argument[i]).  NULL elements are jobs without a key.  For
 * jobq.enqueue_many's unique_keys and concurrency_keys.
 */
CREATE FUNCTION jobq._check_keys(keys text[], payloads integer, argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    bad_position bigint;
BEGIN
    IF array_ndims(_check_keys.keys) > 1 THEN
        RAISE EXCEPTION '% must be a one-dimensional array, got % dimensions', _check_keys.argument,
                        array_ndims(_check_keys.keys)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(_check_keys.keys) <> _check_keys.payloads THEN
        RAISE EXCEPTION '% must have as many elements as payloads, got % and %', _check_keys.argument,
                        cardinality(_check_keys.keys), _check_keys.payloads
            USING ERRCODE = '22023',
                  HINT = 'Pass NULL for a job without a key.';
    END IF;
    SELECT k.position + array_lower(_check_keys.keys, 1) - 1 INTO bad_position
      FROM unnest(_check_keys.keys) WITH ORDINALITY AS k(given, position)
     WHERE length(k.given) NOT BETWEEN 1 AND 512
     ORDER BY k.position
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION '%[%] must be 1 to 512 characters, got %', _check_keys.argument, bad_position,
                        length(_check_keys.keys[bad_position])
            USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_keys(text[], integer, text) IS
    'Internal: check keys aligned with payloads (jobq.enqueue_many''s unique_keys and concurrency_keys).';
REVOKE ALL ON FUNCTION jobq._check_keys(text[], integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_keys(text[], integer, text) TO @extowner@;
