"""The package's shape: dependencies point one way (import-linter's contracts in pyproject.toml),
only the engine calls llama.cpp, and the top level stays small."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

PACKAGE = ROOT / "specrun"


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.fail("lint-imports is missing: install the test extra (pip install -e '.[test]')")
    result = subprocess.run([lint, "--no-cache"], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_only_the_engine_calls_llama_cpp():
    callers = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if any(m.split(".")[0] == "llama_cpp" for m in imported_modules(p))
    )
    assert callers and all(c.startswith("engine/") for c in callers), callers


def test_the_top_level_holds_at_most_six_modules():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 6, modules
    assert {"__init__.py", "__main__.py", "errors.py", "defaults.py"} <= set(modules)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def internal_imports(path: Path) -> set[str]:
    """The specrun modules `path` imports anywhere in it (inside functions too), resolved to modules."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "specrun")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "specrun":
                target = node.module
            else:
                continue
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)  # `from . import x` names a module
    return found


def test_no_module_of_the_package_imports_itself_in_a_circle():
    """Every import counts, lazy ones inside functions too: a circle that only a function-level
    import breaks is still one piece of code split in two."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in internal_imports(path) if m in files and m != name} for name, path in files.items()}
    for name in graph:  # a package's __init__ is not a dependency of its own modules
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt) :] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, cycles
