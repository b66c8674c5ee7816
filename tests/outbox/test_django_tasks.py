"""A Django project (settings here) enqueues with ``@task`` through sqsjobs, on the test Postgres.

Real processes run the jobs: ``sqsjobs outbox relay`` and ``sqsjobs worker`` on MiniStack. A task
enqueued in an atomic block that commits runs and its result comes back as a ``TaskResult``; one
whose block rolls back never exists; a task that raises comes back ``FAILED`` with its exception.

This module runs twice: here on Django 5.2 and the ``django-tasks`` backport (Python 3.11), and on
Django 6's own ``django.tasks`` in ``.venv-django6`` (Python 3.12: ``test_django6.py`` runs it there).
"""

from __future__ import annotations

import contextlib

import django
import psycopg
import pytest
from django.conf import settings

from sqsjobs.django import task_api
from sqsjobs.outbox.tables import count
from tests.integration.helpers import kill_group, wait_until, worker_process
from tests.outbox.test_outbox_processes import relay

pytestmark = pytest.mark.slow
APP = "tests.apps.django_tasks:app"


class Rollback(Exception):
    pass


@pytest.fixture
def project(postgres, dsn, ministack_url, make_app, monkeypatch):
    """Django configured on this test's database (once per process: Django configures only once)."""
    parts = dict(p.split("=", 1) for p in dsn.split())
    if settings.configured:
        pytest.skip("Django was already configured in this process by another test")
    settings.configure(
        USE_TZ=True,
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": parts["dbname"],
                "USER": "postgres",
                "HOST": parts["host"],
            }
        },
        TASKS={"default": {"BACKEND": "sqsjobs.django.SqsJobsBackend", "OPTIONS": {"APP": APP}}},
    )
    django.setup()
    from tests.apps import django_tasks

    sqsjobs_app = make_app(ministack_url, name=django_tasks.app.name)
    monkeypatch.setattr(django_tasks, "app", sqsjobs_app)
    django_tasks.register(sqsjobs_app, django_tasks.add, django_tasks.explode, django_tasks.attempt_of)
    sqsjobs_app.provision()
    return django_tasks


def test_a_task_commits_with_its_transaction_runs_and_returns_its_result(project, dsn):
    from django.db import connection, transaction

    TaskResultStatus, TaskResultDoesNotExist = task_api.TaskResultStatus, task_api.TaskResultDoesNotExist

    seen: list[str] = []

    def record(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    with transaction.atomic(), connection.execute_wrapper(record):
        with connection.cursor() as cursor:
            cursor.execute("INSERT INTO orders VALUES ('d1', 5)")
        added = project.add.enqueue(2, 3)
    # the row went through Django's cursor: the project's execute wrappers (and query log) saw it
    assert [sql.split("(")[0].strip() for sql in seen] == [
        "INSERT INTO orders VALUES",
        "INSERT INTO sqsjobs_outbox",
    ]
    with pytest.raises(Rollback), transaction.atomic():
        rolled_back = project.add.enqueue(40, 2)
        raise Rollback()
    failing = project.explode.enqueue("boom")
    with_context = project.attempt_of.enqueue("ctx")
    assert added.status == TaskResultStatus.READY and added.args == [2, 3]

    app = project.app
    procs = [relay(app, dsn, "--poll", "0.5"), worker_process(app, APP, concurrency=2)]
    try:
        for result in (added, failing, with_context):
            wait_until(lambda r=result: refreshed(r).is_finished, 60, f"{result.task.name} finished")
    finally:
        kill_group(*procs)
    assert added.status == TaskResultStatus.SUCCESSFUL
    assert added.return_value == 5
    assert added.started_at <= added.finished_at
    assert added.attempts == 1  # one attempt, though a first-attempt success writes no history
    # a task that takes a context gets Django's TaskContext: the running attempt's TaskResult
    assert with_context.return_value == {
        "label": "ctx",
        "attempt": 1,
        "id": with_context.id,
        "status": str(TaskResultStatus.RUNNING),
    }
    assert with_context.attempts == 1
    assert failing.status == TaskResultStatus.FAILED
    assert failing.errors[0].exception_class is ValueError
    assert "boom" in failing.errors[0].traceback
    with psycopg.connect(dsn) as conn:
        assert count(conn) == 0
    with pytest.raises(TaskResultDoesNotExist):
        project.add.get_result(rolled_back.id)
    assert project.add.get_result(added.id).return_value == 5
    # the results are the installed Django's own: django.tasks on Django 6, the backport's before
    assert ("django.tasks" if django.VERSION >= (6,) else "django_tasks") == task_api.SOURCE
    assert type(project.add.get_result(added.id)).__module__ == f"{task_api.SOURCE}.base"

    # OUTBOX: False: Django's own on_commit semantics, the job enqueued by the commit's callback.
    from sqsjobs.django import SqsJobsBackend

    direct = SqsJobsBackend("direct", {"OPTIONS": {"APP": APP, "OUTBOX": False}})
    with transaction.atomic():
        on_commit = direct.enqueue(project.add, [1, 1], {})
        with pytest.raises(TaskResultDoesNotExist):  # not before the commit
            direct.get_result(on_commit.id)
    with pytest.raises(Rollback), transaction.atomic():
        dropped = direct.enqueue(project.add, [1, 2], {})
        raise Rollback()
    assert direct.get_result(on_commit.id).status == TaskResultStatus.READY
    with pytest.raises(TaskResultDoesNotExist):
        direct.get_result(dropped.id)


def refreshed(result):
    with contextlib.suppress(task_api.TaskResultDoesNotExist):  # not moved by the relay yet
        result.refresh()
    return result
