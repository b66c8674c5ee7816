"""Run by the CDK virtualenv's Python: the ``SqsJobs`` construct for an App that encrypts payloads, with the API.

The App's key is an alias; one type names its own key by ARN. ``python tests/infra/encryption_synth.py
OUTDIR`` prints the stack's template as JSON, for test_encryption_template.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from lambda_synth import print_stack  # this folder's: it puts this checkout first on sys.path
from sqsjobs_cdk import HttpApi

from sqsjobs import App, PayloadVersion

OWN_KEY = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
app = App("sealed", encrypt="alias/pii")
app.job("orders.ship")(lambda payload, ctx: None)
app.job("cards.charge", version=PayloadVersion(1, encrypt=OWN_KEY))(lambda payload, ctx: None)


def with_producer(stack: cdk.Stack, jobs: object) -> None:
    """A producer service's role, granted enqueue (it seals what it enqueues)."""
    role = iam.Role(stack, "ProducerService", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    jobs.grant_enqueue(role)  # type: ignore[attr-defined]


if __name__ == "__main__":
    print_stack(
        Path(sys.argv[1]),
        "Sealed",
        app,
        "tests.infra.encryption_synth:app",
        api=HttpApi(),
        then=with_producer,
    )
