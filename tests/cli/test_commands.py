"""The ``sqldelay`` commands on every reachable backend: what an operator types, and what
they read back. The installed entry point runs in a process of its own for the main calls of
each command (a process costs about a second here); variants of a call go through ``main``
in this process, which is the same code behind the entry point's import."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import traceback
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pytest
import sqlalchemy as sa

from sqldelay import DeadLetters, DelayedQueue, Message, create_schema, drop_schema
from sqldelay.schema import SCHEMA_VERSION

from ..conftest import unique_name

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).with_name("sqldelay")
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "sqldelay.cli"]


def sqldelay(*args: str, env: dict | None = None, cwd: Path = ROOT,
             timeout: float = 60) -> subprocess.CompletedProcess:
    """The entry point in a process of its own, with a wide terminal for rich's tables."""
    environment = {k: v for k, v in os.environ.items() if k != "SQLDELAY_URL"}
    environment["COLUMNS"] = "250"
    return subprocess.run([*COMMAND, *args], cwd=cwd, env={**environment, **(env or {})},
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def here(*args: str) -> subprocess.CompletedProcess:
    """``sqldelay.cli.main`` in this process, answering as ``sqldelay`` would."""
    from sqldelay.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            mock.patch.dict(os.environ, {"COLUMNS": "250"}):
        try:
            code = main(list(args))
        except SystemExit as exc:  # --help, and argparse's own errors
            code = exc.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def ok(*args: str, run=sqldelay, **kwargs) -> str:
    done = run(*args, **kwargs)
    assert done.returncode == 0, done.stderr
    return done.stdout


def fails(*args: str, run=sqldelay, **kwargs) -> str:
    """The one-line error of a command that must fail."""
    done = run(*args, **kwargs)
    assert done.returncode != 0, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if ": error: " in line]
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.fixture(autouse=True)
def _one_target_per_server(request):
    """The mysql and mariadb targets reach one server through two dialect names, which the
    commands do not tell apart: these tests run on the mariadb one."""
    if "target" in request.fixturenames and request.getfixturevalue("target").database == "mysql":
        pytest.skip("the mariadb target runs the commands on the same server")


@pytest.fixture
def own_table(engine):
    """A queue table of the test's own (the commands create, upgrade and break it)."""
    name = unique_name("sqdcli")
    yield name
    drop_schema(engine, table_name=name)


def test_messages_from_offer_to_purge(backend_url, engine, table_name):
    db = ["--url", backend_url, "--table", table_name]
    name = unique_name("cli")
    assert ok("offer", name, "now", "--payload", '{"to": "a@b.c"}', *db).startswith("created")
    ok("offer", name, "later", "--payload", "[1, 2]", "--delay", "1h", *db, run=here)
    assert ok("offer", name, "now", "--payload", "2", "--no-update", *db,
              run=here).startswith("ignored")
    queue = DelayedQueue(engine, name, table_name=table_name)
    assert queue.get("later").scheduled_at > datetime.now(UTC) + timedelta(minutes=59)

    [mine] = [q for q in json.loads(ok("queues", "--json", *db)) if q["queue"] == name]
    assert (mine["due"], mine["scheduled"], mine["in_flight"], mine["dead_letters"]) == \
        (1, 1, 0, 0)
    assert mine["oldest_due_age"] >= 0
    table = ok("stats", name, *db, run=here)  # for people
    assert name in table and "in flight" in table

    due = json.loads(ok("peek", name, "--json", *db))
    assert [(m["key"], m["payload"]) for m in due["messages"]] == [("now", {"to": "a@b.c"})]
    later = json.loads(ok("peek", name, "--scheduled", "--json", *db, run=here))
    assert [m["key"] for m in later["messages"]] == ["later"]
    assert json.loads(ok("get", name, "later", "--json", *db, run=here))["payload"] == [1, 2]

    assert "no message 'gone'" in fails("get", name, "gone", *db, run=here)
    assert "no message 'gone'" in fails("drop", name, "gone", *db, run=here)
    assert "pass --yes" in fails("purge", name, *db)  # no terminal to confirm at
    assert queue.contains("now") and queue.contains("later")
    assert ok("drop", name, "now", "--yes", *db, run=here).startswith("dropped")
    assert ok("purge", name, "--yes", *db, run=here).startswith("deleted 1 message")
    assert not queue.contains("later")
    assert "no queue named" in fails("stats", name, *db, run=here)


