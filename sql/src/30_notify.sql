----------------------------------------------------------------------------
-- Wake-ups: inserting jobs notifies the queue's channel once per statement.
-- A notification is a hint; workers poll underneath, so nothing correct
-- depends on one arriving.
----------------------------------------------------------------------------

/*
 * jobq.channel(queue): the notification channel for queue, 'jobq_' || queue.
 * Raises like jobq._check_queue.
 */
CREATE FUNCTION jobq.channel(queue text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE CALLED ON NULL INPUT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM jobq._check_queue(channel.queue);
    RETURN 'jobq_' || channel.queue;
END
$$;
COMMENT ON FUNCTION jobq.channel(text) IS
    'The LISTEN channel of a queue: jobq_<queue>. Inserting jobs notifies it once per statement; the payload is empty.';
REVOKE ALL ON FUNCTION jobq.channel(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq.channel(text) TO @extowner@;

-- Statement-level: one notification per queue per statement, however many rows.
CREATE FUNCTION jobq._notify_inserted()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify(jobq.channel(q.queue), '')
       FROM (SELECT DISTINCT i.queue FROM inserted AS i) AS q;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION jobq._notify_inserted() IS 'Internal: trigger function of jobs_notify_trg.';
REVOKE ALL ON FUNCTION jobq._notify_inserted() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION jobq._notify_inserted() TO @extowner@;

CREATE TRIGGER jobs_notify_trg
    AFTER INSERT ON jobq.jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT
    EXECUTE FUNCTION jobq._notify_inserted();
COMMENT ON TRIGGER jobs_notify_trg ON jobq.jobs IS
    'Wakes workers: NOTIFY jobq_<queue> once per queue per inserting statement.';
