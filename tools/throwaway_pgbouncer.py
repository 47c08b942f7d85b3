"""A throwaway PgBouncer in front of a PostgreSQL server, for tests.

It writes its configuration in a folder of its own, listens on 127.0.0.1 at a
free port with trust authentication, passes every database name through to
the server, and is stopped and removed on exit.  PgBouncer refuses to run as
root, so when this process is root it runs as the same unprivileged user as
the throwaway PostgreSQL (``server_user()`` in throwaway_pg.py).

Command line, for a pooler to poke at by hand (runs until Ctrl-C)::

    python tools/throwaway_pgbouncer.py --server-port 5432 [--pool-mode transaction]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

from throwaway_pg import SUPERUSER, free_port, server_user

__all__ = ["ThrowawayPgBouncer", "find_pgbouncer"]


def find_pgbouncer() -> Path:
    """The pgbouncer program (Debian installs it in /usr/sbin, which a user's PATH may lack)."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise RuntimeError("pgbouncer not found: install the Debian package pgbouncer")
    return Path(found)


class ThrowawayPgBouncer:
    """PgBouncer for the server at server_host:server_port, in a folder of its own.

    ``pool_mode`` is session, transaction or statement; ``pool_size`` is the
    number of server connections per database and user, kept small so that
    clients really share them.  ``users`` may log in (trust, no password).
    ``settings`` are added to the [pgbouncer] section.
    """

    def __init__(
        self,
        server_host: str,
        server_port: int,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 4,
        users: Sequence[str] = (SUPERUSER,),
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.server_host = server_host
        self.server_port = server_port
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.users = tuple(users)
        self.host = "127.0.0.1"
        self.port = port or free_port()
        self.settings = dict(settings or {})
        self.base_dir = Path(tempfile.mkdtemp(prefix="pgjobq-pgbouncer-"))
        self.log_file = self.base_dir / "pgbouncer.log"
        self._account = server_user()
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def dsn(self, dbname: str, user: str = SUPERUSER) -> str:
        """A libpq connection string for dbname through this PgBouncer."""
        return f"host={self.host} port={self.port} user={user} dbname={dbname}"

    def _write_config(self) -> Path:
        userlist = self.base_dir / "userlist.txt"
        userlist.write_text("".join(f'"{user}" ""\n' for user in self.users))
        settings = {
            "listen_addr": self.host,
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(userlist),
            "pool_mode": self.pool_mode,
            "default_pool_size": str(self.pool_size),
            "max_client_conn": "200",
            "ignore_startup_parameters": "extra_float_digits",
            **self.settings,
        }
        config = self.base_dir / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port}\n"
            "\n[pgbouncer]\n" + "".join(f"{key} = {value}\n" for key, value in settings.items())
        )
        if self._account is not None:
            for path in (self.base_dir, userlist, config):
                os.chown(path, self._account.pw_uid, self._account.pw_gid)
        return config

    def _accepts_connections(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(0.5)
            return sock.connect_ex((self.host, self.port)) == 0

    def start(self, timeout: float = 30) -> None:
        """Start PgBouncer in the foreground of a child process; wait until it listens."""
        config = self._write_config()
        self._log = self.log_file.open("wb")
        account = self._account
        self._process = subprocess.Popen(
            [str(find_pgbouncer()), str(config)],
            cwd=self.base_dir,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )
        deadline = time.monotonic() + timeout
        while not self._accepts_connections():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PgBouncer did not start:\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop PgBouncer at once (SIGTERM: immediate shutdown), dropping its connections."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> ThrowawayPgBouncer:
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
    parser.add_argument("--server-host", default="127.0.0.1", help="PostgreSQL host (default: %(default)s)")
    parser.add_argument("--server-port", type=int, required=True, help="PostgreSQL port")
    parser.add_argument("--port", type=int, help="port to listen on (default: a free one)")
    parser.add_argument("--pool-mode", choices=["session", "transaction", "statement"], default="transaction")
    args = parser.parse_args()
    bouncer = ThrowawayPgBouncer(args.server_host, args.server_port, pool_mode=args.pool_mode, port=args.port)
    with bouncer, contextlib.suppress(KeyboardInterrupt):
        print(bouncer.dsn("postgres"), flush=True)
        signal.pause()


if __name__ == "__main__":
    main()
