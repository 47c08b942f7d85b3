// pg-boss in pgjobq's benchmark, run the way its documentation runs it: `new PgBoss(...)`,
// `start()` (which installs or migrates its schema), `createQueue`, `work(queue, options, handler)`,
// `send` for one job and `insert` for many.  Protocol and modes: protocol.mjs and
// bench/contenders/node_peers.py.
//
//   node pg_boss.mjs setup   --dsn DSN
//   node pg_boss.mjs load    --dsn DSN --count N           every job of the queue deleted, N inserted
//   node pg_boss.mjs work    --dsn DSN --batch B [--latency 1]
//   node pg_boss.mjs enqueue --dsn DSN --count N           single-row send calls
//   node pg_boss.mjs produce --dsn DSN --count N --gap LOW,HIGH --seed S   latency's producer
//
// Settings (the benchmark's report repeats them): one pool of at most 10 connections per process
// (its default max), its defaults for supervision, maintenance and retention (completed jobs stay in
// the table until its maintenance deletes them, 7 days by default), LISTEN/NOTIFY on
// (useListenNotify, and the queue created with notify: true: a send wakes an idle worker at once),
// with polling underneath every 0.5 s (pollingIntervalSeconds and notifyPollingIntervalSeconds at their
// minimum; their defaults are 2 s and 30 s).  The polling matters: a worker at batch 1 woken by one
// notification fetches one job, and a second job whose notification came before that fetch waits for
// the next notification or poll.  One worker per process
// (localConcurrency 1, its default) with batchSize B: one fetch claims up to B jobs, the handler gets
// them as one array, and pg-boss completes them in one statement once it returns.  pg-boss waits a
// polling interval after every fetch unless a burst setting says the queue has more: the workers set
// burstWhenReadyExceeds 1 (fetch again at once while the last fetch was full and the queue's cached
// ready count is above 1) and, above batch 1, burstWhenBatchFull.  The ready count is cached from
// pg-boss's monitor pass; `load` runs one (supervise) after inserting, as the background supervisor
// would within a minute, so that workers started after it see the backlog.

import { PgBoss } from "pg-boss";
import { Counter, main, now, numberOption, onStop, pauses, readyThenGo, report, sleep } from "./protocol.mjs";

const QUEUE = "bench";
const POOL_SIZE = 10;
const CHUNK = 5000;
const WARM_UP = 3; // jobs -3..-1, 0.3 s apart, before the measured ones (the driver leaves them out)
const WARM_UP_PAUSE = 0.3;

function boss(options, extra = {}) {
  const instance = new PgBoss({ connectionString: options.dsn, max: POOL_SIZE, ...extra });
  instance.on("error", (err) => process.stderr.write(`pg-boss error: ${err?.message ?? err}\n`));
  return instance;
}

const modes = {
  async setup(options) {
    const instance = boss(options);
    await instance.start();
    await instance.createQueue(QUEUE, { notify: true });
    await instance.stop({ graceful: false });
  },

  async load(options) {
    const count = numberOption(options, "count");
    const instance = boss(options, { supervise: false, schedule: false });
    await instance.start();
    await instance.deleteAllJobs(QUEUE);
    for (let first = 0; first < count; first += CHUNK) {
      const jobs = [];
      for (let i = first; i < Math.min(count, first + CHUNK); i++) jobs.push({ data: { i } });
      await instance.insert(QUEUE, jobs);
    }
    await instance.supervise(QUEUE); // the monitor pass: the queue's cached counts see the backlog
    await instance.stop({ graceful: false });
  },

  async work(options) {
    const batch = numberOption(options, "batch", 1);
    const latency = numberOption(options, "latency", 0) > 0;
    const instance = boss(options, { useListenNotify: true });
    await instance.start();
    const counter = latency ? null : new Counter();
    onStop(async () => instance.stop({ graceful: true, timeout: 5000 }));
    await readyThenGo();
    await instance.work(
      QUEUE,
      {
        batchSize: batch,
        pollingIntervalSeconds: 0.5,
        notifyPollingIntervalSeconds: 0.5,
        burstWhenReadyExceeds: 1,
        burstWhenBatchFull: batch > 1,
      },
      async (jobs) => {
        if (latency) {
          const t = now();
          for (const job of jobs) report(`s ${job.data.i} ${t}`);
        } else {
          counter.hit(jobs.length);
        }
      },
    );
    await new Promise(() => {}); // runs until the driver stops it
  },

  async enqueue(options) {
    const count = numberOption(options, "count");
    const instance = boss(options, { supervise: false, schedule: false });
    await instance.start();
    const counter = new Counter();
    onStop(async () => instance.stop({ graceful: false }));
    await readyThenGo();
    for (let i = 0; i < count; i++) {
      await instance.send(QUEUE, { i });
      counter.hit(1);
    }
    counter.flush();
    await instance.stop({ graceful: false });
  },

  async produce(options) {
    const count = numberOption(options, "count");
    const [low, high] = (options.gap ?? "0.005,0.025").split(",").map(Number);
    const pause = pauses(numberOption(options, "seed", 4), low, high);
    const instance = boss(options, { supervise: false, schedule: false });
    await instance.start();
    onStop(async () => instance.stop({ graceful: false }));
    await readyThenGo();
    for (let i = -WARM_UP; i < count; i++) {
      await sleep(i < 0 ? WARM_UP_PAUSE : pause());
      await instance.send(QUEUE, { i });
      report(`c ${i} ${now()}`);
    }
    await instance.stop({ graceful: false });
  },
};

main(modes);
