----------------------------------------------------------------------------
-- Access levels.  Producers and workers get no table privilege: the
-- functions they call are SECURITY DEFINER.  Handing out levels stays with
-- the extension's owner (and superusers): these helpers run with the
-- caller's rights and are granted to nobody else.
--
-- - producer: jobq.enqueue, jobq.enqueue_many, jobq.enqueue_flow, and
--             (0.11.0) jobq.signal and jobq.unhold: the program that holds
--             jobs or awaits an approval releases them;
-- - worker:   jobq.claim, claim_any, complete, complete_many, complete_and_claim, fail,
--             snooze, hand_back, heartbeat, heartbeat_many, heartbeat_status, release,
--             register_waiter, reap (it recovers only jobs whose
--             lease expired) and tick (it enqueues the schedules' due
--             occurrences), and (0.11.0) the durable calls of a running
--             job, checkpoint, sleep, await_signal, progress and fan_out
--             (fenced by its lease), and signal (a job may signal others);
-- - admin:    both, and jobq.retry_failed, purge, stats, cancel, pause,
--             resume, configure_queue, schedule, unschedule, the views
--             jobq.health, jobq.queues and jobq.schedules,
--             SELECT, INSERT, UPDATE, DELETE on jobq.jobs (USAGE on its
--             sequence), jobq.queue_settings, jobq.unique_keys,
--             jobq.results, jobq.deadlines, jobq.queue_gates,
--             jobq.concurrency_keys, jobq.job_deps, jobq.job_waits,
--             jobq.schedule_settings, jobq.job_steps, jobq.signals,
--             jobq.signal_waits and jobq.job_progress, and the internal
--             helpers those need;
-- - observer: jobq.job, steps, parent_results, wait (for a job) and watch, which show any
--             job's state, steps and result: part of the worker and admin levels, and
--             of the producer level only when asked (grant_producer(role,
--             see_jobs => true)), job ids being sequential;
-- - monitor:  read-only (0.8.0, for dashboards and exporters): jobq.metrics,
--             stats, the observer's functions, and SELECT on jobq.jobs, the
--             tables above and the views; part of the admin level;
-- - worker and monitor: jobq.metrics (counts only, SECURITY DEFINER);
-- - every level: jobq.channel and jobq.version.
----------------------------------------------------------------------------

/*
 * jobq._level_functions(level): the functions a level may execute, for
 * level 'producer', 'observer', 'worker', 'monitor' or 'admin'; NULL for any other
 * level.
 */
CREATE FUNCTION jobq._level_functions(level text)
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
REVOKE ALL ON FUNCTION jobq._level_functions(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._level_functions(text) TO @extowner@;

/*
 * jobq._grantee(role): the name of role, for GRANT and REVOKE.  Raises 22004
 * (NULL role) and 42501 unless the caller may pass pgjobq's privileges on
 * (holds the grant option on schema jobq: the extension's owner, a
 * superuser).
 */
CREATE FUNCTION jobq._grantee(role regrole)
RETURNS name
LANGUAGE plpgsql STABLE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    grantee name;
BEGIN
    IF _grantee.role IS NULL THEN
        RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF NOT has_schema_privilege('jobq', 'USAGE WITH GRANT OPTION') THEN
        RAISE EXCEPTION 'permission denied to grant or revoke pgjobq privileges'
            USING ERRCODE = '42501',
                  HINT = 'Run this as the role that created the extension, or as a superuser.';
    END IF;
    SELECT r.rolname INTO grantee FROM pg_roles AS r WHERE r.oid = _grantee.role;
    RETURN grantee;
END
$$;
COMMENT ON FUNCTION jobq._grantee(regrole) IS
    'Internal: the role''s name, once the caller is known to hold the grant option on jobq.';
REVOKE ALL ON FUNCTION jobq._grantee(regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._grantee(regrole) TO @extowner@;

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
CREATE FUNCTION jobq._grant_level(role regrole, level text)
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
REVOKE ALL ON FUNCTION jobq._grant_level(regrole, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._grant_level(regrole, text) TO @extowner@;

/*
 * jobq.grant_producer(role, see_jobs): returns nothing.  Grants the
 * producer level, and with see_jobs the observer level too: jobq.job, wait
 * and watch, which show any job's state and result by its id (ids are
 * sequential, so a producer given them can read every job's outcome; not
 * its payload).  Raises like jobq._grantee, and 22004 for a NULL see_jobs.
 */
CREATE FUNCTION jobq.grant_producer(role regrole, see_jobs boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF grant_producer.see_jobs IS NULL THEN
        RAISE EXCEPTION 'see_jobs must not be NULL' USING ERRCODE = '22004';
    END IF;
    PERFORM jobq._grant_level(grant_producer.role, 'producer');
    IF grant_producer.see_jobs THEN
        PERFORM jobq._grant_level(grant_producer.role, 'observer');
    END IF;
END
$$;
COMMENT ON FUNCTION jobq.grant_producer(regrole, boolean) IS
    'Let role enqueue jobs (jobq.enqueue, jobq.enqueue_many, jobq.enqueue_flow), and with see_jobs look any job up (jobq.job, wait, watch); no access to the jobs table. Owner or superuser only.';
REVOKE ALL ON FUNCTION jobq.grant_producer(regrole, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.grant_producer(regrole, boolean) TO @extowner@;

CREATE FUNCTION jobq.grant_worker(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_worker.role, 'worker') $$;
COMMENT ON FUNCTION jobq.grant_worker(regrole) IS
    'Let role work jobs (claim, claim_any, heartbeat, complete, fail, snooze, hand_back, release and their batch forms), recover expired leases (reap), advance schedules (tick) and look jobs up (job, wait, watch); no access to the jobs table. Owner or superuser only.';
REVOKE ALL ON FUNCTION jobq.grant_worker(regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.grant_worker(regrole) TO @extowner@;

CREATE FUNCTION jobq.grant_admin(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_admin.role, 'admin') $$;
COMMENT ON FUNCTION jobq.grant_admin(regrole) IS
    'Let role do everything with the queue: every function, retry_failed, purge, stats, cancel, pause, resume, configure_queue, schedule, unschedule, jobq.health, jobq.queues, jobq.schedules, and read and write jobq.jobs, jobq.queue_settings, jobq.unique_keys, jobq.results, jobq.deadlines and the tables of limits and dependencies. Owner or superuser only.';
REVOKE ALL ON FUNCTION jobq.grant_admin(regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.grant_admin(regrole) TO @extowner@;

CREATE FUNCTION jobq.grant_monitor(role regrole)
RETURNS void
LANGUAGE sql VOLATILE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$ SELECT jobq._grant_level(grant_monitor.role, 'monitor') $$;
COMMENT ON FUNCTION jobq.grant_monitor(regrole) IS
    'Let role read everything and change nothing, for dashboards and exporters: jobq.metrics, stats, job, wait, watch, SELECT on jobq.jobs, the tables of settings, results, limits, dependencies and schedules, and the views jobq.health, jobq.queues and jobq.schedules. Owner or superuser only.';
REVOKE ALL ON FUNCTION jobq.grant_monitor(regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.grant_monitor(regrole) TO @extowner@;

/*
 * jobq.revoke_all(role): returns nothing.  Takes back every privilege the
 * levels give (admin's include the others'); grants made by hand
 * on other objects are left alone.  Raises like jobq._grantee.
 */
CREATE FUNCTION jobq.revoke_all(role regrole)
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
REVOKE ALL ON FUNCTION jobq.revoke_all(regrole) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.revoke_all(regrole) TO @extowner@;
