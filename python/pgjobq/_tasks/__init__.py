"""Tasks: named job types, enqueued with checked keyword arguments, run by one worker.

- task (:class:`Task`): one function registered as a named job type; its
  enqueue calls, and what a job of it is called with;
- running: running a task on a job (its arguments, timeout and retry_on);
- registry (:class:`Tasks`): the tasks of an application, and the handlers
  the workers run them with;
- loading (:func:`load_tasks`): the registry ``pgjobq worker --tasks`` names.
"""

from __future__ import annotations

from pgjobq._tasks.loading import load_tasks
from pgjobq._tasks.registry import Tasks
from pgjobq._tasks.task import EnqueueOptions, Task

__all__ = ["EnqueueOptions", "Task", "Tasks", "load_tasks"]
