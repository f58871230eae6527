"""Settings every command reads alike, and outputs that say what happened: SQLDELAY_URL for
``history`` too; an unknown queue is an error naming it for every command that reads or
deletes a queue (unknown: no messages, no dead letters and no settings row under the name);
a drain says how many handler calls succeeded and failed; a negative duration is refused by
name; tables piped to another program are not wrapped at 80 columns; help without
reStructuredText markup, each command's own."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from sqldelay import DeadLetters, DelayedQueue, create_schema

from .test_commands import COMMAND, ROOT, fails, here, ok, sqldelay


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(url)
    create_schema(engine, history=True)
    engine.dispose()
    return url


@pytest.fixture
def engine(url):
    engine = sa.create_engine(url)
    yield engine
    engine.dispose()


def test_history_reads_sqldelay_url(url, engine):
    DelayedQueue(engine, "emails", history=True).offer("welcome:42", {"to": "a@b.c"})
    done = sqldelay("history", "emails", "welcome:42", "--json", env={"SQLDELAY_URL": url})
    assert done.returncode == 0, done.stderr
    [event] = [json.loads(line) for line in done.stdout.splitlines()]
    assert event["event"] == "offered"
    assert "no history for key 'other'" in fails("history", "emails", "other", "--url", url,
                                                 run=here)


# every command that reads, deletes or controls the messages of one queue, as typed for
# queue "nope"
ON_A_QUEUE = [["peek", "nope"], ["purge", "nope", "--yes"], ["get", "nope", "k"],
              ["drop", "nope", "k", "--yes"], ["stats", "nope"], ["pause", "nope"],
              ["resume", "nope"], ["limit", "nope"], ["limit", "nope", "--none"],
              ["release-stuck", "nope", "--older-than", "1m", "--yes"],
              ["dead-letters", "list", "--queue", "nope"],
              ["dead-letters", "requeue", "--all", "--queue", "nope"],
              ["dead-letters", "drop", "--all", "--queue", "nope", "--yes"]]


def test_an_unknown_queue_is_an_error_naming_it_for_every_command(url, engine):
    DelayedQueue(engine, "real").offer("k", 1)
    for command in ON_A_QUEUE:
        line = fails(*command, "--url", url, run=here)
        assert "no queue named 'nope'" in line, (command, line)


def test_a_queue_known_by_its_settings_or_dead_letters_alone_is_no_error(url, engine):
    DelayedQueue(engine, "paused").pause()  # a settings row, nothing in it
    buried = DelayedQueue(engine, "buried")
    buried.offer("k", 1)
    assert DeadLetters.of(buried).bury(buried.poll(), "boom")
    db = ["--url", url]
    for name in ("paused", "buried"):
        assert json.loads(ok("peek", name, "--json", *db, run=here))["messages"] == []
        assert f"queue {name!r} is empty" in ok("purge", name, *db, run=here)
        [stats] = json.loads(ok("stats", name, "--json", *db, run=here))
        assert (stats["queue"], stats["due"], stats["dead_letters"]) == \
            (name, 0, 1 if name == "buried" else 0)
    assert "no dead letters of queue 'paused'" in ok("dead-letters", "list", "--queue",
                                                    "paused", *db, run=here)
    # a queue is a name and a payload type: the wrong one is named, with the right one
    line = fails("peek", "buried", "--serializer", "str", *db, run=here)
    assert "has no str payloads, only json ones: pass --serializer json" in line


def test_a_drain_says_how_many_succeeded_and_how_many_failed(url, engine):
    queue = DelayedQueue(engine, "jobs")
    queue.offer("good", {"n": 1})
    queue.offer("bad", {"fail": True})
    queue.offer("worse", {"fail": True})
    done = sqldelay("worker", "tests.cli.handlers:handle", "--url", url, "--queue", "jobs",
                    "--drain", "--max-attempts", "1")
    assert done.returncode == 0, done.stderr
    assert "handled 3 message(s): 1 succeeded, 2 failed (0 to be retried, 2 dead-lettered)" \
        in done.stdout


@pytest.mark.parametrize("delay", [["--delay", "-5m"], ["--delay=-5m"], ["--delay", "-1"]])
def test_a_negative_delay_is_refused_by_name(url, engine, delay):
    done = here("offer", "q", "k", "--payload", "1", *delay, "--url", url)
    assert done.returncode != 0
    assert "argument --delay: a duration cannot be negative" in done.stderr, done.stderr
    assert not DelayedQueue(engine, "q").contains("k")
    done = here("release-stuck", "q", "--older-than", "-1h", "--url", url)
    assert "argument --older-than: a duration cannot be negative: '-1h'" in done.stderr


def test_a_table_piped_to_another_program_keeps_each_row_on_one_line(url, engine):
    name = "a-queue-with-a-rather-long-name"
    key = "a-key-that-is-long-enough-to-push-the-table-past-80-columns"
    DelayedQueue(engine, name).offer(key, {"payload": "x" * 50},
                                     datetime.now(UTC) - timedelta(seconds=1))
    environment = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run([*COMMAND, "peek", name, "--url", url], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    [header] = [line for line in done.stdout.splitlines() if "due at (UTC)" in line]
    assert "priority" in header and "claimed by" in header
    [row] = [line for line in done.stdout.splitlines() if key in line]
    assert '{"payload": "xxxx' in row


def _parsers():
    from sqldelay.cli import build_parser

    top = build_parser()
    yield "sqldelay", top
    [sub] = [a for a in top._actions if a.choices and "purge" in a.choices]
    for name, parser in sub.choices.items():
        yield name, parser
        for nested in (a for a in parser._actions if a.choices and a.dest == "action"):
            for action, child in nested.choices.items():
                yield f"{name} {action}", child


def test_help_shows_no_markup_and_each_command_describes_itself():
    for name, parser in _parsers():
        text = parser.format_help()
        assert "``" not in text, name
    assert "--watch" not in ok("queues", "--help", run=here)
    assert "--watch" in ok("stats", "--help", run=here)
    assert "sqldelay offer QUEUE KEY --payload JSON" in ok("offer", "--help", run=here)
