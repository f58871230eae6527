"""Every command that deletes or releases asks first at a terminal, goes on without asking
with --yes, and refuses without --yes when its standard input is not a terminal (a script
must say so explicitly): dead-letters drop, purge, drop and release-stuck."""

from __future__ import annotations

import io
import os
import pty
import subprocess
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
import sqlalchemy as sa

from sqldelay import DeadLetters, DelayedQueue, Message, create_schema

from .test_commands import COMMAND, ROOT, fails, here, ok

DESTRUCTIVE = {"dead-letters drop", "purge", "drop", "release-stuck"}


@pytest.fixture
def db(tmp_path):
    """A queue "q" holding a message "k" due later, one claimed long ago ("old", released by
    release-stuck) and a dead letter; returns (command-line options, queue, dead letters)."""
    url = f"sqlite:///{tmp_path / 'app.db'}"
    engine = sa.create_engine(url)
    create_schema(engine)
    queue = DelayedQueue(engine, "q", acquire_timeout=timedelta(hours=1))
    now = datetime.now(UTC)
    queue.offer_many([Message("dead", 0, now - timedelta(seconds=2)),
                      Message("old", 1, now - timedelta(seconds=1)),
                      Message("k", 2, now + timedelta(hours=1))])
    letters = DeadLetters.of(queue)
    assert letters.bury(queue.poll(), "boom")
    assert queue.poll().key == "old"  # for an hour: claimed an hour ago, under a 2-hour lock
    yield ["--url", url], queue, letters
    engine.dispose()


def commands() -> dict[str, list[str]]:
    """Each destructive command, as typed, on the fixture's data."""
    return {"dead-letters drop": ["dead-letters", "drop", "--all"],
            "purge": ["purge", "q"],
            "drop": ["drop", "q", "k"],
            "release-stuck": ["release-stuck", "q", "--older-than", "30m",
                              "--acquire-timeout", "2h"]}


def untouched(queue: DelayedQueue, letters: DeadLetters) -> bool:
    return (queue.contains("k") and queue.get("old").in_flight and letters.count("q") == 1)


class _Terminal(io.StringIO):
    """Standard input at a terminal where the user types ``answer``."""

    def isatty(self) -> bool:
        return True


def at_terminal(answer: str, *args: str):
    with mock.patch("sys.stdin", _Terminal(answer)):
        return here(*args)


def test_every_command_that_deletes_or_releases_takes_yes():
    from sqldelay.cli import build_parser

    [sub] = [a for a in build_parser()._actions if a.choices and "purge" in a.choices]
    with_yes = set()
    for name, parser in sub.choices.items():
        nested = [a for a in parser._actions if a.choices and a.dest == "action"]
        for action, child in (nested[0].choices.items() if nested else [(None, parser)]):
            if any("--yes" in a.option_strings for a in child._actions):
                with_yes.add(name if action is None else f"{name} {action}")
    assert with_yes == DESTRUCTIVE == set(commands())


@pytest.mark.parametrize("name", sorted(DESTRUCTIVE))
def test_without_a_terminal_it_refuses_unless_yes(db, name):
    options, queue, letters = db
    assert "pass --yes" in fails(*commands()[name], *options, run=here)
    assert untouched(queue, letters)
    ok(*commands()[name], *options, "--yes", run=here)
    assert not untouched(queue, letters)


@pytest.mark.parametrize("name", sorted(DESTRUCTIVE))
def test_at_a_terminal_it_asks_and_does_nothing_unless_told_yes(db, name):
    options, queue, letters = db
    done = at_terminal("n\n", *commands()[name], *options)
    assert done.returncode == 1 and "[y/N]" in done.stderr
    assert "not confirmed: nothing changed" in done.stderr
    assert untouched(queue, letters)
    done = at_terminal("y\n", *commands()[name], *options)
    assert done.returncode == 0, done.stderr
    assert not untouched(queue, letters)


def test_dead_letters_drop_all_asks_at_a_real_terminal(db):
    """The reported case, through the entry point with a pseudo-terminal as its input."""
    options, queue, letters = db

    def typed(answer: bytes) -> subprocess.CompletedProcess:
        main, terminal = pty.openpty()
        try:
            os.write(main, answer)  # waits in the terminal's buffer until it is read
            return subprocess.run([*COMMAND, "dead-letters", "drop", "--all", *options],
                                  cwd=ROOT, stdin=terminal, capture_output=True, text=True,
                                  timeout=60)
        finally:
            os.close(terminal)
            os.close(main)

    done = typed(b"n\n")
    assert done.returncode == 1 and "delete 1 dead letter(s) of every queue for good?" in \
        done.stderr
    assert letters.count("q") == 1
    done = typed(b"y\n")
    assert done.returncode == 0 and "dropped 1 dead letter(s)" in done.stdout
    assert letters.count("q") == 0
