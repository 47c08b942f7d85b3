/* sql/updates/pgjobq--0.3.0--0.4.0.sql: pgjobq 0.3.0 -> 0.4.0, leases that belong to the job (CHANGELOG.md) */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION pgjobq UPDATE TO '0.4.0'" to load this file. \quit

/*
 * What 0.4.0 changes (CHANGELOG.md has the whole list, and sql/src/ the
 * current definitions, which this step copies):
 *
 * - A lease belongs to its job.  jobq.jobs.lease_expires_at is set by
 *   claim and complete_and_claim from their new lease_timeout argument
 *   (default 60 seconds), heartbeats move it on by that job's own length,
 *   and jobq.reap recovers exactly the running jobs whose lease expired;
 *   its stale argument (now optional) can only hold reaping back.
 * - The worker level may reap: a fleet of worker-level workers recovers a
 *   killed worker's jobs with no admin anywhere.
 * - Forward mode keeps its position per queue in jobq._claim_hints instead
 *   of the session setting jobq.claim_hint, which a transaction-pooling
 *   PgBouncer would hand to other clients.
 * - jobq.version() returns the installed version.
 */

----------------------------------------------------------------------------
-- The lease's expiry on the row.  Jobs running during the upgrade were
-- claimed without a length of their own: they get 60 seconds (the default
-- stale interval of 0.3.0's jobq.reap) from their last claim or heartbeat.
----------------------------------------------------------------------------

ALTER TABLE jobq.jobs ADD COLUMN lease_expires_at timestamptz;
UPDATE jobq.jobs SET lease_expires_at = locked_at + interval '60 seconds' WHERE status = 'running';
COMMENT ON COLUMN jobq.jobs.lease_expires_at IS 'When the current lease expires unless extended: locked_at + the lease_timeout given to claim. jobq.reap recovers running jobs past it.';

-- a running job must have an expiry, or no reaper would ever recover it
ALTER TABLE jobq.jobs
    DROP CONSTRAINT jobs_running_lock_check,
    ADD CONSTRAINT jobs_running_lock_check
        CHECK (status OPERATOR(pg_catalog.<>) 'running'
               OR (locked_by IS NOT NULL AND locked_at IS NOT NULL AND lease_expires_at IS NOT NULL));

-- the reaper now looks for expired leases
DROP INDEX jobq.jobs_reap_idx;
CREATE INDEX jobs_reap_idx ON jobq.jobs (lease_expires_at)
    WHERE status OPERATOR(pg_catalog.=) 'running';
COMMENT ON INDEX jobq.jobs_reap_idx IS 'Serves jobq.reap: running jobs by lease_expires_at.';

----------------------------------------------------------------------------
-- Claiming with a lease length.  The new signatures are created beside the
-- old ones, the roles that could call the old ones are granted the new ones,
-- and then the old ones are dropped.
----------------------------------------------------------------------------

CREATE UNLOGGED TABLE jobq._claim_hints (
    queue    text        NOT NULL,
    priority integer     NOT NULL,
    run_at   timestamptz NOT NULL,
    id       bigint      NOT NULL,
    until    timestamptz NOT NULL
);
COMMENT ON TABLE jobq._claim_hints IS
    'Internal: where claims of a queue in forward mode scan from (priority, run_at, id) and until when. A hint only.';
REVOKE ALL ON TABLE jobq._claim_hints FROM PUBLIC;

CREATE FUNCTION jobq.claim(queue text, n integer, worker text,
                           lease_timeout interval DEFAULT '60 seconds')
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 10
-- SECURITY DEFINER: workers claim without privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    hint          jobq._claim_hints;
    picked        bigint[];
    walked        bigint;
    forward_until timestamptz;  -- forward mode lasts until then; NULL: the last scan was from the start
BEGIN
    PERFORM jobq._check_queue(claim.queue);
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
    IF claim.lease_timeout IS NULL THEN
        RAISE EXCEPTION 'lease_timeout must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF claim.lease_timeout <= interval '0' OR claim.lease_timeout > interval '1 day' THEN
        RAISE EXCEPTION 'lease_timeout must be a positive interval of at most 1 day, got %', claim.lease_timeout
            USING ERRCODE = '22023';
    END IF;

    SELECT h.* INTO hint
      FROM jobq._claim_hints AS h
     WHERE h.queue = claim.queue AND h.until > statement_timestamp();
    IF FOUND THEN
        forward_until := hint.until;
        walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass);
        picked := ARRAY(
            SELECT p.id
              FROM jobq.jobs AS p
             WHERE p.queue = claim.queue
               AND p.status = 'queued'
               AND p.priority = hint.priority
               AND (p.run_at, p.id) > (hint.run_at, hint.id)
               AND p.run_at <= statement_timestamp()
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT claim.n
               FOR NO KEY UPDATE SKIP LOCKED);
    END IF;
    IF cardinality(picked) IS DISTINCT FROM claim.n THEN
        -- from the start of the index
        forward_until := NULL;
        walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass);
        picked := ARRAY(
            SELECT p.id
              FROM jobq.jobs AS p
             WHERE p.queue = claim.queue
               AND p.status = 'queued'
               AND p.run_at <= statement_timestamp()
             ORDER BY p.priority DESC, p.run_at, p.id
             LIMIT claim.n
               FOR NO KEY UPDATE SKIP LOCKED);
    END IF;

    -- the entries the scan walked in vain: those it returned but did not claim
    walked := pg_stat_get_xact_tuples_returned('jobq.jobs_claim_idx'::regclass) - walked
              - cardinality(picked);
    IF walked > 1000 AND cardinality(picked) > 0
       AND pg_try_advisory_xact_lock(hashtext('jobq._claim_hints'), hashtext(claim.queue)) THEN
        UPDATE jobq._claim_hints AS h
           SET priority = p.priority, run_at = p.run_at, id = p.id,
               until = coalesce(forward_until, statement_timestamp() + interval '2 seconds')
          FROM jobq.jobs AS p
         WHERE h.queue = claim.queue AND p.id = picked[cardinality(picked)];
        IF NOT FOUND THEN
            INSERT INTO jobq._claim_hints (queue, priority, run_at, id, until)
            SELECT claim.queue, p.priority, p.run_at, p.id, statement_timestamp() + interval '2 seconds'
              FROM jobq.jobs AS p
             WHERE p.id = picked[cardinality(picked)];
        END IF;
    END IF;

    RETURN QUERY
    WITH claimed AS (
        UPDATE jobq.jobs AS j
           SET status           = 'running',
               locked_by        = claim.worker,
               locked_at        = statement_timestamp(),
               lease_expires_at = statement_timestamp() + claim.lease_timeout,
               attempts         = j.attempts + 1,
               lease            = j.lease + 1
         WHERE j.id = ANY (picked)
        RETURNING j.*
    )
    SELECT c.* FROM claimed AS c ORDER BY c.priority DESC, c.run_at, c.id;
