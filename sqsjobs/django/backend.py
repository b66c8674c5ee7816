"""``SqsJobsBackend``: Django tasks as sqsjobs jobs, enqueued with the caller's transaction.

A task is a job type named by its module path (``Task.module_path``); its payload is the call's
``{"args": [...], "kwargs": {...}}``. ``register(app, *tasks)`` gives the App a handler for each, so
``sqsjobs worker --app`` runs them (the worker's process must configure Django, as any Django
worker does). Results and errors come back from the job record as Django ``TaskResult``s.

When is the job sent? ``OPTIONS["OUTBOX"]`` (default True) writes it into the outbox table through
the Django connection (``OPTIONS["DATABASE"]``, a PostgreSQL one, psycopg 3), inside the atomic block
the caller has open: it commits or rolls back with the caller's rows, and survives a crash right
after the commit (docs/outbox.md). With ``OUTBOX: False`` the job is enqueued by
``transaction.on_commit``, Django's own semantics: nothing on a rollback, but a process that dies
between its commit and the callback loses the job.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from sqsjobs.app import App
from sqsjobs.django.task_api import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
)
from sqsjobs.errors import JobNotFound
from sqsjobs.job import JobStatus
from sqsjobs.store.codec import idempotent_job_id

if TYPE_CHECKING:
    from sqsjobs.context import JobContext
    from sqsjobs.job import Job

T = TypeVar("T")

#: sqsjobs states as Django sees them: waiting to run, running, or finished one way or the other.
STATUS: dict[JobStatus, TaskResultStatus] = {
    state: TaskResultStatus(value)
    for value, states in {
        "READY": (JobStatus.QUEUED, JobStatus.WAITING, JobStatus.RETRY_SCHEDULED),
        "RUNNING": (JobStatus.RUNNING,),
        "SUCCESSFUL": (JobStatus.SUCCEEDED,),
        "FAILED": (JobStatus.DEAD, JobStatus.CANCELLED, JobStatus.EXPIRED),
    }.items()
    for state in states
}


def register(app: App, *tasks: Task[Any, Any], max_attempts: int = 1) -> None:
    """Give ``app`` a handler for each task: ``task.call(*args, **kwargs)``, its return value as the result.

    A task with ``takes_context=True`` gets Django's ``TaskContext`` first: its ``task_result`` is
    the running job's (``attempt``: this attempt's number, from 1). ``max_attempts`` defaults to 1: a Django task runs once and ends ``FAILED`` on an exception, as
    with Django's own backends; raise it to have sqsjobs retry with the App's backoff.
    """
    for t in tasks:

        def run(payload: dict[str, Any], ctx: JobContext, _task: Task[Any, Any] = t) -> Any:
            args = list(payload.get("args", []))
            if _task.takes_context:  # Django's TaskContext: the running attempt as a TaskResult
                running = ctx.job.evolve(status=JobStatus.RUNNING, lease_owner=ctx.worker_id)
                args.insert(0, TaskContext(task_result=task_result(_task, running, _task.backend)))
            return normalize_json(_task.call(*args, **payload.get("kwargs", {})))

        app.job(t.module_path, queue=t.queue_name, max_attempts=max_attempts)(run)


def task_result(task: Task[Any, T], job: Job, backend: str) -> TaskResult[T]:
    """The ``TaskResult`` a job record describes (``args``/``kwargs`` only while the record keeps the payload)."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    errors = []
    if job.last_error is not None and STATUS[job.status] == STATUS[JobStatus.DEAD]:
        name = job.last_error.error_class
        errors.append(
            TaskError(
                # The record keeps the class's name; a builtin's path is known, others' is their name.
                exception_class_path=name if "." in name else f"builtins.{name}",
                traceback=job.last_error.traceback or job.last_error.message,
            )
        )
    result: TaskResult[T] = TaskResult(
        task=task,
        id=job.id,
        status=STATUS[job.status],
        enqueued_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.started_at,
        args=list(payload.get("args", [])),
        kwargs=dict(payload.get("kwargs", {})),
        backend=backend,
        errors=errors,
        worker_ids=worker_ids(job),
    )
    object.__setattr__(result, "_return_value", job.result)  # TaskResult is frozen; Django's backends do this
    return result


#: In ``worker_ids``, an attempt whose worker the record does not keep (see ``worker_ids``).
UNRECORDED_WORKER = "unrecorded"


def worker_ids(job: Job) -> list[str]:
    """One worker id per attempt started, so Django's ``TaskResult.attempts`` counts them.

    The record's history names the worker of each finished attempt and ``lease_owner`` the running
    one's; a first attempt that succeeds writes no history entry (its times are the record's own)
    and the capped history drops the oldest, so those attempts are ``UNRECORDED_WORKER``.
    """
    ids = [h.worker for h in job.history]
    if job.status is JobStatus.RUNNING and job.lease_owner:
        ids.append(job.lease_owner)
    return [UNRECORDED_WORKER] * max(0, job.attempt - len(ids)) + ids


class SqsJobsBackend(BaseTaskBackend):
    """A ``django.tasks`` backend whose tasks are sqsjobs jobs (see the module docstring).

    ``OPTIONS``: ``APP`` (``"pkg.module:app"``, required), ``OUTBOX`` (default True), ``DATABASE``
    (default ``"default"``). Priorities map to the queue's levels: above 0 ``high``, below 0 ``low``
    (only on a queue in ``priority_queues``); ``run_after`` to ``run_at``; queue names are sqsjobs'.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.app_path: str = self.options["APP"]
        self.outbox: bool = self.options.get("OUTBOX", True)
        self.database: str = self.options.get("DATABASE", "default")
        self._app: App | None = None

    @property
    def app(self) -> App:
        """Loaded on first use: the App's module may itself declare the tasks this backend validates."""
        if self._app is None:
            self._app = App.from_path(self.app_path)
        return self._app

    def _priority(self, task: Task[Any, Any]) -> str | None:
        if task.priority == 0:
            return None
        if task.queue_name not in self.app.settings.priority_queues:
            raise InvalidTask(f"queue {task.queue_name!r} has no priority levels (priority_queues)")
        return "high" if task.priority > 0 else "low"

    def enqueue(self, task: Task[Any, T], args: Any, kwargs: Any) -> TaskResult[T]:
        """Send the task as a job: through the outbox in the open transaction, or on its commit."""
        self.validate_task(task)
        payload = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "run_at": task.run_after,
            "priority": self._priority(task),
        }
        if self.outbox:
            # Django's cursor, not its driver connection: the row is written as any query of the
            # project is (execute wrappers, query logging, the debug toolbar see it).
            with connections[self.database].cursor() as cursor:
                job_id = self.app.enqueue(task.module_path, payload, connection=cursor, **options)
        else:
            key = uuid.uuid4().hex  # the id is known now; the enqueue on commit makes that job
            job_id = idempotent_job_id(task.module_path, key)
            transaction.on_commit(
                lambda: self.app.enqueue(task.module_path, payload, idempotency_key=key, **options),
                using=self.database,
            )
        return TaskResult(
            task=task,
            id=job_id,
            status=STATUS[JobStatus.QUEUED],
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id: str) -> TaskResult[Any]:
        """The job's record as a ``TaskResult``; ``TaskResultDoesNotExist`` for no such job (yet)."""
        try:
            job = self.app.get(result_id)
        except JobNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        task = import_string(job.type)
        if not isinstance(task, Task):
            raise TaskResultDoesNotExist(f"{result_id}: job type {job.type!r} is not a Django task")
        return task_result(task, job, self.alias)
