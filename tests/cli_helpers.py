"""Run the real `specrun` command in a subprocess, as a shell script would."""

from __future__ import annotations

import os
import subprocess
import sys

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}
ENV.pop("SPECRUN_DEBUG", None)


def specrun(*args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m specrun ARGS`; stdin is empty (not a terminal) unless given."""
    return subprocess.run(
        [sys.executable, "-m", "specrun", *map(str, args)],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env={**ENV, **(env or {})},
        timeout=timeout,
    )


def popen(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "specrun", *map(str, args)], env=ENV, **kw)
