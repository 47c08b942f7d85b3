"""Placing an order: the row and the job that ships it, in one transaction."""

from __future__ import annotations

from django.db import transaction

from pgjobq.contrib import django as jobs

from frameworks.djangoapp.shop.models import Order

__all__ = ["place_order"]


def place_order(item: str) -> tuple[int, int]:
    """Write an order and enqueue its shipping, atomically; (order id, job id)."""
    with transaction.atomic():
        order = Order.objects.create(item=item)
        job_id = jobs.enqueue("orders", {"order": order.pk})
    assert job_id is not None
    return int(order.pk), job_id
