"""A throwaway redis-server for the benchmark's Redis contenders.

It runs Debian's ``redis-server`` (``tools/ensure-deps bench`` installs it) in
a folder it owns, listening on 127.0.0.1 at a free port, and is removed on
exit.  Persistence is off (no RDB snapshots, no append-only file), as in the
reference article's Redis comparison.  When this process is root the server
runs as the same unprivileged account as the throwaway PostgreSQL
(``postgres`` when it exists, else ``nobody``), which owns the folder.

    with ThrowawayRedis() as server:
        client = redis.Redis.from_url(server.url())
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis
from throwaway_pg import free_port, server_user

__all__ = ["ThrowawayRedis", "find_redis_server"]

HOST = "127.0.0.1"


def find_redis_server() -> Path:
    """The redis-server program, or an error saying how to install it."""
    found = shutil.which("redis-server") or shutil.which("redis-server", path="/usr/bin:/usr/sbin")
    if found is None:
        raise RuntimeError("redis-server not found: install it with tools/ensure-deps bench")
    return Path(found)


class ThrowawayRedis:
    """A redis-server in a folder of its own, started and removed by us."""

    def __init__(self, base_dir: Path | None = None, *, port: int | None = None) -> None:
        self._own_base = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="pgjobq-redis-"))
        self.log_file = self.base_dir / "redis.log"
        self.port = port or free_port()
        self.host = HOST
        self.program = find_redis_server()
        self._account = server_user()
        self._process: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    def _arguments(self) -> list[str]:
        settings = {
            "bind": self.host,
            "port": str(self.port),
            "protected-mode": "yes",
            "dir": str(self.base_dir),
            "logfile": str(self.log_file),
            "loglevel": "warning",
            "daemonize": "no",
            "save": "",
            "appendonly": "no",
        }
        arguments = [str(self.program)]
        for key, value in settings.items():
            arguments += [f"--{key}", value]
        return arguments

    def start(self, timeout: float = 30.0) -> None:
        """Start the server and wait until it answers PING."""
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir.chmod(0o755)
        account = self._account
        if account is not None:
            shutil.chown(self.base_dir, account.pw_uid, account.pw_gid)
        self._process = subprocess.Popen(
            self._arguments(),
            cwd=self.base_dir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis(host=self.host, port=self.port, socket_connect_timeout=1)
        try:
            while True:
                if self._process.poll() is not None:
                    raise RuntimeError(f"redis-server exited at start:\n{self.log_tail()}")
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server did not answer within {timeout} s:\n{self.log_tail()}")
                time.sleep(0.05)
        finally:
            client.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM; with persistence off it saves nothing)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def remove(self) -> None:
        self.stop()
        if self._own_base:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> ThrowawayRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()
