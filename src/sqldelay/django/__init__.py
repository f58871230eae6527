"""A backend for Django's tasks framework on sqldelay's queues: ``django.tasks`` on Django 6,
the ``django-tasks`` backport on Django 4.2-5.2 (``framework``).

    TASKS = {"default": {
        "BACKEND": "sqldelay.django.SqlDelayBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"DATABASE": "default", "TABLE": "sqldelay_tasks", "RESULTS": 86400},
    }}
    INSTALLED_APPS = [..., "sqldelay.django"]   # the tables after migrate, the worker command

    python manage.py sqldelay_worker --queue default --queue emails --concurrency 4

Each Django queue name is a sqldelay queue of that name in ``TABLE``, on a SQLAlchemy engine
built from the Django database ``DATABASE`` names (PostgreSQL, MySQL/MariaDB, SQLite, Oracle,
SQL Server through mssql-django). A task is a sqldelay task message (``sqldelay.tasks``)
naming the function by its module path; the worker command runs them with a sqldelay
``Worker`` whose handler is a registry that imports each task by that path.

What maps to what: ``run_after`` is the message's due time; Django's priority (-100 to 100,
higher first) is the message's priority as it is (sqldelay's is any 32-bit integer, higher
first too); the result id is the message key, ``<queue name>.<32 hex digits>``. Enqueue in
an atomic block writes the message when the transaction commits (``transaction.on_commit``,
as Django's documentation asks of tasks enqueued inside a transaction), never before, so a
worker never runs a task whose data it cannot see yet, and a rollback leaves no task; outside
one it writes at once. ``ENQUEUE_ON_COMMIT: False`` writes at once in every case (the task is
then committed even if Django's transaction rolls back).

A task that raises is FAILED at once (Django's tasks are not retried) unless ``RETRY`` gives
a ``sqldelay.RetryPolicy``; a FAILED task is a sqldelay dead letter, which ``sqldelay
dead-letters requeue`` runs again. Results are kept ``RESULTS`` seconds (default a day; 0:
none, and ``get_result`` then knows a task only until it has run).
"""

from __future__ import annotations

import inspect
import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import sqlalchemy as sa
from django.db import close_old_connections, connections, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from ..errors import InvalidArgumentError
from ..messages import Envelope
from ..queue import DelayedQueue
from ..retry import RetryPolicy
from ..tasks import Task, Tasks
from ..tasks_base import NO_RETRY, TaskBase, TaskStatus, UnknownTaskError, status_op
from .framework import (
    BaseTaskBackend,
    InvalidTask,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
    task_finished,
    task_started,
)

if TYPE_CHECKING:
    from ..queue_base import QueueBase
    from ..tasks_base import TaskContext as SqlDelayTaskContext
    from ..tasks_base import TaskResult as SqlDelayTaskResult
    from ..worker import Worker

log = logging.getLogger("sqldelay.django")

DEFAULT_TABLE = "sqldelay_tasks"
DEFAULT_RESULTS = timedelta(days=1)

# Django's database engines and the SQLAlchemy dialect and driver that reach the same server
_DIALECTS = {
    "django.db.backends.postgresql": "postgresql+psycopg",
    "django.db.backends.mysql": "mysql+mysqldb",
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.oracle": "oracle+oracledb",
    "mssql": "mssql+pyodbc",
}

_STATUS = {TaskStatus.QUEUED: TaskResultStatus.READY,
           TaskStatus.RUNNING: TaskResultStatus.RUNNING,
           TaskStatus.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
           TaskStatus.FAILED: TaskResultStatus.FAILED}

_engines: dict[tuple[str, str], sa.Engine] = {}  # (alias, URL) -> engine
_engines_lock = threading.Lock()


def engine_for(alias: str) -> sa.Engine:
    """A SQLAlchemy engine on the database Django names ``alias`` (as its settings are now:
    the test database, under Django's test runner), one per process and settings."""
    settings = connections[alias].settings_dict
    url = database_url(settings)
    key = (alias, url.render_as_string(hide_password=False))
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = sa.create_engine(url, **_engine_options(settings))
        return engine


