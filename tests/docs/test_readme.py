"""The README keeps its promises: its first example runs as printed and shows a delivery, the
test command does not destroy the environment the first command made, and every ``sqldelay``
command it shows exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from sqldelay.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def blocks(language: str, after: str) -> list[str]:
    """The ``language`` code blocks of the README section headed ``after``."""
    section = README.split(f"\n## {after}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def test_the_first_example_shows_a_whole_round_trip(tmp_path):
    [code] = blocks("python", "In 30 seconds")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    before, delivered = done.stdout.splitlines()
    assert before == "None"  # not due yet
    assert delivered.startswith("sending {'to': 'a@b.c'} due at ")
    assert (tmp_path / "queue.db").exists()


def test_the_test_command_keeps_the_environment_of_the_first_command():
    [commands] = blocks("sh", "The two commands")
    first = re.search(r"python3 -m venv (\S+)", commands).group(1)
    script = (ROOT / ".ci" / "run").read_text()
    default = re.search(r"venv=\$\{SQLDELAY_VENV:-([^}]+)\}", script).group(1)
    assert default != first
    assert 'rm -rf "$venv"' in script  # what it would do to the first command's environment


def test_every_command_the_readme_shows_exists():
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    shown = set()
    for block in re.findall(r"```sh\n(.*?)```", README, re.S):
        shown |= set(re.findall(r"^(?:\.venv/bin/)?sqldelay ([a-z-]+)", block, re.M))
    assert shown and shown <= commands, shown - commands
