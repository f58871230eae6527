"""Django settings of the backend's tests: the database from SQLDELAY_DJANGO_DB (sqlite,
postgresql or mariadb; the servers' addresses from SQLDELAY_TEST_PG_URL and
SQLDELAY_TEST_MYSQL_URL, as for the rest of the suite)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import django
from sqlalchemy.engine import make_url

SECRET_KEY = "sqldelay-tests"
USE_TZ = True
INSTALLED_APPS = ["sqldelay.django"]
if django.VERSION < (6,):  # the django-tasks backport: an app of its own
    INSTALLED_APPS.insert(0, "django_tasks")
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

_which = os.environ.get("SQLDELAY_DJANGO_DB", "sqlite")
_name = f"sqldelay_django_{os.getpid()}"
if _which == "sqlite":
    _file = Path(tempfile.gettempdir()) / f"{_name}.db"
    DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(_file),
                             "TEST": {"NAME": str(_file.with_suffix(".test.db"))}}}
else:
    _url = make_url(os.environ.get(
        "SQLDELAY_TEST_PG_URL" if _which == "postgresql" else "SQLDELAY_TEST_MYSQL_URL",
        "postgresql://postgres@127.0.0.1:5432/test" if _which == "postgresql"
        else "mysql://root@127.0.0.1:3306/test"))
    DATABASES = {"default": {
        "ENGINE": ("django.db.backends.postgresql" if _which == "postgresql"
                   else "django.db.backends.mysql"),
        "NAME": _url.database or "test", "USER": _url.username or "",
        "PASSWORD": _url.password or "", "HOST": _url.host or "", "PORT": _url.port or "",
        "TEST": {"NAME": f"test_{_name}"}}}

TASKS = {
    "default": {
        "BACKEND": "sqldelay.django.SqlDelayBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"DATABASE": "default", "TABLE": "sqldelay_djt", "RESULTS": 3600},
    },
    "immediate": {"BACKEND": "sqldelay.django.SqlDelayBackend",
                  "QUEUES": [],
                  "OPTIONS": {"TABLE": "sqldelay_djt", "ENQUEUE_ON_COMMIT": False,
                              "RESULTS": 0}},
}
