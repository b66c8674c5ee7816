"""``python -m bench.import_cost``: what ``import sqsjobs`` (and defining an App and a job) costs, against a git revision.

A producer (a web app that only enqueues), the CLI's ``--help`` and the Lambda's init phase all
begin with ``import sqsjobs``. This measures that start in a fresh interpreter per run, for this
worktree's ``sqsjobs/`` and for the same folder at ``--against`` (``git archive`` into a temporary
folder, put first on ``sys.path``), alternating so a load change hits both alike:

- ``import_s``: ``import sqsjobs`` plus ``App(...)`` and one ``@app.job``, timed with ``perf_counter``
  inside the process (interpreter start-up excluded);
- ``modules``: how many modules that loaded, and whether boto3 / botocore were among them.

Bytecode is written on the first run and read after (``-B`` is not set): the figure is a warm
``import``, as on a machine with compiled packages. Medians of ``--runs`` runs.

Run: ``PYTHONPATH=. .venv/bin/python -m bench.import_cost --against f1ab0b7 [--runs 15] [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
began = time.perf_counter()
import sqsjobs
app = sqsjobs.App("bench")
@app.job("bench.noop")
def noop(ctx, n: int) -> None: ...
took = time.perf_counter() - began
assert sqsjobs.__file__.startswith(sys.argv[1]), sqsjobs.__file__
print(json.dumps({"import_s": took, "modules": len(sys.modules),
                  "boto3": "boto3" in sys.modules, "botocore": "botocore" in sys.modules}))
"""


def _checkout(revision: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", revision, "sqsjobs"],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def _run(root: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(root)], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)  # type: ignore[no-any-return]


def main() -> None:
    """Measure both trees alternately and print the medians as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", help="the git revision to compare with")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--out", type=Path, help="also write the report here (JSON)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this worktree": REPO, args.against: _checkout(args.against, Path(tmp))}
        for root in trees.values():  # one run each to write bytecode
            _run(root)
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
        for _ in range(args.runs):
            for name, root in trees.items():
                runs[name].append(_run(root))
    report = {
        name: {
            "import_s": round(statistics.median(r["import_s"] for r in results), 4),
            "modules": results[-1]["modules"],
            "boto3": results[-1]["boto3"],
            "botocore": results[-1]["botocore"],
        }
        for name, results in runs.items()
    }
    report["load_average_1m"] = round(os.getloadavg()[0], 1)  # type: ignore[assignment]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
