"""No hot partitions (docs/scale.md): the happy path writes no index, and attention entries spread over shards.

A run with successes and failures, then a count of the ``attention`` index's entries per partition
key value, read back from DynamoDB (MiniStack) itself.
"""

from __future__ import annotations

from collections import Counter

from sqsjobs import JobStatus, PermanentError
from sqsjobs._aws import Call, one
from sqsjobs.store import schema
from sqsjobs.testing import all_finished, work_until

OK, DEAD = 60, 160


def attention_entries(app) -> Counter[str]:
    """Entries per partition key value of the attention index (a Scan of the index)."""
    counts: Counter[str] = Counter()
    params = {"TableName": app.settings.table_name, "IndexName": schema.ATTENTION_INDEX}
    while True:
        page = app.run(one(Call("dynamodb", "scan", params)))
        counts.update(item["attn"]["S"] for item in page.get("Items", []))
        if not page.get("LastEvaluatedKey"):
            return counts
        params = {**params, "ExclusiveStartKey": page["LastEvaluatedKey"]}


def test_only_dead_jobs_enter_the_index_and_they_spread_over_every_shard(ministack_url, make_app):
    # GIVEN jobs that succeed and jobs that die
    app = make_app(ministack_url)

    @app.job("ok")
    def ok(payload, ctx):
        return None

    @app.job("doomed")
    def doomed(payload, ctx):
        raise PermanentError("no")

    app.provision()
    # (idempotency keys make the job ids, and so their shards, the same on every run: no luck involved)
    ids = app.enqueue_many(
        [{"type": "ok", "payload": {"n": i}, "idempotency_key": f"ok-{i}"} for i in range(OK)]
        + [{"type": "doomed", "payload": {"n": i}, "idempotency_key": f"dead-{i}"} for i in range(DEAD)]
    )
    # WHEN a worker runs them all
    work_until(app, all_finished(app, ids), concurrency=16, timeout_s=90)
    assert sum(app.get(i).status is JobStatus.DEAD for i in ids) == DEAD

    # THEN the index holds exactly the dead jobs: no succeeded job ever entered it
    counts = attention_entries(app)
    assert sum(counts.values()) == DEAD
    assert {key.split("#")[0] for key in counts} == {schema.DEAD}
    # AND they spread over the shards: every shard is used, none holds more than three times its share
    # (5 per shard here; a single low-cardinality key would hold all 160)
    assert len(counts) == schema.ATTENTION_SHARDS, counts
    assert max(counts.values()) <= 3 * DEAD / schema.ATTENTION_SHARDS, counts