END
$$;
COMMENT ON FUNCTION jobq.claim(text, integer, text, interval) IS
    'Claim up to n runnable jobs of a queue for worker (FOR NO KEY UPDATE SKIP LOCKED), each under a new lease that expires lease_timeout (default 60 s) from now; returns them running.';
REVOKE ALL ON FUNCTION jobq.claim(text, integer, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.claim(text, integer, text, interval) TO @extowner@;

CREATE FUNCTION jobq.complete_and_claim(ids bigint[], leases bigint[], queue text, n integer, worker text,
                                        lease_timeout interval DEFAULT '60 seconds')
RETURNS SETOF jobq.jobs
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 20
-- SECURITY DEFINER: like claim and complete_many, for workers without
-- privileges on jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_pairs(complete_and_claim.ids, complete_and_claim.leases);
    IF cardinality(complete_and_claim.ids) > 0 THEN
        -- should jobq.claim below refuse its arguments, the error undoes these
        -- acknowledgements with the rest of the statement
        RETURN QUERY
        SELECT a.* FROM jobq._acknowledge(complete_and_claim.ids, complete_and_claim.leases) AS a
         ORDER BY a.id;
    END IF;
    RETURN QUERY
    SELECT c.* FROM jobq.claim(complete_and_claim.queue, complete_and_claim.n,
                               complete_and_claim.worker, complete_and_claim.lease_timeout) AS c;
END
$$;
COMMENT ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval) IS
    'Acknowledge finished jobs (returned with status done) and claim up to n more (returned running, under leases of lease_timeout), in one statement.';
REVOKE ALL ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval) TO @extowner@;

CREATE FUNCTION jobq.version()
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$ SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pgjobq' $$;
COMMENT ON FUNCTION jobq.version() IS 'The installed version of pgjobq, as in pg_extension (for example 0.4.0).';
REVOKE ALL ON FUNCTION jobq.version() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.version() TO @extowner@;

