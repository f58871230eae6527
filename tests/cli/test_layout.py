"""How the command line's package is built: no import circle through it, the library never
imports it, and nothing in it reaches outside the installed package (``sqldelay bench`` only
says where the benchmark suite runs)."""

from __future__ import annotations

import ast
from pathlib import Path

import sqldelay

from .test_commands import fails, here

PACKAGE = Path(sqldelay.__file__).parent


def imports() -> dict[str, set[str]]:
    """Each module of the package, by dotted name, with the package's modules it imports,
    at the top or inside a function (a module imported by name, else the module the names
    come from)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["sqldelay", *path.relative_to(PACKAGE).with_suffix("").parts]
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        here_ = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join([*here_.split(".")[:len(here_.split(".")) - node.level + 1],
                                     *([base] if base else [])])
                targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                            for a in node.names}
        found[name] = {t for t in targets if t in modules and t != name}
    return found


def test_no_module_of_the_command_line_imports_its_package_and_none_is_in_a_circle():
    graph = imports()
    cli = {name for name in graph if name == "sqldelay.cli" or name.startswith("sqldelay.cli.")}
    # __main__ runs main, and nothing imports it: it closes no circle
    assert {m for m in cli - {"sqldelay.cli.__main__"} if "sqldelay.cli" in graph[m]} == set()

    def reaches(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for target in graph[todo.pop()] - seen:
                seen.add(target)
                todo.append(target)
        return seen

    assert {m for m in cli if m in reaches(m)} == set()  # no module imports itself back


def test_the_library_never_imports_the_command_line():
    graph = imports()
    outside = {m for m in graph if not (m == "sqldelay.cli" or m.startswith("sqldelay.cli."))}
    assert {m for m in outside if any(t.startswith("sqldelay.cli") for t in graph[m])} == set()


def test_bench_says_where_the_benchmarks_run_with_the_arguments_given():
    line = fails("bench", "--scenario", "churn", "--help", run=here)
    assert "python -m benchmarks --scenario churn --help" in line
    assert "source checkout" in line
    assert "sys.path" not in (PACKAGE / "cli" / "bench.py").read_text()
