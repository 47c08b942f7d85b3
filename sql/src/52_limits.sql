----------------------------------------------------------------------------
-- Limits: how many jobs of a queue may run at once (concurrency), how many
-- per concurrency key (key_concurrency, served in priority or round-robin
-- order across keys), and how many may be claimed per window of time
-- (rate_limit per rate_interval), all set by jobq.configure_queue.
--
-- Exact, not approximate.  A claim of a queue with limits first locks the
-- queue's gate row (jobq.queue_gates) FOR UPDATE, so such claims of one
-- queue take turns, each holding the gate to the end of its transaction;
-- then, with a snapshot taken after the lock, it counts the queue's running
-- jobs from jobq.jobs itself: every claim that took the gate before it has
-- committed or rolled back by then, so its jobs are counted exactly, and
-- nothing is kept in counters that a killed worker could leave wrong.  A
-- limit bounds the jobs in status running, that is the valid leases and
-- the expired ones not yet reaped (a heartbeat may still extend those); a
-- reaped job's worker, a zombie, may still be executing it.  Only claims
-- take the gate: completing, failing and reaping free a place without it.
-- A queue without limits never reads any of this (jobq.claim branches on
-- its cached settings).
----------------------------------------------------------------------------

-- One row per queue claimed with limits: the lock that claims of the queue
-- take turns on, the claims of the current rate window, and where
-- round-robin claiming goes on from.  Not dumped: a restore starts a new
-- window.
CREATE TABLE jobq.queue_gates (
    queue        text          NOT NULL,
    claim_times  timestamptz[] NOT NULL DEFAULT '{}',  -- the claims of the last rate_interval: when,
    claim_counts integer[]     NOT NULL DEFAULT '{}',  -- and how many jobs each took
    next_key     text,                                 -- round robin: the key served last
    CONSTRAINT queue_gates_pkey PRIMARY KEY (queue)
);
COMMENT ON TABLE jobq.queue_gates IS
    'Internal: per queue with limits, the row its claims lock in turn, its recent claims (for rate_limit) and the round-robin position.';
COMMENT ON COLUMN jobq.queue_gates.queue IS 'The queue.';
COMMENT ON COLUMN jobq.queue_gates.claim_times IS 'When each claim of the current rate window took jobs (the clock after the gate was locked).';
COMMENT ON COLUMN jobq.queue_gates.claim_counts IS 'How many jobs each of those claims took.';
COMMENT ON COLUMN jobq.queue_gates.next_key IS 'Round robin: the concurrency key served last; the next claim goes on after it.';
REVOKE ALL ON TABLE jobq.queue_gates FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.queue_gates TO @extowner@;

-- The concurrency key of each job enqueued with one (jobq.enqueue(...,
-- concurrency_key => ...)), while it is queued, waiting, running or failed:
-- finishing done or cancelled deletes the row, so the index below holds
-- the jobs that may still run.  A table of its own, not a column of
-- jobq.jobs, which would cost every plain job's statements (10_jobs.sql).
-- priority is the job's, which never changes: round-robin claims take a
-- key's jobs by priority, then in enqueue order.
CREATE TABLE jobq.concurrency_keys (
    id              bigint  NOT NULL,
    queue           text    NOT NULL,
    concurrency_key text    NOT NULL,
    priority        integer NOT NULL,
    CONSTRAINT concurrency_keys_pkey PRIMARY KEY (id)
);
CREATE INDEX concurrency_keys_claim_idx ON jobq.concurrency_keys (queue, concurrency_key, priority DESC, id);
COMMENT ON INDEX jobq.concurrency_keys_claim_idx IS
    'Round-robin claims: the keys of a queue in order, and each key''s jobs by priority, then id.';
COMMENT ON TABLE jobq.concurrency_keys IS
    'The concurrency key of each job enqueued with one, until it is done or cancelled.';
COMMENT ON COLUMN jobq.concurrency_keys.id IS 'The job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.concurrency_keys.queue IS 'The job''s queue.';
COMMENT ON COLUMN jobq.concurrency_keys.concurrency_key IS 'The key: at most key_concurrency jobs of the queue with this key run at once.';
COMMENT ON COLUMN jobq.concurrency_keys.priority IS 'The job''s priority.';
SELECT pg_catalog.pg_extension_config_dump('jobq.concurrency_keys', '');
REVOKE ALL ON TABLE jobq.concurrency_keys FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.concurrency_keys TO @extowner@;

