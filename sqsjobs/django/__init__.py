"""A ``django.tasks`` backend on sqsjobs: Django's ``@task`` enqueues sqsjobs jobs (docs/django.md).

``SqsJobsBackend`` is the backend (``TASKS = {"default": {"BACKEND": "sqsjobs.django.SqsJobsBackend",
"OPTIONS": {"APP": "shop.jobs:app"}}}``); ``register(app, *tasks)`` makes each task a job type of the
App its workers run. On Django 6 it is a backend of Django's own ``django.tasks``; on Django 5.2, of
the ``django-tasks`` backport with the same API (``sqsjobs.django.task_api`` picks the one installed).
"""

from __future__ import annotations

from sqsjobs.django.backend import SqsJobsBackend, register, task_result

__all__ = ["SqsJobsBackend", "register", "task_result"]
