// @ts-check
/**
 * A Node worker for the render.* types of tests/apps/polyglot.py (and the README's walk-through).
 *
 *   SQSJOBS_API_URL=http://127.0.0.1:8000 SQSJOBS_API_TOKEN=... node examples/thumbnails.js
 *
 * Each run appends one JSON line to `<payload.runs_dir>/<job id>.node` when the payload names a
 * directory (evidence a test reads from outside): its attempt, this process, and how it ended. The
 * payload's `mode` says how the run behaves: `ok`, `fail:N` (its first N attempts fail), `permanent`,
 * `hang` (runs until its signal aborts: a cancel, a lost lease, a drain's end), `hang-once` (hangs on
 * attempt 1 only), `slow:S` (takes S seconds).
 */
import { appendFileSync } from "node:fs";
import { join } from "node:path";

import { PermanentError, Worker } from "../src/index.js";

/**
 * @param {any} payload
 * @param {import("../src/index.js").JobContext} job
 * @param {Record<string, any>} fields
 */
function record(payload, job, fields) {
  if (!payload.runs_dir) return;
  const line = { attempt: job.attempt, pid: process.pid, at: Date.now() / 1000, ...fields };
  appendFileSync(join(payload.runs_dir, `${job.jobId}.node`), `${JSON.stringify(line)}\n`);
}

/**
 * Resolves after `ms`, or rejects with the signal's reason.
 * @param {number} ms
 * @param {AbortSignal} signal
 */
function wait(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    });
  });
}

/** @type {import("../src/index.js").Handler} */
async function thumbnail(payload, job) {
  const [mode, arg] = String(payload.mode ?? "ok").split(":");
  record(payload, job, { event: "start" });
  try {
    if (mode === "fail" && job.attempt <= Number(arg)) throw new TypeError(`flaky render ${job.attempt}`);
    if (mode === "permanent") throw new PermanentError("not a PNG");
    if (mode === "hang" || (mode === "hang-once" && job.attempt === 1)) await wait(3_600_000, job.signal);
    if (mode === "slow") await wait(Number(arg) * 1000, job.signal);
  } catch (error) {
    record(payload, job, { event: job.signal.aborted ? "aborted" : "failed", reason: String(error) });
    throw error;
  }
  record(payload, job, { event: "done" });
  return { thumbnail: `${payload.url}@${payload.width}`, previous: job.previousResult ?? null };
}

/** @type {import("../src/index.js").Handler} */
async function count(payload, job) {
  record(payload, job, { event: "done" });
  return { doubled: payload.n * 2 };
}

const url = process.env.SQSJOBS_API_URL;
if (!url) throw new Error("set SQSJOBS_API_URL to the sqsjobs API");
const worker = new Worker({
  url,
  token: process.env.SQSJOBS_API_TOKEN,
  workerId: process.env.SQSJOBS_WORKER_ID ?? `node-${process.pid}`,
  concurrency: Number(process.env.SQSJOBS_CONCURRENCY ?? 4),
  waitS: Number(process.env.SQSJOBS_WAIT_S ?? 20),
  handlers: { "render.thumbnail": thumbnail, "render.count": count },
});
await worker.run();