def test_release_stuck_gives_back_only_messages_held_too_long(backend_url, engine, table_name):
    name = unique_name("stuck")
    long = DelayedQueue(engine, name, table_name=table_name, acquire_timeout=timedelta(hours=2))
    short = DelayedQueue(engine, name, table_name=table_name, acquire_timeout=timedelta(hours=1))
    due = long.now() - timedelta(seconds=1)  # by the queue's clock: claimed in this order
    long.offer_many([Message("fresh", 1, due), Message("old", 2, due + timedelta(milliseconds=1))])
    fresh = long.poll()
    old = short.poll()  # as if claimed an hour ago under a 2-hour lock
    assert (fresh.key, old.key) == ("fresh", "old")
    db = ["--url", backend_url, "--table", table_name]

    assert "pass --yes" in fails("release-stuck", name, "--older-than", "30m",
                                 "--acquire-timeout", "2h", *db, run=here)
    out = ok("release-stuck", name, "--older-than", "30m", "--acquire-timeout", "2h",
             "--yes", *db)
    assert "released 1 message(s)" in out
    assert not long.get("old").in_flight and long.get("fresh").in_flight
    assert not old.ack()  # its holder's lock is gone
    assert fresh.ack()


def test_migrate_creates_upgrades_and_verify_catches_what_is_wrong(backend_url, engine,
                                                                    own_table, target):
    db = ["--url", backend_url, "--table", own_table]
    assert "created" in ok("migrate", *db)
    assert "already" in ok("migrate", *db, run=here)
    settings = server_problems(engine)
    report = here("verify", "--json", *db)
    assert report.returncode == (1 if settings else 0)
    assert problems(report) == settings

    index = DelayedQueue(engine, "q", table_name=own_table).dao.claim_index  # the claims'
    with engine.begin() as conn:
        conn.execute(sa.text(_drop_index(target, index, own_table)))
        conn.execute(sa.text(f"UPDATE {own_table}_alembic SET version_num = '0004'"))
    done = sqldelay("verify", "--json", *db)
    assert done.returncode == 1
    assert problems(done) == ["schema version", *settings]
    [version] = [f["finding"] for f in json.loads(done.stdout)["findings"]
                 if f["check"] == "schema version"]
    assert "0004" in version and "sqldelay migrate" in version

    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {own_table}_alembic SET version_num = :v"),
                     {"v": SCHEMA_VERSION})
    done = here("verify", "--json", *db)
    assert done.returncode == 1 and problems(done) == [index, *settings]
    [missing] = [f["finding"] for f in json.loads(done.stdout)["findings"]
                 if f["check"] == index]
    # how to make it again, with the condition of a partial index where it is one
    assert "pkind, priority DESC, scheduled_at, id" in missing
    assert ("WHERE lock_uuid IS NULL" in missing) == (engine.dialect.name == "postgresql")


