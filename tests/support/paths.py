"""Where the checkout's parts are, for tests in any folder of tests/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout whose tests these are
SCRIPTS = ROOT / "scripts"
DATA = ROOT / "tests" / "data"
SUPPORT = Path(__file__).resolve().parent
