"""``make bench``: each framework drains the same backlog, answers the same idle jobs, on one emulator.

Per framework and run (``--runs``) and per proxy latency (``--latency-ms``), in this order:

1. start the worker (its own process group) and wait for its first ReceiveMessage at the proxy;
   pause the whole group (SIGSTOP) so it cannot start on the backlog early;
2. **bulk enqueue** N jobs through the framework's producer (requests and wall time);
3. resume the worker and **drain** the backlog: worker CPU (its process group only, from /proc),
   AWS requests by action, jobs/s from resume to the last handler start;
4. **idle latency**: K jobs one at a time into the idle worker, enqueue→handler-start.

Requests are counted by the proxy (``bench/proxy.py``) every process talks to; the harness itself
provisions and inspects queues directly on the emulator, uncounted. Output: JSON + markdown (and
a PNG when the bench virtualenv has matplotlib) under ``bench/results/``; see ``docs/bench.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3

from bench import procs, report
from bench.frameworks import REPO, Framework, select
from bench.markers import Markers
from bench.proxy import AwsProxy

if TYPE_CHECKING:
    from collections.abc import Iterator

READY_TIMEOUT_S = 60.0
#: After the last handler start, how long the queue may take to be emptied (acks are batched).
ACK_TIMEOUT_S = 30.0
#: Pause after the queue is empty, so trailing deletes are counted.
SETTLE_S = 0.5
#: Between two idle jobs the worker finishes, acks and goes back to its long poll. The gap is
#: jittered over one MiniStack poll tick: MiniStack answers a waiting ReceiveMessage by re-checking
#: the queue every 100 ms (``ministack/services/sqs.py``), so a fixed gap would lock every
#: framework to one phase of that tick and decide its latency by luck (AWS wakes a poll at once).
IDLE_GAP_S = 0.3
IDLE_JITTER_S = 0.1


def idle_gaps(k: int, seed: int) -> list[float]:
    """The pauses before ``k`` idle jobs: one in each of ``k`` equal slices of the jitter, shuffled.

    Independent uniform draws cover the tick's phases unevenly: the median of 20 wake-ups spread
    over a 100 ms tick has a standard error of about 11 ms (6 ms over three runs), for each
    framework on its own, as much as the differences being measured. One draw per slice covers
    the phases evenly, so every framework samples the tick the same way and the medians compare.
    """
    rng = random.Random(seed)
    gaps = [IDLE_GAP_S + (i + rng.random()) / k * IDLE_JITTER_S for i in range(k)]
    rng.shuffle(gaps)
    return gaps


CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class Producer:
    """A framework's ``bench.producer`` process, driven over stdin/stdout."""

    def __init__(self, fw: Framework, env: dict[str, str], log: Path) -> None:
        self._log = open(log, "ab")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            fw.producer_argv(),
            env=env,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            start_new_session=True,
        )
        self.ask_ready()

    def ask_ready(self) -> None:
        """Wait for the producer's imports and clients (not part of any measurement)."""
        line = self._read()
        if not line.get("ready"):
            raise RuntimeError(f"producer not ready: {line}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"producer exited with {self.proc.poll()}; see its log")
        return dict(json.loads(line))

    def command(self, text: str) -> dict[str, Any]:
        """Send one command line and return the JSON answer."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        """Ask the producer to quit; kill it if it does not."""
        if self.proc.poll() is None:
            with contextlib.suppress(RuntimeError, BrokenPipeError, ValueError):
                self.command("quit")
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


class Bench:
    """The emulator, the proxy, the marker socket and the queues, for a whole session."""

    def __init__(self, stack: ExitStack, emulator: str, workdir: Path, *, write_units: bool = True) -> None:
        self.workdir = workdir
        os.environ.update(CREDENTIALS)
        if emulator == "ministack":
            from tests.emulators import MiniStack

            server: Any = MiniStack()
        else:
            from sqsjobs.local.emulator import EmbeddedMoto

            server = EmbeddedMoto()
        self.emulator = emulator
        self.upstream = server.start()
        #: The emulator's process group, to report its CPU per job (None when it runs in-process).
        self.emulator_pgid: int | None = getattr(server, "pid", None)
        stack.callback(server.stop)
        self.proxy = AwsProxy(self.upstream)
        self.proxy_url = self.proxy.start()
        stack.callback(self.proxy.stop)
        self.markers = Markers()
        stack.callback(self.markers.close)
        self.sqs = boto3.client("sqs", endpoint_url=self.upstream, region_name="us-east-1")
        self.write_units = self._write_units() if write_units else {}

    def make_queue(self, fw: Framework, tag: str) -> str:
        """Create the run's queue directly on the emulator (uncounted); returns its URL."""
        if fw.kind == "sqsjobs":
            from bench.apps.sqsjobs_app import app

            app.configure(endpoint_url=self.upstream, **_settings(fw.queue_env(tag, "")))
            try:
                return str(app.provision().queue_urls["default"])
            finally:
                app.close()
        attrs = {"VisibilityTimeout": "30"}
        return str(self.sqs.create_queue(QueueName=fw.queue_name(tag), Attributes=attrs)["QueueUrl"])

    def _write_units(self) -> dict[str, dict[str, float]]:
        """Write units of enqueue, claim and complete for a 1 KB payload, from MiniStack's sizes."""
        from bench.write_units import measure
        from tests.emulators import MiniStack

        if self.emulator == "ministack":
            units = measure(self.upstream, 1024)
        else:  # moto's ConsumedCapacity is not size-based: ask a short-lived MiniStack instead
            with MiniStack() as sizer:
                units = measure(sizer.endpoint_url, 1024)
        return {step: {"table": t, "indexes": i} for step, (t, i) in units.items()}

    def env(self, fw: Framework, tag: str, queue_url: str) -> dict[str, str]:
        """The worker's and producer's environment: proxy endpoint, marker address, the run's queue."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_ENDPOINT_URL", "SQSJOBS_", "BENCH_")) or k == "BENCH_FINISH_LINGER_S"
        }
        env.update(CREDENTIALS)
        env.update(
            PYTHONPATH=str(REPO),
            PYTHONUNBUFFERED="1",
            BENCH_ENDPOINT=self.proxy_url,
            BENCH_MARK_ADDR=self.markers.address,
            SQSJOBS_ENDPOINT_URL=self.proxy_url,
        )
        env.update(fw.queue_env(tag, queue_url))
        return env

    def emulator_cpu_s(self) -> float:
        """CPU seconds the emulator has used so far (0 when it runs in this process)."""
        return procs.group_cpu_s(self.emulator_pgid) if self.emulator_pgid else 0.0

    def depth(self, queue_url: str) -> int:
        """Visible + in-flight messages, asked of the emulator directly (not counted)."""
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def wait_receive(self, *workers: tuple[subprocess.Popen[bytes], Path]) -> None:
        """Wait for one ReceiveMessage per ``(worker, log)`` at the proxy: all started and polling.

        On an empty queue each worker holds one 20 s long poll, so N polls counted since the
        proxy's counts were reset mean N workers polling (the caller resets them before starting).
        """
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proxy.counts[("sqs", "ReceiveMessage")] >= len(workers):
                return
            if any(proc.poll() is not None for proc, _ in workers):
                break
            time.sleep(0.02)
        proc, log = next(((p, lg) for p, lg in workers if p.poll() is not None), workers[-1])
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"worker never polled its queue (exit {proc.poll()}):\n{tail}")


def drain(
    bench: Bench, workers: list[subprocess.Popen[bytes]], queue_url: str, seqs: range, what: str
) -> dict[str, Any]:
    """Resume the paused worker groups and run the backlog ``seqs`` to an empty queue.

    Returns the wall time from resume to the last handler start, the CPU the worker groups
    (summed), the emulator, this process (the proxy's thread, the marker socket, the depth polls)
    and the whole machine used until the queue was empty and the trailing acks settled, the
    requests the proxy counted, and what was left in the queue. ``what`` names the run in errors.
    """
    time.sleep(0.05)
    bench.proxy.reset_counts()
    cpu0 = sum(procs.group_cpu_s(w.pid) for w in workers)
    emu0 = bench.emulator_cpu_s()
    own0 = time.process_time()
    all0 = procs.machine_cpu_s()
    resumed = time.monotonic()
    for worker in workers:
        procs.signal_group(worker, signal.SIGCONT)
    if not bench.markers.wait(seqs, timeout_s=max(120.0, len(seqs) * 0.5)):
        raise RuntimeError(f"{what}: only {bench.markers.seen(seqs)}/{len(seqs)} jobs started")
    last = max(bench.markers.starts[s].received_mono for s in seqs)
    deadline = time.monotonic() + ACK_TIMEOUT_S
    while bench.depth(queue_url) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(SETTLE_S)
    ended = time.monotonic()
    return {
        "wall_s": last - resumed,
        "worker_cpu_s": sum(procs.group_cpu_s(w.pid) for w in workers) - cpu0,
        "emulator_cpu_s": bench.emulator_cpu_s() - emu0,
        "harness_cpu_s": time.process_time() - own0,
        # Everything the machine did in the same window, the above included, and the window.
        "machine_cpu_s": procs.machine_cpu_s() - all0,
        "cpu_window_s": ended - resumed,
        "requests": _counts(bench.proxy),
        "write_units": _write_units(bench.proxy),
        "left_in_queue": bench.depth(queue_url),
    }


def _settings(env: dict[str, str]) -> dict[str, str]:
    """``SQSJOBS_QUEUE_PREFIX``-style variables as App settings."""
    names = {"SQSJOBS_QUEUE_PREFIX": "queue_prefix", "SQSJOBS_TABLE": "table_name"}
    return {names[k]: v for k, v in env.items() if k in names}


def _counts(proxy: AwsProxy) -> dict[str, int]:
    return dict(proxy.snapshot()["requests"])


def _write_units(proxy: AwsProxy) -> dict[str, float]:
    return dict(proxy.snapshot()["write_units"])


@contextlib.contextmanager
def session(emulator: str, keep_logs: str | None, prefix: str) -> Iterator[Bench]:
    """A :class:`Bench` for a whole command; logs go to ``keep_logs``, else to a temporary folder."""
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        workdir = Path(keep_logs or tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        yield Bench(stack, emulator, workdir)


def machine(started: float, load_before: tuple[float, float, float]) -> dict[str, Any]:
    """When and on what the figures were taken: every figure depends on how busy the cores were."""
    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(time.time() - started, 1),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


@dataclasses.dataclass
class Launched:
    """One framework's worker and producer on a fresh queue, as a run starts them."""

    queue_url: str
    worker: subprocess.Popen[bytes]
    worker_log: Path
    producer: Producer


def launch(bench: Bench, fw: Framework, *, latency_ms: float, tag: str) -> Launched:
    """Set the proxy's latency, make the run's queue, start the producer, then the worker.

    The proxy's counts are reset before the worker starts, so ``wait_receive`` sees its first poll.
    """
    bench.proxy.latency_s = latency_ms / 1000.0
    queue_url = bench.make_queue(fw, tag)
    env = bench.env(fw, tag, queue_url)
    name = f"{fw.label.replace(' ', '-')}-{latency_ms:g}ms-{tag}"
    worker_log = bench.workdir / f"{name}-worker.log"
    producer = Producer(fw, env, bench.workdir / f"{name}-producer.log")
    bench.proxy.reset_counts()
    worker = procs.start(fw.worker_argv(), env=env, cwd=REPO, log=worker_log)
    return Launched(queue_url, worker, worker_log, producer)


def run_once(bench: Bench, fw: Framework, *, latency_ms: float, n: int, k: int, seq0: int) -> dict[str, Any]:
    """One framework, one latency, one run: bulk enqueue, drain, idle latency."""
    run = launch(bench, fw, latency_ms=latency_ms, tag=f"r{seq0}")
    queue_url, worker, worker_log, producer = run.queue_url, run.worker, run.worker_log, run.producer
    try:
        bench.wait_receive((worker, worker_log))
        procs.signal_group(worker, signal.SIGSTOP)
        startup_counts = _counts(bench.proxy)

        # (3) bulk enqueue, the worker paused
        bench.proxy.reset_counts()
        bulk = producer.command(f"bulk {n} {seq0}")
        enqueue_counts, enqueue_units = _counts(bench.proxy), _write_units(bench.proxy)

        # (1) drain the backlog
        drained = drain(bench, [worker], queue_url, range(seq0, seq0 + n), f"{fw.label} (see {worker_log})")

        # (2) idle latency: one job at a time
        bench.proxy.reset_counts()
        cpu2 = procs.group_cpu_s(worker.pid)
        calls, call_cpus, latencies = [], [], []
        idle0 = seq0 + n
        for i, gap in enumerate(idle_gaps(k, seed=seq0)):
            time.sleep(gap)
            answer = producer.command(f"one {idle0 + i}")
            calls.append(answer["call_s"])
            call_cpus.append(answer.get("cpu_s", float("nan")))
            if not bench.markers.wait(range(idle0 + i, idle0 + i + 1), timeout_s=30.0):
                raise RuntimeError(f"{fw.label}: idle job {i} never started; see {worker_log}")
            start = bench.markers.starts[idle0 + i]
            latencies.append(start.started_at - start.enqueued_at)
        time.sleep(SETTLE_S)
        idle_counts = _counts(bench.proxy)
        cpu3 = procs.group_cpu_s(worker.pid)
    finally:
        procs.stop(worker)
        producer.close()
    return {
        "framework": fw.label,
        "kind": fw.kind,
        "concurrency": fw.concurrency,
        "latency_ms": latency_ms,
        "n": n,
        "k": k,
        "bulk": {
            "wall_s": bulk["wall_s"],
            "producer_cpu_s": bulk["cpu_s"],
            "requests": enqueue_counts,
            "write_units": enqueue_units,
        },
        "drain": drained,
        "idle": {
            "latency_s": latencies,
            "enqueue_call_s": calls,
            "enqueue_call_cpu_s": call_cpus,
            "worker_cpu_s": cpu3 - cpu2,
            "requests": idle_counts,
        },
        "startup_requests": startup_counts,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and write JSON, markdown and (with the bench virtualenv) a PNG."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frameworks", default="all", help="all, or a comma list of labels/kinds")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--n", type=int, default=400, help="backlog size (drain and bulk enqueue)")
    parser.add_argument("--k", type=int, default=20, help="idle jobs for the latency figure")
    parser.add_argument("--latency-ms", default="0,10", help="per-request latency added by the proxy")
    parser.add_argument("--emulator", choices=("ministack", "moto"), default="ministack")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "bench"), help="output path stem")
    parser.add_argument("--plot", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--keep-logs", metavar="DIR", help="keep worker/producer logs in DIR")
    parser.add_argument("--smoke", action="store_true", help="tiny run: --runs 1 --n 30 --k 3 --latency-ms 0")
    args = parser.parse_args(argv)
    if args.smoke:
        args.runs, args.n, args.k, args.latency_ms = 1, 30, 3, "0"

    frameworks = select(args.frameworks)
    latencies = [float(x) for x in args.latency_ms.split(",") if x.strip()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    load_before = os.getloadavg()
    runs: list[dict[str, Any]] = []
    with session(args.emulator, args.keep_logs, "sqsjobs-bench-") as bench:
        seq = 0
        for run in range(args.runs):
            for latency in latencies:
                # Rotate the order each run so slow drift of the machine does not favour one framework.
                order = frameworks[run % len(frameworks) :] + frameworks[: run % len(frameworks)]
                for fw in order:
                    t = time.monotonic()
                    result = run_once(bench, fw, latency_ms=latency, n=args.n, k=args.k, seq0=seq)
                    result["run"] = run
                    runs.append(result)
                    seq += args.n + args.k
                    print(report.one_line(result, time.monotonic() - t), flush=True)
        meta = {
            **machine(started, load_before),
            "emulator": args.emulator,
            "n": args.n,
            "k": args.k,
            "runs": args.runs,
            "latency_ms": latencies,
            "frameworks": [f.label for f in frameworks],
            "versions": versions(frameworks),
            "write_units_1kb": bench.write_units,
            "prices": report.PRICES,
        }
        summary = report.summarise(runs, bench.write_units, frameworks)
    document = {"meta": meta, "summary": summary, "runs": runs}
    json_path = out.with_suffix(".json")
    json_path.write_text(json.dumps(document, indent=1) + "\n")
    md_path = out.with_suffix(".md")
    md_path.write_text(report.markdown(document))
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
    if args.plot:
        _plot(json_path, out.with_suffix(".png"))
    return 0


def versions(frameworks: list[Framework]) -> dict[str, str]:
    """Package versions of every interpreter used, from their metadata."""
    code = (
        "import importlib.metadata as m, json\n"
        "out = {}\n"
        "for p in ('sqsjobs', 'celery', 'kombu', 'dramatiq', 'dramatiq-sqs', 'boto3', 'botocore', 'aiobotocore', 'pycurl'):\n"
        "    try: out[p] = m.version(p)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))\n"
    )
    versions: dict[str, str] = {}
    for python in sorted({f.python for f in frameworks}):
        found = json.loads(
            subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout
        )
        tag = "peers" if "venv-bench" in python else "sqsjobs"
        # The peers' interpreter also sees this checkout's sqsjobs (PYTHONPATH); it does not use it.
        versions.update(
            {f"{name} ({tag})": v for name, v in found.items() if (name, tag) != ("sqsjobs", "peers")}
        )
    return versions


def _plot(json_path: Path, png_path: Path) -> None:
    from bench.frameworks import PEER_VENV

    python = PEER_VENV / "bin" / "python"
    if not python.exists():
        print(f"no plot: {python} is missing (make bench-venv)")
        return
    subprocess.run(
        [str(python), "-m", "bench.plot", str(json_path), str(png_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    print(f"wrote {png_path}")


if __name__ == "__main__":
    sys.exit(main())
