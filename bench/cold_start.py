"""``python -m bench.cold_start``: a Lambda cold start from the ``sqsjobs package lambda`` zip, with and without bytecode.

Both zips are built from the same dependency cache for this machine's Python (the zip's bytecode is
compiled by the function's own Python version, so the measuring interpreter must be that version),
unpacked into a read-only folder as Lambda's ``/var/task`` is, and each run is a fresh interpreter
with only that folder and the standard library on ``sys.path`` (``-I -S``), writing no bytecode
(``-B``), and the function's environment (``AWS_LAMBDA_FUNCTION_NAME``, ``_HANDLER``, ``SQSJOBS_APP``).
Measured in that process, with ``time.perf_counter``:

- ``init_s``: importing the handler module, which loads the App (Lambda's init phase);
- ``first_call_s``: the first invocation (an empty batch) plus what the first record's claim does
  before its first request: open the DynamoDB and SQS clients (aiobotocore's imports and models).

No request is sent (the endpoint is a closed port on 127.0.0.1). Each figure is the median of
``--runs`` runs, taken alternately from the two zips so a load change hits both alike.

Run: ``PYTHONPATH=. .venv/bin/python -m bench.cold_start [--runs 7] [--out bench/results/cold_start.json]``
(``make lambda-e2e-deps`` fills the dependency cache it builds from, for this machine's Python).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from sqsjobs.deploy.packaging import HANDLER, LambdaBuild, build_lambda_zip

APP = "examples.shop:app"
REPO = Path(__file__).resolve().parent.parent

#: Runs inside the unpacked zip, as the Lambda runtime would: import the handler, then invoke it.
PROBE = """
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[1])
began = time.perf_counter()
import sqsjobs.runtime.lambda_handlers as entry
initialised = time.perf_counter()

class Context:
    aws_request_id = "bench"
    function_name = "bench"
    def get_remaining_time_in_millis(self):
        return 60_000

entry.sqs_worker({"Records": []}, Context())

async def clients():
    from aiobotocore.session import get_session
    session = get_session()
    async with session.create_client("dynamodb", region_name="us-east-1"), session.create_client(
        "sqs", region_name="us-east-1"
    ):
        pass

asyncio.run(clients())
done = time.perf_counter()
print(json.dumps({"init_s": initialised - began, "first_call_s": done - initialised}))
"""


def unpack(zip_path: Path, into: Path) -> Path:
    """Unzip read-only, as Lambda's /var/task is: Python cannot write bytecode there either."""
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(into)
    for root, dirs, files in os.walk(into):
        for name in files:
            os.chmod(Path(root) / name, 0o444)
        for name in dirs:
            os.chmod(Path(root) / name, 0o555)
    return into


def measure(task_root: Path) -> dict[str, float]:
    """One cold start in a fresh interpreter: its init and first-call seconds."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_LAMBDA_FUNCTION_NAME": "bench",
        "_HANDLER": HANDLER,
        "SQSJOBS_APP": APP,
        "SQSJOBS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "POWERTOOLS_METRICS_DISABLED": "true",
    }
    done = subprocess.run(
        # -B: write no bytecode. The folder is read-only, but root writes anyway, and -I ignores
        # PYTHONDONTWRITEBYTECODE: without -B the first run from sources would leave pycs behind.
        [sys.executable, "-I", "-S", "-B", "-c", PROBE, str(task_root)],
        env=env,
        cwd=task_root,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    """Build both zips, measure them alternately, print (and write) the medians and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    arch = {"aarch64": "arm64"}.get(platform.machine(), platform.machine())
    samples: dict[str, list[dict[str, float]]] = {"bytecode": [], "sources": []}
    with tempfile.TemporaryDirectory(prefix="sqsjobs-cold-") as scratch:
        roots = {}
        for kind in samples:
            report = build_lambda_zip(
                LambdaBuild(
                    app=APP,
                    output=Path(scratch) / f"{kind}.zip",
                    python_version=version,
                    arch=arch,
                    project_dir=REPO,
                    offline=True,
                    compress_level=1,
                    bytecode=kind == "bytecode",
                )
            )
            roots[kind] = unpack(report.path, Path(scratch) / kind)
        for _ in range(args.runs):
            for kind, root in roots.items():
                samples[kind].append(measure(root))
        for root in roots.values():  # let the scratch folder go
            for dirpath, dirs, _ in os.walk(root):
                os.chmod(dirpath, 0o755)
                for name in dirs:
                    os.chmod(Path(dirpath) / name, 0o755)
    result: dict[str, object] = {"python": version, "runs": args.runs, "load_avg": os.getloadavg()}
    for kind, runs in samples.items():
        result[kind] = {
            key: round(statistics.median(r[key] for r in runs), 3) for key in ("init_s", "first_call_s")
        } | {"total_s": round(statistics.median(r["init_s"] + r["first_call_s"] for r in runs), 3)}
    with_pyc, without = result["bytecode"], result["sources"]
    assert isinstance(with_pyc, dict) and isinstance(without, dict)
    result["ratio"] = round(without["total_s"] / with_pyc["total_s"], 2)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