def test_migrate_makes_again_what_verify_finds_missing_keeping_the_rest(backend_url, engine,
                                                                        own_table, target):
    """The queue table and the dead letters' index dropped by hand: verify names both and
    the command that fixes them, that command makes both again, the dead letters' rows kept,
    and verify is then clean."""
    db = ["--url", backend_url, "--table", own_table]
    ok("migrate", *db, run=here)
    queue = DelayedQueue(engine, "q", table_name=own_table)
    queue.offer_many([Message("buried", 1), Message("waiting", 2)])
    assert DeadLetters(engine, table_name=own_table).bury(queue.poll(), "boom")
    index = f"{own_table}_dead_kind_ix"
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE {own_table}"))
        conn.execute(sa.text(_drop_index(target, index, f"{own_table}_dead")))
    settings = server_problems(engine)

    done = sqldelay("verify", "--json", *db)
    assert done.returncode == 1 and problems(done) == [own_table, index, *settings]
    fixes = {f["finding"].rpartition("run ")[2] for f in json.loads(done.stdout)["findings"]
             if f["check"] in (own_table, index)}
    assert fixes == {f"sqldelay migrate --url {backend_url} --table {own_table}"}
    [fix] = fixes
    out = ok(*fix.split()[1:])  # the command verify named
    assert f"created the missing {own_table}, {index}" in out
    assert problems(here("verify", "--json", *db)) == settings
    assert "already" in ok("migrate", *db, run=here)  # nothing left to make

    [letter] = DeadLetters(engine, table_name=own_table).list()
    assert (letter.key, letter.last_error) == ("buried", "boom")
    assert not queue.contains("waiting")  # it went with its table
    queue.offer("after", 3)
    [env] = queue.poll_many(10)
    assert env.key == "after" and queue.ack(env)


def test_migrate_refuses_a_table_that_is_not_sqldelays_and_writes_nothing(backend_url, engine):
    """An application's table named by --table (or one beside it, as X_dead): one line naming
    it and the columns it lacks, no version table or other table made (MariaDB does not roll
    DDL back, so the refusal must come before it), the table's rows untouched; verify says
    the same instead of pointing at migrate."""
    users, orphan = unique_name("sqdusers"), unique_name("sqdorphan")
    apps = sa.MetaData()
    sa.Table(users, apps, sa.Column("id", sa.Integer, primary_key=True),
             sa.Column("name", sa.String(50)))
    sa.Table(f"{orphan}_dead", apps, sa.Column("id", sa.Integer, primary_key=True),
             sa.Column("pkind", sa.String(50)))  # a dead-letter table's name, not its columns
    apps.create_all(engine)
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(apps.tables[users]).values(id=1, name="ada"))
        for table, named, missing in ((users, users, "pkind, pkey, payload"),
                                      (orphan, f"{orphan}_dead", "pkey, payload")):
            db = ["--url", backend_url, "--table", table]
            line = fails("migrate", *db, run=here)
            assert f"the table '{named}' exists and is not a sqldelay" in line, line
            assert missing in line and "nothing was written" in line, line
            found = here("verify", "--json", *db)
            assert problems(found) == [named]
            assert "give --table a name of its own" in found.stdout
        with engine.connect() as conn:
            present = set(sa.inspect(conn).get_table_names())
            assert conn.execute(sa.select(apps.tables[users].c.name)).scalars().all() == ["ada"]
        made = {f"{t}{suffix}" for t in (users, orphan)
                for suffix in ("_alembic", "_dead", "_groups", "_settings", "_history")}
        assert present & made == {f"{orphan}_dead"}  # only the application's own
        assert orphan not in present
    finally:
        apps.drop_all(engine)


def problems(done: subprocess.CompletedProcess) -> list[str]:
    return [f["check"] for f in json.loads(done.stdout)["findings"] if f["level"] == "problem"]


def server_problems(engine) -> list[str]:
    """The settings problems verify must report, read from the server itself: PostgreSQL
    with autovacuum off (as test servers are sometimes run)."""
    if engine.dialect.name != "postgresql":
        return []
    with engine.connect() as conn:
        value = conn.exec_driver_sql("SHOW autovacuum").scalar()
    return [] if value == "on" else [f"autovacuum = {value}"]


def _drop_index(target, index: str, table: str) -> str:
    if target.database in ("mysql", "mariadb"):
        return f"DROP INDEX {index} ON {table}"
    return f"DROP INDEX {index}"


