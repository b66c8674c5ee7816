"""A keyed dedup mode whose key write landed but whose answer was lost still enqueues its job.

``WhileActive`` and ``Debounce`` write a key item before the job. When that put reaches DynamoDB
and the connection drops before the answer (the fault proxy's ``reset_after``), botocore sends the
same put again, which the first one's item now refuses — an item naming this very job. Read as
"another job holds the key", the enqueue would return the id of a job it never wrote, and the key
would stay blocked for 16 minutes. The retry must be read as the enqueue's own write.
"""

from __future__ import annotations

import pytest

from sqsjobs import Debounce, JobStatus, WhileActive
from tests.soak.faults import FaultPlan, FaultProxy

pytestmark = pytest.mark.slow

#: The first PutItem's answer is lost (its write landed); every later request goes through.
LOSE_FIRST_PUT = FaultPlan(reset_after=1.0, only_actions=frozenset({"PutItem"}), max_faults=1)


@pytest.mark.parametrize("mode", [WhileActive(), Debounce(60)], ids=["while_active", "debounce"])
def test_a_lost_answer_to_the_key_put_still_enqueues_the_job(ministack_url, make_app, mode):
    with FaultProxy(ministack_url, faults=FaultPlan()) as proxy:
        app = make_app(proxy.url)

        @app.job("doc.index")
        def index(payload: dict, ctx) -> None: ...

        app.provision()
        proxy.faults = LOSE_FIRST_PUT
        first = app.enqueue("doc.index", {"doc": 1}, idempotency_key="doc-1", dedupe=mode)
        proxy.faults = FaultPlan()
        assert proxy.snapshot()["faults"].get("reset_after") == 1
        # the job the enqueue answered exists: it was written and is waiting to run
        assert app.get(first).status is JobStatus.QUEUED
        # and it holds the key: a second enqueue is told about it instead of making another job
        again = app.enqueue("doc.index", {"doc": 1}, idempotency_key="doc-1", dedupe=mode)
        assert again == first and again.deduplicated  # type: ignore[attr-defined]
