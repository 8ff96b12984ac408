"""The agent clients as their users install them (Claude Code, Codex CLI and OpenCode from the npm
registry, aider and llm from PyPI), each pointed at `specrun serve` with only a base URL and a
model name, complete a short task on a tiny fixture model (scripts/agent_clients.sh). A lane of
its own (`-m clients`): the clients are installed apart from the project (the script's header says
how); a client that is not installed is skipped, and with none installed the test is."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from paths import ROOT

pytestmark = [pytest.mark.clients, pytest.mark.slow]

CLIENTS = ("claude", "codex", "opencode", "aider", "llm")
HOME = os.environ.get("AGENT_CLIENTS", "/tmp/clients")


def installed() -> list[str]:
    path = os.pathsep.join(
        [os.environ.get("PATH", ""), f"{HOME}/npm/node_modules/.bin", f"{HOME}/venv/bin", f"{HOME}/aider-venv/bin"]
    )
    return [name for name in CLIENTS if shutil.which(name, path=path)]


def test_every_installed_client_completes_a_task():
    present = installed()
    if not present:
        pytest.skip(f"no agent client is installed (see scripts/agent_clients.sh; AGENT_CLIENTS={HOME})")
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "agent_clients.sh"), "--clients", " ".join(present), "--timeout", "300"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    lines = [line for line in result.stdout.splitlines() if line.split(" ")[0] in CLIENTS]
    assert result.returncode == 0 and len(lines) == len(present), result.stdout + result.stderr
    assert all(" ok " in line for line in lines), result.stdout
