"""Small helpers the contenders written for pgjobq share (not a contender module)."""

from __future__ import annotations

import json
import time

from .base import WorkerHooks

__all__ = ["idle", "payload_texts"]


def payload_texts(count: int) -> list[str]:
    """The payloads of count jobs as JSON text: ``{"i": 0}``, ``{"i": 1}``, ..."""
    return [json.dumps({"i": i}) for i in range(count)]


def idle(hooks: WorkerHooks, seconds: float, step: float = 0.02) -> None:
    """Sleep up to seconds, in steps, returning early once the driver says stop."""
    deadline = time.monotonic() + seconds
    while not hooks.should_stop() and (remaining := deadline - time.monotonic()) > 0:
        time.sleep(min(step, remaining))
