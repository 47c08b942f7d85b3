// Graphile Worker in pgjobq's benchmark, run the way its documentation runs it from a library:
// `runMigrations` installs its schema, `run({ taskList, concurrency, ... })` runs a worker pool,
// `makeWorkerUtils().addJob` / `addJobs` add jobs.  Protocol and modes: protocol.mjs and
// bench/contenders/node_peers.py.
//
//   node graphile_worker.mjs setup   --dsn DSN
//   node graphile_worker.mjs load    --dsn DSN --count N           every job removed, then N jobs added
//   node graphile_worker.mjs work    --dsn DSN --batch B [--latency 1]
//   node graphile_worker.mjs enqueue --dsn DSN --count N           single-row addJob calls
//   node graphile_worker.mjs produce --dsn DSN --count N --gap LOW,HIGH --seed S   latency's producer
//
// Settings (the benchmark's report repeats them): one pool of at most 10 connections per process
// (its default maxPoolSize), concurrency 1 (its default: one job at a time per process, as pgjobq
// runs with --concurrency 1), pollInterval 2000 ms (its default; LISTEN/NOTIFY is always on in
// Graphile Worker), prepared statements on (its default).  Batch 1 is its default job fetching: each
// job fetched by its own get_job call and completed by its own complete_job call.  Batch B > 1 turns
// on its batching (https://worker.graphile.org/docs/performance#batching): localQueue.size B (B jobs
// fetched and locked per query) and completeJobBatchDelay 0 (completions made in the same tick go to
// the database as one statement).  A job is deleted when it completes, as always in Graphile Worker.

import pg from "pg";
import { makeWorkerUtils, run, runMigrations } from "graphile-worker";
import { Counter, main, now, numberOption, onStop, pauses, readyThenGo, report, sleep } from "./protocol.mjs";

const TASK = "bench";
const POOL_SIZE = 10;
const CHUNK = 5000;
const WARM_UP = 3; // jobs -3..-1, 0.3 s apart, before the measured ones (the driver leaves them out)
const WARM_UP_PAUSE = 0.3;

async function preconnect(pool, count) {
  const clients = await Promise.all(Array.from({ length: count }, () => pool.connect()));
  for (const client of clients) client.release();
}

const modes = {
  async setup(options) {
    await runMigrations({ connectionString: options.dsn });
  },

  async load(options) {
    const count = numberOption(options, "count");
    const utils = await makeWorkerUtils({ connectionString: options.dsn });
    try {
      await utils.withPgClient((client) =>
        client.query("TRUNCATE graphile_worker._private_jobs, graphile_worker._private_job_queues"),
      );
      for (let first = 0; first < count; first += CHUNK) {
        const specs = [];
        for (let i = first; i < Math.min(count, first + CHUNK); i++) {
          specs.push({ identifier: TASK, payload: { i } });
        }
        await utils.addJobs(specs);
      }
    } finally {
      await utils.release();
    }
  },

  async work(options) {
    const batch = numberOption(options, "batch", 1);
    const latency = numberOption(options, "latency", 0) > 0;
    const pgPool = new pg.Pool({ connectionString: options.dsn, max: POOL_SIZE });
    pgPool.on("error", (err) => process.stderr.write(`pool error: ${err?.message ?? err}\n`));
    await preconnect(pgPool, 2);
    const counter = latency ? null : new Counter();
    const taskList = {
      [TASK]: async (payload) => {
        if (latency) report(`s ${payload.i} ${now()}`);
        else counter.hit(1);
      },
    };
    await readyThenGo();
    const worker = { pollInterval: 2000, concurrentJobs: 1 };
    if (batch > 1) {
      worker.localQueue = { size: batch };
      worker.completeJobBatchDelay = 0;
    }
    const runner = await run({
      pgPool,
      taskList,
      concurrency: 1,
      noHandleSignals: true,
      preset: { worker },
    });
    onStop(async () => {
      await runner.stop();
      await pgPool.end();
    });
    await runner.promise;
  },

  async enqueue(options) {
    const count = numberOption(options, "count");
    const utils = await makeWorkerUtils({ connectionString: options.dsn });
    await utils.withPgClient((client) => client.query("SELECT 1"));
    const counter = new Counter();
    onStop(async () => utils.release());
    await readyThenGo();
    for (let i = 0; i < count; i++) {
      await utils.addJob(TASK, { i });
      counter.hit(1);
    }
    counter.flush();
    await utils.release();
  },

  async produce(options) {
    const count = numberOption(options, "count");
    const [low, high] = (options.gap ?? "0.005,0.025").split(",").map(Number);
    const pause = pauses(numberOption(options, "seed", 4), low, high);
    const utils = await makeWorkerUtils({ connectionString: options.dsn });
    await utils.withPgClient((client) => client.query("SELECT 1"));
    onStop(async () => utils.release());
    await readyThenGo();
    for (let i = -WARM_UP; i < count; i++) {
      await sleep(i < 0 ? WARM_UP_PAUSE : pause());
      await utils.addJob(TASK, { i });
      report(`c ${i} ${now()}`);
    }
    await utils.release();
  },
};

main(modes);
