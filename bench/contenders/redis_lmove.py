"""Redis as a reliable queue, as the reference article compared it: LMOVE to a processing list.

The article's Redis comparison (Redis 7.0 with persistence off, redis-py)
used Redis's "reliable queue" pattern from the LMOVE documentation
(redis.io, commands/lmove, "Pattern: Reliable queue"): a worker atomically
moves a job from the queue list to a processing list of its own, runs it,
then removes it from the processing list with LREM.  A job whose worker
dies stays in that worker's processing list, from where a reaper can put it
back (not measured here, as in the article).

Settings, and why:
- ``LMOVE queue processing LEFT RIGHT`` per job, ``LREM processing 1 job``
  when done: two commands per job, no transaction, exactly the pattern.
  The blocking form ``BLMOVE`` waits while the queue is empty, with a 50 ms
  timeout so the worker notices ``should_stop`` promptly.
- ``batch`` > 1 uses redis-py pipelining (the "Pipelining" page of the Redis
  docs: many commands, one round trip): one pipeline of ``batch`` LMOVEs,
  the jobs, then one pipeline of their LREMs.  Each LMOVE stays atomic, so a
  job still moves to exactly one worker.
- Enqueue: RPUSH of 10,000 payloads per command, in one pipeline.
- Persistence off (bench/redis_server.py), as in the article; each worker
  uses one connection (``redis.Redis.from_url``, redis-py defaults).
- Payloads are unique (``{"i": n}``), so LREM of the payload removes
  exactly this job.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import cast

import redis

from ._util import RedisContender, chunks, do_work, payload_texts, redis_client
from .base import Target, WorkerHooks

__all__ = ["RedisLmove"]

QUEUE_KEY = "lmove:queue"
PROCESSING_PREFIX = "lmove:processing:"
PUSH_CHUNK = 10_000
WAIT_SECONDS = 0.05


class RedisLmove(RedisContender):
    name = "redis_lmove"
    label = "Redis list, LMOVE (reliable queue)"
    batches = None
    keys = "lmove:*"  # the queue and every worker's processing list

    def enqueue(self, target: Target, count: int) -> None:
        with redis_client(target) as client, client.pipeline(transaction=False) as pipe:
            for numbers in chunks(count, PUSH_CHUNK):
                pipe.rpush(QUEUE_KEY, *payload_texts(numbers))
            pipe.execute()

    def work(self, target: Target, batch: int, work_seconds: float, hooks: WorkerHooks) -> None:
        processing = f"{PROCESSING_PREFIX}{os.getpid()}:{uuid.uuid4().hex[:8]}"
        with redis_client(target, decode_responses=True) as client:
            client.ping()
            hooks.ready()
            while not hooks.should_stop():
                jobs = self._take(client, processing, batch)
                if not jobs:
                    continue
                for job in jobs:
                    _ = json.loads(job)["i"]  # the handler reads its payload
                    do_work(work_seconds)
                if len(jobs) == 1:
                    client.lrem(processing, 1, jobs[0])
                else:
                    with client.pipeline(transaction=False) as pipe:
                        for job in jobs:
                            pipe.lrem(processing, 1, job)
                        pipe.execute()
                hooks.processed(len(jobs))

    @staticmethod
    def _take(client: redis.Redis, processing: str, batch: int) -> list[str]:
        """Move up to batch jobs to this worker's processing list; wait a little when there are none."""
        if batch > 1:
            with client.pipeline(transaction=False) as pipe:
                for _ in range(batch):
                    pipe.lmove(QUEUE_KEY, processing, "LEFT", "RIGHT")
                moved: list[str | None] = pipe.execute()
            jobs = [job for job in moved if job is not None]
            if jobs:
                return jobs
        # redis-py types the timeout as int (BLMOVE takes decimal seconds since Redis 6)
        # and the reply as bytes | str (it is str: the client decodes responses)
        job = client.blmove(QUEUE_KEY, processing, WAIT_SECONDS, "LEFT", "RIGHT")  # type: ignore[arg-type]
        return [] if job is None else [cast(str, job)]