/*
 * jobq._claim_gated(queue, n): for jobq.claim on a queue with limits (its
 * cached settings say so), the ids of the jobs to claim, locked FOR NO KEY
 * UPDATE, at most n and as many as the limits leave room for, and at:
 * the clock when the gate was taken, which the claim uses as its time (its
 * locked_at), so that the claims of the rate window are in the order they
 * took the gate.
 *
 * Locks: the queue's row of jobq.queue_gates FOR UPDATE (waiting for the
 * claim that holds it to commit or roll back; then it reads the limits
 * afresh from jobq.queue_settings), then the jobs picked, FOR NO
 * KEY UPDATE SKIP LOCKED.  Raises 25000 when the transaction is not READ
 * COMMITTED: only a snapshot taken after the gate's lock sees the claims
 * that held it before.
 *
 * Which jobs: room = n, less the jobs running over concurrency, less the
 * claims of the last rate_interval over rate_limit.  With key_concurrency,
 * a key already running key_concurrency jobs gets none, and one claim takes
 * at most the room each key has left.  key_order 'priority': the queue's
 * jobs in claim order (priority desc, run_at, id), those of full keys
 * passed over (a long backlog of full keys ahead of the others is walked
 * at every claim: that is where 'round_robin' is the better order).
 * 'round_robin': one job per key in turn, from the key after the one served
 * last, each key's best job (priority, then enqueue order), round after
 * round while room is left; jobs without a key come after the keys' turns.
 */
