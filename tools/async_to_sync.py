"""Generate sqldelay's blocking front end from its asyncio one.

    python tools/async_to_sync.py           # rewrite every generated module
    python tools/async_to_sync.py --check   # exit 1 if a generated module is out of date

The async modules (``src/sqldelay/*_async.py``) are the source; each blocking twin is the same
text with ``async``/``await`` dropped and the names in ``RENAMES`` replaced, in code, strings
and comments alike, so layout, comments and docstrings carry over. What cannot be said the same
way for threads and tasks lives in the hand-written runner pair ``concurrency_async.py`` /
``concurrency.py``, which give the same names. A line may end with a comment
``# sync: <code>`` to say what that line is in the blocking twin. Comments and docstrings are
rewritten too: the renamed names, ``await``/``async`` dropped from code quoted in double
backticks, and the prose forms in ``PHRASES`` ("an async def", ...); a word about
awaiting left over after that is an error, so no comment goes stale unseen. Each generated
module is marked ``linguist-generated`` in ``.gitattributes`` (``--check`` verifies it), so
diffs and reviews fold it away.

The edits work on Python's own tokens, not on text patterns, so "await" inside a word or a
string that merely mentions a name is not touched by mistake; the result is compiled, and a
leftover ``asyncio`` is an error.
"""

from __future__ import annotations

import argparse
import ast
import io
import re
import sys
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "sqldelay"

# async module -> generated blocking module, in the package
MODULES = {
    "executor_async.py": "executor.py",
    "queue_async.py": "queue.py",
    "dead_letters_async.py": "dead_letters.py",
    "cron_async.py": "cron.py",
    "worker_async.py": "worker.py",
    "sharded_async.py": "sharded.py",
    "inspection_async.py": "inspection.py",
    "notifier_async.py": "notifier.py",
    "tasks_async.py": "tasks.py",
}

RENAMES = {
    "AsyncDelayedQueue": "DelayedQueue",
    "AsyncWorker": "Worker",
    "AsyncExecutor": "Executor",
    "AsyncDeadLetters": "DeadLetters",
    "AsyncCronService": "CronService",
    "AsyncCronHandle": "CronHandle",
    "AsyncShardedQueue": "ShardedQueue",
    "AsyncShardedCronService": "ShardedCronService",
    "AsyncInspector": "Inspector",
    "AsyncEnvelope": "Envelope",
    "AsyncTasks": "Tasks",
    "AsyncTask": "Task",
    "AsyncTaskHandle": "TaskHandle",
    "AsyncConnection": "Connection",
    "AsyncEngine": "Engine",
    "AsyncRetrying": "Retrying",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "concurrency_async": "concurrency",
    **{src[:-3]: dst[:-3] for src, dst in MODULES.items()},
}

# in strings and comments: the names above as whole words, and phrases about awaiting
_TEXT_RENAMES = re.compile(r"\b(" + "|".join(map(re.escape, RENAMES)) + r")\b")
# prose about awaiting in comments and docstrings, as the blocking twin says it: the forms
# the async modules use (a new one fails ``_verify`` until it is added here or reworded)
PHRASES = (
    (re.compile(r"\ban async def\b"), "a plain def"),
    (re.compile(r"\basync (def|with|for)\b"), r"\1"),
    (re.compile(r"\bawaits what\b"), "returns what"),  # a call's result, awaited or not
)
# code quoted in a comment or docstring: ``await x`` is ``x`` in the blocking twin
_QUOTED = re.compile(r"``(.+?)``")
_QUOTED_KEYWORD = re.compile(r"\b(?:await|async) ")
# what may not be left in a blocking twin's comments and docstrings
_ASYNC_WORD = re.compile(r"\b(?:async|await\w*|asyncio|coroutines?)\b")
GITATTRIBUTES = PACKAGE.parents[1] / ".gitattributes"
_SYNC_LINE = re.compile(r"^(?P<indent>\s*)(?P<code>\S.*?)\s*# sync: (?P<sync>.+)$")
_FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", None)  # Python 3.12+


def header(source_name: str) -> str:
    return (f"# Generated from {source_name} by tools/async_to_sync.py: edit that file, then run\n"
            "# `python tools/async_to_sync.py`. Do not edit this one.\n")


def convert(source: str, source_name: str) -> str:
    """The blocking twin of the async module text ``source``."""
    source = _apply_sync_lines(source)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    starts = _line_offsets(source)

    def offset(position: tuple[int, int]) -> int:
        return starts[position[0] - 1] + position[1]

    edits: list[tuple[int, int, str]] = []
    shrunk: dict[int, list[tuple[int, int]]] = {}  # row -> (column, characters removed)

    def replace(i: int, end: tuple[int, int], text: str) -> None:
        tok = tokens[i]
        edits.append((offset(tok.start), offset(end), text))
        removed = offset(end) - offset(tok.start) - len(text)
        shrunk.setdefault(tok.start[0], []).append((tok.start[1], removed))

    for i, tok in enumerate(tokens):
        if tok.type == tokenize.NAME:
            if tok.string == "await" or (tok.string == "async"
                                         and _next_name(tokens, i) in ("def", "with", "for")):
                replace(i, tokens[i + 1].start, "")  # the keyword and the space after it
            elif tok.string in RENAMES:
                replace(i, tok.end, RENAMES[tok.string])
        elif tok.type in (tokenize.STRING, tokenize.COMMENT, _FSTRING_MIDDLE):
            text = _sync_text(tok.string)
            if text != tok.string:
                replace(i, tok.end, text)
    for row, width in _realigned_rows(tokens, shrunk).items():
        edits.append((starts[row - 1], starts[row - 1] + width, ""))
    out = source
    for start, end, text in sorted(edits, reverse=True):
        out = out[:start] + text + out[end:]
    out = header(source_name) + _sort_renamed_imports(out)
    _verify(out, source_name)
    return out


