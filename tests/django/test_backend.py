"""``sqldelay.django.SqlDelayBackend`` under Django's test machinery: enqueue and results,
run_after, priorities, queue names, context, failures, async tasks, signals, transactions,
and the worker command, on the database of SQLDELAY_DJANGO_DB."""

from __future__ import annotations

import io
from datetime import timedelta

from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.db import transaction
from django.test import SimpleTestCase, TransactionTestCase
from django.utils import timezone

from sqldelay import InvalidArgumentError
from sqldelay.django import SqlDelayBackend
from sqldelay.django.framework import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from sqldelay.tasks_base import UNREGISTERED, task_label

from . import tasks


class Signals:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def __enter__(self):
        for name, signal in self._signals():
            signal.connect(self._receiver(name), weak=False, dispatch_uid=f"test-{name}")
        return self

    def __exit__(self, *exc) -> None:
        for name, signal in self._signals():
            signal.disconnect(dispatch_uid=f"test-{name}")

    @staticmethod
    def _signals():
        return (("enqueued", task_enqueued), ("started", task_started),
                ("finished", task_finished))

    def _receiver(self, name):
        def receive(sender, task_result, **kwargs):
            self.seen.append((name, task_result.id, task_result.status))
        return receive


def drain(*queues: str) -> int:
    return default_task_backend.worker(list(queues) or None).drain()


