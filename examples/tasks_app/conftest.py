"""The test database: DATABASE_URL names it (pgjobq installed); each test's work is rolled back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest


@pytest.fixture
def conn() -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(os.environ["DATABASE_URL"]) as conn:
        yield conn
        conn.rollback()
