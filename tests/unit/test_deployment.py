"""The deployment rules infra/ is built from: limits, derived values, and IAM lists kept equal to the code."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from sqsjobs import App
from sqsjobs._aws import Call, Flow, Outcome
from sqsjobs.config import Settings
from sqsjobs.deploy import rules as d
from sqsjobs.errors import ConfigurationError
from sqsjobs.registry import DEFAULT_TIMEOUT_S
from sqsjobs.transport import objects
from sqsjobs.transport.sqs import MAX_DELAY_S

SQSJOBS = Path(__file__).resolve().parents[2] / "sqsjobs"
_CALL = re.compile(r'Call\(\s*"(\w+)",\s*"(\w+)"')

#: The modules each deployed principal runs. A new AWS call in one of them needs its IAM action in
#: ``sqsjobs.deploy.rules``, or the deployed process gets AccessDenied on AWS (never on an emulator).
WORKER_MODULES = [
    "app.py",
    "producer.py",
    "transaction.py",  # a handler may enqueue in a transaction
    "runtime/execution.py",
    "runtime/worker.py",
    "runtime/lambda_sqs.py",
    "store/write_batcher.py",
    "transport/sqs.py",
    "transport/queues.py",
    "transport/objects.py",
    "chains/plugin.py",  # a chain step's previous result, and its finish's follow-up
    "chains/namespace.py",  # the hook's reads; a handler may start a chain
    "batches/namespace.py",  # ctx.add_to_batch
    "batches/completion.py",  # the batch hook's completion check
    "limits/plugin.py",  # a limit's slots, rate log and breaker
    "runtime/record_stage.py",  # a serialized job's note that it yielded its place
    "runtime/outliving.py",  # a run that outlives its message
    "steps/book.py",  # ctx.step's records
    "notify/sender.py",  # a notification's delivery (its own targets: NOTIFY_TARGET_ACTIONS)
    "slow_runs/records.py",  # the slow-run watch reads its types' baselines
    "schedules/overlap.py",  # a fire's turn: the schedule's item, the previous job, its cancel
    "signals/waits.py",  # ctx.signals.wait: the waiter on its signal item
    "signals/plugin.py",  # a cancel_on type's claim registers it; the sqsjobs.signal type sends
    "signals/namespace.py",  # a handler (or the sqsjobs.signal type) sends a signal: answers, cancels
]
#: What a notification's delivery calls on the targets a caller names, which no deployment can
#: know: another queue (sqs:SendMessage, granted on the App's own queues only), a bus, a secret.
#: docs/http-workers.md tells the application to grant them on its own targets.
NOTIFY_TARGET_ACTIONS = {"events:PutEvents", "secretsmanager:GetSecretValue"}
ECS_WORKER_MODULES = [*WORKER_MODULES, "runtime/presence.py", "store/probe.py"]  # the PartiQL probe at start
SWEEPER_MODULES = [
    "app.py",
    "runtime/sweeper.py",
    "runtime/reconciler.py",  # the DLQs
    "transport/dead_letters.py",
    "runtime/lambda_handlers.py",
    "transport/queues.py",
    "transport/objects.py",  # a large completion callback's payload
    "batches/completion.py",  # the repair of batches
    "slow_runs/plugin.py",  # the slow-run baselines (from the records, or CloudWatch: granted apart)
    "slow_runs/records.py",
    "ops/series.py",
]
#: What the HTTP API's function runs: its routes and the producer and operator flows they call.
API_MODULES = [
    "app.py",
    "producer.py",
    "api/job_routes.py",
    "api/queue_routes.py",
    "api/dlq_routes.py",
    "ops/inspect.py",
    "ops/stats.py",
    "ops/dlq.py",
    "transport/dead_letters.py",
    "ops/replay.py",
    "ops/requeue.py",
    "transport/queues.py",
    "transport/objects.py",
    "batches/completion.py",  # cancel and retry of a batch item
    "ops/cancel_job.py",
    "ops/bulk_cancel.py",
    "ops/reprioritize.py",
    "ops/worker_views.py",  # a worker's drain
    "limits/namespace.py",  # pause, resume, a breaker's close
    "steps/namespace.py",  # a token's answer
    "api/signal_routes.py",  # POST /signals: app.signals.send (signals/namespace.py, with the workers')
    "chains/namespace.py",
    "batches/namespace.py",
    "schedules/runtime.py",  # POST /schedules...: runtime schedules, their items, a resume's fires
    # The HTTP worker protocol (POST /leases...): the claim and record stages a worker runs, from the API.
    "remote/lease_server.py",
    "remote/lease.py",  # the lease key's secret
    *(
        m
        for m in WORKER_MODULES
        if m not in ("runtime/worker.py", "runtime/lambda_sqs.py", "steps/book.py", "notify/sender.py")
    ),
]


def actions_called(modules: list[str]) -> set[str]:
    """The IAM actions of the calls the modules make: literal ``Call``s, and the typed writes they ``apply``."""
    found = set()
    for module in modules:
        source = (SQSJOBS / module).read_text()
        calls = _CALL.findall(source)
        if "apply(" in source:
            calls += [("dynamodb", op) for op in typed_writes(module, source)]
        calls += [("dynamodb", op) for flow, op in _APPLIED_MANY.items() if f"{flow}(" in source]
        for service, operation in calls:
            found.update(d.iam_actions(service, operation))
    return found


#: What ``store.apply.apply`` sends for each typed write.
_APPLIED = {"Write": "update_item", "Put": "put_item", "Delete": "delete_item"}
#: What the store's flows over many items send: a transaction, a batch of PartiQL statements
#: (``store.apply``), a BatchGetItem or BatchWriteItem (``store.batched``, called by name or through
#: a feature's own reader of its items: ``limit_records.batch_get``).
_APPLIED_MANY = {
    "apply_all": "transact_write_items",
    "apply_batched": "batch_execute_statement",
    "get_items": "batch_get_item",
    "batch_get": "batch_get_item",
    "put_items": "batch_write_item",
    "write_jobs_flow": "batch_write_item",  # a tagged job's tag items (store/tags.py)
}
_CALLED = re.compile(r"\b(?:(\w+)\.)?(\w+)\(")


def typed_writes(module: str, source: str) -> set[str]:
    """The operations of the typed writes a module builds: by each builder's declared return type.

    A module that applies ``limit_store.give_back_slot(...)`` sends a DeleteItem because that builder
    returns a ``Delete``: read from the builder itself, so a new builder needs no entry here.
    """
    loaded = importlib.import_module("sqsjobs." + module.removesuffix(".py").replace("/", "."))
    ops = set()
    for owner, name in _CALLED.findall(source):
        holder = getattr(loaded, owner, None) if owner else loaded
        target = getattr(holder, name, None)
        if inspect.isclass(target) and name in _APPLIED:  # a write built in place: Delete(...)
            ops.add(_APPLIED[name])
        elif inspect.isfunction(target):
            returns = str(inspect.signature(target).return_annotation)
            ops.update(op for kind, op in _APPLIED.items() if re.search(rf"\b{kind}\b", returns))
    return ops


def granted(actions: dict[str, tuple[str, ...]]) -> set[str]:
    return {a for names in actions.values() for a in names}


def test_encryption_is_granted_exactly_what_sealing_calls():
    # GIVEN the calls the one module that seals and opens payloads makes (KMS, the hash key's item)
    called = actions_called(["store/sealing.py"])
    # THEN the actions an encrypting App's roles get are exactly those
    assert (
        granted(d.ENCRYPTION_ACTIONS)
        == called
        == {
            "kms:GenerateDataKey",
            "kms:Decrypt",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
        }
    )


def test_an_encrypted_enqueue_calls_only_the_producers_and_the_encryption_actions(monkeypatch):
    # GIVEN an App encrypting one type, whose calls are answered by a script
    from sqsjobs import PayloadVersion
    from sqsjobs.store import sealing

    app = App("p", inline_payload_bytes=1024)

    @app.job("a", version=PayloadVersion(1, encrypt="alias/pii"))
    def a(payload: dict[str, str], ctx: object) -> None: ...

    sealing.KEYS.forget()
    calls = scripted(app, monkeypatch)
    # WHEN it enqueues a small and a large payload
    app.enqueue("a", {"n": "1"})
    app.enqueue("a", {"blob": "x" * 2048})
    # THEN every call is granted by the producer's list or the encryption one
    needed = {a for c in calls for a in actions_of(c)}
    assert needed <= granted(d.PRODUCER_ACTIONS) | granted(d.ENCRYPTION_ACTIONS)
    assert {"kms:GenerateDataKey", "dynamodb:GetItem"} <= needed
    # ... one data key sealed both payloads, and the hash key was made once
    assert [c.operation for c in calls if c.service == "kms"] == ["generate_data_key", "generate_data_key"]
    sealing.KEYS.forget()


def test_iam_action_names_follow_boto3_operations():
    assert d.iam_actions("dynamodb", "update_item") == ("dynamodb:UpdateItem",)
    assert d.iam_actions("sqs", "send_message_batch") == ("sqs:SendMessage",)
    assert d.iam_actions("sqs", "change_message_visibility_batch") == ("sqs:ChangeMessageVisibility",)
    assert d.iam_actions("dynamodb", "batch_write_item") == ("dynamodb:BatchWriteItem",)
    # PartiQL is authorised by statement kind: sqsjobs batches INSERTs and UPDATEs
    assert d.iam_actions("dynamodb", "batch_execute_statement") == (
        "dynamodb:PartiQLInsert",
        "dynamodb:PartiQLUpdate",
    )
    # No TransactWriteItems action exists: on the jobs table a transaction's items are record puts,
    # batch record and counter updates, and a batch completion's checks
    assert d.iam_actions("dynamodb", "transact_write_items") == (
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:ConditionCheckItem",
    )


def test_the_api_is_granted_exactly_what_its_routes_call():
    # GIVEN the AWS calls of the modules the API's function runs
    called = actions_called(API_MODULES)
    # THEN its list grants each of them and nothing else, no wildcard
    assert granted(d.API_ACTIONS) == called
    assert not any("*" in a for a in granted(d.API_ACTIONS))


def test_an_api_enqueue_is_one_put(monkeypatch):
    # GIVEN an App whose flows are answered by a script, as the API enqueues (one job per request)
    app = App("p")

    @app.job("a")
    def a(payload: dict[str, str], ctx: object) -> None: ...

    calls = scripted(app, monkeypatch)
    app.enqueue("a", {"n": "1"}, idempotency_key="k")
    # THEN no PartiQL statement is sent: the record is one PutItem
    assert [c.operation for c in calls if c.service == "dynamodb"] == ["put_item"]


@pytest.mark.parametrize(
    ("actions", "modules"),
    [
        (d.WORKER_ACTIONS, WORKER_MODULES),
        (d.WORKER_ACTIONS, ECS_WORKER_MODULES),
        (d.SWEEPER_ACTIONS, SWEEPER_MODULES),
    ],
    ids=["worker", "ecs-worker", "sweeper"],
)
def test_each_role_is_granted_exactly_what_its_code_calls(actions, modules):
    # GIVEN the AWS calls the modules a deployed worker/sweeper runs make
    called = actions_called(modules) - NOTIFY_TARGET_ACTIONS
    # THEN the role grants each of them (no AccessDenied in AWS) and nothing else (least privilege)
    assert granted(actions) == called
    assert not any("*" in a for a in granted(actions))


def answer(call: Call) -> dict[str, Any]:
    """What AWS would answer a producer's call, enough for its flow to go on."""
    if call.operation == "get_queue_url":
        return {"QueueUrl": f"https://sqs.example/{call.params['QueueName']}"}
    if call.operation == "batch_execute_statement":
        return {"Responses": [{} for _ in call.params["Statements"]]}
    if call.operation == "generate_data_key":
        return {"KeyId": "arn:aws:kms:us-east-1:1:key/k", "Plaintext": b"k" * 32, "CiphertextBlob": b"w" * 96}
    return {}  # send_message_batch (nothing failed), put_item, put_object, get_item (no item)


