"""The tasks framework the backend plugs into: Django's own ``django.tasks`` (Django 6), else
the ``django-tasks`` package that backports it to Django 4.2–5.2 (Python 3.10 and newer).

The two share one API, module for module; the names differ in one place (the backport's
``InvalidTaskError`` is Django 6's ``InvalidTask``). Everything in ``sqldelay.django`` takes
the framework's names from here, so one backend serves both, and tasks declared with either
``task`` decorator reach it through the ``TASKS`` setting as usual.
"""

from __future__ import annotations

try:
    from django.tasks import (
        TaskContext,
        TaskResult,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    BACKPORT = False
except ImportError:  # Django before 6: the backport, if it is installed
    try:
        from django_tasks import (
            TaskContext,
            TaskResult,
            TaskResultStatus,
            default_task_backend,
            task,
            task_backends,
        )
    except ImportError as exc:
        raise ImportError(
            "sqldelay.django needs Django's tasks framework: Django 6 (django.tasks), or on "
            "Django 4.2-5.2 the django-tasks package (pip install 'sqldelay[django-tasks]')"
        ) from exc
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import TaskError
    from django_tasks.exceptions import (
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import (
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json

    BACKPORT = True

__all__ = ["BACKPORT", "BaseTaskBackend", "InvalidTask", "TaskContext", "TaskError",
           "TaskResult", "TaskResultDoesNotExist", "TaskResultStatus", "default_task_backend",
           "normalize_json", "task", "task_backends", "task_enqueued", "task_finished",
           "task_started"]
