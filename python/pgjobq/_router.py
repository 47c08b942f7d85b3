"""Queue-level sharding from the client: which PostgreSQL server holds each queue.

Past what one primary can take, queues can be spread over several
PostgreSQL servers, each with the pgjobq extension, each queue living on
exactly one of them.  Nothing in the database knows about the others: every
call of pgjobq works on one server, as it always did, and the application
picks the server from the queue.  :class:`QueueRouter` is that choice, and
only that: a small object, built from configuration, that does no I/O and
opens no connection of its own.

A queue's server is, in this order:

1. its placement, when the router was given one (``placements``);
2. otherwise ``default``, when a default server is named;
3. otherwise the server that wins the rendezvous hash of the queue's name
   (the highest score of a stable hash of server name and queue name), so
   that every process computes the same answer, and adding a server moves
   only the queues the new server wins, removing one only its own.

The server's *name*, not its conninfo, is hashed: a new password or host
for a server moves nothing.

What the router cannot do, and docs/explanation/scaling.md says why: a queue that moves
to another server leaves its jobs behind, so drain (or pause and empty) a
queue before its placement changes, or before adding a server that would
win it (:meth:`QueueRouter.moves` lists them); an enqueue commits with
business data only on the queue's own server; dependencies, flows and
``claim_any`` stay within one server; unique keys, ids, stats, reaping and
LISTEN/NOTIFY are per server.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import psycopg
from psycopg.conninfo import conninfo_to_dict

from pgjobq._errors import ConfigurationError

__all__ = ["JobAddress", "QueueRouter"]

# jobq._check_queue (sql/src/20_checks.sql): '^[a-z0-9_]{1,58}$'
_QUEUE_NAME = re.compile(r"[a-z0-9_]{1,58}")
# server names are the router's own: short, printable, no spaces, stable (they are hashed)
_SERVER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,63}")


class JobAddress(NamedTuple):
    """A job among several servers: its queue and its id.

    Each server numbers its jobs with its own sequence, so an id alone
    names a job on every server at once; the queue says which server
    holds it (:meth:`QueueRouter.locate`).
    """

    queue: str
    id: int


def _check_queue(queue: object, argument: str = "queue") -> str:
    if not isinstance(queue, str) or _QUEUE_NAME.fullmatch(queue) is None:
        shown = repr(queue[:80]) if isinstance(queue, str) else type(queue).__name__
        raise ConfigurationError(f"{argument} must be 1 to 58 characters of a-z, 0-9 and _, got {shown}")
    return queue


def _names(queues: Iterable[str]) -> list[str]:
    """queues as a list, each once, in the order given (one name passed alone is one queue)."""
    return list(dict.fromkeys([queues] if isinstance(queues, str) else queues))


def _score(server: str, queue: str) -> int:
    """The rendezvous score of a server for a queue: 64 bits of BLAKE2b over both names.

    hashlib's digests are the same in every process and Python version (unlike
    hash(), which is salted per process), so every producer and worker agrees.
    """
    digest = hashlib.blake2b(f"{server}\x00{queue}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class QueueRouter:
    """Maps each queue to the one PostgreSQL server that holds it, and back.

    ``servers`` maps server names to conninfo strings (at least one; names
    of 1 to 63 letters, digits, ``_``, ``-`` or ``.``; two names may not
    share a conninfo, since each queue must live on exactly one server).
    ``placements`` pins queues to servers by name.  ``default`` names the
    server of every queue not placed; without it, such a queue goes to the
    server the rendezvous hash of its name picks among all of them.
    Anything wrong raises :class:`pgjobq.ConfigurationError`, naming it.

    The router only computes; connecting, and keeping a pool per server,
    is the application's.  Its repr shows server names and placements, never
    a conninfo (which may hold a password).
    """

    __slots__ = ("_default", "_placements", "_servers")

    def __init__(
        self,
        servers: Mapping[str, str],
        placements: Mapping[str, str] | None = None,
        *,
        default: str | None = None,
    ) -> None:
        if not isinstance(servers, Mapping):
            raise ConfigurationError(f"servers must map server names to conninfo strings, got {servers!r}")
        if not servers:
            raise ConfigurationError("servers must name at least one server, got none")
        seen: dict[tuple[tuple[str, str], ...], str] = {}
        for name, conninfo in servers.items():
            if not isinstance(name, str) or _SERVER_NAME.fullmatch(name) is None:
                raise ConfigurationError(
                    "server names must be 1 to 63 characters of letters, digits, '_', '-' and '.', "
                    f"got {name!r}"
                )
            if not isinstance(conninfo, str) or not conninfo.strip():
                raise ConfigurationError(f"the conninfo of server {name!r} must be a non-empty string")
            try:
                parsed = conninfo_to_dict(conninfo)
            except psycopg.ProgrammingError as exc:
                # the message may quote the string; name the server, not its secrets
                raise ConfigurationError(f"the conninfo of server {name!r} is not valid") from exc
            key = tuple(sorted((k, str(v)) for k, v in parsed.items()))
            if key in seen:
                raise ConfigurationError(
                    f"servers {seen[key]!r} and {name!r} have the same conninfo: "
                    "each queue must live on exactly one server"
                )
            seen[key] = name
        self._servers: Mapping[str, str] = MappingProxyType(dict(servers))
        known = ", ".join(self._servers)
        pinned: dict[str, str] = {}
        for queue, server in (placements or {}).items():
            _check_queue(queue, "placed queue names")
            if server not in self._servers:
                raise ConfigurationError(
                    f"the placement of queue {queue!r} names unknown server {server!r} (servers: {known})"
                )
            pinned[queue] = server
        self._placements: Mapping[str, str] = MappingProxyType(pinned)
        if default is not None and default not in self._servers:
            raise ConfigurationError(f"default names unknown server {default!r} (servers: {known})")
        self._default = default

    def __repr__(self) -> str:
        default = f", default={self._default!r}" if self._default is not None else ""
        return f"QueueRouter(servers={list(self._servers)!r}, placements={dict(self._placements)!r}{default})"

    @property
    def servers(self) -> Mapping[str, str]:
        """Every server, name to conninfo, in the order given: for stats, reaping, purging and
        metrics, which each server does for its own queues only."""
        return self._servers

    @property
    def placements(self) -> Mapping[str, str]:
        """The queues pinned to a server, queue to server name."""
        return self._placements

    @property
    def default(self) -> str | None:
        """The server of the queues not placed, or None: the rendezvous hash picks it."""
        return self._default

    def server(self, queue: str) -> str:
        """The name of the server that holds queue."""
        _check_queue(queue)
        placed = self._placements.get(queue)
        if placed is not None:
            return placed
        if self._default is not None:
            return self._default
        return max(self._servers, key=lambda server: (_score(server, queue), server))

    def conninfo(self, queue: str) -> str:
        """The conninfo of the server that holds queue: where to enqueue, claim and settle its jobs."""
        return self._servers[self.server(queue)]

    def by_server(self, queues: Iterable[str]) -> dict[str, list[str]]:
        """The queues grouped by the server holding them (servers in the router's order, queues in
        the order given, each once); servers holding none of them are left out."""
        groups: dict[str, list[str]] = {name: [] for name in self._servers}
        for queue in _names(queues):
            groups[self.server(queue)].append(queue)
        return {name: held for name, held in groups.items() if held}

    def server_for(self, queues: Iterable[str]) -> str:
        """The one server holding all of queues: for a worker claiming several queues, and for
        claim_any.  Raises ConfigurationError when they are on different servers, naming which
        queue is where: no claim can span servers."""
        groups = self.by_server(queues)
        if not groups:
            raise ConfigurationError("queues must name at least one queue, got none")
        if len(groups) > 1:
            where = "; ".join(f"{', '.join(held)} on {server}" for server, held in groups.items())
            raise ConfigurationError(
                f"queues span servers ({where}): one worker or claim_any takes queues of one server; "
                "run a worker per server (by_server) or place the queues together"
            )
        return next(iter(groups))

    def conninfo_for(self, queues: Iterable[str]) -> str:
        """The conninfo of the one server holding all of queues (see server_for)."""
        return self._servers[self.server_for(queues)]

    def locate(self, job: JobAddress | tuple[str, int]) -> str:
        """The conninfo of the server holding the job (queue, id): where to look it up (job, wait,
        watch), cancel it or depend on it.  An id alone does not say: every server has its own."""
        queue, job_id = job
        if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
            raise ConfigurationError(f"a job id must be a positive integer, got {job_id!r}")
        return self.conninfo(queue)

    def moves(self, other: QueueRouter, queues: Iterable[str]) -> dict[str, tuple[str, str]]:
        """The queues among queues that other puts on another server than this router does, each
        with (this server, other's server): what to drain before switching to other (adding a
        server, changing a placement).  The queues must be listed (say, from stats on every
        server): a hashed router places any name."""
        moved: dict[str, tuple[str, str]] = {}
        for queue in _names(queues):
            here, there = self.server(queue), other.server(queue)
            if here != there:
                moved[queue] = (here, there)
        return moved