def scripted(app: App, monkeypatch: pytest.MonkeyPatch) -> list[Call]:
    """Answer ``app``'s flows with ``answer`` instead of AWS; the calls they make, in order."""
    calls: list[Call] = []

    def run(flow: Flow[Any]) -> Any:
        try:
            call = next(flow)
            while True:
                if call.service == "flows":  # ``together``: its flows one after the other
                    call = flow.send([Outcome(value=run(f)) for f in call.params["flows"]])
                    continue
                calls.append(call)
                call = flow.send(answer(call))
        except StopIteration as stop:
            return stop.value

    monkeypatch.setattr(app, "run", run)
    return calls


def actions_of(call: Call) -> set[str]:
    """The IAM actions of one call; a PartiQL batch by the kinds of statement it really carries."""
    if call.operation == "batch_execute_statement":
        kinds = {s["Statement"].split()[0].capitalize() for s in call.params["Statements"]}
        return {f"dynamodb:PartiQL{kind}" for kind in kinds}
    return set(d.iam_actions(call.service, call.operation))


def test_the_producer_is_granted_exactly_what_enqueue_calls(monkeypatch):
    # GIVEN an App whose flows are answered by a script instead of AWS, each call recorded
    app = App("p", inline_payload_bytes=1024)

    @app.job("a")
    def a(payload: dict[str, str], ctx: object) -> None: ...

    calls = scripted(app, monkeypatch)
    # WHEN it enqueues one job, a tagged one, a batch, a payload too large for the message, a held job,
    # and a job inside a transaction (the caller's own table aside: its grants are the caller's)
    app.enqueue("a", {"n": "1"})
    app.enqueue("a", {"n": "t"}, tags={"customer": "42"})
    app.enqueue_many([{"type": "a", "payload": {"n": str(i)}} for i in range(3)])
    app.enqueue("a", {"blob": "x" * 2048})
    app.enqueue("a", {"n": "2"}, delay=MAX_DELAY_S + 1)
    with app.transaction() as tx:
        tx.enqueue("a", {"n": "3"})
    # THEN the producer's list is exactly the actions those calls need
    assert granted(d.PRODUCER_ACTIONS) == {a for c in calls for a in actions_of(c)}
    # ... resolving a queue's URL resolves its DLQ's too, so GetQueueUrl is needed on both
    settings = app.settings
    assert {c.params["QueueName"] for c in calls if c.operation == "get_queue_url"} == {
        settings.queue_name("default"),
        settings.dlq_name("default"),
    }
    # ... and the only objects it writes are payloads
    [put] = [c for c in calls if c.operation == "put_object"]
    assert put.params["Bucket"] == settings.payload_bucket
    assert put.params["Key"].startswith(objects.PAYLOADS)


