"""What a figure depends on besides the code: versions, machine, load, settings."""

from __future__ import annotations

import os
import platform
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata

import sqlalchemy as sa


def describe(engine: sa.Engine) -> dict:
    return {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cores": os.cpu_count(),
        "packages": {name: _version(name) for name in (
            "sqldelay", "SQLAlchemy", "psycopg", "PyMySQL", "mysqlclient", "pgqueuer",
            "procrastinate")},
        "dialect": engine.dialect.name,
        "driver": engine.dialect.driver,
        "server": server_version(engine),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
    }


def load() -> dict:
    """The machine's load now: other work on a shared machine shifts every figure."""
    try:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        uptime = ""
    return {"uptime": uptime, "loadavg": list(os.getloadavg())}


def server_version(engine: sa.Engine) -> str:
    if engine.dialect.name == "sqlite":
        return f"SQLite {sqlite3.sqlite_version}"
    with engine.connect() as conn:
        return str(conn.exec_driver_sql("SELECT version()").scalar())


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=os.path.dirname(__file__))
    except OSError:
        return None
    return done.stdout.strip() or None
