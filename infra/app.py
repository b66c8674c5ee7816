"""Example CDK app: deploys ``examples/shop.py``'s App (ECS worker + sweeper; a Lambda worker when built).

Synthesize offline — no CDK CLI, no Docker, no credentials (node must be on PATH)::

    JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20 .venv-cdk/bin/python infra/app.py

The template lands in ``cdk.out/`` (or ``$CDK_OUTDIR``); deploy it with ``cdk deploy --app cdk.out``
(CDK CLI 2.x) or any CloudFormation tool after uploading the assets. Choices, as CDK context
(``CDK_CONTEXT_JSON``) or ``SQSJOBS_INFRA_*`` environment variables:

- ``sqsjobs:app`` / ``SQSJOBS_INFRA_APP``: the App's dotted path (default ``examples.shop:app``);
- ``sqsjobs:lambda_zip`` / ``SQSJOBS_INFRA_LAMBDA_ZIP``: the Lambda deployment package
  (``sqsjobs package lambda``); without it there is no Lambda worker and no HTTP API;
- ``sqsjobs:local`` / ``SQSJOBS_INFRA_LOCAL``: ``true`` leaves out the VPC, ECS and autoscaling,
  which emulators cannot run (MiniStack deploys the rest through CloudFormation).

cdk-nag's AwsSolutions pack checks the app during synthesis: any finding not acknowledged with a
reason in the construct fails the synth (``validation-report.json`` says which).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# `python infra/app.py` from a checkout, from anywhere: the example App (examples/) and this tree's
# construct must import. A CDK app of your own installs the construct instead (`pip install
# sqsjobs-cdk`, or `pip install ./infra`) and needs no such lines.
for path in (str(REPO_ROOT / "infra"), str(REPO_ROOT)):
    if path not in sys.path:
        sys.path.insert(0, path)

import aws_cdk as cdk  # noqa: E402
from aws_cdk import aws_ecr_assets as ecr_assets  # noqa: E402
from aws_cdk import aws_ecs as ecs  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402
from sqsjobs_cdk import FargateWorker, HttpApi, LambdaWorker, SqsJobs, Sweeper  # noqa: E402

DEFAULT_APP = "examples.shop:app"


def _choice(context: dict[str, str], key: str, env: str, default: str = "") -> str:
    return str(context.get(f"sqsjobs:{key}") or os.environ.get(env) or default)


def build(
    outdir: str | None = None,
    *,
    app_path: str | None = None,
    lambda_zip: str | None = None,
    local: bool | None = None,
    stack_name: str = "SqsJobsExample",
) -> cdk.cx_api.CloudAssembly:
    """Synthesize the example stack; arguments win over context, which wins over the environment."""
    app = cdk.App(outdir=outdir or os.environ.get("CDK_OUTDIR") or str(REPO_ROOT / "cdk.out"))
    context = {k: str(v) for k, v in (app.node.try_get_context("sqsjobs") or {}).items()}
    context |= {
        k: str(app.node.try_get_context(k)) for k in ("sqsjobs:app", "sqsjobs:lambda_zip", "sqsjobs:local")
    }
    context = {k: v for k, v in context.items() if v not in ("", "None")}
    app_path = app_path or _choice(context, "app", "SQSJOBS_INFRA_APP", DEFAULT_APP)
    lambda_zip = lambda_zip or _choice(context, "lambda_zip", "SQSJOBS_INFRA_LAMBDA_ZIP") or None
    if local is None:
        local = _choice(context, "local", "SQSJOBS_INFRA_LOCAL").lower() in ("1", "true", "yes")

    from sqsjobs import App
    from sqsjobs.deploy.rules import LAMBDA_VISIBILITY_FACTOR, lambda_timeout_s

    jobs = App.from_path(app_path)
    if lambda_zip:
        # The Lambda worker consumes every queue, with the shortest timeout that starts every job
        # type; the queues must then hide a batch for 6x that.
        timeout = lambda_timeout_s(jobs.registry, jobs.registry.worker_queues())
        visibility = max(jobs.settings.visibility_timeout_s, LAMBDA_VISIBILITY_FACTOR * timeout)
        jobs.configure(visibility_timeout_s=visibility)

    stack = cdk.Stack(
        app,
        stack_name,
        description=f"sqsjobs: jobs table, queues, workers and alarms for App {jobs.name!r}",
    )
    fargate = None
    if not local:
        fargate = FargateWorker(
            image=ecs.ContainerImage.from_asset(
                str(REPO_ROOT), file="Dockerfile", platform=ecr_assets.Platform.LINUX_AMD64
            ),
            # With a Lambda worker too, both consume every queue: the claim decides who runs a job.
            queues=jobs.registry.worker_queues() if lambda_zip else None,
            # One task on regular Fargate, the rest on Spot: a reclaim's two minutes fit the drain.
            spot=True,
            on_demand_base=1,
        )
    SqsJobs(
        stack,
        "Jobs",
        app=jobs,
        app_path=app_path,
        fargate=fargate,
        sweeper=Sweeper(),
        lambda_worker=LambdaWorker(code_path=lambda_zip) if lambda_zip else None,
        # The HTTP API from the same zip; not locally, where emulators lack API Gateway v2.
        api=HttpApi() if lambda_zip and not local else None,
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app.synth()


if __name__ == "__main__":
    from sqsjobs.errors import ConfigurationError

    try:
        assembly = build()
    except ConfigurationError as exc:
        sys.exit(f"error: {exc}")
    print(assembly.directory)