def test_the_lambda_visibility_rule_is_six_times_the_timeout():
    d.check_lambda_visibility("q", visibility_timeout_s=360, function_timeout_s=60)
    with pytest.raises(ConfigurationError, match=r"at least 360"):
        d.check_lambda_visibility("q", visibility_timeout_s=359, function_timeout_s=60)
    with pytest.raises(ConfigurationError, match=r"1\.\.900"):
        d.check_lambda_visibility("q", visibility_timeout_s=43_200, function_timeout_s=901)


def test_the_lambda_timeout_starts_every_job_type_of_its_queues():
    from sqsjobs.runtime.lambda_sqs import DEADLINE_MARGIN_S

    app = App("t")

    @app.job("slow", queue="a", timeout=300)
    def slow(payload: None, ctx: object) -> None: ...

    @app.job("quick", queue="b", timeout=5)
    def quick(payload: None, ctx: object) -> None: ...

    # THEN the derived timeout leaves the deadline guard room for the longest job of those queues
    assert d.lambda_timeout_s(app.registry, ["a", "b"]) > 300 + DEADLINE_MARGIN_S
    assert d.lambda_timeout_s(app.registry, ["b"]) > 5 + DEADLINE_MARGIN_S
    d.check_lambda_timeout(app.registry, ["b"], 60)
    with pytest.raises(ConfigurationError, match="can never start"):
        d.check_lambda_timeout(app.registry, ["a"], 300)

    @app.job("too.long", queue="c", timeout=899)
    def too_long(payload: None, ctx: object) -> None: ...

    with pytest.raises(ConfigurationError, match="run that queue on ECS"):
        d.lambda_timeout_s(app.registry, ["c"])


