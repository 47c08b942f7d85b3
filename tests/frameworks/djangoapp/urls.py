"""The test project's one route."""

from __future__ import annotations

from typing import Any

from django.urls import path

from frameworks.djangoapp.shop import views

urlpatterns: list[Any] = [path("orders", views.place_order_view)]
