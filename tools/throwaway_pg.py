"""A throwaway PostgreSQL server for tests, the demo and benchmarks.

It runs initdb and pg_ctl from the Debian packages in a folder it owns,
listens on 127.0.0.1 at a free port with trust authentication, and is removed
on exit.  PostgreSQL refuses to run as root, so when this process is root the
server runs as an unprivileged user (``postgres`` when it exists, else
``nobody``) that owns the data folder; callers never see the difference.

A running server can be given a streaming standby (``standby()``: a base
backup taken by pg_basebackup into a folder and port of its own, following
the server under an application_name that ``synchronous_standby_names`` can
name), which ``promote()`` turns into a primary; ``wait_for_standby`` and
``wait_replayed`` wait for it to stream and to catch up.  These few calls
use psycopg, imported when called.

Command line, for a server to poke at by hand::

    python tools/throwaway_pg.py --dir /tmp/pg start    # prints the DSN
    python tools/throwaway_pg.py --dir /tmp/pg remove
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = ["ThrowawayPostgres", "find_bindir", "server_user"]

SUPERUSER = "postgres"

# Settings for every throwaway server: loopback only, enough connections for
# the worker-process tests, quiet logs.
BASE_SETTINGS: Mapping[str, str] = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "200",
    "log_min_messages": "warning",
    "log_line_prefix": "'%m [%p] '",
}

# A standby's application_name (its name in pg_stat_replication and synchronous_standby_names) and
# replication slot: a plain lower-case identifier, so that it needs no quoting in either.
STANDBY_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# For tests only: no fsync.  Safe against a PostgreSQL crash (the OS keeps
# the writes), unlike synchronous_commit = off, which would lose commits.
FAST_SETTINGS: Mapping[str, str] = {"fsync": "off", "full_page_writes": "off"}


def find_bindir() -> Path:
    """The bin folder of the newest installed PostgreSQL server, or PGJOBQ_PG_BINDIR."""
    override = os.environ.get("PGJOBQ_PG_BINDIR")
    if override:
        return Path(override)
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not candidates:
        found = shutil.which("postgres")
        if found is None:
            raise RuntimeError(
                "no PostgreSQL server found: install postgresql-15 (make deps) or set PGJOBQ_PG_BINDIR"
            )
        return Path(found).resolve().parent
    return candidates[-1].parent


def server_user() -> pwd.struct_passwd | None:
    """The account the server runs as: None (this one) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and neither 'postgres' nor 'nobody' exists")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayPostgres:
    """A PostgreSQL cluster in a folder of its own, started and removed by us.

    ``settings`` are appended to postgresql.conf; ``fast=True`` adds
    FAST_SETTINGS (for tests).  ``bindir`` chooses the server's programs
    (default: find_bindir()).
    """

    def __init__(
        self,
        base_dir: Path | None = None,
        *,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
        fast: bool = False,
        keep: bool = False,
        bindir: Path | None = None,
    ) -> None:
        self._own_base = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="pgjobq-pg-"))
        self.data_dir = self.base_dir / "data"
        self.log_file = self.base_dir / "server.log"
        self._own_port = port is None  # chosen here: another may be chosen if it is taken meanwhile
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.user = SUPERUSER
        self.bindir = bindir or find_bindir()
        self.settings = {**BASE_SETTINGS, **(FAST_SETTINGS if fast else {}), **(settings or {})}
        self.keep = keep
        self._account = server_user()

    # -- connection details -------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={dbname}"

    @functools.cached_property
    def major(self) -> int:
        """The server's major version, from ``postgres --version`` ("postgres (PostgreSQL) 13.23")."""
        output = subprocess.run(
            [str(self.bindir / "postgres"), "--version"], capture_output=True, text=True, check=True
        ).stdout
        found = re.search(r"\(PostgreSQL\) (\d+)", output)
        if found is None:
            raise RuntimeError(f"cannot read the version of {self.bindir / 'postgres'}: {output!r}")
        return int(found.group(1))

    # -- lifecycle ------------------------------------------------------------

    def run(
        self, *args: str, check: bool = True, stdin: IO[str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a server program as the server's account (in the server's folder); its output as text."""
        account = self._account
        result = subprocess.run(
            args,
            check=False,
            stdin=stdin,
            cwd=self.base_dir,
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"},
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )
        if check and result.returncode != 0:
            who = f" as {account.pw_name}" if account else ""
            raise RuntimeError(f"{Path(args[0]).name}{who} failed:\n{result.stdout}{result.stderr}")
        return result

    def _prepare_dir(self) -> None:
        """Create the folder, owned by the server's account, and check that account can reach it."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if self._account is not None:
            for parent in self.base_dir.resolve().parents:
                if not parent.stat().st_mode & 0o001:
                    raise RuntimeError(
                        f"{self.base_dir} is not reachable by {self._account.pw_name}: "
                        f"{parent} is not searchable by others (chmod o+x, or choose another folder)"
                    )
        if self._account is not None:
            os.chown(self.base_dir, self._account.pw_uid, self._account.pw_gid)
            self.log_file.touch()
            os.chown(self.log_file, self._account.pw_uid, self._account.pw_gid)
        self.base_dir.chmod(0o755)

    def init(self) -> None:
        """Create the cluster (initdb) and write its settings."""
        self._prepare_dir()
        self.run(
            str(self.bindir / "initdb"),
            "-D", str(self.data_dir),
            "-U", SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
            *(["--no-instructions"] if self.major >= 14 else []),
        )  # fmt: skip
        settings = dict(self.settings, port=str(self.port), unix_socket_directories=f"'{self.base_dir}'")
        conf = "".join(f"{key} = {value}\n" for key, value in settings.items())
        conf_path = self.data_dir / "postgresql.conf"
        with conf_path.open("a") as handle:
            handle.write("\n# pgjobq throwaway server\n" + conf)

    def start(self) -> None:
        """Start the server (initialising it first if needed) and wait until it accepts connections."""
        if not (self.data_dir / "PG_VERSION").exists():
            self.init()
        for attempt in range(3):
            result = self.run(
                str(self.bindir / "pg_ctl"), "start", "-w", "-t", "60",
                "-D", str(self.data_dir), "-l", str(self.log_file),
                check=False,
            )  # fmt: skip
            if result.returncode == 0:
                return
            if self._own_port and attempt < 2 and "Address already in use" in self.log_tail(5):
                # another process took the port between free_port() and the server's bind: another one
                self.port = free_port()
                with (self.data_dir / "postgresql.conf").open("a") as handle:
                    handle.write(f"port = {self.port}\n")
                continue
            raise RuntimeError(
                f"PostgreSQL did not start:\n{result.stdout}{result.stderr}\n{self.log_tail()}"
            )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: mode is smart, fast or immediate (pg_ctl -m)."""
        self.run(str(self.bindir / "pg_ctl"), "stop", "-w", "-m", mode, "-D", str(self.data_dir), check=False)

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def is_running(self) -> bool:
        result = self.run(str(self.bindir / "pg_ctl"), "status", "-D", str(self.data_dir), check=False)
        return result.returncode == 0

    # -- replication ----------------------------------------------------------

    def query(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement as the superuser on a connection of its own; its rows (none: [])."""
        import psycopg  # here: the rest of this module needs nothing outside the standard library

        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=10) as conn:
            cursor = conn.execute(statement, params)
            return cursor.fetchall() if cursor.description is not None else []

    def alter_system(self, name: str, value: str) -> None:
        """ALTER SYSTEM SET name = value (a string), then reload the configuration."""
        import psycopg
        from psycopg import sql

        statement = sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(statement)
            conn.execute("SELECT pg_reload_conf()")

    def standby(
        self,
        base_dir: Path | None = None,
        *,
        name: str = "standby",
        port: int | None = None,
        upstream_port: int | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> ThrowawayPostgres:
        """A streaming standby of this running server, made by pg_basebackup; not started yet.

        The base backup (``pg_basebackup -R -X stream``, run as the server's
        account) creates a physical replication slot named ``name`` on this
        server, so that WAL the standby has not received yet is kept while it
        is stopped.  The standby follows this server as ``application_name =
        name`` (for ``synchronous_standby_names``), through upstream_port
        instead of this server's port when given (a relay the caller runs).
        It keeps this server's settings, its own port and folder, plus
        ``settings``, but never ``synchronous_standby_names``: a standby
        promoted with it set would wait on every commit for a standby of its
        own that does not exist.
        """
        if STANDBY_NAME.fullmatch(name) is None:
            raise ValueError(f"standby name must be a lower-case identifier, got {name!r}")
        if not self.is_running():
            raise RuntimeError("a standby is made from a running server: start() it first")
        inherited = {k: v for k, v in self.settings.items() if k != "synchronous_standby_names"}
        standby = ThrowawayPostgres(
            base_dir,
            port=port,
            settings={**inherited, **(settings or {})},
            keep=self.keep,
            bindir=self.bindir,
        )
        standby._prepare_dir()
        standby.run(
            str(self.bindir / "pg_basebackup"),
            "-h", self.host, "-p", str(self.port), "-U", SUPERUSER,
            "-D", str(standby.data_dir),
            "-X", "stream", "-R", "-C", "-S", name, "-c", "fast", "--no-sync",
        )  # fmt: skip
        conf = dict(standby.settings, port=str(standby.port), unix_socket_directories=f"'{standby.base_dir}'")
        with (standby.data_dir / "postgresql.conf").open("a") as handle:
            handle.write("\n# pgjobq throwaway standby\n" + "".join(f"{k} = {v}\n" for k, v in conf.items()))
        # postgresql.auto.conf is read last, and its last line for a setting wins: after what
        # pg_basebackup -R wrote there, and after any ALTER SYSTEM of this server it copied
        upstream = (
            f"host={self.host} port={upstream_port or self.port} user={SUPERUSER} application_name={name}"
        )
        with (standby.data_dir / "postgresql.auto.conf").open("a") as handle:
            handle.write(f"primary_conninfo = '{upstream}'\nsynchronous_standby_names = ''\n")
        return standby

    def promote(self, timeout: float = 60) -> None:
        """Promote this standby to a primary (pg_ctl promote), waiting until it accepts writes."""
        self.run(
            str(self.bindir / "pg_ctl"), "promote", "-w", "-t", str(int(timeout)), "-D", str(self.data_dir)
        )

    def wait_for_standby(self, name: str, *, sync: bool = False, timeout: float = 60) -> None:
        """Wait until the standby name streams from this server (and, when sync, is its synchronous one)."""
        self._wait(
            "SELECT EXISTS (SELECT FROM pg_stat_replication WHERE application_name = %s"
            " AND state = 'streaming' AND (NOT %s OR sync_state = 'sync'))",
            (name, sync),
            timeout,
            f"standby {name} streaming" + (" synchronously" if sync else ""),
        )

    def wait_replayed(self, name: str, timeout: float = 60) -> None:
        """Wait until the standby name has replayed all the WAL this server had written when called."""
        ((target,),) = self.query("SELECT pg_current_wal_lsn()")
        self._wait(
            "SELECT EXISTS (SELECT FROM pg_stat_replication"
            " WHERE application_name = %s AND replay_lsn >= %s::pg_lsn)",
            (name, target),
            timeout,
            f"standby {name} replayed up to {target}",
        )

    def _wait(self, statement: str, params: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not self.query(statement, params)[0][0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"gave up waiting, after {timeout:g} s, for {what}")
            time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def remove(self) -> None:
        if self.is_running():
            self.stop("immediate")
        if not self.keep:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dir", type=Path, required=True, help="folder of the cluster")
    parser.add_argument("--port", type=int, help="port (default: a free one, kept in DIR/port)")
    parser.add_argument("action", choices=["start", "stop", "remove", "dsn"])
    args = parser.parse_args()
    port_file = args.dir / "port"
    port = args.port or (int(port_file.read_text()) if port_file.exists() else None)
    server = ThrowawayPostgres(args.dir, port=port, keep=True)
    if args.action == "start":
        server.start()
        port_file.write_text(str(server.port))
        print(server.dsn())
    elif args.action == "stop":
        server.stop()
    elif args.action == "remove":
        server.keep = False
        server.remove()
    else:
        print(server.dsn())


if __name__ == "__main__":
    main()