def test_an_explicit_timeout_the_function_can_never_start_is_refused_naming_both_numbers():
    # GIVEN a job type whose explicit timeout is ten minutes
    app = App("t")

    @app.job("reports.build", queue="reports", timeout=600)
    def build(payload: None, ctx: object) -> None: ...

    # WHEN its queue is checked against a one-minute Lambda function
    with pytest.raises(ConfigurationError) as refused:
        d.check_lambda_timeout(app.registry, ["reports"], 60)

    # THEN the refusal names the type, its timeout and the function's
    message = str(refused.value)
    assert "'reports.build'" in message
    assert "600 s timeout" in message and "60 s timeout" in message


def test_a_job_type_without_an_explicit_timeout_fits_any_usable_function_timeout():
    # GIVEN a job type registered without a timeout (the ECS worker's default is 300 s)
    app = App("t")

    @app.job("plain")
    def plain(payload: None, ctx: object) -> None: ...

    # THEN functions much shorter than that default pass: on Lambda it runs in the time left
    for function_timeout_s in (4, 10, 60, 900):
        d.check_lambda_timeout(app.registry, ["default"], function_timeout_s)
    # ... unless the function leaves it no time after the deadline margin
    with pytest.raises(ConfigurationError, match=r"3 s timeout leaves job types without a timeout \(plain\)"):
        d.check_lambda_timeout(app.registry, ["default"], 3)
    # ... and the timeout infra derives still gives it as long as the ECS worker would
    assert d.lambda_timeout_s(app.registry, ["default"]) > DEFAULT_TIMEOUT_S


