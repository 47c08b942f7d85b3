----------------------------------------------------------------------------
-- Flows: jobs that wait for other jobs (jobq.enqueue(..., depends_on =>
-- ...), jobq.enqueue_flow), and the concurrency keys jobs are enqueued
-- with (their limits are in 52_limits.sql).
--
-- A job with unfinished parents is 'waiting': outside the claim index, so
-- never claimed.  Its parents carry control bit 8 (they have dependents),
-- so the functions that finish a job (complete, fail, reap, cancel, ...)
-- settle the dependents of those only, inline, in their own transaction
-- (jobq._finish_linked): plain jobs never look here.  When its last parent
-- is done, a waiting job becomes queued; when a parent ends failed or
-- cancelled, it is cancelled (on_parent_failure 'cancel', the default) or
-- counts that parent as settled ('run').  A job can depend only on jobs
-- that exist when it is enqueued, so the graph has no cycles.
--
-- Control bits (jobq.jobs.control): 8, the job has dependents; 16, it has
-- a concurrency key (jobq.concurrency_keys); 32, it has parents
-- (jobq.job_deps).
----------------------------------------------------------------------------

-- One row per parent and child, kept until the child is purged: what the
-- child depends on (jobq.job shows it), and whether the parent's end was
-- counted already (a failed parent redriven and then done is not counted
-- twice).
CREATE TABLE jobq.job_deps (
    parent  bigint  NOT NULL,
    child   bigint  NOT NULL,
    settled boolean NOT NULL,
    CONSTRAINT job_deps_pkey PRIMARY KEY (parent, child)
);
CREATE INDEX job_deps_child_idx ON jobq.job_deps (child);
COMMENT ON INDEX jobq.job_deps_child_idx IS 'A job''s parents, for jobq.job and jobq.purge.';
COMMENT ON TABLE jobq.job_deps IS 'Dependencies: the child job waits for the parent job to end.';
COMMENT ON COLUMN jobq.job_deps.parent IS 'The job waited for.';
COMMENT ON COLUMN jobq.job_deps.child IS 'The job that waits.';
COMMENT ON COLUMN jobq.job_deps.settled IS 'The parent''s end has been counted for the child.';
SELECT pg_catalog.pg_extension_config_dump('jobq.job_deps', '');
REVOKE ALL ON TABLE jobq.job_deps FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.job_deps TO @extowner@;

