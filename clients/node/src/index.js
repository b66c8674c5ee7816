// @ts-check
/**
 * The sqsjobs reference worker for Node.js (>= 20): runs external job types over the HTTP worker
 * protocol (docs/http-workers.md) with nothing but Node's own fetch.
 *
 * A worker long-polls `POST /leases` for jobs of its types, runs each in its handler with an
 * AbortSignal, heartbeats every lease it holds (`POST /leases/heartbeat`: a cancel request or a
 * lost lease aborts the signal), and ends each run with `POST /leases/complete` or
 * `POST /leases/fail`. On SIGTERM (or `stop()`) it stops leasing, lets the running jobs finish
 * (up to `drainMs`, then aborts them: the server hands them out again once their lease runs out).
 *
 * @module @sqsjobs/worker
 */

/** A handler's error that no retry can fix: the job is dead at once, with this error. */
export class PermanentError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "PermanentError";
  }
}

/** A handler's request to run the job again after `afterS` seconds (its attempts still count). */
export class RetryError extends Error {
  /**
   * @param {string} message
   * @param {{afterS: number}} options
   */
  constructor(message, { afterS }) {
    super(message);
    this.name = "RetryError";
    this.afterS = afterS;
  }
}

/** The API answered with a problem (RFC 9457) or a status the protocol does not expect. */
export class ProtocolError extends Error {
  /**
   * @param {number} status
   * @param {any} problem
   */
  constructor(status, problem) {
    super(`${status} ${problem?.type ?? ""}: ${problem?.detail ?? JSON.stringify(problem)}`);
    this.name = "ProtocolError";
    this.status = status;
    this.problem = problem;
  }
}

/**
 * A progress report, as Python's `ctx.progress`: `fraction` 0 to 1, a `message` (at most 500
 * characters), small JSON `data` (at most 2 KB).
 * @typedef {object} ProgressReport
 * @property {number} [fraction]
 * @property {string} [message]
 * @property {any} [data]
 */

/**
 * What a handler is given beside its payload.
 * @typedef {object} JobContext
 * @property {string} jobId
 * @property {string} type
 * @property {number} attempt This run's attempt, from 1.
 * @property {string} fencingToken `<job id>:<epoch>`: make downstream writes conditional on it.
 * @property {Date} deadline Past this the run is a timeout.
 * @property {AbortSignal} signal Aborted on a cancel request, a lost lease, the deadline or a drain's end.
 * @property {any} previousResult A chain step's: the result of the step before.
 * @property {(report: ProgressReport) => void} progress Report how far the run has come: the next
 *   heartbeat carries the latest report (no request of its own); the record, `GET /jobs/{id}` and
 *   its event stream show it.
 */

/**
 * @callback Handler
 * @param {any} payload
 * @param {JobContext} job
 * @returns {Promise<any> | any} The job's result (JSON).
 */

/**
 * @typedef {object} WorkerOptions
 * @property {string} url The sqsjobs API, e.g. `http://127.0.0.1:8000`.
 * @property {string} [token] An API token (`Authorization: Bearer`).
 * @property {string} workerId Written into each job's record as its owner (`http:<workerId>`).
 * @property {Record<string, Handler>} handlers Handler by external job type.
 * @property {number} [concurrency] Jobs run at once (default 4).
 * @property {number} [waitS] How long one lease request waits for jobs (default 20, at most 20).
 * @property {number} [drainMs] How long a drain lets running jobs finish before aborting them (default 30 000).
 * @property {(line: Record<string, any>) => void} [log] Where the worker's log lines go (JSON lines on stderr by default).
 * @property {typeof fetch} [fetch] The fetch to use (Node's own by default).
 */

/**
 * One leased job, as `POST /leases` answers it.
 * @typedef {object} Leased
 * @property {string} lease
 * @property {string} job_id
 * @property {string} type
 * @property {number} attempt
 * @property {string} fencing_token
 * @property {any} payload
 * @property {any} previous_result
 * @property {string} deadline
 * @property {number} heartbeat_every_s
 */

