"""Run by the CDK virtualenv's Python (not pytest's): synthesize infra/app.py twice, and one more stack, in one process.

``python tests/infra/synth_example.py OUTDIR LAMBDA_ZIP`` writes ``OUTDIR/full`` (ECS worker,
sweeper and Lambda worker) and ``OUTDIR/local`` (what MiniStack's CloudFormation can deploy: no
VPC, ECS or autoscaling), ``OUTDIR/options`` (``options``: what the example app does not use),
plus ``OUTDIR/timings.json``. One process because starting the jsii runtime is most of the cost:
the later syntheses take a fraction of the first.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

from sqsjobs import App

REPO = Path(__file__).resolve().parents[2]
#: conftest.STACK: every variant's stack has the example's name, so the tests read them alike.
STACK = "SqsJobsExample"

#: The ``options`` stack's Apps: one names its payload bucket, one is given an existing bucket.
NAMED = App("named", payload_bucket="sqsjobs-named-payloads-example")
IMPORTED = App("imported")
EXISTING_BUCKET = "existing-payloads-example"
#: The events ``NAMED``'s rule turns into jobs, and the delay it asks for.
EVENT_SOURCE = "shop.orders"
EVENT_DETAIL_TYPE = "OrderPlaced"
RULE_DELAY_S = 30
#: ``NAMED``'s job events: those a topic and a webhook get, and the webhook.
NOTIFIED = ("JobDead", "BatchCompleted", "DeadJobsDigest")
WEBHOOK_URL = "https://hooks.example.com/sqsjobs"
#: Both run on a 5 s Lambda function: the queues' default 30 s visibility is 6 x that.
FUNCTION_TIMEOUT_S = 5
#: ``IMPORTED``'s mapping: a batching window and provisioned pollers (minimum, maximum).
BATCHING_WINDOW_S = 5
POLLERS = (2, 20)


@NAMED.job("named.check")
def named_check(payload: None, ctx: object) -> None: ...


@IMPORTED.job("imported.check")
def imported_check(payload: None, ctx: object) -> None: ...


def options(outdir: Path, lambda_zip: str) -> None:
    """``SqsJobs`` with an App that names its bucket, with an existing bucket, producers granted, and
    jobs enqueued by an EventBridge rule and an SNS topic."""
    import aws_cdk as cdk
    from aws_cdk import aws_events as events
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_s3 as s3
    from aws_cdk import aws_sns as sns
    from cdk_nag import AwsSolutionsChecks
    from sqsjobs_cdk import HttpApi, JobEvents, LambdaWorker, SqsJobs
    from sqsjobs_cdk.nag import acknowledge

    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, STACK)
    worker = LambdaWorker(code_path=lambda_zip, timeout_s=FUNCTION_TIMEOUT_S)
    module = "tests.infra.synth_example"
    named = SqsJobs(
        stack,
        "Named",
        app=NAMED,
        app_path=f"{module}:NAMED",
        lambda_worker=worker,
        api=HttpApi(max_body_bytes=65_536),
        job_events=JobEvents(notify=NOTIFIED, webhook_url=WEBHOOK_URL),
    )
    imported = SqsJobs(
        stack,
        "Imported",
        app=IMPORTED,
        app_path=f"{module}:IMPORTED",
        # The event source mapping's optional modes (test_capacity_options.py).
        lambda_worker=LambdaWorker(
            code_path=lambda_zip,
            timeout_s=FUNCTION_TIMEOUT_S,
            max_batching_window_s=BATCHING_WINDOW_S,
            provisioned_pollers=POLLERS,
            mapping_metrics=True,
        ),
        payload_bucket=s3.Bucket.from_bucket_name(stack, "ExistingBucket", EXISTING_BUCKET),
    )
    # Jobs from AWS services (docs/enqueue-from-aws.md): a rule made from a pattern, and a topic.
    named.enqueue_from_rule(
        events.EventPattern(source=[EVENT_SOURCE], detail_type=[EVENT_DETAIL_TYPE]),
        job_type="named.check",
        tenant_path="$.detail.tenant",
        delay_s=RULE_DELAY_S,
    )
    topic = sns.Topic(stack, "OrdersTopic", enforce_ssl=True)
    acknowledge(
        topic,
        "AwsSolutions-SNS2",
        "A test topic of job messages; a production topic takes the owner's own CMK, which SNS can "
        "use to deliver to the SSE-SQS job queue",
    )
    named.enqueue_from_topic(topic, job_types="named.check")
    for jobs in (named, imported):
        producer = iam.Role(
            stack,
            f"{jobs.node.id}Producer",
            description=f"a service that enqueues {jobs.app.name} jobs",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
        )
        jobs.grant_enqueue(producer)
    caller = iam.Role(
        stack,
        "ApiCaller",
        description="a service that calls the HTTP API",
        assumed_by=iam.AccountRootPrincipal(),
    )
    named.grant_invoke_api(caller)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()


#: The ``traced`` stack's App, and the ADOT layer it names (any ARN of that shape synthesizes).
TRACED = App("traced")
ADOT_LAYER = "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-python-amd64-ver-1-32-0:2"


@TRACED.job("traced.check")
def traced_check(payload: None, ctx: object) -> None: ...


def traced(outdir: Path, lambda_zip: str) -> None:
    """``SqsJobs(tracing=Tracing(...))`` with every traced part: ECS worker, Lambda worker, HTTP API."""
    import aws_cdk as cdk
    from aws_cdk import aws_ecs as ecs
    from cdk_nag import AwsSolutionsChecks
    from sqsjobs_cdk import FargateWorker, HttpApi, LambdaWorker, SqsJobs, Tracing

    app = cdk.App(outdir=str(outdir))
    stack = cdk.Stack(app, STACK)
    SqsJobs(
        stack,
        "Traced",
        app=TRACED,
        app_path="tests.infra.synth_example:TRACED",
        fargate=FargateWorker(image=ecs.ContainerImage.from_registry("example/worker:1"), queues=["default"]),
        lambda_worker=LambdaWorker(code_path=lambda_zip, timeout_s=FUNCTION_TIMEOUT_S),
        api=HttpApi(),
        tracing=Tracing(lambda_layer_arn=ADOT_LAYER, ecs_entry_point=("opentelemetry-instrument", "sqsjobs")),
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()


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
    local = time.monotonic()
    options(outdir / "options", lambda_zip)
    done = time.monotonic()
    traced(outdir / "traced", lambda_zip)
    timings = {
        "import_s": imported - started,
        "full_s": full - imported,
        "local_s": local - full,
        "options_s": done - local,
        "traced_s": time.monotonic() - done,
    }
    (outdir / "timings.json").write_text(json.dumps(timings))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
