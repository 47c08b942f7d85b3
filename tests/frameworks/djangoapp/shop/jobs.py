"""The handler of the "orders" queue, run by manage.py pgjobq_worker: it uses the ORM."""

from __future__ import annotations

from typing import Any

from django.db import connection

from pgjobq import Job

from frameworks.djangoapp.shop.models import Order

__all__ = ["ship"]


def ship(job: Job) -> dict[str, Any]:
    """Mark the job's order shipped; the result names the backend of the ORM connection used."""
    Order.objects.filter(pk=job.payload["order"]).update(shipped=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    return {"backend": backend}
