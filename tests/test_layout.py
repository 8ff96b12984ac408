"""The package's shape: dependencies point one way (import-linter's contracts in pyproject.toml),
only the engine calls llama.cpp, and the top level stays small."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "specrun"


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
    callers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if any(m.split(".")[0] == "llama_cpp" for m in imported_modules(p)))
    assert callers and all(c.startswith("engine/") for c in callers), callers


def test_the_top_level_holds_at_most_six_modules():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 6, modules
    assert {"__init__.py", "__main__.py", "errors.py", "defaults.py"} <= set(modules)
