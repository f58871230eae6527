"""Settings of the example shop: one SQLite database beside this file, and a sqldelay task
backend on it. Point DATABASES at PostgreSQL or MySQL/MariaDB and nothing else changes."""

from pathlib import Path

import django

HERE = Path(__file__).resolve().parent.parent

SECRET_KEY = "only-for-the-example"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": HERE / "shop.db"}}

INSTALLED_APPS = ["sqldelay.django"]  # migrate makes the queue tables; the worker command
if django.VERSION < (6,):             # Django 4.2-5.2: the django-tasks backport's app too
    INSTALLED_APPS.insert(0, "django_tasks")

TASKS = {
    "default": {
        "BACKEND": "sqldelay.django.SqlDelayBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"DATABASE": "default", "TABLE": "shop_tasks", "RESULTS": 86400},
    },
}
