"""A registry with a sync and an async task, for ``pgjobq worker --tasks cli.mixed_tasks:tasks``; and a second
registry, so that ``--tasks cli.mixed_tasks`` (the module alone) is ambiguous (tests/cli)."""

from __future__ import annotations

import asyncio

from pgjobq import Tasks

__all__ = ["greet", "shout", "spare", "tasks"]

tasks = Tasks(queue="emails")


@tasks.task
def greet(name: str) -> dict[str, str]:
    """A sync task: its result names whom it greeted."""
    return {"greeted": name}


@tasks.task
async def shout(name: str) -> dict[str, str]:
    """An async task: it runs only under an AsyncWorker; its result is name in capitals."""
    await asyncio.sleep(0)
    return {"shouted": name.upper()}


spare = Tasks(queue="spare")
