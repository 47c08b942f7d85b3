"""Recipes for the frameworks Python teams already use, each optional and imported only on demand.

- ``pgjobq.contrib.django``: enqueue on Django's own connection, inside
  ``transaction.atomic()``; ``manage.py pgjobq_worker``; a migration that
  installs the extension (add ``"pgjobq.contrib.django"`` to INSTALLED_APPS).
- ``pgjobq.contrib.sqlalchemy``: enqueue in a Session's (or AsyncSession's)
  transaction, on the ``postgresql+psycopg`` dialect.
- ``pgjobq.contrib.fastapi``: a lifespan that opens a psycopg_pool
  AsyncConnectionPool, and dependencies that hand endpoints a connection in
  the request's transaction or one for waiting on a job.

Importing ``pgjobq`` imports none of them, nor their frameworks.
"""

from __future__ import annotations

__all__: list[str] = []
