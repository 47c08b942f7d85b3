"""--json on every read command of the command line: each prints one JSON document.

Run in-process (click's runner) on the test's real database, to keep many commands cheap; the
other CLI tests run the command as a process.
"""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from pgjobq._cli import main

from helpers.sqlhelpers import Db, scalar

# The commands that change nothing (and configure-queue and schedule, which print what they set).
READ_COMMANDS = {
    "stats": (),
    "health": (),
    "queues": (),
    "schedules": (),
    "job": ("{id}",),
    "jobs list": (),
    "jobs show": ("{id}",),
    "version": (),
}


def test_every_read_command_takes_json() -> None:
    for name in READ_COMMANDS:
        command: click.Command = main
        for word in name.split():
            assert isinstance(command, click.Group)
            command = command.commands[word]
        assert "as_json" in {param.name for param in command.params}, name


@pytest.mark.parametrize("name", sorted(READ_COMMANDS))
def test_a_read_command_with_json_prints_one_json_document(dsn: str, db: Db, name: str) -> None:
    job_id = scalar(db, "SELECT jobq.enqueue('emails', '{\"to\": \"ada\"}')")
    db.execute("SELECT jobq.schedule('digest', 'emails', every => '1 hour')")
    args = [*name.split(), *(arg.format(id=job_id) for arg in READ_COMMANDS[name]), "--json", "--dsn", dsn]

    result = CliRunner().invoke(main, args)

    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert isinstance(document, (dict, list)) and document
