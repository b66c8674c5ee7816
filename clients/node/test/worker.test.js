// @ts-check
/**
 * The reference worker, with Node's own test runner. The protocol tests need a served sqsjobs API
 * whose App declares tests/apps/polyglot.py's types: tests/remote/test_node_worker.py starts one
 * on MiniStack and runs these with SQSJOBS_API_URL and SQSJOBS_API_TOKEN set.
 */
import assert from "node:assert/strict";
import { test } from "node:test";

import { PermanentError, ProtocolError, RetryError, Worker, failureBody } from "../src/index.js";

const url = process.env.SQSJOBS_API_URL ?? "";
const token = process.env.SQSJOBS_API_TOKEN;

/**
 * @param {string} path
 * @param {string} method
 * @param {any} [body]
 */
async function api(path, method, body) {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json() };
}

/**
 * Enqueue one render.count job over HTTP, run a worker of this process with `handlerOf(jobId)` until the
 * record says the job ended, and return its id and final record.
 * @param {any} payload
 * @param {string} workerId
 * @param {(jobId: string) => (payload: any, job: import("../src/index.js").JobContext) => Promise<any>} handlerOf
 */
async function runOne(payload, workerId, handlerOf) {
  const enqueued = await api("/jobs", "POST", { type: "render.count", payload });
  assert.equal(enqueued.status, 202, JSON.stringify(enqueued.body));
  const jobId = enqueued.body.id;
  const worker = new Worker({ url, token, workerId, waitS: 1, handlers: { "render.count": handlerOf(jobId) }, log: () => {} });
  const running = worker.run();
  let record;
  for (let i = 0; i < 200; i++) {
    record = (await api(`/jobs/${jobId}`, "GET")).body;
    if (["succeeded", "dead"].includes(record.status)) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  worker.stop();
  await running;
  return { jobId, record };
}

test("a handler's errors map to the protocol: retryable, permanent, retry after, cancelled", () => {
  const plain = failureBody("L", new TypeError("bad"), false);
  assert.deepEqual([plain.error.type, plain.error.message, plain.retryable, plain.cancelled], ["TypeError", "bad", true, false]);
  assert.match(plain.error.stack, /TypeError: bad/);
  assert.equal(failureBody("L", new PermanentError("never"), false).retryable, false);
  assert.equal(failureBody("L", new RetryError("later", { afterS: 7 }), false).retry_after_s, 7);
  assert.equal(failureBody("L", "a string thrown", true).cancelled, true);
});

test("a worker refuses an id the record cannot hold and a worker without handlers", () => {
  assert.throws(() => new Worker({ url: "http://x", workerId: "has space", handlers: { a: () => 1 } }), /workerId/);
  assert.throws(() => new Worker({ url: "http://x", workerId: "w", handlers: {} }), /handlers/);
});

test("a job enqueued over HTTP runs in this process's worker and its result is the record's", { timeout: 60_000 }, async () => {
  assert.ok(url, "SQSJOBS_API_URL names the served API (tests/remote/test_node_worker.py sets it)");
  /** @type {import("../src/index.js").JobContext[]} */
  const seen = [];
  const { jobId, record } = await runOne({ n: 21 }, "node-test-runner", () => async (payload, job) => {
    seen.push(job);
    return { doubled: payload.n * 2 };
  });
  assert.equal(record?.status, "succeeded");
  assert.deepEqual(record?.result, { doubled: 42 });
  assert.deepEqual(seen.map((job) => [job.jobId, job.attempt, job.fencingToken]), [[jobId, 1, `${jobId}:1`]]);
});

test("a lease the server did not issue is refused with lease-invalid", async () => {
  assert.ok(url, "SQSJOBS_API_URL names the served API");
  const worker = new Worker({ url, token, workerId: "w", handlers: { "render.count": () => 1 }, log: () => {} });
  await assert.rejects(
    worker.post("/leases/complete", { lease: "x".repeat(40), result: 1 }),
    (/** @type {any} */ error) => error instanceof ProtocolError && error.status === 400 && error.problem.type.endsWith("lease-invalid"),
  );
});

test("a handler's progress rides on its next heartbeat and the record shows each report", { timeout: 60_000 }, async () => {
  assert.ok(url, "SQSJOBS_API_URL names the served API");
  /** @type {any[]} */
  const shown = [];
  const { record } = await runOne({ n: 3 }, "node-progress", (jobId) => async (payload, job) => {
    for (let done = 1; done <= payload.n; done++) {
      job.progress({ fraction: done / payload.n, message: `frame ${done}`, data: { done } });
      for (let i = 0; i < 200; i++) { // until a heartbeat carried it to the record
        const progress = (await api(`/jobs/${jobId}`, "GET")).body.progress;
        if (progress?.data?.done === done) {
          shown.push(progress);
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    return { frames: payload.n };
  });
  assert.equal(record?.status, "succeeded");
  assert.deepEqual(shown.map((p) => [p.report, p.fraction, p.message]), [[1, 1 / 3, "frame 1"], [2, 2 / 3, "frame 2"], [3, 1, "frame 3"]]);
});
