-- The statements of pgjobq.prometheus (QueueStateCollector), one per "-- name:".

-- name: statement_timeout
SELECT set_config('statement_timeout', %(milliseconds)s, true)

-- name: metrics
SELECT metric, queue, value FROM jobq.metrics()
