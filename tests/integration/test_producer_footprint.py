"""What a thin producer's ``enqueue`` loads and runs per request (docs/bench.md, "Producer CPU per enqueue").

A web app that only enqueues pays for every handler its botocore clients run on each request. The
App's Powertools logger is made only when an enqueue logs (SQS refused its message): made up front,
its import hooks every botocore session made afterwards, one more handler on each request.

Checked in a fresh producer process (what the test process imported cannot hide an eager import),
through a proxy that refuses sends only once told to, so the same process also shows that the
refused send is still logged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.soak.faults import FaultPlan, FaultProxy

pytestmark = pytest.mark.slow

PRODUCER = """
import json, os, sys
from sqsjobs import App
app = App(os.environ["TEST_APP_NAME"], endpoint_url=os.environ["TEST_ENDPOINT"])
for n in range(3):
    app.enqueue("notes.any", {"n": n}, queue="default")
print(json.dumps({"powertools": "aws_lambda_powertools" in sys.modules}), flush=True)
sys.stdin.readline()  # the test now refuses every send
app.enqueue("notes.any", {"n": 9}, queue="default")
print(json.dumps({"powertools": "aws_lambda_powertools" in sys.modules}), flush=True)
"""


def test_a_thin_producer_loads_no_logger_until_a_refused_send_is_logged(ministack_url, make_app):
    with FaultProxy(ministack_url, faults=FaultPlan()) as proxy:
        app = make_app(ministack_url)
        app.provision()
        env = {
            **os.environ,
            "TEST_APP_NAME": app.name,
            "TEST_ENDPOINT": proxy.url,
            "AWS_MAX_ATTEMPTS": "1",  # one refused try is enough: no backoff between retries
        }
        producer = subprocess.Popen(
            [sys.executable, "-c", PRODUCER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            assert producer.stdout is not None and producer.stdin is not None
            # GIVEN a producer that enqueued three jobs, each sent and written
            first = json.loads(producer.stdout.readline())
            # THEN it has not loaded Powertools (so no Powertools handler hooks its botocore clients)
            assert first["powertools"] is False
            # WHEN SQS refuses the next send
            proxy.faults = FaultPlan(http_5xx=1.0, only_actions=frozenset({"SendMessageBatch"}))
            producer.stdin.write("go\n")
            producer.stdin.flush()
            second = json.loads(producer.stdout.readline())
            _, stderr = producer.communicate(timeout=60)
        finally:
            if producer.poll() is None:
                producer.kill()
                producer.wait()
            for pipe in (producer.stdin, producer.stdout, producer.stderr):
                if pipe is not None:  # closed even when an assertion above failed: no warning leaks
                    pipe.close()  # into whichever test this worker runs next
        # THEN the logger is made then, and the refusal is logged
        assert second["powertools"] is True
        assert "enqueue: message not sent, the record is kept for the sweeper" in stderr
        assert producer.returncode == 0, stderr
