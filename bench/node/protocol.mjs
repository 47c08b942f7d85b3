// How a Node.js peer's process talks to the Python benchmark (bench/contenders/node_peers.py).
//
// The driver starts one process per worker or client, with a pipe as the file descriptor named by
// BENCH_REPORT_FD (reports, one line each) and standard input open (commands).  Lines written:
//
//   ready                       connected and set up: waiting for "go" on standard input
//   n <count> <first> <last>    jobs counted so far, the clock when the first and the last was counted
//   s <i> <t>                   latency: the handler of job i started at t
//   c <i> <t>                   latency: the add call of job i returned (committed) at t
//   error <message>             a failure; the process then exits non-zero
//
// Times are seconds of CLOCK_MONOTONIC (process.hrtime, libuv's uv_hrtime), the clock Python's
// time.monotonic() reads, so the driver compares them with its own.  The driver stops a process
// with SIGTERM (or by closing standard input): it stops its peer as the peer's documentation says
// and exits.

import fs from "node:fs";

const reportFd = Number(process.env.BENCH_REPORT_FD ?? "1");

/** The clock of every report: seconds of CLOCK_MONOTONIC. */
export function now() {
  return Number(process.hrtime.bigint()) / 1e9;
}

/** Write one report line. */
export function report(line) {
  fs.writeSync(reportFd, `${line}\n`);
}

/** The command-line options as a map: --name value pairs after the mode. */
export function parseArgs(argv) {
  const [mode, ...rest] = argv;
  const options = {};
  for (let i = 0; i < rest.length; i += 2) {
    if (!rest[i].startsWith("--")) throw new Error(`unexpected argument ${rest[i]}`);
    options[rest[i].slice(2)] = rest[i + 1];
  }
  return { mode, options };
}

/** A number option, or the default when absent. */
export function numberOption(options, name, fallback) {
  const value = options[name];
  if (value === undefined) {
    if (fallback === undefined) throw new Error(`--${name} is required`);
    return fallback;
  }
  const parsed = Number(value);
  if (!Number.isFinite(parsed)) throw new Error(`--${name} must be a number, got ${value}`);
  return parsed;
}

let stopHandlers = [];
let goResolve = null;
let stdinText = "";
let armed = false;

process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => {
  stdinText += chunk;
  if (goResolve && stdinText.includes("go\n")) {
    const resolve = goResolve;
    goResolve = null;
    resolve();
  }
});
// the end of input stops a process that waits for or runs after "go"; setup and load run to their end
process.stdin.on("end", () => {
  if (armed) stop("end of input");
});
process.on("SIGTERM", () => stop("SIGTERM"));
process.on("SIGINT", () => stop("SIGINT"));

/** Resolves once the driver writes "go" (after this process reported "ready"). */
export function readyThenGo() {
  const promise = new Promise((resolve) => {
    goResolve = resolve;
  });
  armed = true;
  report("ready");
  if (stdinText.includes("go\n")) {
    goResolve = null;
    return Promise.resolve();
  }
  return promise;
}

/** Run handler (async) once, when the driver stops this process. */
export function onStop(handler) {
  stopHandlers.push(handler);
}

let stopping = false;

async function stop(why) {
  if (stopping) return;
  stopping = true;
  process.stdin.pause();
  const handlers = stopHandlers;
  stopHandlers = [];
  try {
    for (const handler of handlers) await handler(why);
  } catch (err) {
    report(`error stopping: ${String(err?.message ?? err).split("\n")[0]}`);
    process.exit(1);
  }
  process.exit(0);
}

/** Jobs counted by a handler, reported every `everyMs` while the count changes. */
export class Counter {
  constructor(everyMs = 10) {
    this.count = 0;
    this.first = 0;
    this.last = 0;
    this.reported = 0;
    this.timer = setInterval(() => this.flush(), everyMs);
    this.timer.unref();
    onStop(async () => this.flush());
  }

  hit(jobs = 1) {
    const t = now();
    if (this.count === 0) this.first = t;
    this.count += jobs;
    this.last = t;
  }

  flush() {
    if (this.count !== this.reported) {
      this.reported = this.count;
      report(`n ${this.count} ${this.first} ${this.last}`);
    }
  }
}

/** Pauses of the latency producer: uniform in [low, high] seconds, from a seeded generator. */
export function pauses(seed, low, high) {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return low + ((high - low) * state) / 0xffffffff;
  };
}

export function sleep(seconds) {
  return new Promise((resolve) => setTimeout(resolve, seconds * 1000));
}

/** Run main(mode, options), reporting a failure as an "error" line and a non-zero exit. */
export function main(modes) {
  const { mode, options } = parseArgs(process.argv.slice(2));
  const run = modes[mode];
  if (!run) {
    report(`error unknown mode ${mode}; choose from ${Object.keys(modes).join(", ")}`);
    process.exit(2);
  }
  run(options).then(
    () => {
      if (!stopping) process.exit(0);
    },
    (err) => {
      report(`error ${String(err?.stack ?? err).split("\n")[0]}`);
      process.exit(1);
    },
  );
}
