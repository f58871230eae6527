"""docs/recipes/fastapi_app.py, the asyncio recipe, run as its docs say, on every async target:
an order and its reminder commit together, a failed request leaves neither, and the worker in
the app's lifespan sends the reminder when it falls due.

Each run gets a database of its own (a new SQLite file, or a database created on the server
and dropped after), since the recipe uses the default table names.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue

from ..conftest import unique_name

RECIPE = Path(__file__).resolve().parents[2] / "docs" / "recipes" / "fastapi_app.py"


@pytest.fixture
def own_database(target, backend_url, async_url, tmp_path):
    """(async URL, blocking URL) of a new, empty database on the target's server."""
    if target.database == "sqlite":
        path = tmp_path / "shop.db"
        yield f"sqlite+aiosqlite:///{path}", f"sqlite:///{path}"
        return
    name = unique_name("shop")
    admin = sa.create_engine(backend_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    try:
        yield (sa.make_url(async_url).set(database=name).render_as_string(hide_password=False),
               sa.make_url(backend_url).set(database=name).render_as_string(hide_password=False))
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name}")
        admin.dispose()


def load_recipe(monkeypatch, url: str, remind_after: float):
    pytest.importorskip("fastapi")
    monkeypatch.setenv("DATABASE_URL", url)
    monkeypatch.setenv("REMIND_AFTER_SECONDS", str(remind_after))
    name = unique_name("fastapi_app")
    spec = importlib.util.spec_from_file_location(name, RECIPE)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # the ORM resolves annotations through it
    spec.loader.exec_module(module)
    return module


def test_an_order_and_its_reminder_commit_together_and_the_worker_sends_it(own_database,
                                                                          monkeypatch):
    from fastapi.testclient import TestClient

    url, blocking_url = own_database
    recipe = load_recipe(monkeypatch, url, remind_after=0.5)
    with TestClient(recipe.app) as client:  # runs the lifespan: schema, worker
        assert client.post("/orders", params={"item": ""}).status_code == 400
        created = client.post("/orders", params={"item": "tea"})
        assert created.status_code == 200
        order = created.json()["id"]
        engine = sa.create_engine(blocking_url)
        try:
            queue = DelayedQueue(engine, "reminders")
            assert queue.contains(f"order:{order}")
            with engine.connect() as conn:  # the refused order left no row and no reminder
                assert conn.execute(sa.text("SELECT count(*) FROM orders")).scalar() == 1
            stats = queue.stats()
            assert stats.scheduled + stats.due + stats.in_flight == 1
            deadline = time.monotonic() + 30
            while not client.get(f"/orders/{order}").json()["reminded"]:
                assert time.monotonic() < deadline, "the worker never sent the reminder"
                time.sleep(0.05)
            deadline = time.monotonic() + 30
            while queue.contains(f"order:{order}"):  # acked once the handler returned
                assert time.monotonic() < deadline, "the reminder was never acked"
                time.sleep(0.05)
        finally:
            engine.dispose()