def test_the_stop_timeout_outlasts_the_drain_and_fits_fargate():
    assert d.stop_timeout_s(25.0) > 25.0
    assert d.stop_timeout_s(25.5) >= 26 + d.STOP_MARGIN_S
    assert d.stop_timeout_s(110) == d.FARGATE_MAX_STOP_TIMEOUT_S
    with pytest.raises(ConfigurationError, match="drain_timeout_s <= 110"):
        d.stop_timeout_s(111)


def test_esm_limits():
    d.check_esm(batch_size=10, max_concurrency=2)
    with pytest.raises(ConfigurationError, match="batch_size"):
        d.check_esm(batch_size=11, max_concurrency=5)
    with pytest.raises(ConfigurationError, match="max_concurrency"):
        d.check_esm(batch_size=10, max_concurrency=1)


def test_queues_are_the_handlers_queues_or_default():
    app = App("q")
    assert d.queues_of(app.registry) == ["default"]

    @app.job("a", queue="fast")
    def a(payload: None, ctx: object) -> None: ...

    assert d.queues_of(app.registry, ["slow"]) == ["fast", "slow"]


def test_the_runtime_environment_pins_the_names_infra_chose():
    settings = Settings(app_name="shop", visibility_timeout_s=360, drain_timeout_s=12.5)
    env = d.runtime_environment(settings, "examples.shop:app")
    # WHEN a deployed process builds its settings from that environment
    seen = Settings.from_env("shop", env=env)
    # THEN it agrees with the synthesized stack on every name and timing infra used
    assert (seen.table_name, seen.queue_prefix, seen.schedule_group) == (
        "shop-jobs",
        "shop",
        "shop-schedules",
    )
    assert (seen.visibility_timeout_s, seen.drain_timeout_s) == (360, 12.5)
    with pytest.raises(ConfigurationError, match="app path"):
        d.runtime_environment(settings, "examples/shop.py")