def test_worker_says_what_it_runs_and_what_it_did(backend_url, engine, table_name):
    name = unique_name("work")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer_many([Message("a", 1), Message("b", 2),
                      Message("later", 3, datetime.now(UTC) + timedelta(hours=1))])
    done = sqldelay("worker", "builtins:repr", "--url", backend_url, "--table", table_name,
                    "--queue", name, "--drain")
    assert done.returncode == 0, done.stderr
    assert "handled 2 message(s)" in done.stdout
    assert "left 1 message(s) scheduled for later" in done.stdout
    started, stopped = [line for line in done.stderr.splitlines() if "worker st" in line]
    assert f"queue(s) {name}" in started and "concurrency 1" in started
    assert "2 handled" in stopped
    assert queue.contains("later") and not queue.contains("a")
    # several processes run until stopped: not a drain in one process
    assert "--processes" in fails("worker", "builtins:repr", "--url", backend_url,
                                  "--table", table_name, "--queue", name, "--drain",
                                  "--processes", "2", run=here)
    assert "processes must be a positive integer" in fails(
        "worker", "builtins:repr", "--url", backend_url, "--table", table_name,
        "--queue", name, "--processes", "0", run=here)


def test_dead_letters_unknown_ids_and_listing(backend_url, engine, table_name):
    name = unique_name("dead")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer("k", {"n": 1})
    letters = DeadLetters.of(queue)
    assert letters.bury(queue.poll(), "Traceback...\nValueError: the whole error")
    [letter] = letters.list(name)
    db = ["--url", backend_url, "--table", table_name]

    listed = ok("dead-letters", "list", "--queue", name, *db, run=here)
    assert "last error" in listed and "ValueError: the whole error" in listed
    full = ok("dead-letters", "list", "--queue", name, "--full", *db)
    assert "Traceback...\nValueError: the whole error" in full and '{"n":1}' in full
    missing = letter.id + 1000
    assert str(missing) in fails("dead-letters", "requeue", str(letter.id), str(missing), *db)
    assert str(missing) in fails("dead-letters", "drop", str(missing), *db, run=here)
    assert letters.count(name) == 1  # nothing changed
    assert "requeued 1" in ok("dead-letters", "requeue", str(letter.id), *db, run=here)
    assert queue.contains("k")


def test_the_demo_refuses_a_queue_holding_other_messages(backend_url, engine, table_name):
    name = unique_name("emails")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer("real", {"to": "customer"})
    error = fails("demo", "--url", backend_url, "--table", table_name, "--queue", name,
                  "--messages", "10")
    assert "already holds 1 message(s)" in error
    assert queue.get("real").payload == {"to": "customer"}


def test_offer_refuses_a_due_time_a_datetime_cannot_hold_and_writes_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    ok("migrate", "--url", url, run=here)
    offer = ["offer", "q", "k", "--payload", "1", "--url", url]
    for when, problem in ((["--at", "0001-01-01T00:00:00+14:00"], "before the year 1 in UTC"),
                          (["--at", "9999-12-31T23:00:00-05:00"], "after the year 9999 in UTC"),
                          (["--delay", "3000000d"], "ends after the year 9999"),
                          (["--delay", "9999999999d"], "is too long"),
                          (["--delay", "\u0661\u0662s"], "not a duration")):
        assert problem in fails(*offer, *when, run=here), when
    assert DelayedQueue(sa.create_engine(url), "q").get("k") is None