-- One row per waiting job: how many of its parents have not ended yet.  The
-- row is the lock that parents finishing at once take turns on, so the last
-- of them, and only it, sees the count reach 0.
CREATE TABLE jobq.job_waits (
    id                bigint  NOT NULL,
    pending           integer NOT NULL,
    on_parent_failure text    NOT NULL,
    CONSTRAINT job_waits_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE jobq.job_waits IS 'Each waiting job''s count of parents not yet ended, and what their failure does to it.';
COMMENT ON COLUMN jobq.job_waits.id IS 'The waiting job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.job_waits.pending IS 'Parents not yet ended; at 0 the job becomes queued.';
COMMENT ON COLUMN jobq.job_waits.on_parent_failure IS 'cancel: a parent ending failed or cancelled cancels the job; run: it counts as ended.';
SELECT pg_catalog.pg_extension_config_dump('jobq.job_waits', '');
REVOKE ALL ON TABLE jobq.job_waits FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.job_waits TO @extowner@;

/*
 * jobq._check_link_options(concurrency_key, depends_on, on_parent_failure,
 * unique_key): returns nothing; raises 22004 (NULL on_parent_failure),
 * 22023 (concurrency_key not 1 to 512 characters; depends_on
 * multidimensional, with NULL elements or over 1,000 of them, or given with
 * a unique_key; on_parent_failure neither 'cancel' nor 'run'), for
 * jobq.enqueue and jobq.enqueue_flow.
 */
CREATE FUNCTION jobq._check_link_options(concurrency_key text, depends_on bigint[], on_parent_failure text,
                                         unique_key text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _check_link_options.on_parent_failure IS NULL THEN
        RAISE EXCEPTION 'on_parent_failure must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF _check_link_options.on_parent_failure NOT IN ('cancel', 'run') THEN
        RAISE EXCEPTION 'on_parent_failure must be cancel or run, got %',
                        quote_literal(left(_check_link_options.on_parent_failure, 80))
            USING ERRCODE = '22023';
    END IF;
    IF length(_check_link_options.concurrency_key) NOT BETWEEN 1 AND 512 THEN
        RAISE EXCEPTION 'concurrency_key must be 1 to 512 characters, got %', length(_check_link_options.concurrency_key)
            USING ERRCODE = '22023';
    END IF;
    IF array_ndims(_check_link_options.depends_on) > 1 THEN
        RAISE EXCEPTION 'depends_on must be a one-dimensional array, got % dimensions',
                        array_ndims(_check_link_options.depends_on)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(_check_link_options.depends_on, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on must not contain NULL, found one at depends_on[%]',
                        array_position(_check_link_options.depends_on, NULL)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(_check_link_options.depends_on) > 1000 THEN
        RAISE EXCEPTION 'depends_on must name at most 1000 jobs, got %', cardinality(_check_link_options.depends_on)
            USING ERRCODE = '22023';
    END IF;
    IF cardinality(_check_link_options.depends_on) > 0 AND _check_link_options.unique_key IS NOT NULL THEN
        RAISE EXCEPTION 'depends_on cannot be combined with unique_key' USING ERRCODE = '22023';
    END IF;

END
$$;
COMMENT ON FUNCTION jobq._check_link_options(text, bigint[], text, text) IS
    'Internal: check the concurrency_key, depends_on and on_parent_failure of an enqueue.';
REVOKE ALL ON FUNCTION jobq._check_link_options(text, bigint[], text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_link_options(text, bigint[], text, text) TO @extowner@;

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
 * jobq._finish_linked(id, status, control): true, after the bookkeeping of
 * a job with control bits 8, 16 or 32 that has just ended with status
 * (done, failed or cancelled), called by the function that ended it, in its
 * transaction: its concurrency key is dropped (done or cancelled: a failed
 * job keeps it for jobq.retry_failed), its dependents are settled
 * (jobq._settle_dependents), and a waiting job cancelled stops waiting.
 * Locks what jobq._settle_dependents locks.
 */
CREATE FUNCTION jobq._finish_linked(id bigint, status text, control smallint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF _finish_linked.control & 16 <> 0 AND _finish_linked.status IN ('done', 'cancelled') THEN
        DELETE FROM jobq.concurrency_keys AS k WHERE k.id = _finish_linked.id;
    END IF;
    IF _finish_linked.control & 32 <> 0 AND _finish_linked.status = 'cancelled' THEN
        DELETE FROM jobq.job_waits AS w WHERE w.id = _finish_linked.id;
    END IF;
    IF _finish_linked.control & 8 <> 0 AND _finish_linked.status IN ('done', 'failed', 'cancelled') THEN
        PERFORM jobq._settle_dependents(_finish_linked.id, _finish_linked.status);
    END IF;
    RETURN true;
END
$$;
COMMENT ON FUNCTION jobq._finish_linked(bigint, text, smallint) IS
    'Internal: after a job with a concurrency key, dependents or parents ended: drop its key, settle its dependents.';
REVOKE ALL ON FUNCTION jobq._finish_linked(bigint, text, smallint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._finish_linked(bigint, text, smallint) TO @extowner@;

/*
 * jobq._settle_dependents(parent, status): returns nothing.  The parent has
 * ended with status; each of its dependents not yet told counts it: one
 * parent fewer to wait for (status done, or on_parent_failure 'run'), and
 * at none the dependent becomes queued (its queue notified); or, for a
 * parent failed or cancelled under on_parent_failure 'cancel', the
 * dependent is cancelled, and its own dependents settled in turn.  Locks:
 * the parent's rows of jobq.job_deps, then each dependent's row of
 * jobq.job_waits (FOR UPDATE, in id order: parents ending at once take
 * turns there, so exactly the last one releases the dependent) and its row
 * of jobq.jobs.
 */
CREATE FUNCTION jobq._settle_dependents(parent bigint, status text)
RETURNS void
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    children bigint[];
    child    bigint;
    left_    integer;
    policy   text;
    released record;
BEGIN
    WITH told AS (
        UPDATE jobq.job_deps AS d
           SET settled = true
         WHERE d.parent = _settle_dependents.parent AND NOT d.settled
        RETURNING d.child
    )
    SELECT coalesce(array_agg(t.child ORDER BY t.child), '{}') INTO children FROM told AS t;
    FOREACH child IN ARRAY children LOOP
        UPDATE jobq.job_waits AS w
           SET pending = w.pending - CASE WHEN _settle_dependents.status = 'done' OR w.on_parent_failure = 'run'
                                          THEN 1 ELSE 0 END
         WHERE w.id = child
        RETURNING w.pending, w.on_parent_failure INTO left_, policy;
        CONTINUE WHEN NOT FOUND;  -- no longer waiting (cancelled meanwhile)
        IF _settle_dependents.status <> 'done' AND policy = 'cancel' THEN
            DELETE FROM jobq.job_waits AS w WHERE w.id = child;
            UPDATE jobq.jobs AS j
               SET status = 'cancelled', finished_at = statement_timestamp(),
                   last_error = format('cancelled: parent job %s ended %s', _settle_dependents.parent,
                                       _settle_dependents.status)
             WHERE j.id = child AND j.status = 'waiting'
            RETURNING j.id, j.control INTO released;
            IF FOUND THEN
                IF released.control & 2 <> 0 THEN
                    PERFORM jobq._notify_finished(child);
                END IF;
                IF released.control & 24 <> 0 THEN
                    PERFORM jobq._finish_linked(child, 'cancelled', released.control);
                END IF;
            END IF;
        ELSIF left_ <= 0 THEN
            DELETE FROM jobq.job_waits AS w WHERE w.id = child;
            UPDATE jobq.jobs AS j
               SET status = 'queued'
             WHERE j.id = child AND j.status = 'waiting'
            RETURNING j.queue INTO released;
            IF FOUND THEN
                PERFORM pg_notify('jobq_' || released.queue, '');
            END IF;
        END IF;
    END LOOP;
END
$$;
COMMENT ON FUNCTION jobq._settle_dependents(bigint, text) IS
    'Internal: a parent job ended: release (queued) or cancel its waiting dependents as their on_parent_failure says.';
REVOKE ALL ON FUNCTION jobq._settle_dependents(bigint, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._settle_dependents(bigint, text) TO @extowner@;

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
CREATE FUNCTION jobq.enqueue_flow(queue text, steps jsonb)
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
REVOKE ALL ON FUNCTION jobq.enqueue_flow(text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.enqueue_flow(text, jsonb) TO @extowner@;