def database_url(settings: Mapping[str, Any]) -> sa.URL:
    """The SQLAlchemy URL of a Django database's settings."""
    engine = settings.get("ENGINE", "")
    drivername = _DIALECTS.get(engine)
    if drivername is None:
        raise InvalidArgumentError(
            f"sqldelay cannot reach a Django database of ENGINE {engine!r}: it takes "
            + ", ".join(sorted(_DIALECTS)))
    name = settings.get("NAME") or None
    if drivername == "sqlite":
        return sa.URL.create("sqlite", database=str(name) if name else None)
    options = settings.get("OPTIONS", {}) or {}
    query = {}
    if drivername.startswith("mssql"):
        query["driver"] = options.get("driver", "ODBC Driver 18 for SQL Server")
    port = settings.get("PORT")
    return sa.URL.create(drivername, username=settings.get("USER") or None,
                         password=settings.get("PASSWORD") or None,
                         host=settings.get("HOST") or None,
                         port=int(port) if port else None, database=name, query=query)


def _engine_options(settings: Mapping[str, Any]) -> dict[str, Any]:
    if settings.get("ENGINE") == "django.db.backends.sqlite3":
        return {}
    return {"pool_pre_ping": True}


class _DjangoTask(Protocol):
    """What the backend uses of a Django task (``django.tasks.Task``, or the backport's),
    typed here: Django's classes carry no types of their own."""

    @property
    def module_path(self) -> str: ...
    @property
    def queue_name(self) -> str: ...
    @property
    def run_after(self) -> datetime | None: ...
    @property
    def priority(self) -> int: ...
    @property
    def takes_context(self) -> bool: ...
    @property
    def func(self) -> Callable[..., Any]: ...

    def using(self, **changes: Any) -> _DjangoTask: ...

    def call(self, *args: Any, **kwargs: Any) -> Any: ...


