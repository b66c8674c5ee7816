"""Django tasks run by sqsjobs: the App the worker and the relay load, and the tasks it registers.

A worker process configures a minimal Django itself (its tasks touch no database); the test
process configures Django first, with its Postgres database, before it imports this module.
"""

from __future__ import annotations

import os

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        USE_TZ=True,
        TASKS={
            "default": {
                "BACKEND": "sqsjobs.django.SqsJobsBackend",
                "OPTIONS": {"APP": "tests.apps.django_tasks:app"},
            }
        },
    )
    django.setup()

try:  # Django 6: its own django.tasks
    from django.tasks import TaskContext, task
except ImportError:  # Django 5.2: the django-tasks backport of the same API
    from django_tasks import TaskContext, task

from sqsjobs import App
from sqsjobs.django import register

app = App(os.environ.get("TEST_APP_NAME", "djangotasks"))


@task()
def add(a: int, b: int) -> int:
    return a + b


@task()
def explode(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True)
def attempt_of(context: TaskContext, label: str) -> dict[str, object]:
    """What Django's TaskContext tells a task about the run it is in."""
    result = context.task_result
    return {"label": label, "attempt": context.attempt, "id": result.id, "status": str(result.status)}


register(app, add, explode, attempt_of)
