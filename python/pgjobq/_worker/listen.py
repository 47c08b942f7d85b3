"""LISTEN and its probe: the notifications a worker hears, and how it checks that they arrive.

A worker listens on each queue's channel (jobq.channel) on a connection of
its own.  Every notification there is a wake-up (an enqueue while the
worker waits, a resume), except ``cancel:<id>,<id>,...``: jobq.cancel asks
the workers holding those running jobs to stop them.  LISTEN is not trusted
blindly: after each (re)connect the listening connection also listens on a
probe channel of its own (PROBE_CHANNEL_PREFIX and a random token, so that
no other listener ever sees it), the work connection notifies it
(queries.sql's probe_notify), and the probe must arrive within
PROBE_TIMEOUT seconds; behind a transaction-pooling PgBouncer it does not,
and the worker only polls.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence

from psycopg import sql

__all__ = [
    "CANCEL_CHECK",
    "CANCEL_PREFIX",
    "PROBE_CHANNEL_PREFIX",
    "PROBE_TIMEOUT",
    "cancel_ids",
    "listen_statement",
    "probe_channel",
    "unlisten_statement",
    "warn_not_delivered",
    "warn_wait_refused",
]

logger = logging.getLogger("pgjobq.worker")

PROBE_CHANNEL_PREFIX = "pgjobq_probe_"
PROBE_TIMEOUT = 1.5

# jobq.cancel notifies the queue's channel with this prefix and the ids of the
# running jobs it asked to stop; every other notification there is a wake-up.
CANCEL_PREFIX = "cancel:"
# While handlers run, look this often (seconds) for cancel notifications on
# the listening connection, without waiting on it.
CANCEL_CHECK = 0.1


def probe_channel() -> str:
    """A fresh probe channel, that no other listener knows."""
    return f"{PROBE_CHANNEL_PREFIX}{uuid.uuid4().hex}"


def cancel_ids(payload: str) -> set[int] | None:
    """The job ids a cancel notification names; None for a wake-up (any other payload)."""
    if not payload.startswith(CANCEL_PREFIX):
        return None
    return {int(part) for part in payload[len(CANCEL_PREFIX) :].split(",") if part.strip().isdigit()}


def listen_statement(channel: str) -> sql.Composed:
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))


def unlisten_statement(channel: str) -> sql.Composed:
    return sql.SQL("UNLISTEN {}").format(sql.Identifier(channel))


def warn_not_delivered(channels: Sequence[str], poll_interval: float) -> None:
    """Says, once per connect, that the probe did not arrive: the worker polls instead of listening."""
    logger.warning(
        "notifications do not reach this worker's listening connection (a "
        "transaction-pooling PgBouncer?); not listening on %s, polling every %s s instead",
        ", ".join(channels),
        poll_interval,
    )


def warn_wait_refused(reason: str, poll_interval: float) -> None:
    """Says that the registration as waiting (jobq.register_waiter) was
    refused to the worker's role: it does not register, and mostly polls."""
    logger.warning(
        "not registering as waiting: jobq.register_waiter was refused to this worker's role (%s); enqueues "
        "notify only while another worker waits, so this one mostly polls every %s s",
        reason,
        poll_interval,
    )
