"""A ``django.tasks`` backend on sqsjobs: Django's ``@task`` enqueues sqsjobs jobs (docs/django.md).

``SqsJobsBackend`` is the backend (``TASKS = {"default": {"BACKEND": "sqsjobs.django.SqsJobsBackend",
"OPTIONS": {"APP": "shop.jobs:app"}}}``); ``register(app, *tasks)`` makes each task a job type of the
App its workers run. Built on the ``django-tasks`` backport for Django 5.2 (``sqsjobs[django]``);
Django 6's ``django.tasks`` has the same API.
"""

from __future__ import annotations

from sqsjobs.django.backend import SqsJobsBackend, register, task_result

__all__ = ["SqsJobsBackend", "register", "task_result"]
