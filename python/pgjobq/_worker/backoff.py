"""Reconnect backoff: how long a worker waits before connecting again after losing the database."""

from __future__ import annotations

import random

__all__ = ["Backoff"]

FIRST = 0.5  # seconds: the first wait


class Backoff:
    """Doubling waits from FIRST up to cap, each less up to a quarter at random (so that a fleet of
    workers does not retry in step).  reset() once a step worked: a connection alone does not."""

    __slots__ = ("_cap", "_delay")

    def __init__(self, cap: float) -> None:
        self._cap = cap
        self._delay = 0.0

    def next(self) -> float:
        """The wait before the next attempt (seconds)."""
        self._delay = min(self._cap, max(FIRST, self._delay * 2))
        return self._delay * random.uniform(0.75, 1.0)

    def reset(self) -> None:
        self._delay = 0.0