export class Worker {
  /** @param {WorkerOptions} options */
  constructor(options) {
    const types = Object.keys(options.handlers ?? {});
    if (types.length === 0) throw new TypeError("handlers must name at least one external job type");
    if (!/^[A-Za-z0-9._:@-]{1,100}$/.test(options.workerId ?? "")) {
      throw new TypeError("workerId: 1 to 100 letters, digits and ._:@-");
    }
    this.url = options.url.replace(/\/+$/, "");
    this.token = options.token;
    this.workerId = options.workerId;
    this.handlers = options.handlers;
    this.types = types;
    this.concurrency = Math.max(1, options.concurrency ?? 4);
    this.waitS = Math.min(20, Math.max(0, options.waitS ?? 20));
    this.drainMs = options.drainMs ?? 30_000;
    this.log = options.log ?? ((line) => process.stderr.write(`${JSON.stringify(line)}\n`));
    this.fetch = options.fetch ?? fetch;
    /** @type {Map<string, AbortController>} running jobs' controllers, by job id */
    this.running = new Map();
    this.stopping = false;
    this.polling = new AbortController();
  }

  /**
   * POST `body` to `path`; the parsed answer, or a ProtocolError (409: `status` 409).
   * @param {string} path
   * @param {any} body
   * @param {AbortSignal} [signal]
   * @returns {Promise<any>}
   */
  async post(path, body, signal) {
    /** @type {Record<string, string>} */
    const headers = { "content-type": "application/json" };
    if (this.token) headers.authorization = `Bearer ${this.token}`;
    const response = await this.fetch(`${this.url}${path}`, {
      method: "POST",
      headers,
      body: JSON.stringify(body),
      signal,
    });
    const text = await response.text();
    const answer = text ? JSON.parse(text) : null;
    if (!response.ok) throw new ProtocolError(response.status, answer);
    return answer;
  }

  /** Run until `stop()` or SIGTERM/SIGINT, then drain. */
  async run() {
    const onSignal = () => this.stop();
    process.once("SIGTERM", onSignal);
    process.once("SIGINT", onSignal);
    /** @type {Set<Promise<void>>} */
    const tasks = new Set();
    let backoffMs = 250;
    try {
      while (!this.stopping) {
        const free = this.concurrency - this.running.size;
        if (free <= 0) {
          await Promise.race(tasks);
          continue;
        }
        /** @type {Leased[]} */
        let leases;
        try {
          const answer = await this.post(
            "/leases",
            { worker_id: this.workerId, types: this.types, max_jobs: Math.min(free, 10), wait_s: this.waitS },
            this.polling.signal,
          );
          leases = answer.leases;
          backoffMs = 250;
        } catch (error) {
          if (this.stopping) break;
          this.log({ level: "warning", message: "lease request failed", error: String(error) });
          await sleep(backoffMs);
          backoffMs = Math.min(backoffMs * 2, 10_000);
          continue;
        }
        for (const leased of leases) {
          const task = this.runOne(leased).finally(() => tasks.delete(task));
          tasks.add(task);
        }
      }
      await this.drain(tasks);
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    }
  }

  /** Stop leasing; `run()` then drains what is running and returns. */
  stop() {
    if (this.stopping) return;
    this.stopping = true;
    this.log({ level: "info", message: "draining", running: this.running.size });
    this.polling.abort();
  }

