"""Engines from URLs: each front end's driver, and a missing driver named with its extra."""

from __future__ import annotations

import sys

import pytest

from sqldelay.engines import (
    DriverMissingError,
    async_url,
    blocking_url,
    create_async_engine,
    create_engine,
    is_async_url,
)


@pytest.mark.parametrize(("given", "expected"), [
    ("sqlite:///q.db", "sqlite+aiosqlite:///q.db"),
    ("mysql+pymysql://root@h/t", "mysql+asyncmy://root@h/t"),
    ("mariadb+pymysql://root@h/t", "mariadb+asyncmy://root@h/t"),
    ("postgresql+psycopg://u@h/d", "postgresql+psycopg://u@h/d"),  # psycopg is async itself
    ("postgresql+asyncpg://u@h/d", "postgresql+asyncpg://u@h/d"),
])
def test_a_blocking_url_gets_its_databases_async_driver(given, expected):
    assert async_url(given).render_as_string() == expected


def test_async_only_drivers_are_told_apart():
    assert is_async_url("postgresql+asyncpg://u@h/d") and is_async_url("sqlite+aiosqlite://")
    assert not is_async_url("postgresql+psycopg://u@h/d") and not is_async_url("sqlite://")


def test_a_missing_driver_names_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "asyncmy", None)  # import asyncmy now fails
    with pytest.raises(DriverMissingError, match=r"pip install 'sqldelay\[asyncmy\]'"):
        create_async_engine("mysql+pymysql://root@127.0.0.1/test")


def test_a_driver_without_an_extra_is_named_with_its_module():
    with pytest.raises(DriverMissingError, match="pip install aiomysql"):
        create_async_engine("mysql+aiomysql://root@127.0.0.1/test")


@pytest.mark.parametrize(("given", "expected"), [
    ("sqlite+aiosqlite:///q.db", "sqlite:///q.db"),
    ("postgresql+asyncpg://u@h/d", "postgresql+psycopg://u@h/d"),
    ("postgresql+psycopg_async://u@h/d", "postgresql+psycopg://u@h/d"),
    ("mysql+asyncmy://root@h/t", "mysql+pymysql://root@h/t"),
    ("mariadb+asyncmy://root@h/t", "mariadb+pymysql://root@h/t"),
    ("postgresql+psycopg://u@h/d", "postgresql+psycopg://u@h/d"),  # blocking already
    ("mysql+mysqldb://root@h/t", "mysql+mysqldb://root@h/t"),
])
def test_an_asyncio_url_gets_its_databases_blocking_driver(given, expected):
    """A blocking engine on an async-only driver fails at its first statement with
    MissingGreenlet: create_engine takes the database's blocking driver instead."""
    assert blocking_url(given).render_as_string() == expected
    assert create_engine(given).url.render_as_string() == expected


def test_a_missing_blocking_driver_says_which_url_it_came_from(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymysql", None)
    with pytest.raises(DriverMissingError, match=r"mysql\+asyncmy:// uses mysql\+pymysql:// "
                                                 r".*pip install 'sqldelay\[mysql\]'"):
        create_engine("mysql+asyncmy://root@127.0.0.1/test")
