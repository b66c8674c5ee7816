"""Shared by the synth scripts the CDK virtualenv's Python runs for one small App with a Lambda worker.

Importing it puts this checkout's sqsjobs and construct first on ``sys.path`` (not whatever the CDK
virtualenv has installed); ``print_stack`` synthesizes the ``SqsJobs`` construct for the App, with a
Lambda worker on a stub handler and no sweeper, and prints its template as JSON on one line, which
``tests.infra.conftest.run_synth`` reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
for path in (str(REPO / "infra"), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)


def print_stack(
    outdir: Path,
    stack_name: str,
    app: Any,
    app_path: str,
    *,
    worker: Any = None,
    then: Any = None,
    **options: Any,
) -> None:
    """Synthesize ``SqsJobs`` for ``app`` into ``outdir``; ``worker``: ``LambdaWorker``'s options beyond the code.

    ``then(stack, jobs)``: what the test adds to the stack beside the construct (a producer's role).
    """
    import aws_cdk as cdk
    from aws_cdk import assertions
    from sqsjobs_cdk import LambdaWorker, SqsJobs

    code = outdir / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "handler.py").write_text("")
    stack = cdk.Stack(cdk.App(outdir=str(outdir / "cdk.out")), stack_name)
    lambda_worker = LambdaWorker(code_path=str(code), timeout_s=5, **(worker or {}))
    jobs = SqsJobs(
        stack, "Jobs", app=app, app_path=app_path, lambda_worker=lambda_worker, sweeper=None, **options
    )
    if then is not None:
        then(stack, jobs)
    print(json.dumps(assertions.Template.from_stack(stack).to_json()))