CREATE FUNCTION jobq._claim_gated(queue text, n integer, OUT picked bigint[], OUT at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- the walk in priority order is planned for the whole backlog (it is read
-- only as far as the room), whose cost would have the JIT compile it at
-- every claim: 250 ms, where the claim takes a few
SET jit = off
AS $$
DECLARE
    gate         jobq.queue_gates;
    limits       jobq.queue_settings;  -- the queue's limits, read after the gate's lock
    room         integer := _claim_gated.n;
    kept_times   timestamptz[];
    kept_counts  integer[];
    run_keys     text[];      -- the keys of the running jobs and of those picked,
    run_counts   integer[];   -- and how many each has
    full_keys    text[];
    slot         integer;
    one          bigint;
    this_key     text;
    served       text;        -- round robin: the key served last
    round_keys   text[];      -- the keys that gave a job this round and have room left
    next_round   text[];
    wrapped      boolean := false;
    -- priority order: the queue's runnable jobs in claim order, with their
    -- keys, those of full keys left out.  A cursor, so planned to return its
    -- first rows fast: it is read only as far as the room.
    in_order CURSOR (from_queue text, skipped text[]) FOR
        SELECT p.id, k.concurrency_key
          FROM jobq.jobs AS p
          LEFT JOIN jobq.concurrency_keys AS k ON k.id = p.id
         WHERE p.queue = from_queue
           AND p.status = 'queued'
           AND p.run_at <= statement_timestamp()
           AND (k.concurrency_key IS NULL OR NOT k.concurrency_key = ANY (skipped))
         ORDER BY p.priority DESC, p.run_at, p.id;
BEGIN
    picked := '{}';
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'claim of queue % needs a READ COMMITTED transaction: the queue has limits',
                        quote_literal(_claim_gated.queue)
            USING ERRCODE = '25000',
                  DETAIL = format('The transaction is %s.', current_setting('transaction_isolation')),
                  HINT = 'Claim from a queue with limits in a READ COMMITTED transaction (the default), best a short one of its own.';
    END IF;
    SELECT g.* INTO gate FROM jobq.queue_gates AS g WHERE g.queue = _claim_gated.queue FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO jobq.queue_gates (queue) VALUES (_claim_gated.queue)
        ON CONFLICT ON CONSTRAINT queue_gates_pkey DO NOTHING;
        SELECT g.* INTO gate FROM jobq.queue_gates AS g WHERE g.queue = _claim_gated.queue FOR UPDATE;
    END IF;
    -- every claim that held the gate before this one has ended: the
    -- statements below see its jobs, and the clock is past its time
    at := clock_timestamp();
    SELECT s.* INTO limits FROM jobq.queue_settings AS s WHERE s.queue = _claim_gated.queue;

    IF limits.concurrency IS NOT NULL THEN
        room := least(room, limits.concurrency
                            - (SELECT count(*) FROM jobq.jobs AS j
                                WHERE j.queue = _claim_gated.queue AND j.status = 'running')::integer);
    END IF;
    IF limits.rate_limit IS NOT NULL THEN
        -- the claims of the window that ends now
        SELECT coalesce(array_agg(c.t ORDER BY c.o), '{}'), coalesce(array_agg(c.k ORDER BY c.o), '{}')
          INTO kept_times, kept_counts
          FROM unnest(gate.claim_times, gate.claim_counts) WITH ORDINALITY AS c(t, k, o)
         WHERE c.t > at - limits.rate_interval;
        room := least(room, limits.rate_limit - coalesce((SELECT sum(k)::integer FROM unnest(kept_counts) AS k), 0));
    END IF;
    IF room <= 0 THEN
        RETURN;  -- at a limit: none now (the gate stays locked to the end of the transaction all the same)
    END IF;

    IF limits.key_concurrency IS NULL THEN
        picked := ARRAY(
            SELECT p.id
              FROM jobq.jobs AS p
             WHERE p.queue = (SELECT _claim_gated.queue)
               AND p.status = 'queued'
               AND p.run_at <= statement_timestamp()
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT (SELECT room)
               FOR NO KEY UPDATE SKIP LOCKED);
    ELSE
        -- the running jobs' keys, counted
        SELECT coalesce(array_agg(r.concurrency_key ORDER BY r.concurrency_key), '{}'),
               coalesce(array_agg(r.running ORDER BY r.concurrency_key), '{}')
          INTO run_keys, run_counts
          FROM (SELECT k.concurrency_key, count(*)::integer AS running
                  FROM jobq.jobs AS j
                  JOIN jobq.concurrency_keys AS k ON k.id = j.id
                 WHERE j.queue = _claim_gated.queue AND j.status = 'running'
                 GROUP BY k.concurrency_key) AS r;
        full_keys := ARRAY(SELECT u.k FROM unnest(run_keys, run_counts) AS u(k, c) WHERE u.c >= limits.key_concurrency);

        IF limits.key_order = 'round_robin' THEN
            -- the first round: every key once, from the one after the key
            -- served last, round to it
            served := gate.next_key;
            this_key := gate.next_key;
            round_keys := '{}';
            LOOP
                EXIT WHEN cardinality(picked) >= room;
                IF this_key IS NULL THEN
                    this_key := (SELECT min(k.concurrency_key) FROM jobq.concurrency_keys AS k
                                  WHERE k.queue = _claim_gated.queue);
                ELSE
                    this_key := (SELECT min(k.concurrency_key) FROM jobq.concurrency_keys AS k
                                  WHERE k.queue = _claim_gated.queue AND k.concurrency_key > this_key);
                END IF;
                IF this_key IS NULL THEN  -- past the last key
                    EXIT WHEN wrapped OR gate.next_key IS NULL;
                    wrapped := true;
                    CONTINUE;
                END IF;
                EXIT WHEN wrapped AND this_key > gate.next_key;  -- round to the start: every key had its turn
                IF NOT this_key = ANY (full_keys) THEN
                    one := (SELECT p.id
                              FROM jobq.concurrency_keys AS k
                              JOIN jobq.jobs AS p ON p.id = k.id
                             WHERE k.queue = (SELECT _claim_gated.queue) AND k.concurrency_key = (SELECT this_key)
                               AND p.status = 'queued' AND p.run_at <= statement_timestamp()
                             ORDER BY k.priority DESC, k.id
                             LIMIT 1
                               FOR NO KEY UPDATE OF p SKIP LOCKED);
                    IF one IS NOT NULL THEN
                        picked := picked || one;
                        served := this_key;
                        slot := array_position(run_keys, this_key);
                        IF slot IS NULL THEN
                            run_keys := run_keys || this_key;
                            run_counts := run_counts || 0;
                            slot := cardinality(run_keys);
                        END IF;
                        run_counts[slot] := run_counts[slot] + 1;
                        IF run_counts[slot] < limits.key_concurrency THEN
                            round_keys := round_keys || this_key;
                        END IF;
                    END IF;
                END IF;
                EXIT WHEN wrapped AND this_key = gate.next_key;
            END LOOP;
            -- the rounds after: the keys that gave a job and have room left, in the same order
            WHILE cardinality(picked) < room AND cardinality(round_keys) > 0 LOOP
                next_round := '{}';
                FOREACH this_key IN ARRAY round_keys LOOP
                    EXIT WHEN cardinality(picked) >= room;
                    one := (SELECT p.id
                              FROM jobq.concurrency_keys AS k
                              JOIN jobq.jobs AS p ON p.id = k.id
                             WHERE k.queue = (SELECT _claim_gated.queue) AND k.concurrency_key = (SELECT this_key)
                               AND p.status = 'queued' AND p.run_at <= statement_timestamp()
                               AND NOT p.id = ANY ((SELECT picked)::bigint[])
                             ORDER BY k.priority DESC, k.id
                             LIMIT 1
                               FOR NO KEY UPDATE OF p SKIP LOCKED);
                    CONTINUE WHEN one IS NULL;
                    picked := picked || one;
                    served := this_key;
                    slot := array_position(run_keys, this_key);
                    run_counts[slot] := run_counts[slot] + 1;
                    IF run_counts[slot] < limits.key_concurrency THEN
                        next_round := next_round || this_key;
                    END IF;
                END LOOP;
                round_keys := next_round;
            END LOOP;
            IF served IS DISTINCT FROM gate.next_key THEN
                UPDATE jobq.queue_gates AS g SET next_key = served WHERE g.queue = _claim_gated.queue;
            END IF;
            -- jobs without a key, after the keys' turns
            IF cardinality(picked) < room THEN
                picked := picked || ARRAY(
                    SELECT p.id
                      FROM jobq.jobs AS p
                     WHERE p.queue = (SELECT _claim_gated.queue)
                       AND p.status = 'queued'
                       AND p.run_at <= statement_timestamp()
                       AND coalesce(p.control & 16 = 0, true)
                     ORDER BY p.priority DESC, p.run_at, p.id
                     LIMIT (SELECT room - cardinality(picked))
                       FOR NO KEY UPDATE SKIP LOCKED);
            END IF;
        ELSE
            -- priority order
            FOR candidate IN in_order(_claim_gated.queue, full_keys) LOOP
                slot := NULL;
                IF candidate.concurrency_key IS NOT NULL THEN
                    slot := array_position(run_keys, candidate.concurrency_key);
                    CONTINUE WHEN slot IS NOT NULL AND run_counts[slot] >= limits.key_concurrency;
                END IF;
                PERFORM FROM jobq.jobs AS p
                  WHERE p.id = candidate.id AND p.status = 'queued'
                    FOR NO KEY UPDATE SKIP LOCKED;
                CONTINUE WHEN NOT FOUND;
                picked := picked || candidate.id;
                IF candidate.concurrency_key IS NOT NULL THEN
                    IF slot IS NULL THEN
                        run_keys := run_keys || candidate.concurrency_key;
                        run_counts := run_counts || 1;
                    ELSE
                        run_counts[slot] := run_counts[slot] + 1;
                    END IF;
                END IF;
                EXIT WHEN cardinality(picked) >= room;
            END LOOP;
        END IF;
    END IF;

    IF limits.rate_limit IS NOT NULL THEN
        UPDATE jobq.queue_gates AS g
           SET claim_times  = kept_times || CASE WHEN cardinality(picked) > 0 THEN ARRAY[at] ELSE '{}' END,
               claim_counts = kept_counts || CASE WHEN cardinality(picked) > 0 THEN ARRAY[cardinality(picked)] ELSE '{}' END
         WHERE g.queue = _claim_gated.queue;
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._claim_gated(text, integer) IS
    'Internal: for jobq.claim on a queue with limits, take the queue''s gate and pick (and lock) the jobs the limits leave room for.';
REVOKE ALL ON FUNCTION jobq._claim_gated(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._claim_gated(text, integer) TO @extowner@;
