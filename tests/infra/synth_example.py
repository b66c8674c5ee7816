"""Run by the CDK virtualenv's Python (not pytest's): synthesize infra/app.py twice, in one process.

``python tests/infra/synth_example.py OUTDIR LAMBDA_ZIP`` writes ``OUTDIR/full`` (ECS worker,
sweeper and Lambda worker) and ``OUTDIR/local`` (what MiniStack's CloudFormation can deploy: no
VPC, ECS or autoscaling), plus ``OUTDIR/timings.json``. One process because starting the jsii
runtime is most of the cost: the second synth takes a fraction of the first.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def main(outdir: Path, lambda_zip: str) -> None:
    started = time.monotonic()
    spec = importlib.util.spec_from_file_location("sqsjobs_infra_example", REPO / "infra" / "app.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    imported = time.monotonic()
    example.build(str(outdir / "full"), lambda_zip=lambda_zip, local=False)
    full = time.monotonic()
    example.build(str(outdir / "local"), lambda_zip=lambda_zip, local=True)
    done = time.monotonic()
    timings = {"import_s": imported - started, "full_s": full - imported, "local_s": done - full}
    (outdir / "timings.json").write_text(json.dumps(timings))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
