"""Run by the CDK virtualenv's Python: the ``SqsJobs`` construct for an App with priority levels and serialize keys.

``python tests/infra/routing_synth.py OUTDIR MAX_CONCURRENCY`` synthesizes one stack and prints, as JSON, its queues,
event source mappings and the worker's environment and queue grants, for test_routing_template.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# This checkout's sqsjobs and construct, not whatever the CDK virtualenv has installed.
for path in (str(REPO / "infra"), str(REPO)):
    if path not in sys.path:
        sys.path.insert(0, path)

import aws_cdk as cdk  # noqa: E402
from aws_cdk import assertions  # noqa: E402
from sqsjobs_cdk import LambdaWorker, SqsJobs  # noqa: E402

from sqsjobs import App  # noqa: E402

app = App("routed", priority_queues={"reports"}, serialized_queues={"devices"})
app.job("reports.build", queue="reports")(lambda payload, ctx: None)
app.job("device.command", queue="devices")(lambda payload, ctx: None)
app.job("plain.job")(lambda payload, ctx: None)


def main(outdir: Path, max_concurrency: int) -> None:
    code = outdir / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "handler.py").write_text("")
    cdk_app = cdk.App(outdir=str(outdir / "cdk.out"))
    stack = cdk.Stack(cdk_app, "Routed")
    SqsJobs(
        stack,
        "Jobs",
        app=app,
        app_path="tests.infra.routing_synth:app",
        lambda_worker=LambdaWorker(code_path=str(code), timeout_s=5, max_concurrency=max_concurrency),
        sweeper=None,
    )
    template = assertions.Template.from_stack(stack).to_json()
    print(json.dumps(template))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