# Django ships no types (and is absent where mypy runs): its base class is Any to mypy
class SqlDelayBackend(BaseTaskBackend):  # type: ignore[misc]
    """Django's tasks on sqldelay queues: see the module's docstring for the settings."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = self.options
        self.database = options.get("DATABASE", "default")
        self.table = options.get("TABLE", DEFAULT_TABLE)
        results = options.get("RESULTS", DEFAULT_RESULTS)
        if isinstance(results, int | float) and not isinstance(results, bool):
            results = timedelta(seconds=results) if results > 0 else False
        self.results = results
        retry = options.get("RETRY")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidArgumentError(f"OPTIONS['RETRY'] must be a sqldelay RetryPolicy, "
                                       f"got {retry!r}")
        self.retry = retry
        self.on_commit = bool(options.get("ENQUEUE_ON_COMMIT", True))
        self._registries: dict[tuple[int, str], DjangoTasks] = {}  # (engine, queue)
        self._lock = threading.Lock()

    # ---- sqldelay's side ---------------------------------------------------------------

    @property
    def engine(self) -> sa.Engine:
        return engine_for(self.database)

    def registry(self, queue_name: str) -> DjangoTasks:
        """The sqldelay task registry of Django queue ``queue_name`` (on the engine as the
        database settings are now)."""
        engine = self.engine
        key = (id(engine), queue_name)
        with self._lock:
            found = self._registries.get(key)
            if found is None:
                queue = DelayedQueue(engine, queue_name, table_name=self.table)
                found = self._registries[key] = DjangoTasks(self, queue)
            return found

    def create_schema(self) -> None:
        """The sqldelay tables of this backend, made or upgraded (what ``migrate`` does for
        the backends of the database it migrates, with ``sqldelay.django`` installed)."""
        from ..migrate import create_schema

        create_schema(self.engine, table_name=self.table)

    # ---- Django's side -----------------------------------------------------------------

    def enqueue(self, task: _DjangoTask, args: Sequence[Any],
                kwargs: Mapping[str, Any]) -> TaskResult:
        self.validate_task(task)
        registry = self.registry(task.queue_name)
        sqldelay_task = registry.task_for(task)
        key = f"{task.queue_name}.{os.urandom(16).hex()}"
        at = task.run_after
        if at is not None and timezone.is_naive(at):
            at = timezone.make_aware(at)
        args, kwargs = list(args), dict(kwargs)
        # checked now, whenever it is written: a wrong argument fails the caller here
        sqldelay_task.message(args, kwargs, at=at, key=key, replace=False,
                              priority=task.priority, group=None)
        _check_json(sqldelay_task, args, kwargs)
        result = TaskResult(
            task=task, id=key, status=TaskResultStatus.READY, enqueued_at=None,
            started_at=None, finished_at=None, last_attempted_at=None, args=args,
            kwargs=kwargs, backend=self.alias, errors=[], worker_ids=[])

        def write() -> None:
            sqldelay_task.enqueue(args, kwargs, at=at, key=key, priority=task.priority)
            object.__setattr__(result, "enqueued_at", timezone.now())
            task_enqueued.send(type(self), task_result=result)

        if self.on_commit:  # outside an atomic block Django runs it at once
            transaction.on_commit(write, using=self.database)
        else:
            write()
        return result

    def get_result(self, result_id: str) -> TaskResult:
        queue_name, dot, rest = str(result_id).rpartition(".")
        if not dot or not queue_name or (self.queues and queue_name not in self.queues):
            raise TaskResultDoesNotExist(result_id)
        registry = self.registry(queue_name)
        try:
            found = registry.queue.executor.run(status_op(registry.queue, result_id),
                                                write=False)
        except InvalidArgumentError:
            found = None
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        return self.task_result(found, queue_name)

    def task_result(self, found: SqlDelayTaskResult, queue_name: str) -> TaskResult:
        """Django's TaskResult of what sqldelay knows of a task (``tasks_base.TaskResult``)."""
        try:
            task = import_string(found.task).using(queue_name=queue_name, backend=self.alias)
        except (ImportError, AttributeError, TypeError, InvalidTask) as exc:
            raise TaskResultDoesNotExist(
                f"{found.key}: its task {found.task!r} cannot be imported ({exc})") from None
        errors = []
        if found.status is TaskStatus.FAILED:
            errors.append(TaskError(exception_class_path=_exception_path(found.error or ""),
                                    traceback=found.error or ""))
        attempts = found.attempts if found.status is not TaskStatus.QUEUED else 0
        result = TaskResult(
            task=task, id=found.key, status=_STATUS[found.status],
            enqueued_at=found.enqueued_at, started_at=found.started_at,
            finished_at=found.finished_at, last_attempted_at=found.started_at,
            args=found.args, kwargs=found.kwargs, backend=self.alias, errors=errors,
            worker_ids=[found.worker or ""] * attempts)
        if found.status is TaskStatus.SUCCEEDED:
            object.__setattr__(result, "_return_value", found.return_value)
        return result

    def check(self, **kwargs: Any) -> list[Any]:  # Django's check messages
        from django.core import checks

        problems = []
        if self.database not in connections:
            problems.append(checks.Error(
                f"TASKS[{self.alias!r}] names DATABASE {self.database!r}, which is not in "
                "DATABASES", id="sqldelay.E001"))
        else:
            try:
                database_url(connections[self.database].settings_dict)
            except InvalidArgumentError as exc:
                problems.append(checks.Error(str(exc), id="sqldelay.E002"))
        return problems

    # ---- the worker ----------------------------------------------------------------------

    def worker(self, queue_names: list[str] | None = None, **settings: Any) -> Worker:
        """A sqldelay Worker over the given queues (default: the backend's QUEUES), running
        their tasks under Django's connection handling. ``settings`` go to ``Worker``."""
        from ..worker import Worker

        names = list(queue_names or sorted(self.queues) or ["default"])
        for name in names:
            if self.queues and name not in self.queues:
                raise InvalidArgumentError(
                    f"queue {name!r} is not one of TASKS[{self.alias!r}]['QUEUES']")
        registries = [self.registry(name) for name in names]
        settings.setdefault("name", f"{socket.gethostname()}:{os.getpid()}")
        settings.setdefault("retry", NO_RETRY)
        return Worker({r.queue.name: r.queue for r in registries}, WorkerHandler(registries),
                      **settings)


class DjangoTasks(Tasks):
    """The sqldelay registry of one Django queue: it knows Django's tasks by module path,
    importing each the first time a message names it."""

    def __init__(self, backend: SqlDelayBackend, queue: DelayedQueue) -> None:
        super().__init__(queue, retry=backend.retry or NO_RETRY, results=backend.results)
        self.backend = backend
        self._import_lock = threading.Lock()

    def task_for(self, django_task: _DjangoTask) -> Task:
        """The sqldelay task that runs Django task ``django_task`` (registered on first use)."""
        name = django_task.module_path
        found = self._tasks.get(name)
        if found is None:
            with self._import_lock:
                found = self._tasks.get(name)
                if found is None:
                    found = self.task(partial(_run, self.backend, name), name=name,
                                      context=True)
                    found.signature = _signature(django_task)
        assert isinstance(found, Task)  # the registry makes its tasks so
        return found

    def decode(self, envelope: Envelope[QueueBase]
               ) -> tuple[TaskBase, list[Any], dict[str, Any]]:
        payload = envelope.payload
        name = payload.get("task") if isinstance(payload, dict) else None
        if isinstance(name, str) and name not in self._tasks:
            self._import(name, f"message {envelope.key!r}")
        return super().decode(envelope)

    def knows(self, name: str) -> bool:
        """Whether ``name`` is a Django task (imported and registered the first time): a
        worker's metrics and traces label its first message of a task by name too."""
        if name in self._tasks:
            return True
        try:
            self._import(name, "a message")
        except UnknownTaskError:
            return False
        return True

    def _import(self, name: str, what: str) -> None:
        try:
            django_task = import_string(name)
        except (ImportError, AttributeError) as exc:
            raise UnknownTaskError(
                f"{what} names task {name!r}, which cannot be imported: {exc}") from None
        if not hasattr(django_task, "module_path") or not hasattr(django_task, "func"):
            raise UnknownTaskError(f"{what} names {name!r}, which is not a Django task")
        self.task_for(django_task)


