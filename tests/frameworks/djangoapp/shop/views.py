"""POST /orders places an order (item from the form) and answers with its id and its job's."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponseNotAllowed, JsonResponse

from frameworks.djangoapp.shop.orders import place_order

__all__ = ["place_order_view"]


def place_order_view(request: Any) -> Any:
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    order, job = place_order(request.POST["item"])
    return JsonResponse({"order": order, "job": job}, status=201)
