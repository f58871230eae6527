"""``sqldelay.django`` as a Django app: ``migrate`` makes (or upgrades) the sqldelay tables of
every ``SqlDelayBackend`` on the database it migrates, test databases included, and the
``sqldelay_worker`` command runs the tasks."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class SqlDelayConfig(AppConfig):
    name = "sqldelay.django"
    label = "sqldelay"
    verbose_name = "sqldelay tasks"

    def ready(self) -> None:
        post_migrate.connect(create_tables, dispatch_uid="sqldelay.django.create_tables")


def create_tables(sender, using: str = "default", **kwargs) -> None:
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
