"""What a deployment of an App is built from: its queues, the limits they must respect, and IAM actions.

Pure and CDK-free: ``infra/`` (the CDK construct), the local stacks and the tests all import it,
so the numbers a stack is synthesized from come from the same code the runtime uses, and the
rules that tie settings together (the redrive count above every type's attempts, the platform's
kill after the worker's drain, the Lambda timeout against the job timeouts) are checked in one place.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from sqsjobs.errors import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from sqsjobs.config import Settings
    from sqsjobs.registry import Registry

#: The queue's visibility timeout must be at least this many times the function timeout, or a
#: batch still running can reappear and be handed to a second invocation.
#: https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
LAMBDA_VISIBILITY_FACTOR = 6
#: Lambda function timeout cap (15 min).
#: https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html
LAMBDA_MAX_TIMEOUT_S = 900
#: ``ScalingConfig.MaximumConcurrency`` of an SQS event source mapping: 2..1000.
#: https://docs.aws.amazon.com/lambda/latest/api/API_ScalingConfig.html
ESM_MIN_CONCURRENCY, ESM_MAX_CONCURRENCY = 2, 1000
#: Without a batching window an SQS event source mapping delivers at most 10 records per batch.
#: https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html
ESM_MAX_BATCH_SIZE = 10
#: Fargate kills a container this long after SIGTERM at most (``stopTimeout`` cap).
#: https://docs.aws.amazon.com/AmazonECS/latest/APIReference/API_ContainerDefinition.html
FARGATE_MAX_STOP_TIMEOUT_S = 120
#: Time after the drain deadline for releasing unfinished jobs, flushing acks and exiting.
STOP_MARGIN_S = 10
#: DLQ retention: the SQS maximum (14 days), so an operator has time to look.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_SetQueueAttributes.html
DLQ_RETENTION_S = 14 * 86_400

#: What each deployed principal may do, by service. Every action is named; none is a wildcard, and
#: ``tests/unit/test_deployment.py`` keeps each list equal to the calls the runtime code makes.
#: ``WORKER``: the ECS worker and the Lambda worker (claim → run → record → ack, enqueue from a
#: handler, dead-letter with a reason). ``SWEEPER``: read the ``attention`` index, mark the entry pending,
#: send hints. ``SCHEDULER``: the role EventBridge Scheduler assumes to deliver a fire (and to
#: dead-letter one it cannot deliver). The Lambda event source mapping's own receive/delete rights
#: are granted with the mapping.
WORKER_ACTIONS: Mapping[str, tuple[str, ...]] = {
    "dynamodb": (
        "dynamodb:GetItem",
        # A chain step's finish reads its chain record and the next step in one request.
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:PartiQLInsert",
        "dynamodb:PartiQLUpdate",
        # Batches (sqsjobs.batches): a finish's completion check reads the counter shards, lists a
        # batch's items in the batch_items index, and completes it in a transaction with a check.
        "dynamodb:BatchGetItem",
        "dynamodb:Query",
        "dynamodb:ConditionCheckItem",
        # A limit's concurrency slot is given back by deleting it (``limits/plugin.py``, both workers);
        # the ECS worker also deletes its registry item at exit (``runtime/presence.py``).
        "dynamodb:DeleteItem",
        # A tagged job's tag items, written after its record (``store/tags.py``).
        "dynamodb:BatchWriteItem",
    ),
    "sqs": (
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:SendMessage",
        "sqs:GetQueueUrl",
    ),
    # The claim-check bucket: read payloads, write results (and payloads of jobs a handler enqueues).
    "s3": ("s3:GetObject", "s3:PutObject"),
}
#: The ECS worker's task scale-in protection (``runtime/protection.py``): the worker asks the ECS
#: agent, which calls this action with the task role, on the task's own ARN.
TASK_PROTECTION_ACTIONS: tuple[str, ...] = ("ecs:UpdateTaskProtection",)
SWEEPER_ACTIONS: Mapping[str, tuple[str, ...]] = {
    "dynamodb": (
        "dynamodb:Query",
        "dynamodb:GetItem",
        "dynamodb:UpdateItem",
        # The repair of a batch whose completion check was lost: the worker's completion, below.
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:ConditionCheckItem",
        # The slow-run baselines from the records, where CloudWatch is not read (``charts_source``);
        # on AWS they come from the workers' metrics (cloudwatch:GetMetricData, granted by infra on
        # resource * as the API's charts are: sqsjobs_cdk.api.grant_metric_reads).
        "dynamodb:Scan",
    ),
    # The DLQ reconciler (runtime/reconciler.py) reads every DLQ, sends hints and moves copies.
    "sqs": (
        "sqs:SendMessage",
        "sqs:GetQueueUrl",
        "sqs:GetQueueAttributes",
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
    ),
    # A completion callback whose payload (a final stage's results) is too large for its record is
    # written to the bucket (transport/objects.py, whose read the sweeper never calls but shares).
    "s3": ("s3:GetObject", "s3:PutObject"),
}
SCHEDULER_ACTIONS: Mapping[str, tuple[str, ...]] = {"sqs": ("sqs:SendMessage",)}
#: What ``App.enqueue``/``enqueue_many`` call from a producer service outside the deployment (infra's
#: ``SqsJobs.grant_enqueue``): resolve the queue URLs (the queue's and its DLQ's), send the messages,
#: write the records (a single put, or batched INSERTs), and write a payload too large for the message.
PRODUCER_ACTIONS: Mapping[str, tuple[str, ...]] = {
    # UpdateItem: a transactional enqueue clears its sent records' attention entries. ConditionCheckItem:
    # a transaction's check (a batch's completion, when a producer's seal completes it).
    "dynamodb": (
        "dynamodb:PutItem",
        "dynamodb:PartiQLInsert",
        "dynamodb:UpdateItem",
        "dynamodb:ConditionCheckItem",
        # A tagged job's tag items, written after its record (``store/tags.py``).
        "dynamodb:BatchWriteItem",
    ),
    "sqs": ("sqs:SendMessage", "sqs:GetQueueUrl"),
    "s3": ("s3:PutObject",),
}

#: What an App that encrypts payloads (``Settings.encrypt``, ``PayloadVersion(encrypt=)``) adds to the
#: worker's, the API's and the producer's roles (``store/sealing.py``): a data key to seal with and
#: its unwrapping, on the configured KMS keys only; and the read and first write of the hash key's
#: item (``sealkey#<key ARN>``) in the jobs table, limited to those items by ``dynamodb:LeadingKeys``.
#: An App that does not encrypt is granted none of it. docs/encryption.md.
ENCRYPTION_ACTIONS: Mapping[str, tuple[str, ...]] = {
    "kms": ("kms:GenerateDataKey", "kms:Decrypt"),
    "dynamodb": ("dynamodb:GetItem", "dynamodb:PutItem"),
}

#: The HTTP API's routes that carry their own credential (``sqsjobs.api.token_routes.open_router``:
#: a wait token's answer URL holds its key, which a webhook sender has and IAM cannot sign for), as
#: (method, path): the deployed API leaves them outside its IAM authorisation, one route each.
OPEN_ROUTES: tuple[tuple[str, str], ...] = (("POST", "/tokens/{token_id}/answer"),)

#: What the HTTP API's function calls (``sqsjobs.api``; infra's ``HttpApi`` option): enqueue one job
#: per request and read it back, read, list (Scan; Query of the attention index) and cancel jobs,
#: retry them, read queue depths and the counts' Scan, browse DLQs without loss and replay them
#: (receive, hide and release, delete, requeue), and read and write payloads and results in S3. The
#: HTTP worker protocol (``POST /leases``: ``sqsjobs.remote``) claims and finishes external types'
#: jobs with the worker's own stages, through its write batcher: claims and finishes that meet in
#: it leave as batched PartiQL UPDATEs (a lease request claims one message at a time today, one
#: UpdateItem each: ``tests/remote/test_lease_protocol.py`` counts them; an enqueue is one PutItem).
API_ACTIONS: Mapping[str, tuple[str, ...]] = {
    "dynamodb": (
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:PartiQLInsert",
        "dynamodb:PartiQLUpdate",
        "dynamodb:Query",
        "dynamodb:Scan",
        "dynamodb:BatchGetItem",
        # cancel or retry of a batch item: its count in a transaction, its batch's completion
        "dynamodb:ConditionCheckItem",
        # POST /types/{type}/resume deletes the type's pause item (``limits/namespace.py``).
        "dynamodb:DeleteItem",
        # A tagged job's tag items, written after its record (``store/tags.py``).
        "dynamodb:BatchWriteItem",
    ),
    "sqs": (
        "sqs:SendMessage",
        "sqs:GetQueueUrl",
        "sqs:GetQueueAttributes",
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:DeleteMessage",
    ),
    "s3": ("s3:GetObject", "s3:PutObject"),
    # The key HTTP workers' leases are signed with, read once at a cold start (``remote/lease.py``).
    "secretsmanager": ("secretsmanager:GetSecretValue",),
    # Runtime schedules (``schedules/runtime.py``: POST /schedules...), on the runtime group and its
    # schedules only; the group is made by infra (CreateScheduleGroup: an emulator's first schedule).
    # CreateSchedule and UpdateSchedule also need iam:PassRole on the Scheduler role
    # (``RUNTIME_SCHEDULE_PASS_ROLE``), granted with it: it is not a call the code makes.
    "scheduler": (
        "scheduler:CreateSchedule",
        "scheduler:UpdateSchedule",
        "scheduler:DeleteSchedule",
        "scheduler:ListSchedules",
        "scheduler:CreateScheduleGroup",
    ),
}
#: What creating or updating a schedule needs besides the scheduler actions: passing the role
#: Scheduler assumes (https://docs.aws.amazon.com/scheduler/latest/UserGuide/setting-up.html), only to
#: ``scheduler.amazonaws.com`` and only that role.
RUNTIME_SCHEDULE_PASS_ROLE: tuple[str, ...] = ("iam:PassRole",)

#: SQS batch APIs are authorised by the single-message action.
#: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-api-permissions-reference.html
_BATCH_SUFFIX = "Batch"


#: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ql-iam.html
_PARTIQL_WRITES = ("dynamodb:PartiQLInsert", "dynamodb:PartiQLUpdate")
#: There is no ``dynamodb:TransactWriteItems`` action: each item of a transaction is authorised as
#: its own PutItem, UpdateItem, DeleteItem or ConditionCheckItem on its table. On the jobs table a
#: transaction puts records, updates a batch's records and counters, and checks a batch's shards
#: (its completion); the application's own items need the actions of their writes on the
#: application's tables, granted by the application (sqsjobs cannot know them).
#: https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html
_TRANSACTION_JOB_WRITES = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem")


def queues_of(registry: Registry, extra: Iterable[str] = ()) -> list[str]:
    """The logical queues a deployment needs: every handler's queue plus ``extra`` (``default`` if none).

    The same rule ``sqsjobs provision`` applies, so infra and provision create the same queues.
    """
    return sorted(set(extra) | set(registry.queues()) or {"default"})


def iam_actions(service: str, operation: str) -> tuple[str, ...]:
    """The IAM actions that authorise a boto3 operation, e.g. ``sqs:SendMessage`` for ``send_message_batch``.

    A ``BatchExecuteStatement`` is authorised by the kinds of statement it carries (sqsjobs sends
    INSERTs and UPDATEs), not by its own name; a ``TransactWriteItems`` by its items' (on the jobs
    table: the records' PutItem).
    """
    if (service, operation) == ("dynamodb", "batch_execute_statement"):
        return _PARTIQL_WRITES
    if (service, operation) == ("dynamodb", "transact_write_items"):
        return _TRANSACTION_JOB_WRITES
    name = "".join(part.capitalize() for part in operation.split("_"))
    if service == "sqs" and name.endswith(_BATCH_SUFFIX):
        name = name[: -len(_BATCH_SUFFIX)]
    return (f"{service}:{name}",)


def check_lambda_visibility(queue: str, *, visibility_timeout_s: int, function_timeout_s: int) -> None:
    """Raise unless the queue hides a message for at least 6 x the function timeout."""
    if not 1 <= function_timeout_s <= LAMBDA_MAX_TIMEOUT_S:
        raise ConfigurationError(
            f"Lambda timeout must be 1..{LAMBDA_MAX_TIMEOUT_S} s, got {function_timeout_s}"
        )
    needed = LAMBDA_VISIBILITY_FACTOR * function_timeout_s
    if visibility_timeout_s < needed:
        raise ConfigurationError(
            f"queue {queue!r}: visibility_timeout_s={visibility_timeout_s} is below "
            f"{LAMBDA_VISIBILITY_FACTOR} x the Lambda timeout ({function_timeout_s} s) = {needed}; raise "
            f"visibility_timeout_s to at least {needed} or lower the function timeout to at most "
            f"{visibility_timeout_s // LAMBDA_VISIBILITY_FACTOR} s"
        )


def _function_s_for(run_s: float) -> int:
    """The shortest function timeout that starts a run of ``run_s``.

    The deadline guard wants ``run_s + DEADLINE_MARGIN_S`` left, and an invocation starts its
    handler with a little less than the configured timeout left, hence a second of slack.
    """
    from sqsjobs.runtime.lambda_sqs import DEADLINE_MARGIN_S

    return math.ceil(run_s + DEADLINE_MARGIN_S) + 1


def lambda_timeout_s(registry: Registry, queues: Iterable[str]) -> int:
    """The function timeout infra chooses when none is given, for the job types on ``queues``.

    It starts every explicit timeout (the Lambda worker's deadline guard) and gives types without
    one as long as the ECS worker would (``DEFAULT_TIMEOUT_S``); on Lambda those run in whatever an
    invocation has left, so any function timeout runs them (``check_lambda_timeout``).
    """
    from sqsjobs.runtime.lambda_sqs import DEADLINE_MARGIN_S

    wanted = set(queues)
    specs = [s for s in registry if s.queue in wanted]
    explicit = [s for s in specs if s.explicit_timeout_s is not None]
    if explicit:
        worst = max(explicit, key=lambda s: s.timeout_s)
        if _function_s_for(worst.timeout_s) > LAMBDA_MAX_TIMEOUT_S:
            raise ConfigurationError(
                f"job type {worst.name!r} on queue {worst.queue!r} has a {worst.timeout_s:g} s timeout, "
                f"more than a Lambda function can run ({LAMBDA_MAX_TIMEOUT_S} s minus a "
                f"{DEADLINE_MARGIN_S:g} s margin); run that queue on ECS, or drop the timeout (a type "
                "without one runs in the time an invocation has left)"
            )
    return _function_s_for(max((s.timeout_s for s in specs), default=0.0))


def check_lambda_timeout(registry: Registry, queues: Iterable[str], function_timeout_s: int) -> None:
    """Raise unless a function timeout of ``function_timeout_s`` runs every job type on ``queues``.

    Only explicit timeouts count: the Lambda worker never starts a job whose timeout plus the
    deadline margin does not fit an invocation, so such a type would cycle until redrive
    (a silent trap: docs/lambda.md). A type without a timeout runs in the time an invocation has left, on any
    function timeout that leaves it ``MIN_RUN_S`` after the margin.
    """
    from sqsjobs.runtime.lambda_sqs import DEADLINE_MARGIN_S, MIN_RUN_S

    if not 1 <= function_timeout_s <= LAMBDA_MAX_TIMEOUT_S:
        raise ConfigurationError(
            f"Lambda timeout must be 1..{LAMBDA_MAX_TIMEOUT_S} s, got {function_timeout_s}"
        )
    wanted = sorted(set(queues))
    specs = sorted((s for s in registry if s.queue in wanted), key=lambda s: s.name)
    problems = [
        f"job type {s.name!r} (queue {s.queue!r}) has a {s.timeout_s:g} s timeout, which with the "
        f"{DEADLINE_MARGIN_S:g} s deadline margin needs a function timeout of at least "
        f"{_function_s_for(s.timeout_s)} s"
        for s in specs
        if s.explicit_timeout_s is not None and _function_s_for(s.timeout_s) > function_timeout_s
    ]
    if problems:
        raise ConfigurationError(
            f"the Lambda function's {function_timeout_s} s timeout can never start some job types on "
            f"{wanted}: {'; '.join(problems)}. Raise the function's timeout, lower those timeouts, or "
            "drop them (a type without a timeout runs in the time an invocation has left)"
        )
    defaults = [s.name for s in specs if s.explicit_timeout_s is None]
    if defaults and _function_s_for(MIN_RUN_S) > function_timeout_s:
        raise ConfigurationError(
            f"the Lambda function's {function_timeout_s} s timeout leaves job types without a timeout "
            f"({', '.join(defaults)}) no time to run: they need {MIN_RUN_S:g} s plus the "
            f"{DEADLINE_MARGIN_S:g} s deadline margin, so a function timeout of at least "
            f"{_function_s_for(MIN_RUN_S)} s"
        )


def check_esm(*, batch_size: int, max_concurrency: int) -> None:
    """Raise unless the SQS event source mapping settings are within the AWS limits."""
    if not 1 <= batch_size <= ESM_MAX_BATCH_SIZE:
        raise ConfigurationError(f"Lambda batch_size must be 1..{ESM_MAX_BATCH_SIZE}, got {batch_size}")
    if not ESM_MIN_CONCURRENCY <= max_concurrency <= ESM_MAX_CONCURRENCY:
        raise ConfigurationError(
            f"Lambda max_concurrency must be {ESM_MIN_CONCURRENCY}..{ESM_MAX_CONCURRENCY}, got {max_concurrency}"
        )


def stop_timeout_s(drain_timeout_s: float) -> int:
    """ECS ``stopTimeout`` for a worker: the drain deadline plus time to release and exit.

    The platform's SIGKILL must come after the worker's own deadline (a graceful shutdown drains,
    releases and exits first), or running jobs are killed instead of released.
    """
    timeout = math.ceil(drain_timeout_s) + STOP_MARGIN_S
    if timeout > FARGATE_MAX_STOP_TIMEOUT_S:
        raise ConfigurationError(
            f"drain_timeout_s={drain_timeout_s:g} leaves no room under Fargate's {FARGATE_MAX_STOP_TIMEOUT_S} s "
            f"stopTimeout cap (needs {timeout} s); use drain_timeout_s <= "
            f"{FARGATE_MAX_STOP_TIMEOUT_S - STOP_MARGIN_S}"
        )
    return timeout


def runtime_environment(settings: Settings, app_path: str) -> dict[str, str]:
    """Environment for a deployed worker, sweeper or function: the names infra chose, pinned.

    Settings given explicitly to the App win over these anyway (``Settings.from_env``); pinning them
    makes the deployed process agree with what was synthesized even when the synthesizing shell
    had ``SQSJOBS_*`` variables set.
    """
    if not re.fullmatch(r"[\w.]+:\w+", app_path):
        raise ConfigurationError(f"expected an app path like 'shop.jobs:app', got {app_path!r}")
    return {
        "SQSJOBS_APP": app_path,
        "SQSJOBS_TABLE": settings.table_name,
        "SQSJOBS_QUEUE_PREFIX": settings.queue_prefix,
        "SQSJOBS_VISIBILITY_TIMEOUT_S": str(settings.visibility_timeout_s),
        "SQSJOBS_DRAIN_TIMEOUT_S": f"{settings.drain_timeout_s:g}",
        "SQSJOBS_SCHEDULE_GROUP": settings.schedule_group,
        "SQSJOBS_RUNTIME_SCHEDULE_GROUP": settings.runtime_schedule_group,
        "SQSJOBS_PAYLOAD_BUCKET": settings.payload_bucket,
        # Producers and workers must agree on which queues have levels or serialize keys.
        **(
            {"SQSJOBS_PRIORITY_QUEUES": ",".join(sorted(settings.priority_queues))}
            if settings.priority_queues
            else {}
        ),
        **(
            {"SQSJOBS_SERIALIZED_QUEUES": ",".join(sorted(settings.serialized_queues))}
            if settings.serialized_queues
            else {}
        ),
        # How long records stay, and whether they are archived: the sweeper, workers and the archive's
        # function read the same (an App configured by environment alone would otherwise differ).
        **({"SQSJOBS_ARCHIVE_DAYS": str(settings.archive_days)} if settings.archive_days > 0 else {}),
        **(
            {"SQSJOBS_RETENTION": ",".join(f"{k}={v:g}" for k, v in sorted(settings.retention.items()))}
            if settings.retention
            else {}
        ),
    }
