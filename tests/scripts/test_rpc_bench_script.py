"""scripts/rpc-bench.sh end to end on tiny models: a worker in a network namespace behind a veth
pair with added latency, the bench against it and against a loopback worker, and the teardown.
Needs root, `ip` and `tc`; skipped with the reason where they are missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from cli_helpers import env as cli_env
from netns_helpers import why_no_namespaces
from paths import SCRIPTS

from specrun import defaults
from specrun.engine.rpc import parse_endpoint

SCRIPT = SCRIPTS / "rpc-bench.sh"


def _has_netem() -> bool:
    """Whether the kernel has the netem qdisc (tried on a dummy veth in a scratch namespace)."""
    ns = f"specrun-netem-{os.getpid()}"
    try:
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, capture_output=True)
        return (
            subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"],
                capture_output=True,
            ).returncode
            == 0
        )
    except (subprocess.CalledProcessError, OSError):
        return False
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


REASON = why_no_namespaces()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def namespaces() -> set[str]:
    return set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())


@pytest.mark.slow
def test_rpc_bench_script_runs_over_a_delayed_link_and_cleans_up(tiny_target, tiny_draft, tmp_path):
    before = namespaces()
    env = {
        **cli_env(),
        "SPECRUN_PYTHON": sys.executable,
        "SPECRUN_RPC_OUT": str(tmp_path),
        "SPECRUN_RPC_RUNS": "link loopback",
        "SPECRUN_RPC_THREADS": "1",
    }
    result = subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "--target",
            str(tiny_target),
            "--draft",
            str(tiny_draft),
            "--quick",
            "--category",
            "code-generation",
            "--max-tokens",
            "8",
            "--warmup",
            "0",
            "--spec",
            "off,draft,ngram,auto",
            "-c",
            "1024",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    link = json.loads((tmp_path / "bench-link.json").read_text())
    loopback = json.loads((tmp_path / "bench-loopback.json").read_text())
    for doc in (link, loopback):
        labels = {row["label"] for row in doc["categories"] if row["category"] == "all"}
        assert {"plain", "ngram K=4", f"auto K={defaults.AUTO_K_MAX}"} <= labels and any(
            label.startswith("draft") for label in labels
        )
        target = doc["environment"]["placement"]["target"]["devices"]
        assert [s["device"] for s in target if s["layers"]][0].startswith(
            "RPC"
        )  # --gpu-layers all: every layer on the worker
    link_endpoint = [s["endpoint"] for s in link["environment"]["placement"]["target"]["devices"] if s["endpoint"]][0]
    assert parse_endpoint(link_endpoint).host.startswith("10.211.")
    summary = (tmp_path / "summary.md").read_text()
    assert "| plain |" in summary and "link" in summary and "loopback" in summary and "each way" in summary
    assert namespaces() == before  # the namespace is gone
    assert "specrun-rpc-" not in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout


@pytest.mark.skipif(
    REASON is None and not _has_netem(),
    reason="the kernel has no netem qdisc (CONFIG_NET_SCH_NETEM); "
    "the script falls back to a userspace delay proxy, tested above",
)
def test_rpc_bench_script_uses_netem_where_the_kernel_has_it(tiny_target, tmp_path):
    env = {
        **cli_env(),
        "SPECRUN_PYTHON": sys.executable,
        "SPECRUN_RPC_OUT": str(tmp_path),
        "SPECRUN_RPC_RUNS": "link",
        "SPECRUN_RPC_THREADS": "1",
    }
    result = subprocess.run(
        [
            "bash",
            str(SCRIPT),
            "--target",
            str(tiny_target),
            "--draft",
            "none",
            "--quick",
            "--category",
            "code-generation",
            "--max-tokens",
            "4",
            "--warmup",
            "0",
            "--spec",
            "off",
            "-c",
            "1024",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tc netem 1 ms each way" in (tmp_path / "summary.md").read_text()
