"""Check the deployed resources against the App, each check with its fix.

Checks, in order: the table (exists, ACTIVE, keyed by ``id``; not the first layout, whose
status/type/queue indexes every job wrote), the ``attention`` index as ``table_definition``
declares it (keys, their types, projection), TTL on ``expires_at``; then per logical queue: the
queue and its DLQ exist, the redrive policy targets that DLQ with ``maxReceiveCount`` above every
job type's ``max_attempts``, the visibility timeout against the worker's settings and the
handlers' timeouts, and every queue's retention against ``message_retention_s``; the payload
bucket; whether the endpoint honours PartiQL conditions (``store/probe.py``: it writes one small
item with a TTL); that every job type's retries and expiry fit the retention
(``ops/retention.py``); last, when ``SQSJOBS_LAMBDA_TIMEOUT_S`` says a Lambda function consumes
the queues, that every explicit job timeout fits it. ``fail`` means something will misbehave;
``warn`` means it depends on how you run.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from sqsjobs._aws import Call, Flow
from sqsjobs.deploy.provision import parse_redrive, redrive_count
from sqsjobs.deploy.rules import check_lambda_timeout
from sqsjobs.errors import AwsError, ConfigurationError, ObjectStoreError, StoreError, TransportError
from sqsjobs.ops._common import app_queues
from sqsjobs.ops.checks import Check
from sqsjobs.ops.retention import queue_retention_check, type_retention_checks
from sqsjobs.store import probe, schema
from sqsjobs.transport import objects, routes, sqs

if TYPE_CHECKING:
    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry

TTL_ATTRIBUTE = schema.TTL_ATTRIBUTE
#: AWS: a Lambda event source mapping wants the queue's visibility timeout at least 6x the function timeout.
#: https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
LAMBDA_VISIBILITY_FACTOR = 6
_MISSING_QUEUE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")


def _index_shape(index: dict[str, Any]) -> list[tuple[str, str]]:
    return [(k["AttributeName"], k["KeyType"]) for k in index["KeySchema"]]


def _typed_shape(index: dict[str, Any], types: dict[str, str]) -> list[tuple[str, str, str]]:
    """Key attributes with their role and type, e.g. ``("due", "RANGE", "N")``."""
    return [(a, role, types.get(a, "?")) for a, role in _index_shape(index)]


def _projection(index: dict[str, Any]) -> str:
    return str(index.get("Projection", {}).get("ProjectionType", "?"))


def legacy_check(table: str, legacy: list[str]) -> Check:
    """The table of sqsjobs 0.1: listing indexes that every job wrote (see docs/operations.md)."""
    return Check(
        "table layout",
        "fail",
        f"{table} was created by sqsjobs 0.1: its indexes {', '.join(legacy)} are written by every job "
        "(13 write units per job, each index one hot partition; DynamoDB keeps writing them for as long "
        "as they exist), and there is no migration (0.1.0 was never released)",
        f"create a new table (`SQSJOBS_TABLE=<new name> sqsjobs provision`), point producers and "
        f"workers at it (SQSJOBS_TABLE) once {table} has drained, then delete {table}",
    )


def index_checks(info: dict[str, Any], wanted_table: dict[str, Any], *, legacy: bool) -> list[Check]:
    """Each index ``table_definition`` declares, against the described table ``info``."""
    present = {i["IndexName"]: i for i in info.get("GlobalSecondaryIndexes", [])}
    have_types = {d["AttributeName"]: d["AttributeType"] for d in info.get("AttributeDefinitions", [])}
    want_types = {d["AttributeName"]: d["AttributeType"] for d in wanted_table["AttributeDefinitions"]}
    checks = []
    for wanted in wanted_table["GlobalSecondaryIndexes"]:
        name = wanted["IndexName"]
        have = present.get(name)
        shape = _typed_shape(wanted, want_types)
        keys = ", ".join(f"{a} ({t}, {role.lower()})" for a, role, t in shape)
        described = f"{keys}, projection {_projection(wanted)}"
        if have is None:
            fix = (
                "create a new table, see the `table layout` check"
                if legacy
                else f"add GSI {name} on {described} with UpdateTable (see docs/operations.md); "
                "`sqsjobs provision` only creates missing tables"
            )
            checks.append(Check(f"index {name}", "fail", "missing", fix))
        elif _typed_shape(have, have_types) != shape or _projection(have) != _projection(wanted):
            found = ", ".join(f"{a} ({t}, {role.lower()})" for a, role, t in _typed_shape(have, have_types))
            checks.append(
                Check(
                    f"index {name}",
                    "fail",
                    f"{found}, projection {_projection(have)}",
                    f"delete it and create it again on {described} (UpdateTable, one index change at a time)",
                )
            )
        else:
            checks.append(Check(f"index {name}", "ok", described))
    return checks


def table_checks_flow(settings: Settings) -> Flow[list[Check]]:
    """The table, its layout, its index and TTL."""
    table = settings.table_name
    provision = "run `sqsjobs provision` (or deploy infra/) to create it"
    try:
        described = yield Call("dynamodb", "describe_table", {"TableName": table})
    except StoreError as exc:
        if exc.code == "ResourceNotFoundException":
            return [Check(f"table {table}", "fail", "does not exist", provision)]
        raise
    info = described["Table"]
    checks = []
    keyed = _index_shape(info) == [("id", "HASH")]
    status = info.get("TableStatus", "?")
    checks.append(
        Check(
            f"table {table}",
            "ok" if keyed and status == "ACTIVE" else "fail",
            f"{status}, key {'id' if keyed else _index_shape(info)}",
            "" if keyed else "the table must be keyed by `id` (S) alone; recreate it",
        )
    )
    legacy = sorted(schema.LEGACY_INDEXES & {i["IndexName"] for i in info.get("GlobalSecondaryIndexes", [])})
    if legacy:
        checks.append(legacy_check(table, legacy))
    checks.extend(index_checks(info, schema.table_definition(table), legacy=bool(legacy)))
    ttl = yield Call("dynamodb", "describe_time_to_live", {"TableName": table})
    desc = ttl.get("TimeToLiveDescription", {})
    enabled = (
        desc.get("TimeToLiveStatus") in ("ENABLED", "ENABLING") and desc.get("AttributeName") == TTL_ATTRIBUTE
    )
    checks.append(
        Check(
            "ttl",
            "ok" if enabled else "fail",
            f"{desc.get('TimeToLiveStatus', 'DISABLED')} on {desc.get('AttributeName', '-')}",
            ""
            if enabled
            else (
                f"aws dynamodb update-time-to-live --table-name {table} --time-to-live-specification "
                f"Enabled=true,AttributeName={TTL_ATTRIBUTE}  (finished jobs are never deleted without it)"
            ),
        )
    )
    return checks


def _queue_attrs(name: str) -> Flow[dict[str, str] | None]:
    try:
        response = yield Call("sqs", "get_queue_url", {"QueueName": name})
    except TransportError as exc:
        if exc.code in _MISSING_QUEUE:
            return None
        raise
    attrs = yield Call(
        "sqs", "get_queue_attributes", {"QueueUrl": response["QueueUrl"], "AttributeNames": ["All"]}
    )
    return dict(attrs.get("Attributes", {}))


def _exists(name: str, attrs: dict[str, str] | None, fix: str) -> Check:
    if attrs is None:
        return Check(name, "fail", "missing", fix)
    return Check(name, "ok", "exists")


def queue_checks_flow(settings: Settings, registry: Registry, queue: str) -> Flow[list[Check]]:
    """One logical queue: existence, redrive and visibility timeout."""
    name, dlq_name = settings.queue_name(queue), settings.dlq_name(queue)
    provision = "run `sqsjobs provision` (or deploy infra/)"
    main = yield from _queue_attrs(name)
    dlq = yield from _queue_attrs(dlq_name)
    checks = [_exists(f"queue {name}", main, provision), _exists(f"dlq {dlq_name}", dlq, provision)]
    checks += [
        queue_retention_check(n, a, settings) for n, a in ((name, main), (dlq_name, dlq)) if a is not None
    ]
    checks += yield from _route_checks(settings, registry, queue)
    if main is None:
        return checks
    specs = [s for s in registry if s.queue == queue]
    largest = max((s.max_attempts for s in specs), default=1)
    try:
        target = redrive_count(settings, registry)
    except ConfigurationError:
        target = largest + settings.receive_slack
    redrive = parse_redrive(main)
    count = int(redrive.get("maxReceiveCount", 0) or 0)
    fix_redrive = (
        f"aws sqs set-queue-attributes --queue-url <{name}> --attributes "
        f'\'RedrivePolicy={{"deadLetterTargetArn":"<{dlq_name} arn>","maxReceiveCount":"{target}"}}\' '
        "(or `sqsjobs provision`)"
    )
    if not redrive:
        checks.append(
            Check(f"redrive {name}", "fail", "no redrive policy: poison messages loop forever", fix_redrive)
        )
    elif dlq is not None and redrive.get("deadLetterTargetArn") != dlq.get("QueueArn"):
        checks.append(
            Check(
                f"redrive {name}",
                "fail",
                f"targets {redrive.get('deadLetterTargetArn')}, not {dlq_name}",
                fix_redrive,
            )
        )
    elif count <= largest:
        worst = max(specs, key=lambda s: s.max_attempts).name if specs else "-"
        checks.append(
            Check(
                f"redrive {name}",
                "fail",
                f"maxReceiveCount {count} <= max_attempts {largest} of {worst}: SQS dead-letters jobs "
                "that still have attempts left",
                fix_redrive,
            )
        )
    else:
        checks.append(Check(f"redrive {name}", "ok", f"maxReceiveCount {count} > max_attempts {largest}"))
    checks.append(_visibility_check(settings, name, int(main.get("VisibilityTimeout", 0)), specs))
    return checks


def _route_checks(settings: Settings, registry: Registry, queue: str) -> Flow[list[Check]]:
    """The extra queues of priority levels and serialize keys (``transport.routes``), and type defaults."""
    checks = []
    provision = "run `sqsjobs provision` (or deploy infra/ with the same priority/serialized queues)"
    for key in routes.routes_of(settings, queue):
        if routes.split(key)[1] == routes.NORMAL:
            continue
        name = routes.queue_name(settings, key)
        attrs = yield from _queue_attrs(name)
        if attrs is None:
            checks.append(Check(f"queue {name}", "fail", "missing", provision))
        elif routes.is_fifo(key) and attrs.get("FifoQueue") != "true":
            checks.append(Check(f"queue {name}", "fail", "not a FIFO queue", f"delete it and {provision}"))
        elif not parse_redrive(attrs):
            checks.append(Check(f"redrive {name}", "fail", "no redrive policy", provision))
        else:
            checks.append(Check(f"queue {name}", "ok", "exists, with a redrive policy"))
        if attrs is not None:
            checks.append(queue_retention_check(name, attrs, settings))
    for spec in registry:
        if (
            spec.queue == queue
            and spec.priority not in (None, "normal")
            and queue not in settings.priority_queues
        ):
            checks.append(
                Check(
                    f"priority {spec.name}",
                    "fail",
                    f"defaults to {spec.priority!r} but queue {queue!r} has no priority levels: its enqueues fail",
                    f"add {queue!r} to priority_queues (SQSJOBS_PRIORITY_QUEUES) and {provision}",
                )
            )
    return checks


def _visibility_check(settings: Settings, name: str, visibility: int, specs: list[Any]) -> Check:
    wanted = settings.visibility_timeout_s
    fix_vt = (
        f"aws sqs set-queue-attributes --queue-url <{name}> --attributes VisibilityTimeout={wanted} "
        f"(or `sqsjobs provision`), or set SQSJOBS_VISIBILITY_TIMEOUT_S={visibility}"
    )
    if visibility < wanted:
        return Check(
            f"visibility {name}",
            "fail",
            f"{visibility} s < the worker's visibility_timeout_s {wanted} s: messages reappear before "
            "the heartbeat extends them",
            fix_vt,
        )
    longest = max(specs, key=lambda s: s.timeout_s, default=None)
    if longest is not None and longest.timeout_s > sqs.MAX_VISIBILITY_S:
        return Check(
            f"visibility {name}",
            "warn",
            f"{longest.name} may run {longest.timeout_s:g} s, beyond the 12 h SQS visibility cap: its "
            "message reappears while it runs (the claim still keeps it single)",
            f"lower the timeout of {longest.name} below {sqs.MAX_VISIBILITY_S} s or split the job",
        )
    if longest is not None and visibility < longest.timeout_s:
        # Not a fault: `sqsjobs worker` extends held messages by heartbeat. Say what it relies on.
        return Check(
            f"visibility {name}",
            "ok",
            f"{visibility} s, extended by the worker's heartbeat while {longest.name} runs (up to "
            f"{longest.timeout_s:g} s); a Lambda consumer needs >= {LAMBDA_VISIBILITY_FACTOR} x its function timeout",
        )
    return Check(f"visibility {name}", "ok", f"{visibility} s")


def lambda_timeout_check(settings: Settings, registry: Registry) -> Check | None:
    """Every explicit job timeout against ``settings.lambda_timeout_s`` (None when it is not set).

    A type whose timeout the function can never start would have its messages cycle until the
    redrive policy dead-letters them with no reason, so this fails before that can happen.
    """
    function_s = settings.lambda_timeout_s
    if function_s is None:
        return None
    try:
        check_lambda_timeout(registry, app_queues(registry), function_s)
    except ConfigurationError as exc:
        return Check(
            "lambda timeout",
            "fail",
            str(exc),
            "raise the function's timeout (and SQSJOBS_LAMBDA_TIMEOUT_S with it), lower or drop those "
            "job timeouts, or run their queue on ECS",
        )
    explicit = [s.timeout_s for s in registry if s.explicit_timeout_s is not None]
    longest = f"explicit timeouts up to {max(explicit):g} s" if explicit else "no explicit timeouts"
    return Check(
        "lambda timeout",
        "ok",
        f"{function_s} s starts every job type ({longest}; a type without one runs in the time left)",
    )


def bucket_checks_flow(settings: Settings) -> Flow[list[Check]]:
    """The claim-check bucket exists, and its lifecycle expires both prefixes no later than the settings say."""
    bucket = settings.payload_bucket
    name = f"bucket {bucket}"
    try:
        yield Call("s3", "head_bucket", {"Bucket": bucket})
    except ObjectStoreError as exc:
        if exc.code not in objects.MISSING_CODES:
            raise
        missing = "missing: a payload or result over its inline limit cannot be stored"
        fix = "run `sqsjobs provision`, or set SQSJOBS_PAYLOAD_BUCKET to the bucket infra/ made"
        return [Check(name, "fail", missing, fix)]
    try:
        rules = (yield Call("s3", "get_bucket_lifecycle_configuration", {"Bucket": bucket}))["Rules"]
    except ObjectStoreError as exc:
        if exc.code != "NoSuchLifecycleConfiguration":
            raise
        rules = []
    days = {
        r.get("Filter", {}).get("Prefix"): r.get("Expiration", {}).get("Days")
        for r in rules
        if r.get("Status") == "Enabled"
    }
    never = [p for p in (objects.PAYLOADS, objects.RESULTS) if not days.get(p)]
    if never:
        detail = f"objects under {', '.join(never)} never expire (no lifecycle rule)"
        return [
            Check(
                name, "warn", detail, "run `sqsjobs provision` (it applies the rules of payload_object_days)"
            )
        ]
    return [
        Check(name, "ok", "objects expire after " + ", ".join(f"{days[p]} d ({p})" for p in sorted(days)))
    ]


def partiql_check_flow(settings: Settings) -> Flow[Check]:
    """Whether the endpoint refuses a PartiQL statement whose condition is false (``store/probe.py``).

    Writes the probe item (one PutItem, one refused statement: two write units).
    """
    found, why = yield from probe.partiql_flow(settings.table_name, time.time())
    name = "partiql conditions"
    on = "on" if settings.batch_writes else "off (batch_writes=False)"
    if found is probe.PartiQL.HONOURED:
        return Check(name, "ok", f"a statement whose condition is false is refused: batched writes {on}")
    if found is probe.PartiQL.UNSUPPORTED:
        return Check(name, "ok", f"this endpoint refuses PartiQL ({why}): every write is a single one")
    if found is probe.PartiQL.UNKNOWN:
        return Check(
            name,
            "warn",
            f"could not probe: {why}",
            "check the table exists and that this identity may PutItem and PartiQLUpdate on it",
        )
    if not settings.batch_writes:
        return Check(
            name,
            "ok",
            "this endpoint ignores PartiQL conditions; batched writes are off (batch_writes=False)",
        )
    return Check(
        name,
        "warn",
        "this endpoint ignores PartiQL conditions (a statement whose condition is false was not refused, as "
        "moto's server does): workers turn batched writes off when they start (one log line), but a producer's "
        "enqueue_many would still batch its records",
        "set SQSJOBS_BATCH_WRITES=0 for every process on this endpoint (AWS and MiniStack honour conditions)",
    )


def doctor_flow(settings: Settings, registry: Registry) -> Flow[list[Check]]:
    """Every check; the caller fails when any is ``fail``."""
    checks: list[Check] = []
    try:
        checks.extend((yield from table_checks_flow(settings)))
        for queue in app_queues(registry):
            checks.extend((yield from queue_checks_flow(settings, registry, queue)))
        checks.extend((yield from bucket_checks_flow(settings)))
        checks.append((yield from partiql_check_flow(settings)))
    except AwsError as exc:
        where = settings.endpoint_url or "AWS"
        checks.append(
            Check(
                "reach AWS",
                "fail",
                str(exc).splitlines()[0],
                f"check credentials and --endpoint-url (now {where})",
            )
        )
    try:
        redrive_count(settings, registry)
    except ConfigurationError as exc:
        checks.append(Check("settings", "fail", str(exc), "raise SQSJOBS_MAX_RECEIVE_COUNT or unset it"))
    checks.extend(type_retention_checks(settings, registry))
    lambda_check = lambda_timeout_check(settings, registry)
    if lambda_check is not None:
        checks.append(lambda_check)
    return checks


def encode(checks: list[Check]) -> str:
    """The report as JSON."""
    return json.dumps(
        {"ok": not any(c.level == "fail" for c in checks), "checks": [c.to_dict() for c in checks]}
    )
