"""A registry of sync tasks in two queues, for ``pgjobq worker --tasks cli.sync_tasks`` (tests/cli)."""

from __future__ import annotations

from pgjobq import Tasks

__all__ = ["greet", "tally", "tasks"]

tasks = Tasks(queue="emails")


@tasks.task
def greet(name: str) -> dict[str, str]:
    """A task of queue emails: its result names whom it greeted."""
    return {"greeted": name}


@tasks.task(queue="reports")
def tally(numbers: list[int]) -> dict[str, int]:
    """A task of queue reports: its result is the sum of the numbers."""
    return {"total": sum(numbers)}