class WorkerHandler:
    """A worker's handler over the registries of several Django queues: each message to the
    registry of its queue, under Django's connection handling (stale connections closed
    before and after each task, as around a request)."""

    def __init__(self, registries: list[DjangoTasks]) -> None:
        self.registries = {r.queue.pkind: r for r in registries}

    def _registry(self, envelope: Envelope[QueueBase]) -> DjangoTasks:
        return self.registries[envelope.queue.pkind]

    def __call__(self, envelope: Envelope[DelayedQueue],
                 connection: sa.Connection | None = None) -> Any:
        close_old_connections()
        try:
            return self._registry(envelope)(envelope, connection)
        finally:
            close_old_connections()

    def retry_policy_for(self, envelope: Envelope[QueueBase],
                         error: BaseException | None) -> RetryPolicy | None:
        return self._registry(envelope).retry_policy_for(envelope, error)


def _run(backend: SqlDelayBackend, name: str, context: SqlDelayTaskContext, *args: Any,
         **kwargs: Any) -> Any:
    """Run Django task ``name`` for a worker: its TaskResult RUNNING, task_started, the
    function (with Django's TaskContext when it takes one), task_finished on success or on
    the last failed attempt."""
    django_task: _DjangoTask = import_string(name)
    envelope = context.envelope
    queue_name = envelope.queue.name
    started = timezone.now()
    result = TaskResult(
        task=django_task.using(queue_name=queue_name, backend=backend.alias),
        id=envelope.key, status=TaskResultStatus.RUNNING,
        enqueued_at=envelope.created_at, started_at=started, finished_at=None,
        last_attempted_at=started, args=list(args), kwargs=dict(kwargs), backend=backend.alias,
        errors=[], worker_ids=[envelope.claimed_by or ""] * envelope.attempt)
    task_started.send(sender=type(backend), task_result=result)
    try:
        if django_task.takes_context:
            value = django_task.call(TaskContext(task_result=result), *args, **kwargs)
        else:
            value = django_task.call(*args, **kwargs)
        value = normalize_json(value)
    except BaseException as exc:
        registry = backend.registry(queue_name)
        policy = registry.retry or NO_RETRY
        if policy.gives_up_after(envelope.attempt):
            import traceback

            object.__setattr__(result, "finished_at", timezone.now())
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            result.errors.append(TaskError(
                exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                traceback="".join(traceback.format_exception(exc))))
            task_finished.send(type(backend), task_result=result)
        raise
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "_return_value", value)
    task_finished.send(type(backend), task_result=result)
    return value


def _signature(django_task: _DjangoTask) -> inspect.Signature:
    """The signature Django's task is called with (its context apart)."""
    signature = inspect.signature(django_task.func)
    params = list(signature.parameters.values())
    if django_task.takes_context:
        params = params[1:]
    return signature.replace(parameters=params)


def _check_json(task: Task, args: list[Any], kwargs: dict[str, Any]) -> None:
    try:
        task.queue.serializer.encode({"args": args, "kwargs": kwargs})
    except Exception as exc:
        from ..errors import PayloadError

        task.explain_payload_error(exc if isinstance(exc, PayloadError)
                                   else PayloadError(str(exc)), [(args, kwargs)])


def _exception_path(error: str) -> str:
    """The exception class path of an error text (its first line, ``module.Class: ...``)."""
    head = (error.strip().splitlines() or [""])[0]
    name = head.partition(":")[0].strip()
    if not name or " " in name:
        return "builtins.Exception"
    return name if "." in name else f"builtins.{name}"


__all__ = ["SqlDelayBackend", "database_url", "engine_for"]
