"""An encrypting App's grants in the synthesized template: its keys' data-key actions, on its keys only.

``tests/infra/encryption_synth.py``: the App's key is ``alias/pii``, ``cards.charge`` names its own
key by ARN; the Lambda worker, the API and a producer granted enqueue must each seal or open with
both, and nothing else of KMS.
"""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import run_synth

pytestmark = pytest.mark.slow

OWN_KEY = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return run_synth("encryption_synth.py", str(tmp_path_factory.mktemp("encryption-synth")))


def kms_statements(template, role_id: str) -> list[dict]:
    return [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and any(x.get("Ref") == role_id for x in r["Properties"]["Roles"])
        for s in r["Properties"]["PolicyDocument"]["Statement"]
        if any(
            str(a).startswith("kms:")
            for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])
        )
    ]


def roles(template) -> dict[str, str]:
    """The worker's, the API's and the producer's role ids."""
    functions = {
        f["Properties"]["Handler"]: f
        for f in template["Resources"].values()
        if f["Type"] == "AWS::Lambda::Function"
    }
    worker = next(
        f for h, f in functions.items() if "lambda_sqs" in h or h.endswith("handler.handler") or "worker" in h
    )
    api = next(f for h, f in functions.items() if "api" in h)
    producer = next(
        k
        for k in template["Resources"]
        if k.startswith("ProducerService") and template["Resources"][k]["Type"] == "AWS::IAM::Role"
    )
    return {
        "worker": worker["Properties"]["Role"]["Fn::GetAtt"][0],
        "api": api["Properties"]["Role"]["Fn::GetAtt"][0],
        "producer": producer,
    }


def test_every_sealing_or_opening_role_may_use_the_apps_keys_and_no_other(template):
    for name, role in roles(template).items():
        statements = kms_statements(template, role)
        assert {a for s in statements for a in s["Action"]} == {"kms:GenerateDataKey", "kms:Decrypt"}, name
        by_arn = [s for s in statements if s["Resource"] == [OWN_KEY] or s["Resource"] == OWN_KEY]
        assert by_arn, f"{name}: the type's own key, by ARN"
        [by_alias] = [s for s in statements if "Condition" in s]
        assert by_alias["Condition"] == {"ForAnyValue:StringEquals": {"kms:ResourceAliases": ["alias/pii"]}}
        assert json.dumps(by_alias["Resource"]).endswith(':key/*"]') or ":key/*" in json.dumps(
            by_alias["Resource"]
        )
