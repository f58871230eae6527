"""Engines from database URLs, with the driver each front end needs and a clear error naming
the extra to install when a driver is missing.

``create_engine(url)`` makes a blocking engine, ``create_async_engine(url)`` an asyncio one;
the latter accepts the blocking URL of a database too and picks that database's async driver
(``postgresql+psycopg://`` stays psycopg, whose async mode SQLAlchemy selects by itself;
``sqlite://`` becomes ``sqlite+aiosqlite://``, ``mysql+pymysql://`` ``mysql+asyncmy://``),
and the former the other way round (``postgresql+asyncpg://`` becomes
``postgresql+psycopg://``, ``sqlite+aiosqlite://`` ``sqlite://``, ``mysql+asyncmy://``
``mysql+pymysql://``): a blocking engine on an async-only driver fails at its first statement
with SQLAlchemy's MissingGreenlet, so one URL (``SQLDELAY_URL``) serves the asyncio worker,
the service and the blocking commands alike.
The command line builds its engines here; applications may too, or call SQLAlchemy directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa

from .errors import SqlDelayError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

_E = TypeVar("_E", sa.Engine, "AsyncEngine")  # what _made makes

# driver name in a URL -> (module it imports, sqldelay extra that installs it)
DRIVERS = {
    "psycopg": ("psycopg", "postgresql"),
    "psycopg_async": ("psycopg", "postgresql"),
    "asyncpg": ("asyncpg", "asyncpg"),
    "pymysql": ("pymysql", "mysql"),
    "mysqldb": ("MySQLdb", "mysqlclient"),
    "asyncmy": ("asyncmy", "asyncmy"),
    "aiosqlite": ("aiosqlite", "aiosqlite"),
    "pyodbc": ("pyodbc", "mssql"),
    "oracledb": ("oracledb", "oracle"),
    "oracledb_async": ("oracledb", "oracle"),
}
# backend -> the async driver used when a URL names a blocking one (or none)
ASYNC_DRIVERS = {"sqlite": "aiosqlite", "postgresql": "psycopg", "mysql": "asyncmy",
                 "mariadb": "asyncmy", "mssql": "aioodbc", "oracle": "oracledb_async"}
# backend -> the blocking driver used when a URL names an async-only one (those of the extras)
BLOCKING_DRIVERS = {"sqlite": None, "postgresql": "psycopg", "mysql": "pymysql",
                    "mariadb": "pymysql", "mssql": "pyodbc", "oracle": "oracledb"}
_ASYNC_ONLY = {"asyncpg", "psycopg_async", "asyncmy", "aiosqlite", "aiomysql", "aioodbc",
               "oracledb_async"}
# what SQLAlchemy picks for a URL without a driver, which sqldelay does not install (for
# mysql:// and mariadb:// it picks mysqlclient, the mysqlclient extra)
_SUGGESTED = {"postgresql": "postgresql+psycopg"}


class DriverMissingError(SqlDelayError):
    """The URL's database driver is not installed."""


def create_engine(url: str | sa.URL, **kwargs: Any) -> sa.Engine:
    """A blocking engine for ``url``, whose driver is made the database's blocking one if the
    URL names an async-only driver."""
    given, blocking = _parse(url), blocking_url(url)
    try:
        return _made(blocking, sa.create_engine, kwargs)
    except DriverMissingError as exc:
        if blocking.drivername == given.drivername:
            raise
        raise DriverMissingError(f"a blocking engine for {given.drivername}:// uses "
                                 f"{blocking.drivername}:// instead, and {exc}") from None


def create_async_engine(url: str | sa.URL, **kwargs: Any) -> AsyncEngine:
    """An ``AsyncEngine`` for ``url``, whose driver is made the database's async one if the
    URL names a blocking driver or none."""
    from sqlalchemy.ext.asyncio import create_async_engine as make

    return _made(async_url(url), make, kwargs)


def is_async_url(url: str | sa.URL) -> bool:
    """Whether ``url`` names a driver that only works with an AsyncEngine."""
    return _parse(url).get_driver_name() in _ASYNC_ONLY


def async_url(url: str | sa.URL) -> sa.URL:
    """``url`` with its database's async driver, unless it names one already."""
    parsed = _parse(url)
    backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    if driver in _ASYNC_ONLY or (backend == "postgresql" and driver == "psycopg"):
        return parsed
    if backend not in ASYNC_DRIVERS:
        return parsed  # an unsupported database: DelayedQueue names the supported ones
    return parsed.set(drivername=f"{backend}+{ASYNC_DRIVERS[backend]}")


def blocking_url(url: str | sa.URL) -> sa.URL:
    """``url`` with its database's blocking driver, if it names an async-only one."""
    parsed = _parse(url)
    backend = parsed.get_backend_name()
    if parsed.get_driver_name() not in _ASYNC_ONLY or backend not in BLOCKING_DRIVERS:
        return parsed
    driver = BLOCKING_DRIVERS[backend]
    return parsed.set(drivername=backend if driver is None else f"{backend}+{driver}")


def _parse(url: str | sa.URL) -> sa.URL:
    try:
        return sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise SqlDelayError(f"not a database URL: {url!r} ({exc})") from None


def _made(url: sa.URL, make: Callable[..., _E], kwargs: dict[str, Any]) -> _E:
    try:
        return make(url, **kwargs)
    except ModuleNotFoundError as exc:
        raise DriverMissingError(_missing(url, exc.name or "")) from None
    except sa.exc.NoSuchModuleError as exc:
        raise SqlDelayError(f"{url.drivername}:// is not a database SQLAlchemy knows: "
                            f"{exc}") from None


def _missing(url: sa.URL, module: str) -> str:
    driver = url.get_driver_name()
    backend = url.get_backend_name()
    if driver in DRIVERS and DRIVERS[driver][0] == module.split(".")[0]:
        return (f"{url.drivername}:// needs the {DRIVERS[driver][0]} driver, which is not "
                f"installed: pip install 'sqldelay[{DRIVERS[driver][1]}]'")
    if "+" not in url.drivername and backend in _SUGGESTED:
        return (f"{url.drivername}:// asks for SQLAlchemy's default driver ({module}), which "
                f"sqldelay does not install: use {_SUGGESTED[backend]}:// (pip install "
                f"'sqldelay[{DRIVERS[_SUGGESTED[backend].split('+')[1]][1]}]')")
    return (f"{url.drivername}:// needs the Python module {module!r}, which is not installed: "
            f"pip install {module}")
