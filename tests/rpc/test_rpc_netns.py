"""A worker behind a real link that dies without a word (no reset, no close): the run still ends
with one line and exit 1 within seconds instead of waiting for TCP to give up. Needs root and
`ip`; skipped with the reason elsewhere."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time

import pytest
from cli_helpers import popen
from netns_helpers import Link, why_no_namespaces
from rpc_helpers import start_worker
from test_cli_run import F_SETPIPE_SZ, _unread

from specrun.engine.rpc import DEAD_LINK_TIMEOUT_S

REASON = why_no_namespaces()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.mark.slow
def test_a_link_cut_mid_generation_ends_the_run_within_seconds(tiny_target, tmp_path):
    link = Link.create(os.getpid())
    worker = proc = None
    try:
        worker = start_worker(tmp_path, host=link.ns_ip, namespace=link.namespace)
        proc = popen(
            "run",
            "hi",
            "--target",
            tiny_target,
            "--draft",
            "none",
            "-n",
            "6000",
            "-c",
            "8192",
            "-t",
            "1",
            "--temp",
            "0",
            "--raw",
            "--ignore-eos",
            "--rpc",
            worker.endpoint,
            "-ngl",
            "all",
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        reader = proc.stdout.fileno()
        size = fcntl.fcntl(reader, F_SETPIPE_SZ, 4096)
        deadline = time.monotonic() + 120
        while _unread(reader) < size - 64:  # blocked writing, far from its 6000 tokens
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before filling the pipe"
            time.sleep(0.02)
        link.cut()
        cut = time.monotonic()
        out, err = proc.communicate(timeout=DEAD_LINK_TIMEOUT_S + 120)
        waited = time.monotonic() - cut
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if worker is not None:
            worker.proc.terminate()
            worker.proc.wait(timeout=30)
        link.remove()
    assert proc.returncode == 1, err
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "lost the RPC worker" in lines[0], lines
    assert waited < DEAD_LINK_TIMEOUT_S + 30 and len(out) > size - 64