----------------------------------------------------------------------------
-- Heartbeats extend a lease by its own length; reap recovers expired leases
-- and runs as the owner, for the worker level.
----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq.heartbeat(id bigint, lease bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
-- SECURITY DEFINER: workers extend leases without UPDATE on jobq.jobs; the lease
-- decides which rows they may change.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_locked_at timestamptz;
BEGIN
    PERFORM jobq._check_lease(heartbeat.id, heartbeat.lease);
    UPDATE jobq.jobs AS j
       SET locked_at        = statement_timestamp(),
           lease_expires_at = statement_timestamp() + (j.lease_expires_at - j.locked_at)
     WHERE j.id = heartbeat.id AND j.lease = heartbeat.lease AND j.status = 'running'
    RETURNING j.locked_at INTO new_locked_at;
    IF NOT FOUND THEN
        PERFORM jobq._raise_not_held(heartbeat.id, heartbeat.lease);
    END IF;
    RETURN new_locked_at;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat(bigint, bigint) IS
    'Extend the lease of a running job by its own length (locked_at = now) so jobq.reap leaves it alone; returns the new locked_at. Refuses a stale lease with JQ001.';

CREATE OR REPLACE FUNCTION jobq.heartbeat_many(ids bigint[], leases bigint[])
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT ROWS 20
-- SECURITY DEFINER: like heartbeat, for workers without privileges on
-- jobq.jobs.
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_pairs(heartbeat_many.ids, heartbeat_many.leases);
    RETURN QUERY
    WITH extended AS (
        UPDATE jobq.jobs AS j
           SET locked_at        = statement_timestamp(),
               lease_expires_at = statement_timestamp() + (j.lease_expires_at - j.locked_at)
          FROM unnest(heartbeat_many.ids, heartbeat_many.leases) AS a(id, lease)
         WHERE j.id = ANY (heartbeat_many.ids)
           AND j.id = a.id AND j.lease = a.lease
           AND (j.status = 'running') IS TRUE  -- by primary key, as in jobq._acknowledge
        RETURNING j.id
    )
    SELECT e.id FROM extended AS e ORDER BY e.id;
END
$$;
COMMENT ON FUNCTION jobq.heartbeat_many(bigint[], bigint[]) IS
    'Extend the leases of many running jobs by their own lengths in one statement; returns the ids extended. Stale pairs are left out.';

CREATE OR REPLACE FUNCTION jobq.reap(stale interval DEFAULT NULL)
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

    RETURN QUERY
    WITH expired AS MATERIALIZED (
        SELECT j.id
          FROM jobq.jobs AS j
         WHERE j.status = 'running'
           AND j.lease_expires_at < statement_timestamp()
           AND (reap.stale IS NULL OR j.locked_at < statement_timestamp() - reap.stale)
           FOR NO KEY UPDATE SKIP LOCKED
    ), reaped AS (
        UPDATE jobq.jobs AS j
           SET status      = CASE WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'queued' END,
               run_at      = CASE WHEN j.attempts >= j.max_attempts THEN j.run_at
                                  ELSE statement_timestamp() + jobq._backoff(j.attempts) END,
               finished_at = CASE WHEN j.attempts >= j.max_attempts THEN statement_timestamp() END,
               last_error  = right(concat_ws(E'\n', j.last_error,
                                             format('reaped: lease %s of %s went stale', j.lease, j.locked_by)),
                                   2000)
          FROM expired
         WHERE j.id = expired.id
        RETURNING j.*
    )
    SELECT r.* FROM reaped AS r ORDER BY r.id;
END
$$;
COMMENT ON FUNCTION jobq.reap(interval) IS
    'Recover running jobs whose lease expired: back to queued, or failed when out of attempts. Returns them. stale, when given, also requires the lease to be older than stale.';

-- Roles that could claim (the worker and admin levels, or grants made by
-- hand) may claim with a lease length, and now reap; every role that could
-- claim or enqueue may read the version.  ALTER EXTENSION records what an
-- update script grants as the extension's initial privileges, which pg_dump
-- leaves out of a dump.  These grants are the roles' own, as if
-- jobq.grant_worker had made them: when the upgrading role may (a
-- superuser), the initial privileges are put back as a fresh install has
-- them, so that a dump keeps the grants; otherwise a warning says what to
-- grant again after restoring a dump.  Then the old signatures go.
DO $$
DECLARE
    change  record;
    initial aclitem[];
    grantee text;
    kept    text[] := '{}';  -- grantees whose grants a dump would leave out
BEGIN
    FOR change IN
        SELECT c.old::pg_catalog.regprocedure AS old, c.new::pg_catalog.regprocedure AS new
          FROM (VALUES ('jobq.claim(text, integer, text)', 'jobq.claim(text, integer, text, interval)'),
                       ('jobq.complete_and_claim(bigint[], bigint[], text, integer, text)',
                        'jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval)'),
                       ('jobq.claim(text, integer, text)', 'jobq.reap(interval)'),
                       ('jobq.claim(text, integer, text)', 'jobq.version()'),
                       ('jobq.enqueue(text, jsonb, integer, timestamptz, integer)', 'jobq.version()')) AS c(old, new)
    LOOP
        SELECT i.initprivs INTO initial
          FROM pg_catalog.pg_init_privs AS i
         WHERE i.objoid OPERATOR(pg_catalog.=) change.new
           AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass;
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
             WHERE i.objoid OPERATOR(pg_catalog.=) change.new
               AND i.classoid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass;
            kept := '{}';
        END IF;
    END LOOP;
    IF pg_catalog.cardinality(kept) OPERATOR(pg_catalog.>) 0 THEN
        RAISE WARNING 'pgjobq 0.4.0 granted % the new jobq.claim, complete_and_claim, reap and version',
                      pg_catalog.array_to_string(kept, ', ')
            USING DETAIL = 'An upgrade not run by a superuser records its grants as initial privileges, which '
                           'pg_dump leaves out.',
                  HINT = 'After restoring a dump of this database, run jobq.grant_worker (or grant_admin, '
                         'grant_producer) again for these roles.';
    END IF;
END
$$;

DROP FUNCTION jobq.claim(text, integer, text);
DROP FUNCTION jobq.complete_and_claim(bigint[], bigint[], text, integer, text);

----------------------------------------------------------------------------
-- Access levels: the worker level gains reap; every level gains version.
----------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION jobq._level_functions(level text)
RETURNS regprocedure[]
LANGUAGE plpgsql STABLE PARALLEL SAFE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- one branch per level, so that planning one never plans the others
    IF _level_functions.level = 'producer' THEN
        RETURN ARRAY[
                'jobq.enqueue(text, jsonb, integer, timestamptz, integer)',
                'jobq.enqueue_many(text, jsonb[], integer, timestamptz, integer)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'worker' THEN
        RETURN ARRAY[
                'jobq.claim(text, integer, text, interval)',
                'jobq.complete(bigint, bigint)',
                'jobq.complete_many(bigint[], bigint[])',
                'jobq.complete_and_claim(bigint[], bigint[], text, integer, text, interval)',
                'jobq.fail(bigint, text, bigint)',
                'jobq.heartbeat(bigint, bigint)',
                'jobq.heartbeat_many(bigint[], bigint[])',
                'jobq.release(bigint, bigint)',
                'jobq.reap(interval)',
                'jobq.channel(text)',
                'jobq.version()',
                'jobq._check_queue(text)']::regprocedure[];
    ELSIF _level_functions.level = 'admin' THEN
        -- both levels above, and what operating the queue takes
        RETURN ARRAY(
                SELECT DISTINCT f
                  FROM unnest(jobq._level_functions('producer') || jobq._level_functions('worker')
                              || ARRAY[
                                     'jobq.retry_failed(text, bigint[])',
                                     'jobq.purge(interval, integer, boolean)',
                                     'jobq.stats()',
                                     'jobq._check_payload(jsonb, text)',
                                     'jobq._check_options(integer, timestamptz, integer)',
                                     'jobq._check_lease(bigint, bigint)',
                                     'jobq._raise_not_held(bigint, bigint)',
                                     'jobq._backoff(integer)']::regprocedure[]) AS f
                 ORDER BY f);
    END IF;
    RETURN NULL;
END
$$;

COMMENT ON FUNCTION jobq.grant_worker(regrole) IS
    'Let role work jobs (claim, heartbeat, complete, fail, release and their batch forms) and recover expired leases (reap); no access to the jobs table. Owner or superuser only.';
COMMENT ON FUNCTION jobq.grant_admin(regrole) IS
    'Let role do everything with the queue: every function, retry_failed, purge, stats, jobq.health, and read and write jobq.jobs. Owner or superuser only.';