  /**
   * Wait for the running jobs, up to `drainMs`; then abort the rest (their leases run out, and the
   * server hands them out again).
   * @param {Set<Promise<void>>} tasks
   */
  async drain(tasks) {
    const all = Promise.allSettled([...tasks]);
    const timer = setTimeout(() => {
      for (const controller of this.running.values()) controller.abort(new Error("worker drain timed out"));
    }, this.drainMs);
    try {
      await all;
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Run one leased job: heartbeats while its handler runs, then the lease's end.
   * @param {Leased} leased
   */
  async runOne(leased) {
    const controller = new AbortController();
    this.running.set(leased.job_id, controller);
    /** @type {"cancelled" | "lost" | null} */
    let interrupted = null;
    /** @type {ProgressReport | null} */
    let report = null;
    const beat = async () => {
      const carried = report;
      report = null;
      try {
        const answer = await this.post("/leases/heartbeat", carried ? { lease: leased.lease, progress: carried } : { lease: leased.lease });
        if (answer.cancel_requested && !interrupted) {
          interrupted = "cancelled";
          controller.abort(new Error("cancel requested"));
        }
      } catch (error) {
        if (error instanceof ProtocolError && error.status === 409 && !interrupted) {
          interrupted = "lost";
          controller.abort(new Error("lease lost"));
        } else if (error instanceof ProtocolError && error.status === 422 && carried) {
          this.log({ level: "warning", message: "progress report refused", job_id: leased.job_id, error: String(error) });
        } else {
          report ??= carried; // the next heartbeat carries it, unless a newer report came meanwhile
          this.log({ level: "warning", message: "heartbeat failed", job_id: leased.job_id, error: String(error) });
        }
      }
    };
    const timer = setInterval(beat, Math.max(100, leased.heartbeat_every_s * 1000));
    const deadline = new Date(leased.deadline);
    const overdue = setTimeout(
      () => controller.abort(new Error("job timed out")),
      Math.max(0, deadline.getTime() - Date.now()),
    );
    /** @type {JobContext} */
    const job = {
      jobId: leased.job_id,
      type: leased.type,
      attempt: leased.attempt,
      fencingToken: leased.fencing_token,
      deadline,
      signal: controller.signal,
      previousResult: leased.previous_result,
      progress: (next) => {
        report = next;
      },
    };
    try {
      const handler = this.handlers[leased.type];
      /** @type {any} */
      let result;
      /** @type {unknown} */
      let failure = null;
      try {
        result = await abortable(Promise.resolve().then(() => handler(leased.payload, job)), controller.signal);
      } catch (error) {
        failure = error;
      }
      clearInterval(timer);
      clearTimeout(overdue);
      if (interrupted === "lost") {
        this.log({ level: "warning", message: "job lost its lease", job_id: leased.job_id });
        return;
      }
      if (failure === null) {
        await this.end("/leases/complete", { lease: leased.lease, result: result ?? null }, leased);
        return;
      }
      await this.end("/leases/fail", failureBody(leased.lease, failure, interrupted === "cancelled"), leased);
    } finally {
      clearInterval(timer);
      clearTimeout(overdue);
      this.running.delete(leased.job_id);
    }
  }

  /**
   * Send a lease's end; a 409 (the lease no longer holds its job) is logged, not raised.
   * @param {string} path
   * @param {any} body
   * @param {Leased} leased
   */
  async end(path, body, leased) {
    for (let attempt = 1; ; attempt++) {
      try {
        const answer = await this.post(path, body);
        this.log({ level: "info", message: "job ended", job_id: leased.job_id, status: answer.status });
        return;
      } catch (error) {
        if (error instanceof ProtocolError && error.status < 500) {
          this.log({ level: "warning", message: "lease end refused", job_id: leased.job_id, error: String(error) });
          return;
        }
        if (attempt >= 5) {
          this.log({ level: "error", message: "lease end failed", job_id: leased.job_id, error: String(error) });
          return; // the lease runs out and the job is handed out again
        }
        await sleep(200 * 2 ** attempt);
      }
    }
  }
}

/**
 * The body of `POST /leases/fail` for `error`.
 * @param {string} lease
 * @param {unknown} error
 * @param {boolean} cancelled
 */
export function failureBody(lease, error, cancelled) {
  const err = error instanceof Error ? error : new Error(String(error));
  /** @type {Record<string, any>} */
  const body = {
    lease,
    error: { type: err.name || "Error", message: err.message.slice(0, 10_000), stack: err.stack?.slice(0, 20_000) ?? null },
    retryable: !(err instanceof PermanentError),
    cancelled,
  };
  if (err instanceof RetryError) body.retry_after_s = err.afterS;
  return body;
}

/**
 * `promise`, or a rejection with the signal's reason once it aborts (a handler that ignores its
 * signal is left behind: its lease end is sent without it).
 * @template T
 * @param {Promise<T>} promise
 * @param {AbortSignal} signal
 * @returns {Promise<T>}
 */
function abortable(promise, signal) {
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

/** @param {number} ms */
function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
