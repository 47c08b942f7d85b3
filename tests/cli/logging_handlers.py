"""A handler that logs from inside itself and fails, for ``pgjobq worker cli.logging_handlers:NAME
--log-format json`` (tests/cli)."""

from __future__ import annotations

import logging

from pgjobq import Job

__all__ = ["log_then_fail"]

log = logging.getLogger("cli.logging_handlers")


def log_then_fail(job: Job) -> None:
    """Fails the job with a RuntimeError, after logging it with its traceback and the payload's "say"."""
    try:
        raise RuntimeError("the handler failed on purpose")
    except RuntimeError:
        log.exception("about to fail: %s", job.payload.get("say", ""))
        raise
