"""An unknown queue on each database: the probe by partition and the prefix match behind the
error (``sqldelay.cli.support.require_queue``), with LIKE metacharacters in names taken literally.
The other commands' handling of unknown queues: test_consistent_settings.py."""

from __future__ import annotations

import json

import pytest

from sqldelay import DelayedQueue

from ..conftest import unique_name
from .test_commands import fails, here, ok


@pytest.fixture(autouse=True)
def _one_target_per_server(target):
    if target.database == "mysql":
        pytest.skip("the mariadb target runs the commands on the same server")


def test_unknown_queues_on_every_database(backend_url, engine, table_name):
    name = unique_name("a_b%")
    DelayedQueue(engine, name, table_name=table_name).offer("k", 1)
    db = ["--url", backend_url, "--table", table_name]
    assert json.loads(ok("peek", name, "--json", *db, run=here))["messages"]
    for other in (name.replace("_", "x"), name[:-1], name.replace("%", "_")):
        assert f"no queue named {other!r}" in fails("peek", other, *db, run=here)
    assert "only json ones: pass --serializer json" in fails("peek", name, "--serializer",
                                                             "bytes", *db, run=here)
