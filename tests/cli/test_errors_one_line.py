"""Every subcommand, given a database URL it cannot use as it is, answers in one line on stderr
with a non-zero exit and no traceback: a URL that is not one, an asyncio URL (whose driver
the blocking commands swap for the database's blocking one, so the URL of the asyncio worker
and the service serves every command) and, for ``serve``, a port another process holds.

Most calls run ``main`` in this process (the code behind the entry point); a few run the
entry point itself, where an uncaught exception would print its traceback."""

from __future__ import annotations

import json
import socket

import pytest
import sqlalchemy as sa

from sqldelay import DelayedQueue, create_schema

from ..conftest import unique_name
from .test_commands import here, ok, sqldelay

# every subcommand that reaches a database, with the arguments it needs besides --url
COMMANDS = [
    ["migrate"], ["verify"], ["queues"], ["stats"], ["stats", "q"], ["peek", "q"],
    ["get", "q", "k"], ["drop", "q", "k"], ["purge", "q", "--yes"],
    ["release-stuck", "q", "--older-than", "1m", "--yes"], ["history", "q", "k"],
    ["offer", "q", "k", "--payload", "1"], ["pause", "q"], ["resume", "q"],
    ["limit", "q", "--rate", "1/s"], ["worker", "builtins:repr", "--drain"],
    ["dead-letters", "list"], ["dead-letters", "requeue", "--all"],
    ["dead-letters", "drop", "--all"], ["demo", "--messages", "1"],
    ["serve", "--port", "1"],  # the database is reached before the port is bound
]
IDS = [" ".join(c[:2]) for c in COMMANDS]


def with_url(command: list[str], url: str) -> list[str]:
    return [*command, "--url", url]


def reshard(url: str) -> list[str]:
    return ["reshard", "--queue", "q", "--from", url, "--to", url, url + "2"]


def one_line(done) -> str:
    """The error of a command that failed as it should: one line on stderr, no traceback."""
    assert done.returncode not in (0, None), done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "greenlet" not in lines[0].lower(), lines[0]
    return lines[0]


@pytest.mark.parametrize("command", [*COMMANDS, ["reshard"]], ids=[*IDS, "reshard"])
def test_a_url_that_is_not_one_is_named_in_one_line(command):
    args = reshard("notaurl") if command[0] == "reshard" else with_url(command, "notaurl")
    line = one_line(here(*args))
    assert "not a database URL" in line and "'notaurl'" in line


def test_a_url_from_the_environment_that_is_not_one_says_where_it_came_from(tmp_path):
    line = one_line(sqldelay("queues", env={"SQLDELAY_URL": "notaurl"}))
    assert "SQLDELAY_URL is not a database URL: 'notaurl'" in line
    line = one_line(sqldelay("peek", "q", "--url", "postgresql+psycopg:/u:secret@h/db"))
    assert "secret" not in line  # a password is hidden even in what cannot be parsed


# asyncio URLs of servers that refuse connections: the error names the server, as for its
# blocking URL, where it was SQLAlchemy's MissingGreenlet before
UNREACHABLE = ["postgresql+asyncpg://u@127.0.0.1:1/db", "postgresql+psycopg_async://u@127.0.0.1:1/db",
               "mysql+asyncmy://u@127.0.0.1:1/db"]


@pytest.mark.parametrize("url", UNREACHABLE)
def test_an_asyncio_url_of_a_server_down_is_one_line_naming_it(url):
    for command in [*COMMANDS, ["reshard"]]:
        args = reshard(url) if command[0] == "reshard" else with_url(command, url)
        line = one_line(here(*args))
        assert "127.0.0.1" in line, (command, line)
        if command[0] != "reshard":
            assert "cannot reach the" in line and "127.0.0.1:1" in line, (command, line)


def test_an_asyncio_sqlite_url_of_a_missing_file_is_one_line_naming_it(tmp_path):
    nowhere = tmp_path / "no" / "such" / "dir" / "q.db"
    url = f"sqlite+aiosqlite:///{nowhere}"
    for command in COMMANDS:
        line = one_line(here(*with_url(command, url)))
        assert str(nowhere.parent) in line, (command, line)
    assert not (tmp_path / "no").exists()


def test_the_entry_point_answers_an_asyncio_url_in_one_line(tmp_path):
    for command in (["queues"], ["serve"], ["worker", "builtins:repr", "--drain"]):
        line = one_line(sqldelay(*with_url(command, UNREACHABLE[0])))
        assert "cannot reach the postgresql server at 127.0.0.1:1" in line


@pytest.fixture(autouse=True)
def _one_target_per_server(request):
    if "target" in request.fixturenames and request.getfixturevalue("target").database == "mysql":
        pytest.skip("the mariadb target runs the commands on the same server")


ASYNC_DRIVER = {"sqlite": "aiosqlite", "postgresql": "asyncpg", "mariadb": "asyncmy"}


def test_blocking_commands_work_on_an_asyncio_url(backend_url, engine, table_name, target):
    """With the database's blocking driver: offer, peek, queues, purge, verify and dead
    letters on the URL an asyncio worker uses, as on the blocking one."""
    parsed = sa.make_url(backend_url)
    url = parsed.set(drivername=f"{parsed.get_backend_name()}+{ASYNC_DRIVER[target.database]}")
    db = ["--url", url.render_as_string(hide_password=False), "--table", table_name]
    name = unique_name("aurl")
    assert ok("offer", name, "k", "--payload", '{"n": 1}', *db, run=here).startswith("created")
    page = json.loads(ok("peek", name, "--json", *db, run=here))
    assert [(m["key"], m["payload"]) for m in page["messages"]] == [("k", {"n": 1})]
    [mine] = [q for q in json.loads(ok("queues", "--json", *db, run=here)) if q["queue"] == name]
    assert mine["due"] == 1
    ok("dead-letters", "list", *db, run=here)
    assert ok("purge", name, "--yes", *db, run=here).startswith("deleted 1 message")
    assert not DelayedQueue(engine, name, table_name=table_name).contains("k")


def test_serve_on_a_busy_port_says_so_in_one_line_before_printing_its_address(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    create_schema(sa.create_engine(url))
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = sqldelay("serve", "--url", url, "--port", str(port))
    line = one_line(done)  # no "http://127.0.0.1:PORT/" line first, no [Errno 98] after it
    assert f"127.0.0.1:{port}" in line and "in use" in line and "--port" in line


def test_no_subcommand_is_left_out_of_these_tests():
    from sqldelay.cli import build_parser

    [sub] = [a for a in build_parser()._actions if a.choices and "migrate" in a.choices]
    covered = {c[0] for c in COMMANDS} | {"reshard", "bench"}  # bench takes no --url
    assert set(sub.choices) == covered
