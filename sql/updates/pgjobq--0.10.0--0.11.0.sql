/* sql/updates/pgjobq--0.10.0--0.11.0.sql: pgjobq 0.10.0 -> 0.11.0.
 * Durable execution: steps a running job records under its lease, durable
 * sleeps, signals, held jobs and progress.  Written once; it never changes
 * after 0.11.0 is released.  The definitions are copied from sql/src/ as
 * 0.11.0 has them. */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.11.0'" to load this file. \quit

----------------------------------------------------------------------------
-- Durable execution: its tables and functions, all new (sql/src/57_durable.sql
-- as a whole)
----------------------------------------------------------------------------

----------------------------------------------------------------------------
-- Durable execution (0.11.0): steps a job records as it goes, so that a run
-- after a crash, a retry or a pause goes on after them; sleeps and waits for
-- a signal that give the job back instead of holding a worker; held jobs;
-- progress.  Every write of a running job presents its lease, so a worker
-- whose lease was reaped (a zombie) cannot record a step.
--
-- Only the jobs that use it pay: a job that recorded a step or awaits a
-- signal carries control bit 64, which tells its worker (claim returns the
-- column) that it has steps to read, and tells jobq._delete_rows that it has
-- rows here; a held job carries bit 128.  Nothing here is read by claim,
-- complete or enqueue of a plain job.
--
-- States: a sleeping job is queued, with run_at at the end of its sleep; a
-- job that awaits a signal, and a held job, is waiting (outside the claim
-- index, like a job whose parents have not ended), until jobq.signal,
-- jobq.tick (the timeout) or jobq.unhold makes it queued.  Parking spends no
-- attempt.
----------------------------------------------------------------------------

-- One row per step a job recorded: its name, what kind of step, its
-- result, and the attempt that recorded it.  Kept until the job is deleted
-- (jobq.purge, retention).
CREATE TABLE jobq.job_steps (
    id          bigint      NOT NULL,
    name        text        NOT NULL,
    kind        text        NOT NULL,
    result      jsonb       NOT NULL,
    attempt     integer     NOT NULL,
    recorded_at timestamptz NOT NULL,
    CONSTRAINT job_steps_pkey PRIMARY KEY (id, name)
);
COMMENT ON TABLE jobq.job_steps IS
    'Durable execution: the steps each job recorded (jobq.checkpoint), its sleeps (jobq.sleep) and the outcomes of its waits for a signal (jobq.await_signal). One namespace per job.';
COMMENT ON COLUMN jobq.job_steps.id IS 'The job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.job_steps.name IS 'The step''s name, unique within the job; for a wait, the signal''s key.';
COMMENT ON COLUMN jobq.job_steps.kind IS 'step (jobq.checkpoint), sleep (jobq.sleep: result {"until": ...}), signal (jobq.await_signal: result {"payload": ...} or {"timed_out": true}) or fan_out (jobq.fan_out: result, the ids enqueued).';
COMMENT ON COLUMN jobq.job_steps.result IS 'What the step returned: any JSON value of at most 1 MiB.';
COMMENT ON COLUMN jobq.job_steps.attempt IS 'The attempt (jobq.jobs.attempts) that recorded it.';
COMMENT ON COLUMN jobq.job_steps.recorded_at IS 'When it was recorded.';
SELECT pg_catalog.pg_extension_config_dump('jobq.job_steps', '');
REVOKE ALL ON TABLE jobq.job_steps FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.job_steps TO @extowner@;

-- One row per signal key sent (payload set) or awaited and not sent yet
-- (payload NULL).  The row is what a signal and an await of one key take
-- turns on: each writes it (INSERT ... ON CONFLICT DO UPDATE) before it
-- looks for the other's rows, so neither misses the other (the isolation
-- spec signal_vs_await).  A signal is kept until expires_at (the keep of
-- jobq.signal, 7 days by default) for awaits that come later; a key awaited
-- and never sent, until its last wait's timeout.  jobq.tick deletes the
-- rows past expires_at.
CREATE TABLE jobq.signals (
    key          text        NOT NULL,
    payload      jsonb,
    signalled_at timestamptz,
    expires_at   timestamptz,
    CONSTRAINT signals_pkey PRIMARY KEY (key)
);
CREATE INDEX signals_expires_idx ON jobq.signals (expires_at);
COMMENT ON INDEX jobq.signals_expires_idx IS 'The signals jobq.tick deletes: those past expires_at.';
COMMENT ON TABLE jobq.signals IS
    'Signals by key: the first jobq.signal of a key (payload, kept until expires_at for awaits that come later), or a key awaited and not sent yet (payload NULL).';
COMMENT ON COLUMN jobq.signals.key IS 'The key, 1 to 200 characters.';
COMMENT ON COLUMN jobq.signals.payload IS 'The first signal''s payload (any JSON value); NULL: awaited, not sent yet.';
COMMENT ON COLUMN jobq.signals.signalled_at IS 'When the first signal was sent; NULL: not sent yet.';
COMMENT ON COLUMN jobq.signals.expires_at IS 'jobq.tick deletes the row after it: a signal''s keep, or an unsent key''s last timeout; NULL: never (awaited without a timeout).';
SELECT pg_catalog.pg_extension_config_dump('jobq.signals', '');
REVOKE ALL ON TABLE jobq.signals FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.signals TO @extowner@;

-- One row per job waiting for a signal: the key and when it stops waiting.
CREATE TABLE jobq.signal_waits (
    id         bigint      NOT NULL,
    key        text        NOT NULL,
    timeout_at timestamptz,
    CONSTRAINT signal_waits_pkey PRIMARY KEY (id)
);
CREATE INDEX signal_waits_key_idx ON jobq.signal_waits (key);
CREATE INDEX signal_waits_timeout_idx ON jobq.signal_waits (timeout_at) WHERE timeout_at IS NOT NULL;
COMMENT ON INDEX jobq.signal_waits_key_idx IS 'The jobs a signal releases.';
COMMENT ON INDEX jobq.signal_waits_timeout_idx IS 'The waits jobq.tick ends at their timeout.';
COMMENT ON TABLE jobq.signal_waits IS 'The jobs waiting for a signal (jobq.await_signal): the key, and the end of the wait.';
COMMENT ON COLUMN jobq.signal_waits.id IS 'The waiting job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.signal_waits.key IS 'The signal''s key.';
COMMENT ON COLUMN jobq.signal_waits.timeout_at IS 'When the wait ends without the signal (jobq.tick); NULL: never.';
SELECT pg_catalog.pg_extension_config_dump('jobq.signal_waits', '');
REVOKE ALL ON TABLE jobq.signal_waits FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.signal_waits TO @extowner@;

-- One row per job that reported progress: the latest report.  A table of
-- its own, so that a report writes one small row and never a new version
-- of the job's row (which every index of jobq.jobs would see).
CREATE TABLE jobq.job_progress (
    id         bigint      NOT NULL,
    progress   jsonb       NOT NULL,
    updated_at timestamptz NOT NULL,
    CONSTRAINT job_progress_pkey PRIMARY KEY (id)
);
COMMENT ON TABLE jobq.job_progress IS 'The latest progress each job reported (jobq.progress).';
COMMENT ON COLUMN jobq.job_progress.id IS 'The job (jobq.jobs.id).';
COMMENT ON COLUMN jobq.job_progress.progress IS 'Any JSON value of at most 1 MiB.';
COMMENT ON COLUMN jobq.job_progress.updated_at IS 'When it was reported.';
SELECT pg_catalog.pg_extension_config_dump('jobq.job_progress', '');
REVOKE ALL ON TABLE jobq.job_progress FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.job_progress TO @extowner@;

