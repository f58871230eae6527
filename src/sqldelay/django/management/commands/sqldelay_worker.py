"""``manage.py sqldelay_worker``: run the tasks of a ``SqlDelayBackend`` until stopped (SIGTERM
or SIGINT finish the running tasks first), or until none is due with ``--drain``."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from sqldelay.django import SqlDelayBackend
from sqldelay.django.framework import task_backends
from sqldelay.errors import InvalidArgumentError


# Django ships no types (and is absent where mypy runs): its base class is Any to mypy
class Command(BaseCommand):  # type: ignore[misc]
    help = "Run the tasks of a sqldelay task backend (TASKS) until stopped."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--backend", default="default",
                            help="the TASKS alias of a SqlDelayBackend (default: default)")
        parser.add_argument("--queue", action="append", dest="queues", metavar="NAME",
                            help="a queue to run; repeat it for several (default: the "
                                 "backend's QUEUES)")
        parser.add_argument("--concurrency", type=int, default=1,
                            help="tasks run at once, each in a thread of its own")
        parser.add_argument("--batch-size", type=int, default=None,
                            help="messages per claim (default: the concurrency)")
        parser.add_argument("--idle-poll", type=float, default=1.0,
                            help="longest sleep when nothing is due, in seconds")
        parser.add_argument("--drain", action="store_true",
                            help="exit once nothing is due instead of waiting for more")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            backend = task_backends[options["backend"]]
        except Exception as exc:
            raise CommandError(str(exc)) from None
        if not isinstance(backend, SqlDelayBackend):
            raise CommandError(f"TASKS[{options['backend']!r}] is not a SqlDelayBackend")
        try:
            worker = backend.worker(options["queues"], concurrency=options["concurrency"],
                                    batch_size=options["batch_size"],
                                    idle_poll=timedelta(seconds=options["idle_poll"]))
        except InvalidArgumentError as exc:
            raise CommandError(str(exc)) from None
        queues = ", ".join(worker.queues)
        if options["drain"]:
            handled = worker.drain()
            self.stdout.write(f"ran {handled} task(s) of queue(s) {queues}")
            return
        self.stdout.write(f"running the tasks of queue(s) {queues}; stop with Ctrl-C")
        worker.run()