def test_first_use_errors_are_one_line_and_name_the_problem(tmp_path):
    # the checkout may hold the demo's database (the README's first command makes it)
    databases_before = set(ROOT.glob("*.db"))
    assert "no database given" in fails("queues", cwd=tmp_path)
    assert "SQLDELAY_URL" in fails("peek", "q", cwd=tmp_path)
    missing = tmp_path / "typo.db"
    assert str(missing) in fails("queues", "--url", f"sqlite:///{missing}")
    assert not missing.exists()  # not made into an empty database
    nowhere = tmp_path / "no" / "such" / "dir" / "q.db"
    assert str(nowhere.parent) in fails("migrate", "--url", f"sqlite:///{nowhere}")
    # a driver that is not installed: an import of it that fails, as it would
    shadow = tmp_path / "shadow" / "pymysql"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pymysql'\", name='pymysql')\n")
    error = fails("queues", "--url", "mysql+pymysql://u@h/db",
                  env={"PYTHONPATH": str(shadow.parent)})
    assert "pip install 'sqldelay[mysql]'" in error
    assert "127.0.0.1:1" in fails("queues", "--url", "postgresql+psycopg://u@127.0.0.1:1/db")

    url = f"sqlite:///{tmp_path / 'app.db'}"
    ok("migrate", "--url", url)
    error = fails("queues", "--table", "missing_table", env={"SQLDELAY_URL": url})
    assert "missing_table" in error and "sqldelay migrate" in error
    verbose = sqldelay("queues", "--url", url, "--table", "missing_table", "-v")
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr
    assert not list(tmp_path.glob("sqldelay-demo.db"))
    assert set(ROOT.glob("*.db")) == databases_before


def test_help_and_version():
    top = ok("--help")
    assert "delayed message queue" in top
    assert ok("--version").startswith("sqldelay ")
    assert "(default: 1)" in ok("worker", "--help", run=here)  # --concurrency
    assert "(default: 20)" in ok("peek", "--help", run=here)  # --limit
    assert "-v, --verbose" in ok("dead-letters", "list", "--help", run=here)


