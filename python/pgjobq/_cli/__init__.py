"""The pgjobq command line (``pgjobq``, ``python -m pgjobq``): main, the root group, and its commands.

- worker: the worker (worker);
- jobs: enqueue, wait, cancel, retry-failed, signal, jobs list, jobs show and its alias job, jobs unhold;
- queues: stats (and --watch), health, queues, configure-queue, pause, resume, reap, purge;
- schedules: schedule, unschedule, schedules;
- install: sql install, upgrade and pgtle, installs without the extension's files;
- servers: the optional extras' servers, metrics and dashboard;
- versions: version, the client's, the extension's and the server's;
- common: the root group, completion, the option helper and what the commands share; output: tables
  and records; logs: the worker's text or JSON log.

Every option has an environment-variable twin (shown in --help).  The
worker's are its own: the other commands that take --queue read a variable
named for the command (PGJOBQ_JOBS_LIST_QUEUE, not the worker's PGJOBQ_QUEUE),
so that a worker's environment does not filter an operator's command.  Every
read command takes --json.  Errors print one line and exit non-zero (EXIT_CODES).
"""

from __future__ import annotations

from pgjobq._cli import install, jobs, queues, schedules, servers, versions
from pgjobq._cli.common import completion, main
from pgjobq._cli.worker import worker

__all__ = ["main"]

for _command in (
    worker,
    jobs.enqueue,
    jobs.job,
    jobs.wait,
    jobs.cancel,
    jobs.retry_failed,
    jobs.signal,
    jobs.jobs,
    queues.stats,
    queues.health,
    queues.queues,
    queues.configure_queue,
    queues.pause,
    queues.resume,
    queues.reap,
    queues.purge,
    schedules.schedule,
    schedules.unschedule,
    schedules.schedules,
    install.sql_group,
    servers.metrics,
    servers.dashboard,
    versions.version,
    completion,
):
    main.add_command(_command)
