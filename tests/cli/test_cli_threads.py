"""Errors said once and right: what a command can check before it starts a thread is checked
first, and an exception that ends a background thread is one line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from cli_helpers import env as cli_env
from rpc_helpers import free_port


def python(script: str, debug: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run `script` (which ends by calling specrun's real main) in a fresh interpreter."""
    extra = {"SPECRUN_DEBUG": "1"} if debug else {}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env=cli_env(**extra),
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )


THREAD_COMMAND = """
    import threading
    from specrun.cli import app
    from specrun.errors import SpecrunError

    @app.app.command(name="boom")
    def boom() -> None:
        '''Start a thread that fails, wait for it, and finish.'''
        def fail() -> None:
            raise {error}
        thread = threading.Thread(target=fail, name="boom-thread")
        thread.start()
        thread.join()
        print("command finished")

    app.main(["boom"])
"""


@pytest.mark.parametrize(
    "error, line",
    [
        (
            "ValueError('bad value')",
            "specrun: internal error in boom-thread: ValueError: bad value (SPECRUN_DEBUG=1 shows the traceback)",
        ),
        ("SpecrunError('the thing failed', 'do this')", "specrun: error: the thing failed (do this)"),
    ],
    ids=["a-bug", "a-specrun-error"],
)
def test_an_exception_in_a_background_thread_is_one_line(error, line):
    result = python(THREAD_COMMAND.format(error=error))
    assert result.returncode == 0 and result.stdout == "command finished\n", result
    assert result.stderr.splitlines() == [line], result.stderr


def test_specrun_debug_keeps_pythons_traceback_for_a_thread():
    result = python(THREAD_COMMAND.format(error="ValueError('bad value')"), debug=True)
    assert "Traceback" in result.stderr and "ValueError: bad value" in result.stderr and "boom-thread" in result.stderr


WORKER = """
    import specrun.engine.rpc as rpc
    import specrun.engine.devices as devices
    from specrun.errors import RpcError
    {patch}
    from specrun.cli import app
    app.main(["worker", "--port", "{port}", "--threads", "1"])
"""


def test_a_worker_without_the_rpc_backend_says_so_in_one_line_before_listening():
    """A llama.cpp built without GGML_RPC: once a traceback from the server thread, then a wrong
    guess ("could not listen at …?")."""
    port = free_port()
    start = time.monotonic()
    result = python(WORKER.format(patch="rpc.supported = lambda: False", port=port))
    assert result.returncode == 1, result
    assert result.stderr.splitlines() == [
        "specrun: error: this llama.cpp build has no RPC backend "
        "(rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_RPC=on (scripts/setup.sh does))"
    ], result.stderr
    assert time.monotonic() - start < 30


def test_a_machine_with_no_device_to_serve_is_a_usage_error():
    result = python(WORKER.format(patch="devices.devices = lambda *a, **k: []", port=free_port()))
    assert result.returncode == 2, result
    assert result.stderr.splitlines() == [
        "specrun: error: this machine has no device to serve (pass --device with one of `specrun doctor`'s devices)"
    ]


@pytest.mark.parametrize(
    "raised, line, code",
    [
        ("RpcError('the server gave up', 'restart it')", "specrun worker: error: the server gave up (restart it)", 1),
        (
            "MemoryError('out of memory')",
            "specrun worker: internal error: MemoryError: out of memory (SPECRUN_DEBUG=1 shows the traceback)",
            1,
        ),
    ],
    ids=["a-specrun-error", "a-bug"],
)
def test_an_error_the_server_thread_meets_is_said_once_with_its_exit_code(raised, line, code):
    patch = f"def serve(*args, **kwargs):\n        raise {raised}\n    rpc.serve = serve"
    result = python(WORKER.format(patch=patch, port=free_port()))
    assert result.returncode == code, result
    lines = result.stderr.splitlines()
    assert lines[-1] == line and "Traceback" not in result.stderr and "could not listen" not in result.stderr, (
        result.stderr
    )
    assert sum("error" in entry for entry in lines) == 1, lines
