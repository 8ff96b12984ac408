"""Run the real `specrun` command in a subprocess, as a shell script would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from paths import ROOT

CHECKOUT = ROOT  # the specrun whose tests these are


def env(**extra: str) -> dict:
    """The environment a subprocess gets: this test's (its cache folder included), unbuffered, no
    debug tracebacks, and this checkout's specrun first on the path (a child started in another
    folder would otherwise import whichever specrun is installed)."""
    out = {key: value for key, value in os.environ.items() if key != "SPECRUN_DEBUG"}
    path = os.pathsep.join([str(CHECKOUT), *filter(None, [out.get("PYTHONPATH")])])
    return {**out, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path, **extra}


def specrun(
    *args: str, stdin: str | None = None, env: dict | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`python -m specrun ARGS`; stdin is empty (not a terminal) unless given."""
    return subprocess.run(
        [sys.executable, "-m", "specrun", *map(str, args)],
        input=stdin if stdin is not None else "",
        capture_output=True,
        text=True,
        env=_env(**(env or {})),
        timeout=timeout,
    )


_env = env


def run_json(*args: str, stdin: str | None = None, timeout: float = 120) -> dict:
    """`specrun run ARGS --json`, which must succeed; its document."""
    result = specrun("run", *args, "--json", stdin=stdin, timeout=timeout)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def interruptible() -> None:
    """Give a child Ctrl-C's default action: started from a shell's background job, the test run
    inherits SIGINT ignored, and Python leaves an ignored SIGINT ignored, so a test that sends it
    would wait for nothing. Pass as `preexec_fn`."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "specrun", *map(str, args)], env=_env(), preexec_fn=interruptible, **kw
    )
