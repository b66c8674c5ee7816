"""The host-only local stack: `make localstack-up` / `localstack-down` (MiniStack, no Docker), and the compose file.

``make localstack-up`` provisions with ``sqsjobs provision``; what it creates must be what the
synthesized template declares (table keys, indexes, TTL; queues and redrive), and a job must run there.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import boto3
import pytest
import yaml

from examples.shop import app as shop
from sqsjobs import App, JobStatus
from sqsjobs.store.schema import TTL_ATTRIBUTE
from sqsjobs.testing import all_finished, work_until
from tests.conftest import FAST
from tests.emulators import REPO_ROOT, free_port
from tests.infra.test_template import _index, _keys

#: Never rebuild the venvs from inside a test (a newer pyproject.toml would trigger pip).
MAKE = ["make", "--no-print-directory", "-o", ".venv/bin/sqsjobs", "-o", ".venv-ministack/bin/ministack"]


def make(target: str, port: int, state: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SQSJOBS_"))}
    env["SQSJOBS_MINISTACK_BIN"] = os.environ.get("SQSJOBS_MINISTACK_BIN", "")
    done = subprocess.run(
        [*MAKE, target, f"LOCALSTACK_PORT={port}", f"LOCALSTACK_DIR={state}"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.slow
def test_localstack_up_provisions_what_the_template_declares_runs_a_job_and_down_stops_it(full, tmp_path):
    port, state = free_port(), tmp_path / "localstack"
    # GIVEN `make localstack-up` on a free port
    make("localstack-up", port, state)
    pid = int((state / "ministack.pid").read_text().split()[0])
    try:
        url = f"http://127.0.0.1:{port}"
        aws = {"endpoint_url": url, "region_name": "us-east-1"}
        settings = shop.settings
        # THEN the table has the template's keys, indexes and TTL
        [declared] = [r["Properties"] for r in full.resources("AWS::DynamoDB::Table").values()]
        ddb = boto3.client("dynamodb", **aws)
        table = ddb.describe_table(TableName=settings.table_name)["Table"]
        assert _keys(table["KeySchema"]) == _keys(declared["KeySchema"])
        assert sorted(map(_index, table["GlobalSecondaryIndexes"])) == sorted(
            map(_index, declared["GlobalSecondaryIndexes"])
        )
        ttl = ddb.describe_time_to_live(TableName=settings.table_name)["TimeToLiveDescription"]
        assert (ttl["TimeToLiveStatus"], ttl["AttributeName"]) == ("ENABLED", TTL_ATTRIBUTE)
        # ... and the template's queues, with the same redrive backstop into the same DLQs
        sqs = boto3.client("sqs", **aws)
        declared_queues = {
            r["Properties"]["QueueName"]: r["Properties"] for r in full.resources("AWS::SQS::Queue").values()
        }
        for name, props in declared_queues.items():
            attrs = sqs.get_queue_attributes(
                QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"], AttributeNames=["All"]
            )["Attributes"]
            if "RedrivePolicy" in props:
                redrive = json.loads(attrs["RedrivePolicy"])
                assert int(redrive["maxReceiveCount"]) == props["RedrivePolicy"]["maxReceiveCount"]
                assert redrive["deadLetterTargetArn"].endswith(f":{settings.dlq_name('default')}")

        # WHEN a job is enqueued there and a worker runs
        app = App(settings.app_name, endpoint_url=url, **FAST)
        app.registry.include(shop.registry)
        job = app.enqueue("receipts.send", {"order_id": "o-1", "email": "a@example.com"})
        work_until(app, all_finished(app, [job]), timeout_s=30)
        # THEN it succeeded
        assert app.get(job).status is JobStatus.SUCCEEDED
        app.close()
    finally:
        # WHEN `make localstack-down`
        make("localstack-down", port, state)
    # THEN the server (its whole process group) is gone and the port is free
    assert not (state / "ministack.pid").exists()
    try:
        os.killpg(pid, 0)
        raise AssertionError(f"process group {pid} still alive")
    except ProcessLookupError:
        pass
    assert not listening(port)


def test_the_compose_file_pins_localstack_binds_loopback_and_provisions_first():
    compose = yaml.safe_load((REPO_ROOT / "localstack" / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["localstack"]["image"].endswith("localstack/localstack:4.14}")
    assert all(p.startswith("127.0.0.1:") for s in services.values() for p in s.get("ports", []))
    assert services["provision"]["entrypoint"][-1] == "/opt/sqsjobs/provision.sh"
    for name in ("worker", "sweeper"):
        condition = services[name]["depends_on"]["provision"]["condition"]
        assert condition == "service_completed_successfully"
