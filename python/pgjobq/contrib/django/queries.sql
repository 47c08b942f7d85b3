-- The statements of pgjobq.contrib.django.operations.  Each starts with "-- name: NAME".

-- name: installed
-- the extension, or a plain-SQL install (which has the schema but no pg_extension row)
SELECT EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname = 'pgjobq')
       OR pg_catalog.to_regnamespace('jobq') IS NOT NULL

-- name: create_extension
CREATE EXTENSION IF NOT EXISTS pgjobq

-- name: drop_extension
DROP EXTENSION IF EXISTS pgjobq
