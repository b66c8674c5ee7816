"""Run by the CDK virtualenv's Python: the ``SqsJobs`` construct against Lambda function timeouts.

``python tests/infra/lambda_timeout_synth.py OUTDIR`` builds one stack per case in one process
(starting the jsii runtime is most of the cost) and prints, as JSON, each case's outcome: the
``ConfigurationError`` the construct raised, or the Lambda worker's synthesized ``Timeout``.
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
from sqsjobs.errors import ConfigurationError  # noqa: E402

FUNCTION_TIMEOUT_S = 60


def explicit_app() -> App:
    """A type whose explicit ten-minute timeout a one-minute function can never start."""
    app = App("tlong", visibility_timeout_s=6 * FUNCTION_TIMEOUT_S)
    app.job("reports.build", timeout=600)(lambda payload, ctx: None)
    return app


def default_app() -> App:
    """A type without an explicit timeout: it runs in the time an invocation has left."""
    app = App("tplain", visibility_timeout_s=6 * FUNCTION_TIMEOUT_S)
    app.job("plain")(lambda payload, ctx: None)
    return app


def outcome(outdir: Path, name: str, app: App) -> dict[str, object]:
    code = outdir / "code"
    code.mkdir(exist_ok=True)
    (code / "handler.py").write_text("")
    cdk_app = cdk.App(outdir=str(outdir / name))
    stack = cdk.Stack(cdk_app, name)
    try:
        SqsJobs(
            stack,
            "Jobs",
            app=app,
            app_path="tests.infra.lambda_timeout_synth:app",
            lambda_worker=LambdaWorker(code_path=str(code), timeout_s=FUNCTION_TIMEOUT_S),
            sweeper=None,
        )
    except ConfigurationError as exc:
        return {"error": str(exc)}
    functions = assertions.Template.from_stack(stack).find_resources("AWS::Lambda::Function")
    return {"timeouts": sorted(f["Properties"]["Timeout"] for f in functions.values())}


def main(outdir: Path) -> None:
    cases = {"explicit": explicit_app(), "default": default_app()}
    print(json.dumps({name: outcome(outdir, name, app) for name, app in cases.items()}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
