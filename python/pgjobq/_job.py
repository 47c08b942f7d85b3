"""Job: what a handler receives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Job"]


@dataclass(frozen=True, slots=True)
class Job:
    """One claimed job, as handed to a handler.

    ``lease`` is the fencing token of this claim: the worker presents it to
    complete, fail or heartbeat the job, and the database refuses it once the
    job has been reaped and claimed again.
    """

    id: int
    queue: str
    payload: dict[str, Any]
    priority: int
    attempts: int
    max_attempts: int
    lease: int
