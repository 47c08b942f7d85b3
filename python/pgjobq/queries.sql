-- The statements the Python client sends.  Each starts with "-- name: NAME";
-- pgjobq._queries loads them.  All queue logic lives in the extension: these
-- only call its functions.

-- name: enqueue
SELECT jobq.enqueue(%(queue)s, %(payload)s::jsonb, priority => %(priority)s,
                    run_at => coalesce(%(run_at)s::timestamptz, now()),
                    max_attempts => %(max_attempts)s)

-- name: enqueue_many
-- the payloads travel as one JSON array, parsed once, and become the jsonb[]
-- jobq.enqueue_many takes (an array parameter would be adapted element by element)
SELECT jobq.enqueue_many(%(queue)s,
                         ARRAY(SELECT e.payload
                                 FROM jsonb_array_elements(%(payloads)s::jsonb) WITH ORDINALITY AS e(payload, i)
                                ORDER BY e.i),
                         priority => %(priority)s,
                         run_at => coalesce(%(run_at)s::timestamptz, now()),
                         max_attempts => %(max_attempts)s)

-- name: claim
SELECT id, queue, payload, priority, attempts, max_attempts, lease
  FROM jobq.claim(%(queue)s, %(n)s, %(worker)s, %(lease_timeout)s::interval)

-- name: complete_and_claim
-- acknowledged jobs first (status done: only their id is needed, so their
-- payload is not sent), then the claimed ones (status running)
SELECT status, id, queue, CASE WHEN status = 'running' THEN payload END AS payload,
       priority, attempts, max_attempts, lease
  FROM jobq.complete_and_claim(%(ids)s::bigint[], %(leases)s::bigint[], %(queue)s, %(n)s, %(worker)s,
                               %(lease_timeout)s::interval)

-- name: complete
SELECT jobq.complete(%(id)s, %(lease)s)

-- name: complete_many
SELECT id FROM jobq.complete_many(%(ids)s::bigint[], %(leases)s::bigint[]) AS id

-- name: fail
SELECT status, run_at FROM jobq.fail(%(id)s, %(error)s, %(lease)s)

-- name: heartbeat
SELECT jobq.heartbeat(%(id)s, %(lease)s)

-- name: heartbeat_many
SELECT id FROM jobq.heartbeat_many(%(ids)s::bigint[], %(leases)s::bigint[]) AS id

-- name: reap
SELECT id, queue, status FROM jobq.reap(%(stale)s::interval)

-- name: retry_failed
SELECT id FROM jobq.retry_failed(%(queue)s, %(ids)s::bigint[]) AS id

-- name: stats
SELECT queue, queued, runnable, running, done, failed, oldest_queued_age FROM jobq.stats()

-- name: channel
SELECT jobq.channel(%(queue)s)

-- name: release
SELECT jobq.release(%(id)s, %(lease)s)

-- name: wait
-- also how far ahead next_run_at is by the database's clock (the function's
-- statement_timestamp() is this statement's), so that the worker never
-- compares the database's time with its own
SELECT w.registered, w.next_run_at, w.next_run_at - statement_timestamp() AS next_run_in
  FROM jobq.wait(%(queue)s, %(worker)s, %(up_to)s::interval) AS w

-- name: probe_notify
-- the worker's LISTEN probe: notifies a channel of its own listening connection
SELECT pg_notify(%(channel)s, '')

-- name: purge
SELECT jobq.purge(%(older_than)s, max_rows => %(max_rows)s, include_failed => %(include_failed)s)

-- name: extension_version
-- read from the catalog, not jobq.version(), so that a database with an older
-- pgjobq, or none, is told apart from one with the right version
SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pgjobq'

-- name: health
SELECT queued, runnable, running, failed, oldest_runnable_age, live_tuples, dead_tuples, total_bytes,
       last_vacuum, last_analyze, oldest_transaction_age, oldest_xmin_age
  FROM jobq.health
