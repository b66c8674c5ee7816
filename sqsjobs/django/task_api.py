"""Django's task API, from where the installed Django keeps it: ``django.tasks`` or the backport.

Django 6 ships ``django.tasks`` (Python 3.12 and later); on Django 5.2 the ``django-tasks`` package
is the same API under another name (``sqsjobs[django]`` installs it where Django 6 cannot be). The
backend imports these names from here only, so one backend serves both, and a project moving to
Django 6 changes its own ``from django_tasks import task`` and nothing of sqsjobs'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typed against the backport (the dev environment's Python is 3.11)
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.utils import normalize_json

    SOURCE = "django_tasks"
else:
    try:  # Django 6 and later
        from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.utils.json import normalize_json

        SOURCE = "django.tasks"
    except ImportError:  # Django 5.2: the backport
        try:
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
            from django_tasks.exceptions import InvalidTaskError as InvalidTask
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.utils import normalize_json
        except ImportError as exc:
            from sqsjobs.errors import ConfigurationError

            raise ConfigurationError(
                "sqsjobs.django needs Django's task API: Django 6 (django.tasks), or on Django 5.2 the "
                "django-tasks backport (pip install 'sqsjobs[django]')"
            ) from exc

        SOURCE = "django_tasks"

__all__ = [
    "SOURCE",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
]
