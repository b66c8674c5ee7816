"""``SqsJobs(tracing=Tracing(...))``: what the synthesized template gives each traced process (synth_example.traced)."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from tests.infra.conftest import CDK_VENV, Assembly
from tests.infra.synth_example import ADOT_LAYER
from tests.infra.test_template import acknowledgements

XRAY = {"xray:PutTelemetryRecords", "xray:PutTraceSegments"}


@pytest.fixture(scope="session")
def traced(synth) -> Assembly:
    return Assembly(synth.full.directory.parent / "traced")


def role_statements(asm: Assembly, role_id: str) -> list[dict]:
    return [
        s
        for p in asm.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def test_every_function_has_active_tracing_the_adot_layer_and_only_the_two_x_ray_actions_on_star(traced):
    functions = traced.resources("AWS::Lambda::Function")
    ours = {
        k: v["Properties"]
        for k, v in functions.items()
        if v["Properties"].get("Handler", "").startswith("sqsjobs")
    }
    assert len(ours) == 2  # the worker and the HTTP API (the sweeper is an ECS task here)
    for props in ours.values():
        assert props["TracingConfig"] == {"Mode": "Active"}
        assert props["Layers"] == [ADOT_LAYER]
        env = props["Environment"]["Variables"]
        assert env["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/otel-instrument"
        assert env["OTEL_SERVICE_NAME"] == "traced"
        role_id = props["Role"]["Fn::GetAtt"][0]
        star = [s for s in role_statements(traced, role_id) if s["Resource"] == "*"]
        # the API function also reads CloudWatch metrics for its charts (its own statement on *)
        traced_star = [s for s in star if set(as_list(s["Action"])) != {"cloudwatch:GetMetricData"}]
        assert len(traced_star) == 1 and set(as_list(traced_star[0]["Action"])) == XRAY


def test_the_ecs_worker_sends_otlp_to_a_collector_sidecar_that_signs_for_x_ray(traced):
    tasks = [t["Properties"] for t in traced.resources("AWS::ECS::TaskDefinition").values()]
    [worker_task] = [
        t for t in tasks if any(c["Name"] == "otel-collector" for c in t["ContainerDefinitions"])
    ]
    worker, collector = worker_task["ContainerDefinitions"]
    # ... the worker: run under the SDK's instrumentation, exporting OTLP to the task's loopback
    assert worker["EntryPoint"] == ["opentelemetry-instrument", "sqsjobs"]
    env = {e["Name"]: e["Value"] for e in worker["Environment"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:4318"
    assert env["OTEL_TRACES_EXPORTER"] == "otlp" and env["OTEL_SERVICE_NAME"] == "traced"
    assert worker["DependsOn"] == [{"ContainerName": "otel-collector", "Condition": "START"}]
    # ... the collector: not essential (a collector's end is not the jobs'), read-only, its config inline
    assert collector["Essential"] is False and collector["ReadonlyRootFilesystem"] is True
    [config] = [e["Value"] for e in collector["Environment"] if e["Name"] == "AOT_CONFIG_CONTENT"]
    text = "".join(p if isinstance(p, str) else "us-east-1" for p in config["Fn::Join"][1])
    parsed = yaml.safe_load(text)
    exporter = parsed["exporters"]["otlphttp/xray"]
    assert exporter["traces_endpoint"] == "https://xray.us-east-1.amazonaws.com/v1/traces"
    assert exporter["auth"] == {"authenticator": "sigv4auth"}
    assert parsed["extensions"]["sigv4auth"]["service"] == "xray"
    assert parsed["receivers"]["otlp"]["protocols"]["http"]["endpoint"] == "127.0.0.1:4318"
    # ... and the task role may write traces, nothing more than the two actions on *
    role_id = worker_task["TaskRoleArn"]["Fn::GetAtt"][0]
    star = [s for s in role_statements(traced, role_id) if s["Resource"] == "*"]
    assert len(star) == 1 and set(as_list(star[0]["Action"])) == XRAY


def test_the_sweeper_task_and_untraced_stacks_get_no_tracing(traced, full):
    sweeper = [
        t["Properties"]
        for t in traced.resources("AWS::ECS::TaskDefinition").values()
        if not any(c["Name"] == "otel-collector" for c in t["Properties"]["ContainerDefinitions"])
    ]
    assert len(sweeper) == 1
    assert "xray" not in json.dumps(full.template).lower()


@pytest.mark.slow
def test_cdk_nag_and_cfn_lint_accept_the_traced_stack_and_each_acknowledgement_has_a_reason(traced):
    report = traced.json("validation-report.json")
    assert [v for r in report["pluginReports"] for v in r.get("violations", [])] == []
    acks = acknowledgements(traced)
    assert all(len(reason) >= 20 for reason in acks.values()), acks
    assert "AwsSolutions-IAM5[Resource::*]" in acks
    done = subprocess.run(
        [str(CDK_VENV / "bin" / "cfn-lint"), str(traced.template_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode & 2 == 0 and done.returncode < 16, done.stdout + done.stderr
