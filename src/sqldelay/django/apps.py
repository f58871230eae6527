"""``sqldelay.django`` as a Django app: ``migrate`` makes (or upgrades) the sqldelay tables of
every ``SqlDelayBackend`` on the database it migrates, test databases included, and the
``sqldelay_worker`` command runs the tasks."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


# Django ships no types (and is absent where mypy runs): its base class is Any to mypy
class SqlDelayConfig(AppConfig):  # type: ignore[misc]
    name = "sqldelay.django"
    label = "sqldelay"
    verbose_name = "sqldelay tasks"

    def ready(self) -> None:
        post_migrate.connect(create_tables, dispatch_uid="sqldelay.django.create_tables")


def create_tables(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """After ``migrate`` of database ``using``: the tables of the sqldelay backends on it.
    Once per migrate run (Django sends post_migrate once per app)."""
    from . import SqlDelayBackend
    from .framework import task_backends

    if sender.label != "sqldelay":
        return
    for alias in task_backends.settings:
        backend = task_backends[alias]
        if isinstance(backend, SqlDelayBackend) and backend.database == using:
            backend.create_schema()