class BackendTests(TransactionTestCase):
    """Real transactions (TransactionTestCase): the messages are written by sqldelay's own
    connection, on commit."""

    def setUp(self) -> None:
        tasks.RAN.clear()
        backend = default_task_backend
        for name in ("default", "emails"):  # what an earlier test left
            backend.registry(name).queue.clear()

    def test_features_are_what_the_backend_does(self) -> None:
        backend = task_backends["default"]
        self.assertIsInstance(backend, SqlDelayBackend)
        self.assertTrue(backend.supports_defer and backend.supports_async_task
                        and backend.supports_get_result and backend.supports_priority)
        self.assertEqual(backend.check(), [])

    def test_a_task_enqueued_runs_in_the_worker_and_its_result_comes_back(self) -> None:
        with Signals() as signals:
            result = tasks.add.enqueue(2, b=3)
            self.assertEqual(result.status, TaskResultStatus.READY)
            self.assertIsNotNone(result.enqueued_at)
            self.assertTrue(result.id.startswith("default."))
            waiting = default_task_backend.get_result(result.id)
            self.assertEqual((waiting.status, waiting.args, waiting.kwargs),
                             (TaskResultStatus.READY, [2], {"b": 3}))
            self.assertEqual(drain(), 1)
        done = tasks.add.get_result(result.id)
        self.assertEqual(done.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(done.return_value, 5)
        self.assertEqual(done.attempts, 1)
        self.assertTrue(done.started_at <= done.finished_at)
        result.refresh()
        self.assertEqual((result.status, result.return_value), (TaskResultStatus.SUCCESSFUL, 5))
        self.assertEqual([s[0] for s in signals.seen], ["enqueued", "started", "finished"])
        self.assertEqual(signals.seen[-1][2], TaskResultStatus.SUCCESSFUL)

    def test_enqueue_in_an_atomic_block_writes_on_commit_and_not_after_a_rollback(self) -> None:
        with transaction.atomic():
            kept = tasks.add.enqueue(1)
            self.assertIsNone(kept.enqueued_at)  # written when the transaction commits
            with self.assertRaises(TaskResultDoesNotExist):
                default_task_backend.get_result(kept.id)
        self.assertEqual(default_task_backend.get_result(kept.id).status,
                         TaskResultStatus.READY)
        try:
            with transaction.atomic():
                lost = tasks.add.enqueue(2)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(lost.id)
        self.assertEqual(drain(), 1)

    def test_run_after_waits_and_priority_orders(self) -> None:
        later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(9)
        tasks.add.enqueue(1)
        tasks.urgent.enqueue(2)
        tasks.add.using(priority=-5).enqueue(3)
        self.assertEqual(drain(), 3)
        self.assertEqual(tasks.RAN, [("urgent", 2), ("add", 1, 0), ("add", 3, 0)])
        self.assertEqual(default_task_backend.get_result(later.id).status,
                         TaskResultStatus.READY)

    def test_queue_names_are_queues(self) -> None:
        sent = tasks.send.enqueue("a@example.com")
        tasks.add.enqueue(1)
        self.assertTrue(sent.id.startswith("emails."))
        self.assertEqual(drain("emails"), 1)
        self.assertEqual(tasks.RAN, [("send", "a@example.com")])
        self.assertEqual(tasks.send.get_result(sent.id).return_value,
                         {"sent": "a@example.com"})
        with self.assertRaises(InvalidTask):
            tasks.add.using(queue_name="nowhere")

    def test_a_task_takes_its_context(self) -> None:
        result = tasks.with_context.enqueue(n=4)
        drain()
        self.assertEqual(default_task_backend.get_result(result.id).return_value,
                         {"id": result.id, "attempt": 1, "n": 4})

    def test_a_failed_task_is_failed_with_its_error(self) -> None:
        with Signals() as signals:
            result = tasks.fails.enqueue("bad input")
            drain()
        failed = default_task_backend.get_result(result.id)
        self.assertEqual(failed.status, TaskResultStatus.FAILED)
        self.assertEqual(failed.errors[0].exception_class_path, "builtins.ValueError")
        self.assertIs(failed.errors[0].exception_class, ValueError)
        self.assertIn("bad input", failed.errors[0].traceback)
        with self.assertRaises(ValueError):
            failed.return_value  # noqa: B018
        self.assertEqual([s[0] for s in signals.seen], ["enqueued", "started", "finished"])
        self.assertEqual(signals.seen[-1][2], TaskResultStatus.FAILED)

    def test_async_tasks_and_the_async_api(self) -> None:
        result = async_to_sync(tasks.awaits.aenqueue)(5)
        drain()
        done = async_to_sync(tasks.awaits.aget_result)(result.id)
        self.assertEqual((done.status, done.return_value), (TaskResultStatus.SUCCESSFUL, 15))

    def test_arguments_are_checked_at_enqueue(self) -> None:
        with self.assertRaises(InvalidArgumentError):
            tasks.add.enqueue(1, c=2)
        with self.assertRaises(InvalidArgumentError):
            tasks.add.enqueue(object())
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result("default.0123")
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result("nowhere.0123")

    def test_the_worker_command(self) -> None:
        tasks.add.enqueue(1)
        tasks.send.enqueue("b@example.com")
        out = io.StringIO()
        call_command("sqldelay_worker", "--drain", "--queue", "default", "--queue", "emails",
                     stdout=out)
        self.assertIn("ran 2 task(s)", out.getvalue())

    def test_a_backend_that_writes_at_once_and_keeps_no_results(self) -> None:
        backend = task_backends["immediate"]
        task = tasks.add.using(backend="immediate", queue_name="anything")
        try:
            with transaction.atomic():
                result = task.enqueue(1)
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        self.assertEqual(backend.get_result(result.id).status, TaskResultStatus.READY)
        backend.worker(["anything"]).drain()
        with self.assertRaises(TaskResultDoesNotExist):
            backend.get_result(result.id)  # ran, and nothing is kept

    def test_metrics_and_traces_name_a_django_task_from_its_first_message(self) -> None:
        queue = default_task_backend.registry("default").queue
        queue.offer("first", {"task": "tests.django.tasks.labelled"})
        queue.offer("stray", {"task": "os.path.join"})  # importable, but no Django task
        labels = {e.key: task_label(e) for e in queue.poll_many(2)}
        self.assertEqual(labels, {"first": "tests.django.tasks.labelled",
                                  "stray": UNREGISTERED})


class SettingsTests(SimpleTestCase):
    def test_the_database_url_follows_djangos_settings(self) -> None:
        from sqldelay.django import database_url

        url = database_url({"ENGINE": "django.db.backends.postgresql", "NAME": "app",
                            "USER": "u", "PASSWORD": "p", "HOST": "db", "PORT": "5433"})
        self.assertEqual(url.render_as_string(hide_password=False),
                         "postgresql+psycopg://u:p@db:5433/app")
        self.assertEqual(database_url({"ENGINE": "django.db.backends.mysql", "NAME": "app"})
                         .drivername, "mysql+mysqldb")
        with self.assertRaises(InvalidArgumentError):
            database_url({"ENGINE": "django.db.backends.dummy"})