def test_the_demo_cleans_up_after_ctrl_c(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    proc = subprocess.Popen([*COMMAND, "demo", "--url", url, "--spread", "60",
                             "--messages", "200"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("scheduled 200 messages")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_interrupted_and_dropped(url, proc.returncode, out, err)


def test_the_demo_cleans_up_after_ctrl_c_while_its_consumers_start(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"

    class CtrlC(threading.Thread):
        """Ctrl-C lands as the second consumer is started, before it runs."""
        started = 0

        def start(self) -> None:
            CtrlC.started += 1
            if CtrlC.started == 2:
                raise KeyboardInterrupt
            super().start()

    with mock.patch("sqldelay.cli.demo.threading.Thread", CtrlC):
        done = here("demo", "--url", url, "--spread", "60", "--messages", "200")
    assert_interrupted_and_dropped(url, done.returncode, done.stdout, done.stderr)


def assert_interrupted_and_dropped(url: str, code: int, out: str, err: str) -> None:
    """The demo said it was interrupted (exit 130) and left none of its messages behind."""
    assert code == 130, err
    assert "interrupted" in out and "undelivered demo message(s)" in out, (out, err)
    engine = sa.create_engine(url)
    try:
        assert DelayedQueue(engine, "demo", table_name="sqldelay_demo").stats().scheduled == 0
    finally:
        engine.dispose()


def test_the_demo_runs_in_its_own_table(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(url)
    create_schema(engine)
    DelayedQueue(engine, "demo").offer("mine", 1)
    out = ok("demo", "--url", url, "--messages", "50", "--spread", "0.2")
    assert "delivered 50 of 50" in out
    assert DelayedQueue(engine, "demo").contains("mine")  # the default table is untouched
    engine.dispose()


def test_stats_watch_reads_again_until_ctrl_c(backend_url, engine, table_name):
    name = unique_name("watch")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer("a", 1)
    proc = subprocess.Popen([*COMMAND, "stats", name, "--url", backend_url, "--table",
                             table_name, "--watch", "0.1", "--json"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        [first] = json.loads(proc.stdout.readline())
        queue.offer("b", 2)
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        while (reading := json.loads(proc.stdout.readline()))[0]["due"] != 2:
            assert datetime.now(UTC) < deadline, reading
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert first["due"] == 1 and first["queue"] == name


def test_verify_reports_a_postgresql_table_filled_without_statistics(backend_url, engine,
                                                                    own_table):
    # offers made in the caller's transactions never count towards the queue's own check
    # (test_planner_statistics.py), so the table is filled without planner statistics
    if engine.dialect.name != "postgresql":
        pytest.skip(f"{engine.dialect.name}'s claim plan does not rest on gathered statistics")
    db = ["--url", backend_url, "--table", own_table]
    ok("migrate", *db, run=here)
    queue = DelayedQueue(engine, unique_name("full"), table_name=own_table)
    at = datetime.now(UTC) - timedelta(seconds=1)
    with engine.connect() as conn:
        for lo in range(0, 40_000, 5_000):
            queue.offer_many([Message(f"k{i}", i, at) for i in range(lo, lo + 5_000)],
                             connection=conn)
        conn.commit()
    check = f"{own_table} statistics = none"
    done = here("verify", "--json", *db)
    assert done.returncode == 1 and check in problems(done)
    [finding] = [f["finding"] for f in json.loads(done.stdout)["findings"]
                 if f["check"] == check]
    assert f"ANALYZE {own_table}" in finding
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.exec_driver_sql(f"ANALYZE {own_table}")
    assert check not in problems(here("verify", "--json", *db))


def _raised(message: str) -> str:
    """The error text a worker stores for an exception raised with ``message``."""
    from sqldelay.worker_base import error_text

    try:
        raise ValueError(message)
    except ValueError as exc:
        return error_text(exc)


def test_history_is_a_table_of_one_row_per_event_whatever_the_error(backend_url, engine,
                                                                     table_name):
    name = unique_name("hist")
    queue = DelayedQueue(engine, name, table_name=table_name, history=True)
    queue.offer("k", 1, by="shop")
    queue.release(queue.poll(by="w1"), error=_raised("the server said no\nand a second line"))
    queue.poll(by="w2").ack()
    db = ["--url", backend_url, "--table", table_name]

    out = ok("history", name, "k", *db)
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert [row.split("│")[2].strip() for row in rows] == [
        "offered", "claimed", "failed", "claimed", "acked"]
    assert len({len(line) for line in out.splitlines()[1:]}) == 1  # aligned columns
    [failed] = [row for row in rows if " failed " in row]
    assert "ValueError: the server said no…" in failed and "second line" not in out
    assert "raise ValueError" not in out  # the traceback stays out of the table
    events = [json.loads(line) for line in ok("history", name, "k", "--json", *db,
                                              run=here).splitlines()]
    assert "second line" in events[2]["detail"] and "raise ValueError" in events[2]["detail"]


def test_dead_letters_list_shows_the_error_message_not_the_traceback(backend_url, engine,
                                                                     table_name):
    name = unique_name("deadmsg")
    queue = DelayedQueue(engine, name, table_name=table_name)
    queue.offer_many([Message("worker", 1), Message("python", 2), Message("lines", 3)])
    letters = DeadLetters.of(queue)
    try:
        raise KeyError("customer 7")
    except KeyError:
        python_layout = traceback.format_exc()  # what code calling bury() may store
    errors = {"worker": _raised("the server said no"), "python": python_layout,
              "lines": _raised("first line\nsecond line")}
    for _ in errors:
        envelope = queue.poll()
        assert letters.bury(envelope, errors[envelope.key])
    db = ["--url", backend_url, "--table", table_name]

    listed = ok("dead-letters", "list", "--queue", name, *db, run=here)
    cells = {row.split("│")[3].strip(): row.split("│")[6].strip()
             for row in listed.splitlines() if row.startswith("│")}
    assert cells == {"worker": "ValueError: the server said no",
                     "python": "KeyError: 'customer 7'", "lines": "ValueError: first line…"}
    full = ok("dead-letters", "list", "--queue", name, "--full", *db, run=here)
    assert "raise ValueError(message)" in full and "second line" in full