def _sync_text(text: str) -> str:
    """A string or comment as the blocking twin says it."""
    text = _TEXT_RENAMES.sub(lambda m: RENAMES[m.group(1)], text)
    text = _QUOTED.sub(lambda m: "``" + _QUOTED_KEYWORD.sub("", m.group(1)) + "``", text)
    for pattern, replacement in PHRASES:
        text = pattern.sub(replacement, text)
    return text


def _sort_renamed_imports(text: str) -> str:
    """Put the names of each ``from … import`` that a rename touched back in the order ruff's
    isort keeps (constants, classes, then the rest, each alphabetical), one line if it fits."""
    renamed = set(RENAMES.values())
    lines = text.splitlines(keepends=True)
    for node in sorted(ast.parse(text).body, key=lambda n: -n.lineno):
        if not isinstance(node, ast.ImportFrom) or not renamed & {a.name for a in node.names}:
            continue
        names = sorted((a.name if a.asname is None else f"{a.name} as {a.asname}"
                        for a in node.names), key=_isort_key)
        module = "." * node.level + (node.module or "")
        one = f"from {module} import {', '.join(names)}\n"
        block = one if len(one) <= 101 else (
            f"from {module} import (\n" + "".join(f"    {n},\n" for n in names) + ")\n")
        lines[node.lineno - 1:node.end_lineno] = [block]
    return "".join(lines)


def _isort_key(name: str) -> tuple[int, str, str]:
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name.lower(), name  # ruff's isort compares names without case first


def _apply_sync_lines(source: str) -> str:
    """Replace each line ending in ``# sync: <code>`` with ``<code>`` at its indentation."""
    lines = []
    for line in source.splitlines(keepends=True):
        match = _SYNC_LINE.match(line.rstrip("\n"))
        if match:
            line = f"{match['indent']}{match['sync']}\n"
        lines.append(line)
    return "".join(lines)


def _next_name(tokens: list[tokenize.TokenInfo], i: int) -> str | None:
    for tok in tokens[i + 1:]:
        if tok.type == tokenize.NAME:
            return tok.string
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            return None
    return None


def _realigned_rows(tokens: list[tokenize.TokenInfo],
                    shrunk: dict[int, list[tuple[int, int]]]) -> dict[int, int]:
    """Continuation lines aligned with an opening bracket whose line got shorter before it
    (``await foo(a,`` / ``         b)``): how many leading spaces each loses to stay aligned.
    Hanging indents stay as they are."""
    shift: dict[int, int] = {}
    brackets: list[tuple[int, int, bool]] = []  # row, column, followed on its own line
    previous_row = 0
    for i, tok in enumerate(tokens):
        row, col = tok.start
        if row != previous_row and brackets and tok.type not in (tokenize.NL, tokenize.COMMENT):
            b_row, b_col, aligned = brackets[-1]
            if aligned and col == b_col + 1:
                moved = shift.get(b_row, 0) + sum(n for c, n in shrunk.get(b_row, ()) if c < b_col)
                if moved:
                    shift[row] = moved
        if tok.type == tokenize.OP and tok.string in "([{":
            after = tokens[i + 1]
            brackets.append((row, col, after.start[0] == row
                             and after.type not in (tokenize.NL, tokenize.COMMENT)))
        elif tok.type == tokenize.OP and tok.string in ")]}":
            brackets.pop()
        previous_row = tok.end[0]
    return shift


def _line_offsets(source: str) -> list[int]:
    starts = [0]
    for line in source.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return starts


def _verify(text: str, source_name: str) -> None:
    compile(text, source_name, "exec")
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.NAME and tok.string in ("asyncio", "await", "async"):
            raise SystemExit(f"{source_name}: {tok.string!r} left in the blocking twin at line "
                             f"{tok.start[0]}: move it into concurrency_async.py")
        if tok.type == tokenize.COMMENT:
            _prose_done(tok.string, tok.start[0], source_name)
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body and (
                isinstance(doc := node.body[0], ast.Expr)
                and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str)):
            _prose_done(doc.value.value, doc.lineno, source_name)


def _prose_done(text: str, line: int, source_name: str) -> None:
    """Refuse a comment or docstring of a blocking twin that still speaks of awaiting."""
    if word := _ASYNC_WORD.search(text):
        raise SystemExit(f"{source_name}: {word.group()!r} left in a comment or docstring of "
                         f"the blocking twin at line {line}: reword it, or add its form to "
                         "PHRASES")


def _marked_generated() -> set[str]:
    """The modules of the package that ``.gitattributes`` marks ``linguist-generated``."""
    lines = GITATTRIBUTES.read_text().splitlines() if GITATTRIBUTES.exists() else []
    prefix = "src/sqldelay/"
    return {words[0].removeprefix(prefix) for words in map(str.split, lines)
            if words and words[0].startswith(prefix) and "linguist-generated" in words[1:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only compare: exit 1 when a generated module is out of date")
    args = parser.parse_args(argv)
    stale = []
    for source_name, target_name in MODULES.items():
        text = convert((PACKAGE / source_name).read_text(), source_name)
        target = PACKAGE / target_name
        if target.exists() and target.read_text() == text:
            continue
        stale.append(target_name)
        if not args.check:
            target.write_text(text)
    unmarked = sorted(set(MODULES.values()) - _marked_generated())
    if unmarked:
        print("not marked linguist-generated in .gitattributes: " + ", ".join(unmarked))
    if args.check and stale:
        print("out of date: " + ", ".join(stale) + " (run python tools/async_to_sync.py)")
    if (args.check and stale) or unmarked:
        return 1
    for name in stale:
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
