"""A script of scripts/ imported as a module, for tests of its functions."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

from paths import SCRIPTS


@contextmanager
def script_module(filename: str, name: str) -> Iterator[ModuleType]:
    """scripts/`filename` imported as `name`, registered in sys.modules while in use (dataclasses
    look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / filename)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
