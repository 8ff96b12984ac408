"""A `specrun worker` in a subprocess on a free loopback port, and fake workers for handshake faults."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cli_helpers import env as cli_env
from cli_helpers import interruptible


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class Worker:
    """A running `specrun worker`; its stderr goes to a file (a pipe nobody reads would fill up)."""

    proc: subprocess.Popen
    endpoint: str
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_worker(directory: Path, *args: str, host: str = "127.0.0.1", namespace: str | None = None) -> Worker:
    """Start a worker (in a network namespace if given) and wait until it listens."""
    port = free_port()
    log = directory / f"worker-{port}.log"
    prefix = ["ip", "netns", "exec", namespace] if namespace else []
    with open(log, "wb") as handle:
        proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "specrun",
                "worker",
                "--host",
                host,
                "--port",
                str(port),
                "--threads",
                "1",
                *args,
            ],
            stdout=subprocess.DEVNULL,
            stderr=handle,
            stdin=subprocess.DEVNULL,
            env=cli_env(),
            preexec_fn=interruptible,
        )
    reach = "127.0.0.1" if host == "0.0.0.0" else host
    worker = Worker(proc, f"{reach}:{port}", log)
    deadline = time.monotonic() + 60
    while "Starting RPC server" not in worker.text() or not _listening(reach, port):
        if proc.poll() is not None or time.monotonic() > deadline:
            worker.stop()
            raise RuntimeError(f"the worker did not start: {worker.text()}")
        time.sleep(0.05)
    return worker


def _listening(host: str, port: int) -> bool:
    """True once something accepts TCP connections there (llama.cpp's server, not our check)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class FakeWorker:
    """A TCP server that answers the RPC HELLO as told: with a version, by closing, or not at all."""

    def __init__(self, reply: tuple[int, int, int] | None, *, silent: bool = False):
        self.reply, self.silent = reply, silent
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(4)
        self.port = self.server.getsockname()[1]
        self.connections: list[socket.socket] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        self.connections.append(conn)
        if self.silent:
            return
        conn.recv(64)
        if self.reply is None:
            conn.close()
            return
        conn.sendall(struct.pack("<Q", 28) + bytes(self.reply) + bytes(25))

    def close(self) -> None:
        for conn in self.connections:
            conn.close()
        self.server.close()
