"""pgjobq stats --watch: a live table until Ctrl-C, in a terminal (rich, or plain redraws) or a pipe."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers.processes import pgjobq_command, process_env, wait_until
from helpers.sqlhelpers import Db


class Watching:
    """A running `pgjobq stats --watch ...`, its output collected as it comes."""

    def __init__(self, dsn: str, *args: str, terminal: bool = False, **env: str) -> None:
        self.output = ""
        self._lock = threading.Lock()
        command = pgjobq_command("stats", "--watch", "--interval", "0.1", *args)
        environment = process_env(dsn, **env) | {"COLUMNS": "120", "LINES": "40", "TERM": "xterm"}
        if terminal:
            master, slave = pty.openpty()
            self.process = subprocess.Popen(command, env=environment, stdin=slave, stdout=slave, stderr=slave)
            os.close(slave)
            reader = lambda: os.read(master, 65536)  # noqa: E731
        else:
            self.process = subprocess.Popen(
                command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            assert self.process.stdout is not None
            stdout = self.process.stdout
            reader = lambda: os.read(stdout.fileno(), 65536)  # noqa: E731
        threading.Thread(target=self._collect, args=(reader,), daemon=True).start()

    def _collect(self, read: Callable[[], bytes]) -> None:
        while True:
            try:
                chunk = read()
            except OSError:  # the terminal closed with the process
                return
            if not chunk:
                return
            with self._lock:
                self.output += chunk.decode(errors="replace")

    def text(self) -> str:
        with self._lock:
            return self.output

    def shows(self, condition: Callable[[str], bool]) -> bool:
        return wait_until(lambda: condition(self.text()), timeout=30)

    def interrupt(self) -> int:
        """Ctrl-C; the exit status."""
        self.process.send_signal(signal.SIGINT)
        return self.process.wait(30)


@pytest.fixture
def watch(dsn: str) -> Iterator[Callable[..., Watching]]:
    started: list[Watching] = []

    def start(*args: str, terminal: bool = False, **env: str) -> Watching:
        started.append(Watching(dsn, *args, terminal=terminal, **env))
        return started[-1]

    yield start
    for watching in started:
        if watching.process.poll() is None:
            watching.process.kill()
            watching.process.wait()


def test_stats_watch_in_a_pipe_prints_a_table_at_each_reading_and_ctrl_c_ends_it(
    db: Db, watch: Callable[..., Watching]
) -> None:
    db.execute("SELECT jobq.enqueue('emails', '{}')")
    watching = watch()
    assert watching.shows(lambda out: "emails" in out)

    db.execute("SELECT jobq.enqueue('emails', '{}'), jobq.enqueue('reports', '{}')")

    assert watching.shows(lambda out: "reports" in out)
    tables = [t for t in watching.text().split("\n\n") if "queue" in t]
    first, last = tables[0].splitlines(), tables[-1].splitlines()
    assert first[0].endswith("+00:00")  # each reading starts with its time
    assert first[2].split()[:2] == ["emails", "1"]
    assert [line.split()[:2] for line in last[2:]] == [["emails", "2"], ["reports", "1"]]
    assert watching.interrupt() == 0


def test_stats_watch_json_prints_one_array_per_reading(db: Db, watch: Callable[..., Watching]) -> None:
    db.execute("SELECT jobq.enqueue('emails', '{}')")
    watching = watch("--json")

    assert watching.shows(lambda out: out.count("\n") >= 2)
    assert watching.interrupt() == 0
    readings = [json.loads(line) for line in watching.text().splitlines() if line.startswith("[")]
    assert len(readings) >= 2
    assert all(reading[0]["queue"] == "emails" and reading[0]["queued"] == 1 for reading in readings)


def test_stats_watch_in_a_terminal_draws_a_live_table_with_rich(
    db: Db, watch: Callable[..., Watching]
) -> None:
    db.execute("SELECT jobq.enqueue('emails', '{}')")
    watching = watch(terminal=True)

    assert watching.shows(lambda out: "pgjobq stats every 0.1s" in out and "emails" in out)
    assert "┃" in watching.text() or "│" in watching.text()  # rich's box lines
    assert watching.interrupt() == 0


def test_stats_watch_in_a_terminal_without_rich_redraws_the_plain_table(
    db: Db, watch: Callable[..., Watching], tmp_path: Path
) -> None:
    (tmp_path / "rich").mkdir()
    (tmp_path / "rich" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'rich'\", name='rich')\n"
    )
    db.execute("SELECT jobq.enqueue('emails', '{}')")
    watching = watch(terminal=True, PYTHONPATH=f"{tmp_path}{os.pathsep}{process_env('')['PYTHONPATH']}")

    assert watching.shows(lambda out: out.count("\x1b[H\x1b[2J") >= 2 and "emails" in out)
    assert "│" not in watching.text()
    assert watching.interrupt() == 0
