"""Run by the CDK virtualenv's Python: the ``SqsJobs`` construct with the outbox lag alarm asked for.

``python tests/infra/outbox_synth.py OUTDIR`` synthesizes one stack and prints its template as JSON,
for test_outbox_alarm.py.
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
from sqsjobs_cdk import LambdaWorker, Monitoring, SqsJobs  # noqa: E402

from sqsjobs import App  # noqa: E402

app = App("outboxed")
app.job("orders.ship")(lambda payload, ctx: None)


def main(outdir: Path) -> None:
    code = outdir / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "handler.py").write_text("")
    cdk_app = cdk.App(outdir=str(outdir / "cdk.out"))
    stack = cdk.Stack(cdk_app, "Outboxed")
    SqsJobs(
        stack,
        "Jobs",
        app=app,
        app_path="tests.infra.outbox_synth:app",
        lambda_worker=LambdaWorker(code_path=str(code), timeout_s=5),
        sweeper=None,
        monitoring=Monitoring(outbox_max_lag_s=120),
    )
    print(json.dumps(assertions.Template.from_stack(stack).to_json()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