/*
 * jobq._check_name(name, argument): returns nothing; raises 22004 for NULL
 * and 22023 unless name is 1 to 200 characters.  argument names the
 * caller's argument (step, key) in the message.
 */
CREATE FUNCTION jobq._check_name(name text, argument text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', argument USING ERRCODE = '22004';
    END IF;
    IF length(name) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION '% must be 1 to 200 characters, got %', argument, length(name) USING ERRCODE = '22023';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._check_name(text, text) IS 'Internal: raises 22004 or 22023 unless a step name or signal key is 1 to 200 characters.';
REVOKE ALL ON FUNCTION jobq._check_name(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._check_name(text, text) TO @extowner@;

/*
 * jobq._raise_other_kind(id, name, kind, wanted): never returns.  A call
 * of the job id wanted a step of kind wanted named name, and the job has
 * one of kind kind by that name: raises 22023 saying so (a job's steps,
 * sleeps, waits and fan-outs share one namespace).
 */
CREATE FUNCTION jobq._raise_other_kind(id bigint, name text, kind text, wanted text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'step % of job % is a %, not a %', quote_literal(name), id, kind,
                    CASE wanted WHEN 'signal' THEN 'wait for a signal' ELSE wanted END
        USING ERRCODE = '22023',
              HINT = 'A job''s steps, sleeps and waits for a signal share one namespace: give each its own name.';
END
$$;
COMMENT ON FUNCTION jobq._raise_other_kind(bigint, text, text, text) IS
    'Internal: raises 22023 for a step name that a step of another kind of the job has.';
REVOKE ALL ON FUNCTION jobq._raise_other_kind(bigint, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._raise_other_kind(bigint, text, text, text) TO @extowner@;

/*
 * jobq._hold_running(id, lease): the job's attempts, after locking its row
 * (FOR NO KEY UPDATE: a reaper, a cancel or another call of this job's
 * worker waits) and marking it durable (control bit 64), when it is running
 * under lease.  Raises JQ002 (no such job) or JQ001 (the lease is not
 * current, or the job is not running) otherwise.  The fence of every
 * function here that a running job calls.
 */
CREATE FUNCTION jobq._hold_running(id bigint, lease bigint)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    attempt integer;
    bits    smallint;
BEGIN
    SELECT j.attempts, j.control INTO attempt, bits
      FROM jobq.jobs AS j
     WHERE j.id = _hold_running.id AND j.lease = _hold_running.lease AND j.status = 'running'
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(_hold_running.id, _hold_running.lease);
    END IF;
    IF coalesce(bits & 64, 0) = 0 THEN  -- the first step: one new version of the row, once
        UPDATE jobq.jobs AS j SET control = coalesce(j.control, 0) | 64 WHERE j.id = _hold_running.id;
    END IF;
    RETURN attempt;
END
$$;
COMMENT ON FUNCTION jobq._hold_running(bigint, bigint) IS
    'Internal: lock a job running under lease and mark it durable (control bit 64); raises JQ001 or JQ002 otherwise.';
REVOKE ALL ON FUNCTION jobq._hold_running(bigint, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._hold_running(bigint, bigint) TO @extowner@;

/*
 * jobq.checkpoint(id, lease, step, result): the step's recorded result.
 * Records that step of the running job finished with result (any JSON
 * value; 'null' for none), in the caller's transaction, so that the step's
 * own writes and its record commit together.  A step recorded already (by
 * this attempt or an earlier one) keeps its first result, which is
 * returned.  Locks the job's row (jobq._hold_running).  Raises 22004 (NULL
 * argument), 22023 (step not 1 to 200 characters, or the name of a sleep or
 * a wait of the job), 54000 (result over 1 MiB), JQ002 (no such job), JQ001
 * (the lease is not current, or the job is not running: a zombie's step is
 * refused).
 */
CREATE FUNCTION jobq.checkpoint(id bigint, lease bigint, step text, result jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers record steps without privileges on the tables;
-- the lease decides which jobs they may write.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    attempt  integer;
    recorded jobq.job_steps;
BEGIN
    PERFORM jobq._check_lease(checkpoint.id, checkpoint.lease);
    PERFORM jobq._check_name(checkpoint.step, 'step');
    IF checkpoint.result IS NULL THEN
        RAISE EXCEPTION 'result must not be NULL' USING ERRCODE = '22004',
              HINT = 'A step without a result records ''null''::jsonb.';
    END IF;
    PERFORM jobq._check_result(checkpoint.result, 'result');
    attempt := jobq._hold_running(checkpoint.id, checkpoint.lease);
    INSERT INTO jobq.job_steps AS s (id, name, kind, result, attempt, recorded_at)
    VALUES (checkpoint.id, checkpoint.step, 'step', checkpoint.result, attempt, statement_timestamp())
    ON CONFLICT ON CONSTRAINT job_steps_pkey DO NOTHING;
    IF FOUND THEN
        RETURN checkpoint.result;
    END IF;
    SELECT s.* INTO recorded FROM jobq.job_steps AS s WHERE s.id = checkpoint.id AND s.name = checkpoint.step;
    IF recorded.kind <> 'step' THEN
        PERFORM jobq._raise_other_kind(checkpoint.id, recorded.name, recorded.kind, 'step');
    END IF;
    RETURN recorded.result;
END
$$;
COMMENT ON FUNCTION jobq.checkpoint(bigint, bigint, text, jsonb) IS
    'Record that a step of a running job finished with its result, in the caller''s transaction; returns the recorded result (the first, when the step was recorded already). Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.checkpoint(bigint, bigint, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.checkpoint(bigint, bigint, text, jsonb) TO @extowner@;

/*
 * jobq.steps(id): the steps the job recorded, its sleeps and the outcomes
 * of its waits (jobq.job_steps), in the order they were recorded: what a
 * worker reads when it runs a job whose control bit 64 is set.  Reads
 * without locking.  Raises 22004 (NULL id), JQ002 (no such job).
 */
CREATE FUNCTION jobq.steps(id bigint)
RETURNS TABLE (name text, kind text, result jsonb, attempt integer, recorded_at timestamptz)
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
-- SECURITY DEFINER: the roles given it read a job's steps without SELECT on
-- the tables.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF steps.id IS NULL THEN
        RAISE EXCEPTION 'id must not be NULL' USING ERRCODE = '22004';
    END IF;
    RETURN QUERY
    SELECT s.name, s.kind, s.result, s.attempt, s.recorded_at
      FROM jobq.job_steps AS s
     WHERE s.id = steps.id
     ORDER BY s.recorded_at, s.name;
    IF NOT FOUND AND NOT EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = steps.id) THEN
        RAISE EXCEPTION 'id %: no such job', steps.id USING ERRCODE = 'JQ002';
    END IF;
END
$$;
COMMENT ON FUNCTION jobq.steps(bigint) IS
    'The steps a job recorded (name, kind: step, sleep, signal or fan_out, result, attempt, recorded_at), oldest first. JQ002: no such job.';
REVOKE ALL ON FUNCTION jobq.steps(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.steps(bigint) TO @extowner@;

/*
 * jobq.sleep(id, lease, step, until): true when the sleep named step is
 * over, and the job goes on running; false when the job was given back to
 * sleep: queued, runnable at the sleep's end, without spending an attempt,
 * its lease spent (as by jobq.snooze; cancelled instead when a cancel was
 * requested), and the caller stops running it.  The first call records the
 * sleep with its end, until; later calls (the job run again, early or on
 * time) keep that end, whatever until they give.  An end already past at
 * the first call records the sleep and returns true.  Locks the job's row.
 * Raises 22004 (NULL argument), 22023 (step not 1 to 200 characters or the
 * name of another kind of step, until not finite or more than 10 years
 * ahead), JQ002, JQ001 like jobq.checkpoint.
 */
CREATE FUNCTION jobq.sleep(id bigint, lease bigint, step text, until timestamptz)
RETURNS boolean
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: like jobq.checkpoint.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    attempt  integer;
    recorded jobq.job_steps;
    ends     timestamptz;
BEGIN
    PERFORM jobq._check_lease(sleep.id, sleep.lease);
    PERFORM jobq._check_name(sleep.step, 'step');
    IF sleep.until IS NULL THEN
        RAISE EXCEPTION 'until must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT isfinite(sleep.until) OR sleep.until > statement_timestamp() + interval '10 years' THEN
        RAISE EXCEPTION 'until must be a time at most 10 years ahead, got %', sleep.until USING ERRCODE = '22023';
    END IF;
    attempt := jobq._hold_running(sleep.id, sleep.lease);
    INSERT INTO jobq.job_steps AS s (id, name, kind, result, attempt, recorded_at)
    VALUES (sleep.id, sleep.step, 'sleep', jsonb_build_object('until', sleep.until), attempt, statement_timestamp())
    ON CONFLICT ON CONSTRAINT job_steps_pkey DO NOTHING;
    IF FOUND THEN
        ends := sleep.until;
    ELSE
        SELECT s.* INTO recorded FROM jobq.job_steps AS s WHERE s.id = sleep.id AND s.name = sleep.step;
        IF recorded.kind <> 'sleep' THEN
            PERFORM jobq._raise_other_kind(sleep.id, recorded.name, recorded.kind, 'sleep');
        END IF;
        ends := (recorded.result ->> 'until')::timestamptz;
    END IF;
    IF ends <= statement_timestamp() THEN
        RETURN true;
    END IF;
    -- given back (a cancel requested: cancelled, as jobq.snooze does), runnable at ends exactly: not
    -- through snooze's delay, ends - statement_timestamp(), which comes back in days (a day of the
    -- session's time zone may last 23 or 25 hours) and may exceed the 3,600 days of interval '10 years'
    IF EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = sleep.id AND j.control & 1 <> 0) THEN
        PERFORM jobq.snooze(sleep.id, sleep.lease, interval '0');
        RETURN false;
    END IF;
    UPDATE jobq.jobs AS j
       SET status = 'queued', run_at = ends, attempts = j.attempts - 1
     WHERE j.id = sleep.id;
    RETURN false;
END
$$;
COMMENT ON FUNCTION jobq.sleep(bigint, bigint, text, timestamptz) IS
    'A durable sleep of a running job: true when the sleep named step is over (go on); false when the job was given back, queued until the sleep''s end (recorded by the first call), without spending an attempt. Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.sleep(bigint, bigint, text, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.sleep(bigint, bigint, text, timestamptz) TO @extowner@;

/*
 * jobq.await_signal(id, lease, key, timeout): the payload of the signal
 * key (jobq.signal) when it was sent, at once, recorded as the outcome of
 * the job's wait for key (a step of kind signal); otherwise NULL, after
 * parking the job: waiting, its lease spent, no attempt spent (cancelled
 * instead when a cancel was requested), until jobq.signal(key) or, after
 * timeout (NULL: none), jobq.tick makes it queued with that outcome, and the
 * caller stops running it.  Run again, the job's await of key returns the
 * outcome recorded: the payload, or JQ005 after a timeout, whatever was
 * sent since.  Locks the job's row, then the key's row of jobq.signals
 * (INSERT ... ON CONFLICT DO UPDATE: a signal of the key in flight is
 * waited for; under REPEATABLE READ, one committed after the snapshot
 * raises 40001).  Raises 22004 (NULL id, lease or key), 22023 (key not 1
 * to 200 characters or the name of another kind of step, timeout not
 * positive or over 10 years), JQ005 (the recorded outcome is a timeout),
 * JQ002, JQ001 like jobq.checkpoint.
 */
CREATE FUNCTION jobq.await_signal(id bigint, lease bigint, key text, timeout interval DEFAULT NULL)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: like jobq.checkpoint.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    attempt  integer;
    recorded jobq.job_steps;
    sent     jobq.signals;
    ends     timestamptz;
BEGIN
    PERFORM jobq._check_lease(await_signal.id, await_signal.lease);
    PERFORM jobq._check_name(await_signal.key, 'key');
    IF await_signal.timeout <= interval '0' OR await_signal.timeout > interval '10 years' THEN
        RAISE EXCEPTION 'timeout must be a positive interval of at most 10 years, got %', await_signal.timeout
            USING ERRCODE = '22023';
    END IF;
    attempt := jobq._hold_running(await_signal.id, await_signal.lease);
    SELECT s.* INTO recorded FROM jobq.job_steps AS s WHERE s.id = await_signal.id AND s.name = await_signal.key;
    IF FOUND THEN
        IF recorded.kind <> 'signal' THEN
            PERFORM jobq._raise_other_kind(await_signal.id, recorded.name, recorded.kind, 'signal');
        END IF;
        IF recorded.result ? 'timed_out' THEN
            RAISE EXCEPTION 'signal % did not arrive in time', quote_literal(await_signal.key)
                USING ERRCODE = 'JQ005',
                      DETAIL = format('Job %s stopped waiting at %s.', await_signal.id, recorded.recorded_at);
        END IF;
        RETURN recorded.result -> 'payload';
    END IF;

    ends := statement_timestamp() + await_signal.timeout;
    -- the key's row, written (so locked) before the look: a signal of the
    -- key in flight is waited for, and one that comes later waits for this
    INSERT INTO jobq.signals AS g (key, expires_at) VALUES (await_signal.key, ends)
    ON CONFLICT ON CONSTRAINT signals_pkey DO UPDATE
       SET expires_at = CASE WHEN g.payload IS NOT NULL THEN g.expires_at
                             WHEN g.expires_at IS NULL OR excluded.expires_at IS NULL THEN NULL
                             ELSE greatest(g.expires_at, excluded.expires_at) END
    RETURNING g.* INTO sent;
    IF sent.signalled_at IS NOT NULL THEN
        INSERT INTO jobq.job_steps (id, name, kind, result, attempt, recorded_at)
        VALUES (await_signal.id, await_signal.key, 'signal', jsonb_build_object('payload', sent.payload), attempt,
                statement_timestamp());
        RETURN sent.payload;
    END IF;

    -- park the job (a cancel requested: cancelled, as jobq.snooze does)
    IF EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = await_signal.id AND j.control & 1 <> 0) THEN
        PERFORM jobq.snooze(await_signal.id, await_signal.lease, interval '0');
        RETURN NULL;
    END IF;
    INSERT INTO jobq.signal_waits (id, key, timeout_at) VALUES (await_signal.id, await_signal.key, ends)
    ON CONFLICT ON CONSTRAINT signal_waits_pkey DO UPDATE SET key = excluded.key, timeout_at = excluded.timeout_at;
    UPDATE jobq.jobs AS j
       SET status = 'waiting', attempts = j.attempts - 1
     WHERE j.id = await_signal.id;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq.await_signal(bigint, bigint, text, interval) IS
    'Wait for a signal: its payload at once when it was sent; else NULL, the job parked (waiting, no worker held, no attempt spent) until jobq.signal(key) or the timeout, and run again, when this returns the payload or raises JQ005 (timed out). Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.await_signal(bigint, bigint, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.await_signal(bigint, bigint, text, interval) TO @extowner@;

/*
 * jobq._wake(ids, key, outcome): how many of the jobs ids, whose waits for
 * the signal key were just deleted, it released: each still waiting (not
 * cancelled meanwhile) becomes queued, runnable now, with outcome recorded
 * as its wait's (a step of kind signal named key, for the attempt that
 * awaited), and its queue is notified.  Called by jobq.signal and
 * jobq._end_waits.  Locks the rows of the jobs it releases.
 */
CREATE FUNCTION jobq._wake(ids bigint[], key text, outcome jsonb)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    woken_count integer;
BEGIN
    WITH woken AS (
        UPDATE jobq.jobs AS j
           SET status = 'queued', run_at = statement_timestamp()
         WHERE j.id = ANY (_wake.ids) AND j.status = 'waiting'
        RETURNING j.id, j.queue, j.attempts
    ), outcomes AS (
        INSERT INTO jobq.job_steps (id, name, kind, result, attempt, recorded_at)
        SELECT o.id, _wake.key, 'signal', _wake.outcome, o.attempts + 1, statement_timestamp()
          FROM woken AS o
        ON CONFLICT ON CONSTRAINT job_steps_pkey DO NOTHING
    ), notified AS (
        SELECT pg_notify('jobq_' || q.queue, '') FROM (SELECT DISTINCT o.queue FROM woken AS o) AS q
    )
    SELECT (SELECT count(*) FROM woken)::integer INTO woken_count
      FROM (SELECT count(*) FROM notified) AS q;  -- notified: read for its notifications
    RETURN woken_count;
END
$$;
COMMENT ON FUNCTION jobq._wake(bigint[], text, jsonb) IS
    'Internal: release the jobs whose waits for a signal ended (queued, the outcome recorded, their queues notified); returns how many.';
REVOKE ALL ON FUNCTION jobq._wake(bigint[], text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._wake(bigint[], text, jsonb) TO @extowner@;

/*
 * jobq.signal(key, payload, keep): how many jobs the signal released.  The
 * first signal of key wins: it is kept for keep (default 7 days; jobq.tick
 * deletes it then) for the jobs that await key later, each of which gets
 * its payload at once; and every job waiting for key now becomes queued,
 * the payload recorded as its wait's outcome, its queue notified.  A later
 * signal of the same key changes nothing and returns 0.  Runs in the
 * caller's transaction (a trigger may signal).  Locks the key's row of
 * jobq.signals (waits for an await of the key in flight; under REPEATABLE
 * READ, one committed after the snapshot raises 40001), then the rows of
 * the jobs it releases.  Raises 22004 (NULL key, payload or keep), 22023
 * (key not 1 to 200 characters, keep negative or over 10 years), 54000
 * (payload over 1 MiB).
 */
CREATE FUNCTION jobq.signal(key text, payload jsonb DEFAULT 'null'::jsonb, keep interval DEFAULT '7 days')
RETURNS integer
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers signal without privileges on the tables; a
-- signal only releases the jobs that await its key.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    released integer;
BEGIN
    PERFORM jobq._check_name(signal.key, 'key');
    IF signal.payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be NULL' USING ERRCODE = '22004',
              HINT = 'A signal without a payload sends ''null''::jsonb (the default).';
    END IF;
    PERFORM jobq._check_result(signal.payload, 'payload');
    IF signal.keep IS NULL THEN
        RAISE EXCEPTION 'keep must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF signal.keep < interval '0' OR signal.keep > interval '10 years' THEN
        RAISE EXCEPTION 'keep must be an interval between 0 and 10 years, got %', signal.keep
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO jobq.signals AS g (key, payload, signalled_at, expires_at)
    VALUES (signal.key, signal.payload, statement_timestamp(), statement_timestamp() + signal.keep)
    ON CONFLICT ON CONSTRAINT signals_pkey DO UPDATE
       SET payload = excluded.payload, signalled_at = excluded.signalled_at, expires_at = excluded.expires_at
     WHERE g.signalled_at IS NULL;
    IF NOT FOUND THEN
        RETURN 0;  -- sent before: the first signal wins
    END IF;
    -- the waits, read by a statement of its own (a snapshot taken after the
    -- key's row was locked: every await that parked a job on it has committed)
    WITH ended AS (
        DELETE FROM jobq.signal_waits AS w WHERE w.key = signal.key RETURNING w.id
    )
    SELECT jobq._wake(coalesce(array_agg(e.id), '{}'), signal.key, jsonb_build_object('payload', signal.payload))
      INTO released
      FROM ended AS e;
    RETURN released;
END
$$;
COMMENT ON FUNCTION jobq.signal(text, jsonb, interval) IS
    'Send a signal: every job waiting for key becomes queued with payload as its wait''s outcome; the first signal of a key wins and is kept for keep (default 7 days) for later awaits. Returns how many jobs it released.';
REVOKE ALL ON FUNCTION jobq.signal(text, jsonb, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.signal(text, jsonb, interval) TO @extowner@;

/*
 * jobq._end_waits(at, max_rows): how many waits for a signal it ended at
 * their timeout (at most max_rows, oldest timeout first): each job still
 * waiting becomes queued, the timeout recorded as its wait's outcome
 * ({"timed_out": true}), its queue notified.  Then deletes up to max_rows
 * signals past their expires_at.  Called by jobq.tick.  Locks the waits
 * and signals it deletes (FOR UPDATE SKIP LOCKED: ticks at once share the
 * work, and a signal or an await in flight keeps its rows), and the jobs
 * it releases.
 */
CREATE FUNCTION jobq._end_waits(at timestamptz, max_rows integer)
RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    due   record;
    ended integer := 0;
BEGIN
    FOR due IN
        WITH gone AS (
            DELETE FROM jobq.signal_waits AS w
             WHERE w.id = ANY (ARRAY(SELECT t.id
                                       FROM jobq.signal_waits AS t
                                      WHERE t.timeout_at <= _end_waits.at
                                      ORDER BY t.timeout_at
                                      LIMIT _end_waits.max_rows
                                        FOR UPDATE SKIP LOCKED))
            RETURNING w.id, w.key
        )
        SELECT g.key, array_agg(g.id) AS ids FROM gone AS g GROUP BY g.key
    LOOP
        PERFORM jobq._wake(due.ids, due.key, '{"timed_out": true}'::jsonb);
        ended := ended + cardinality(due.ids);
    END LOOP;

    DELETE FROM jobq.signals AS g
     WHERE g.key = ANY (ARRAY(SELECT e.key FROM jobq.signals AS e
                               WHERE e.expires_at <= _end_waits.at
                               ORDER BY e.expires_at
                               LIMIT _end_waits.max_rows
                                 FOR UPDATE SKIP LOCKED));
    RETURN ended;
END
$$;
COMMENT ON FUNCTION jobq._end_waits(timestamptz, integer) IS
    'Internal: end the waits for a signal whose timeout passed (the jobs queued, the timeout their outcome) and delete expired signals; run by jobq.tick.';
REVOKE ALL ON FUNCTION jobq._end_waits(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._end_waits(timestamptz, integer) TO @extowner@;

/*
 * jobq.fan_out(id, lease, step, children, continuation): the ids of the
 * jobs enqueued, the children's in their order, then the continuation's.
 * The running job enqueues children (a JSON array of 1 to 999 jobs, each
 * an object as a step of jobq.enqueue_flow: payload, and optionally queue,
 * task, priority, run_at, max_attempts, headers, concurrency_key,
 * depends_on (ids), on_parent_failure; not name) and, unless continuation
 * is NULL, one more job that depends on every child (and on what its own
 * depends_on lists) and runs once each of them ended: with
 * on_parent_failure 'run' unless it says 'cancel', so a failed or
 * cancelled child does not cancel it, and jobq.parent_results gives it the
 * children's results and statuses in their order.  Queue: each job's own,
 * else the running job's.  The step is recorded with the ids in the same
 * transaction, so a run of the job after a crash gets the same ids back
 * and enqueues nothing twice.  Locks the job's row (jobq._hold_running),
 * and what jobq.enqueue_flow locks.  Raises 22004 (NULL id, lease, step or
 * children), 22023 (children not an array of 1 to 999 objects, a child
 * with a name, continuation not an object or its depends_on not an
 * array, step of another kind), JQ002, JQ001 like jobq.checkpoint, and
 * what jobq.enqueue_flow raises (its steps[i] are children[i], and
 * steps[N] the continuation).
 */
CREATE FUNCTION jobq.fan_out(id bigint, lease bigint, step text, children jsonb, continuation jsonb DEFAULT NULL)
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: like jobq.checkpoint; it enqueues with jobq.enqueue_flow.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    attempt  integer;
    recorded jobq.job_steps;
    own      text;
    named    jsonb;
    ids      bigint[];
    bad      integer;
BEGIN
    PERFORM jobq._check_lease(fan_out.id, fan_out.lease);
    PERFORM jobq._check_name(fan_out.step, 'step');
    IF fan_out.children IS NULL THEN
        RAISE EXCEPTION 'children must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF jsonb_typeof(fan_out.children) <> 'array' OR jsonb_array_length(fan_out.children) NOT BETWEEN 1 AND 999 THEN
        RAISE EXCEPTION 'children must be a JSON array of 1 to 999 objects, got %',
                        CASE WHEN jsonb_typeof(fan_out.children) = 'array'
                             THEN format('%s elements', jsonb_array_length(fan_out.children))
                             ELSE 'a JSON ' || jsonb_typeof(fan_out.children) END
            USING ERRCODE = '22023';
    END IF;
    -- the flow's names are fan_out's own: no job of it names itself, and a child depends on jobs by id
    SELECT (c.ordinality - 1)::integer INTO bad
      FROM jsonb_array_elements(fan_out.children) WITH ORDINALITY AS c
     WHERE jsonb_typeof(c.value) = 'object'
       AND (c.value ? 'name'
            OR (jsonb_typeof(c.value -> 'depends_on') = 'array'
                AND EXISTS (SELECT FROM jsonb_array_elements(c.value -> 'depends_on') AS d
                             WHERE jsonb_typeof(d) <> 'number')))
     ORDER BY c.ordinality LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'children[%] must have no name, and depend on jobs by id only', bad USING ERRCODE = '22023',
              HINT = 'The continuation depends on every child; a child depends on existing jobs by id.';
    END IF;
    IF jsonb_typeof(fan_out.continuation) = 'object' AND fan_out.continuation ? 'name' THEN
        RAISE EXCEPTION 'continuation must have no name' USING ERRCODE = '22023';
    END IF;
    IF fan_out.continuation IS NOT NULL AND jsonb_typeof(fan_out.continuation) <> 'object' THEN
        RAISE EXCEPTION 'continuation must be a JSON object, got a JSON %', jsonb_typeof(fan_out.continuation)
            USING ERRCODE = '22023';
    END IF;
    IF jsonb_typeof(fan_out.continuation -> 'depends_on') NOT IN ('array', 'null') THEN
        RAISE EXCEPTION 'continuation.depends_on must be a JSON array, got a JSON %',
                        jsonb_typeof(fan_out.continuation -> 'depends_on')
            USING ERRCODE = '22023';
    END IF;
    attempt := jobq._hold_running(fan_out.id, fan_out.lease);
    SELECT s.* INTO recorded FROM jobq.job_steps AS s WHERE s.id = fan_out.id AND s.name = fan_out.step;
    IF FOUND THEN
        IF recorded.kind <> 'fan_out' THEN
            PERFORM jobq._raise_other_kind(fan_out.id, recorded.name, recorded.kind, 'fan_out');
        END IF;
        RETURN ARRAY(SELECT e::bigint FROM jsonb_array_elements_text(recorded.result) AS e);
    END IF;

    SELECT j.queue INTO own FROM jobq.jobs AS j WHERE j.id = fan_out.id;
    -- the flow: the children named by position (the names are the flow's
    -- only), then the continuation after all of them
    named := (SELECT jsonb_agg(CASE WHEN jsonb_typeof(c.value) = 'object'
                                    THEN c.value || jsonb_build_object('name', '#' || c.ordinality)
                                    ELSE c.value END ORDER BY c.ordinality)
                FROM jsonb_array_elements(fan_out.children) WITH ORDINALITY AS c);
    IF fan_out.continuation IS NOT NULL THEN
        named := named || jsonb_build_array(
            jsonb_build_object('on_parent_failure', 'run')
            || fan_out.continuation
            || jsonb_build_object('depends_on',
                                  (SELECT jsonb_agg('#' || n ORDER BY n)
                                     FROM generate_series(1, jsonb_array_length(fan_out.children)) AS n)
                                  || CASE WHEN jsonb_typeof(fan_out.continuation -> 'depends_on') = 'array'
                                          THEN fan_out.continuation -> 'depends_on' ELSE '[]'::jsonb END));
    END IF;
    ids := jobq.enqueue_flow(own, named);
    INSERT INTO jobq.job_steps (id, name, kind, result, attempt, recorded_at)
    VALUES (fan_out.id, fan_out.step, 'fan_out', to_jsonb(ids), attempt, statement_timestamp());
    RETURN ids;
END
$$;
COMMENT ON FUNCTION jobq.fan_out(bigint, bigint, text, jsonb, jsonb) IS
    'A running job enqueues children and one continuation that runs once every child ended (jobq.parent_results gives it their results), recorded as a step: returns the ids, the same ones when the job runs again. Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.fan_out(bigint, bigint, text, jsonb, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.fan_out(bigint, bigint, text, jsonb, jsonb) TO @extowner@;

/*
 * jobq.parent_results(id): one row per parent of the job (jobq.enqueue's
 * depends_on, jobq.fan_out's children), in the order they were enqueued
 * (by id): its id, status and result (NULL when it has none, or did not
 * end done).  What a dependent's worker reads, one call for all parents.
 * Reads without locking.  Raises 22004 (NULL id), JQ002 (no such job).
 */
CREATE FUNCTION jobq.parent_results(id bigint)
RETURNS TABLE (parent bigint, status text, result jsonb)
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
-- SECURITY DEFINER: the roles given it read the parents' results without
-- SELECT on the tables (as jobq.job shows them).
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF parent_results.id IS NULL THEN
        RAISE EXCEPTION 'id must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT FROM jobq.jobs AS j WHERE j.id = parent_results.id) THEN
        RAISE EXCEPTION 'id %: no such job', parent_results.id USING ERRCODE = 'JQ002';
    END IF;
    RETURN QUERY
    SELECT d.parent, p.status, r.result
      FROM jobq.job_deps AS d
      LEFT JOIN jobq.jobs AS p ON p.id = d.parent
      LEFT JOIN jobq.results AS r ON r.id = d.parent
     WHERE d.child = parent_results.id
     ORDER BY d.parent;
END
$$;
COMMENT ON FUNCTION jobq.parent_results(bigint) IS
    'The parents of a job (depends_on, or a fan_out''s children), in the order enqueued: id, status and result. JQ002: no such job.';
REVOKE ALL ON FUNCTION jobq.parent_results(bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.parent_results(bigint) TO @extowner@;

/*
 * jobq._enqueue_held(queue, payload, priority, run_at, max_attempts,
 * headers, task, hold, other): the new job's id, for jobq.enqueue(...,
 * hold => true): the job is inserted waiting and held (control bit 128),
 * and no worker is woken.  other names the first option given that a held
 * job cannot have yet (unique_key, concurrency_key, depends_on), or is
 * NULL.  The caller checked the other arguments.  Raises 22004 (NULL hold),
 * 22023 (other given).
 */
CREATE FUNCTION jobq._enqueue_held(queue text, payload jsonb, priority integer, run_at timestamptz,
                                   max_attempts integer, headers jsonb, task text, hold boolean, other text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
BEGIN
    IF _enqueue_held.hold IS NULL THEN
        RAISE EXCEPTION 'hold must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF _enqueue_held.other IS NOT NULL THEN
        RAISE EXCEPTION 'hold cannot be combined with %', _enqueue_held.other
            USING ERRCODE = '22023',
                  HINT = 'Enqueue the job held without it, or without hold.';
    END IF;
    INSERT INTO jobq.jobs (queue, payload, status, priority, run_at, max_attempts, headers, task, control)
    VALUES (_enqueue_held.queue, _enqueue_held.payload, 'waiting', _enqueue_held.priority, _enqueue_held.run_at,
            _enqueue_held.max_attempts, _enqueue_held.headers, _enqueue_held.task, 128::smallint)
    RETURNING jobq.jobs.id INTO new_id;
    RETURN new_id;
END
$$;
COMMENT ON FUNCTION jobq._enqueue_held(text, jsonb, integer, timestamptz, integer, jsonb, text, boolean, text) IS
    'Internal: insert a held job (waiting, control bit 128) for jobq.enqueue(..., hold => true).';
REVOKE ALL ON FUNCTION jobq._enqueue_held(text, jsonb, integer, timestamptz, integer, jsonb, text, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._enqueue_held(text, jsonb, integer, timestamptz, integer, jsonb, text, boolean, text) TO @extowner@;

/*
 * jobq.unhold(ids): how many of the held jobs ids it released: each becomes
 * queued (runnable at its run_at), its queue notified.  Jobs of ids that
 * are not held (unknown, released already, cancelled) are left alone.
 * Locks the rows it changes.  Raises 22004 (NULL ids), 22023 (ids
 * multidimensional or holding NULL).
 */
CREATE FUNCTION jobq.unhold(ids bigint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: producers release the jobs they held without UPDATE on
-- jobq.jobs; it changes only held jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    released integer;
BEGIN
    IF unhold.ids IS NULL THEN
        RAISE EXCEPTION 'ids must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF array_ndims(unhold.ids) > 1 THEN
        RAISE EXCEPTION 'ids must be a one-dimensional array, got % dimensions', array_ndims(unhold.ids)
            USING ERRCODE = '22023';
    END IF;
    IF array_position(unhold.ids, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'ids must not contain NULL, found one at ids[%]', array_position(unhold.ids, NULL)
            USING ERRCODE = '22023';
    END IF;
    WITH woken AS (
        UPDATE jobq.jobs AS j
           SET status = 'queued', control = nullif(j.control & ~128::smallint, 0::smallint)
         WHERE j.id = ANY (unhold.ids) AND j.status = 'waiting' AND j.control & 128 <> 0
        RETURNING j.queue
    ), notified AS (
        SELECT pg_notify('jobq_' || q.queue, '') FROM (SELECT DISTINCT o.queue FROM woken AS o) AS q
    )
    SELECT (SELECT count(*) FROM woken)::integer INTO released
      FROM (SELECT count(*) FROM notified) AS q;  -- notified: read for its notifications
    RETURN released;
END
$$;
COMMENT ON FUNCTION jobq.unhold(bigint[]) IS
    'Release held jobs (enqueued with hold => true): each becomes queued. Returns how many it released.';
REVOKE ALL ON FUNCTION jobq.unhold(bigint[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.unhold(bigint[]) TO @extowner@;

/*
 * jobq.progress(id, lease, progress): when it was stored.  Stores progress
 * (any JSON value) as the running job's latest, readable in jobq.job; one
 * row per job, replaced by each report.  Locks the job's row FOR SHARE
 * (the fence: a reaper taking the job waits, and a report after it is
 * refused), then writes the report's row.  Raises 22004 (NULL argument),
 * 54000 (progress over 1 MiB), JQ002, JQ001 like jobq.checkpoint.
 */
CREATE FUNCTION jobq.progress(id bigint, lease bigint, progress jsonb)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: like jobq.checkpoint.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_lease(progress.id, progress.lease);
    IF progress.progress IS NULL THEN
        RAISE EXCEPTION 'progress must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM jobq._check_result(progress.progress, 'progress');
    PERFORM FROM jobq.jobs AS j
     WHERE j.id = progress.id AND j.lease = progress.lease AND j.status = 'running'
       FOR SHARE;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(progress.id, progress.lease);
    END IF;
    INSERT INTO jobq.job_progress AS p (id, progress, updated_at)
    VALUES (progress.id, progress.progress, statement_timestamp())
    ON CONFLICT ON CONSTRAINT job_progress_pkey DO UPDATE
       SET progress = excluded.progress, updated_at = excluded.updated_at;
    RETURN statement_timestamp();
END
$$;
COMMENT ON FUNCTION jobq.progress(bigint, bigint, jsonb) IS
    'Store a running job''s latest progress (any JSON value), shown by jobq.job; returns when. Refuses a stale lease with JQ001.';
REVOKE ALL ON FUNCTION jobq.progress(bigint, bigint, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.progress(bigint, bigint, jsonb) TO @extowner@;

/*
 * jobq._waiting_for(id, status, control, run_at): what a job that is not
 * running waits for, as JSON, for jobq.job: {"hold": true} (held),
 * {"signal": key, "timeout_at": ...} (a wait for a signal), {"parents":
 * [ids]} (the parents not ended yet), {"sleep": name, "until": ...} (a
 * sleep not over); NULL for anything else.  Reads without locking.
 */
CREATE FUNCTION jobq._waiting_for(id bigint, status text, control smallint, run_at timestamptz)
RETURNS jsonb
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    found_ jsonb;
BEGIN
    IF _waiting_for.status = 'waiting' THEN
        IF _waiting_for.control & 128 <> 0 THEN
            RETURN '{"hold": true}'::jsonb;
        END IF;
        SELECT jsonb_build_object('signal', w.key, 'timeout_at', w.timeout_at) INTO found_
          FROM jobq.signal_waits AS w WHERE w.id = _waiting_for.id;
        IF FOUND THEN
            RETURN found_;
        END IF;
        IF _waiting_for.control & 32 <> 0 THEN
            RETURN jsonb_build_object('parents', ARRAY(SELECT d.parent FROM jobq.job_deps AS d
                                                       WHERE d.child = _waiting_for.id AND NOT d.settled
                                                       ORDER BY d.parent));
        END IF;
    ELSIF _waiting_for.status = 'queued' AND _waiting_for.control & 64 <> 0
          AND _waiting_for.run_at > statement_timestamp() THEN
        SELECT jsonb_build_object('sleep', s.name, 'until', s.result -> 'until') INTO found_
          FROM jobq.job_steps AS s
         WHERE s.id = _waiting_for.id AND s.kind = 'sleep'
           AND (s.result ->> 'until')::timestamptz = _waiting_for.run_at;
        RETURN found_;
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._waiting_for(bigint, text, smallint, timestamptz) IS
    'Internal: what a held, waiting or sleeping job waits for, as JSON, for jobq.job.';
REVOKE ALL ON FUNCTION jobq._waiting_for(bigint, text, smallint, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._waiting_for(bigint, text, smallint, timestamptz) TO @extowner@;

----------------------------------------------------------------------------
-- A job's public state gains its steps, progress and what it waits for
-- (attributes added last, so that readers by position find 0.10.0's where
-- they were)
----------------------------------------------------------------------------

ALTER TYPE jobq.job_state
    ADD ATTRIBUTE steps jsonb,
    ADD ATTRIBUTE step_attempts jsonb,
    ADD ATTRIBUTE progress jsonb,
    ADD ATTRIBUTE waiting_for jsonb;
COMMENT ON TYPE jobq.job_state IS
    'A job''s public state, as jobq.job, jobq.wait and jobq.watch return it (max_attempts with the queue''s default filled in; task NULL for a plain job; steps: name to result, step_attempts: name to the attempt that recorded it, progress: the latest report, waiting_for: what a held, waiting or sleeping job waits for; NULL when none).';

/*
 * jobq.job(id): the job's public state (jobq.job_state: its task NULL for a
 * plain job), its result read from jobq.results; for a durable job
 * (control bit 64) its steps and the attempt that recorded each
 * (jobq.job_steps), its latest progress (jobq.job_progress), and for a
 * held, waiting or sleeping job what it waits for (jobq._waiting_for).
 * Reads the rows without locking them.  Raises 22004 (NULL id), JQ002 (no
 * such job).
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
           j.task,
           CASE WHEN j.control & 64 <> 0
                THEN (SELECT jsonb_object_agg(t.name, t.result) FROM jobq.job_steps AS t WHERE t.id = j.id) END,
           CASE WHEN j.control & 64 <> 0
                THEN (SELECT jsonb_object_agg(t.name, t.attempt) FROM jobq.job_steps AS t WHERE t.id = j.id) END,
           p.progress,
           CASE WHEN j.status = 'waiting' OR j.control & 64 <> 0
                THEN jobq._waiting_for(j.id, j.status, j.control, j.run_at) END
      INTO state.id, state.queue, state.status, state.attempts, state.max_attempts, state.result,
           state.last_error, state.run_at, state.created_at, state.finished_at, state.cancel_requested,
           state.depends_on, state.task, state.steps, state.step_attempts, state.progress, state.waiting_for
      FROM jobq.jobs AS j
      LEFT JOIN jobq.queue_settings AS s ON s.queue = j.queue
      LEFT JOIN jobq.results AS r ON r.id = j.id
      LEFT JOIN jobq.job_progress AS p ON p.id = j.id
     WHERE j.id = job.id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'id %: no such job', job.id
            USING ERRCODE = 'JQ002';
    END IF;
    RETURN state;
END
$$;
COMMENT ON FUNCTION jobq.job(bigint) IS
    'A job''s public state: queue, status, attempts, max_attempts, result, last_error, run_at, created_at, finished_at, cancel_requested, depends_on (its parents), task, steps, step_attempts, progress, waiting_for (not its payload). JQ002: no such job.';

----------------------------------------------------------------------------
-- Deleting a job deletes its steps, waits for a signal and progress; a tick
-- ends the waits past their timeout
----------------------------------------------------------------------------

/*
 * jobq._delete_rows(ids): how many jobs of ids it deleted, with their side
 * rows: the unique keys they hold, their results, deadlines and
 * concurrency keys, their rows of jobq.job_deps (as the child) and
 * jobq.job_waits, and (0.11.0) their steps, waits for a signal and
 * progress.  One statement; the work of jobq._delete_jobs, which
 * calls it and says what it locks and raises.
 */
CREATE OR REPLACE FUNCTION jobq._delete_rows(ids bigint[])
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
    ), steps AS (
        DELETE FROM jobq.job_steps AS s USING gone AS g WHERE s.id = g.id AND g.control & 64 <> 0
    ), signal_waits AS (
        DELETE FROM jobq.signal_waits AS w USING gone AS g WHERE w.id = g.id AND g.control & 64 <> 0
    ), progress AS (
        DELETE FROM jobq.job_progress AS p USING gone AS g WHERE p.id = g.id
    )
    SELECT count(*) INTO deleted FROM gone;
    RETURN deleted;
END
$$;
COMMENT ON FUNCTION jobq._delete_rows(bigint[]) IS
    'Internal: delete these jobs and their side rows (keys, results, deadlines, concurrency keys, dependency rows, steps, waits for a signal, progress) in one statement; returns how many jobs.';

/*
 * jobq.tick(): how many jobs it enqueued: the schedules' due occurrences
 * (jobq._tick(statement_timestamp())); then (0.11.0) the waits for a
 * signal whose timeout passed end, and expired signals are deleted
 * (jobq._end_waits(statement_timestamp(), 10000)); then retention: at most 100,000
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
    -- 0.11.0: waits for a signal past their timeout, and expired signals
    PERFORM jobq._end_waits(statement_timestamp(), 10000);
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
    'Enqueue the occurrences of schedules due within the next minute (and missed ones, by catch_up), end the waits for a signal past their timeout, then delete up to 100,000 finished jobs whose retention ended; returns how many jobs it enqueued. Run by workers or pg_cron.';

----------------------------------------------------------------------------
-- jobq.enqueue gains hold: created beside the old signature, which is
-- dropped once its grants are copied (below)
----------------------------------------------------------------------------

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

----------------------------------------------------------------------------
-- The access levels name the new functions and tables
----------------------------------------------------------------------------

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
                'jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text, boolean)',
                'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer, text[], text, text, jsonb, text[], text)',
                'jobq.enqueue_flow(text, jsonb)',
                'jobq.signal(text, jsonb, interval)',
                'jobq.unhold(bigint[])',
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
                'jobq.checkpoint(bigint, bigint, text, jsonb)',
                'jobq.sleep(bigint, bigint, text, timestamptz)',
                'jobq.await_signal(bigint, bigint, text, interval)',
                'jobq.signal(text, jsonb, interval)',
                'jobq.progress(bigint, bigint, jsonb)',
                'jobq.fan_out(bigint, bigint, text, jsonb, jsonb)',
                'jobq.job(bigint)',
                'jobq.steps(bigint)',
                'jobq.parent_results(bigint)',
                'jobq.wait(bigint, interval)',
                'jobq.watch(bigint)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'observer' THEN
        RETURN ARRAY[
                'jobq.job(bigint)',
                'jobq.steps(bigint)',
                'jobq.parent_results(bigint)',
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
                'jobq.steps(bigint)',
                'jobq.parent_results(bigint)',
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

/*
 * jobq._grant_level(role, level): returns nothing.  Grants role USAGE on the
 * schema, EXECUTE on jobq._level_functions(level) and, for admin, table
 * privileges on jobq.jobs, its sequence, jobq.queue_settings,
 * jobq.unique_keys, jobq.results, jobq.deadlines and the tables of limits,
 * dependencies and schedules, and SELECT on the views jobq.health,
 * jobq.queues and jobq.schedules; for monitor, SELECT on those tables and
 * views.  Runs with the caller's rights.
 * Raises like jobq._grantee, and 22023 for an unknown level.
 */
CREATE OR REPLACE FUNCTION jobq._grant_level(role regrole, level text)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    grantee   name := jobq._grantee(_grant_level.role);
    functions regprocedure[] := jobq._level_functions(_grant_level.level);
    fn        regprocedure;
BEGIN
    IF functions IS NULL THEN
        RAISE EXCEPTION 'level must be producer, observer, worker, monitor or admin, got %', quote_nullable(_grant_level.level)
            USING ERRCODE = '22023';
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA jobq TO %I', grantee);
    FOREACH fn IN ARRAY functions LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', fn, grantee);
    END LOOP;
    IF _grant_level.level = 'admin' THEN
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.jobs TO %I', grantee);
        EXECUTE format('GRANT USAGE, SELECT ON SEQUENCE jobq.jobs_id_seq TO %I', grantee);
        EXECUTE format('GRANT SELECT ON TABLE jobq.health TO %I', grantee);
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.queue_settings, jobq.unique_keys,'
                       ' jobq.results, jobq.deadlines, jobq.queue_gates, jobq.concurrency_keys, jobq.job_deps,'
                       ' jobq.job_waits, jobq.schedule_settings, jobq.job_steps, jobq.signals, jobq.signal_waits,'
                       ' jobq.job_progress TO %I', grantee);
        EXECUTE format('GRANT SELECT ON TABLE jobq.queues, jobq.schedules TO %I', grantee);
    ELSIF _grant_level.level = 'monitor' THEN
        EXECUTE format('GRANT SELECT ON TABLE jobq.jobs, jobq.health, jobq.queue_settings, jobq.unique_keys,'
                       ' jobq.results, jobq.deadlines, jobq.queue_gates, jobq.concurrency_keys, jobq.job_deps,'
                       ' jobq.job_waits, jobq.schedule_settings, jobq.job_steps, jobq.signals, jobq.signal_waits,'
                       ' jobq.job_progress, jobq.queues, jobq.schedules TO %I', grantee);
    END IF;
END
$$;
COMMENT ON FUNCTION jobq._grant_level(regrole, text) IS
    'Internal: grants the privileges of one access level (producer, observer, worker, monitor, admin).';

/*
 * jobq.revoke_all(role): returns nothing.  Takes back every privilege the
 * levels give (admin's include the others'); grants made by hand
 * on other objects are left alone.  Raises like jobq._grantee.
 */
CREATE OR REPLACE FUNCTION jobq.revoke_all(role regrole)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    grantee name := jobq._grantee(revoke_all.role);
    fn      regprocedure;
BEGIN
    EXECUTE format('REVOKE USAGE ON SCHEMA jobq FROM %I', grantee);
    FOREACH fn IN ARRAY jobq._level_functions('admin') LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %I', fn, grantee);
    END LOOP;
    EXECUTE format('REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.jobs FROM %I', grantee);
    EXECUTE format('REVOKE USAGE, SELECT ON SEQUENCE jobq.jobs_id_seq FROM %I', grantee);
    EXECUTE format('REVOKE SELECT ON TABLE jobq.health FROM %I', grantee);
    EXECUTE format('REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLE jobq.queue_settings, jobq.unique_keys,'
                   ' jobq.results, jobq.deadlines, jobq.queue_gates, jobq.concurrency_keys, jobq.job_deps,'
                   ' jobq.job_waits, jobq.schedule_settings, jobq.job_steps, jobq.signals, jobq.signal_waits,'
                   ' jobq.job_progress FROM %I', grantee);
    EXECUTE format('REVOKE SELECT ON TABLE jobq.queues, jobq.schedules FROM %I', grantee);
END
$$;
COMMENT ON FUNCTION jobq.revoke_all(regrole) IS
    'Take back from role every privilege that grant_producer, grant_worker, grant_monitor or grant_admin gave. Owner or superuser only.';

----------------------------------------------------------------------------
-- Grants: each role keeps its level.  A new function is granted to every
-- role that may execute the one it serves: the new jobq.enqueue, jobq.signal
-- and jobq.unhold to those that may execute the old jobq.enqueue (the
-- producer and admin levels); the durable calls of a running job and
-- jobq.signal to those that may execute jobq.claim (the worker level);
-- jobq.steps to those that may execute jobq.job (the observer level, and
-- the levels that include it).  The new tables get, for each role, the
-- privileges it holds on jobq.job_waits (the monitor and admin levels).  An
-- upgrade run by a superuser restores the initial privileges its grants
-- changed, so that pg_dump keeps them; otherwise it says which roles a dump
-- would leave without them.
----------------------------------------------------------------------------

DO $$
DECLARE
    change    record;
    initial   aclitem[];
    grantee   text;
    privilege text;
    tab       pg_catalog.regclass;
    kept      text[] := '{}';  -- grantees whose grants a dump would leave out
BEGIN
    FOR change IN
        SELECT c.old::pg_catalog.regprocedure AS old, c.new::pg_catalog.regprocedure AS new
          FROM (VALUES
                ('jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text)',
                 'jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text, boolean)'),
                ('jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text)',
                 'jobq.signal(text, jsonb, interval)'),
                ('jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text)',
                 'jobq.unhold(bigint[])'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.checkpoint(bigint, bigint, text, jsonb)'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.sleep(bigint, bigint, text, timestamptz)'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.await_signal(bigint, bigint, text, interval)'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.progress(bigint, bigint, jsonb)'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.signal(text, jsonb, interval)'),
                ('jobq.claim(text, integer, text, interval)', 'jobq.fan_out(bigint, bigint, text, jsonb, jsonb)'),
                ('jobq.job(bigint)', 'jobq.steps(bigint)'),
                ('jobq.job(bigint)', 'jobq.parent_results(bigint)')) AS c(old, new)
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
        END IF;
    END LOOP;
    FOREACH tab IN ARRAY ARRAY['jobq.job_steps', 'jobq.signals', 'jobq.signal_waits',
                               'jobq.job_progress']::pg_catalog.regclass[] LOOP
        SELECT i.initprivs INTO initial
          FROM pg_catalog.pg_init_privs AS i
         WHERE i.objoid OPERATOR(pg_catalog.=) tab::pg_catalog.oid
           AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
           AND i.objsubid OPERATOR(pg_catalog.=) 0;
        FOR grantee, privilege IN
            SELECT a.grantee::pg_catalog.regrole::text, a.privilege_type
              FROM pg_catalog.pg_class AS c, pg_catalog.aclexplode(c.relacl) AS a
             WHERE c.oid OPERATOR(pg_catalog.=) 'jobq.job_waits'::pg_catalog.regclass
               AND a.privilege_type OPERATOR(pg_catalog.=) ANY (ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE'])
               AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
               AND a.grantee OPERATOR(pg_catalog.<>) 0
        LOOP
            EXECUTE pg_catalog.format('GRANT %s ON TABLE %s TO %s', privilege, tab, grantee);
            IF NOT grantee OPERATOR(pg_catalog.=) ANY (kept) THEN
                kept := kept OPERATOR(pg_catalog.||) grantee;
            END IF;
        END LOOP;
        IF pg_catalog.has_table_privilege('pg_catalog.pg_init_privs', 'UPDATE') THEN
            UPDATE pg_catalog.pg_init_privs AS i
               SET initprivs = initial
             WHERE i.objoid OPERATOR(pg_catalog.=) tab::pg_catalog.oid
               AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
               AND i.objsubid OPERATOR(pg_catalog.=) 0;
        END IF;
    END LOOP;
    IF pg_catalog.has_table_privilege('pg_catalog.pg_init_privs', 'UPDATE') THEN
        kept := '{}';
    END IF;
    IF pg_catalog.cardinality(kept) OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING 'pgjobq 0.11.0 granted % the new jobq.enqueue and the functions and tables of durable '
                      'execution', pg_catalog.array_to_string(kept, ', ')
            USING DETAIL = 'An upgrade not run by a superuser records its grants as initial privileges, which '
                           'pg_dump leaves out.',
                  HINT = 'After restoring a dump of this database, run jobq.grant_producer, grant_worker, '
                         'grant_monitor or grant_admin again for these roles.';
    END IF;
END
$$;

-- the old signature, replaced above, and the name jobq.register_waiter had
-- until 0.9.0, deprecated since 0.10.0
DROP FUNCTION jobq.enqueue(text, jsonb, integer, timestamptz, integer, text, text, text, jsonb, text, bigint[], text, text);
DROP FUNCTION jobq.wait(text, text, interval);
