"""One model: an order, shipped by the "orders" queue's handler."""

from __future__ import annotations

from django.db import models

__all__ = ["Order"]


class Order(models.Model):
    item = models.CharField(max_length=100)
    shipped = models.BooleanField(default=False)
