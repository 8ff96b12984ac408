"""`specrun worker`: serve this machine's devices to other machines over llama.cpp's RPC.

The server runs in-process on a daemon thread, because llama.cpp's server call blocks in C for
good; the main thread waits, so Ctrl-C still ends the process at once (exit 130). The process ends
with os._exit: a normal interpreter exit would tear down llama.cpp's statics under the running
server thread. llama.cpp prints connection events on stdout; they are sent to stderr with
everything else, as stdout is for generated text only.

Everything that can be checked before the thread starts is checked first, each failure one line
and its exit code: the address, the RPC backend of this llama.cpp build, the devices, the cache
folder, the port. An error the server thread meets anyway is reported by the main thread, once.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Annotated

import typer

from .. import defaults
from ..engine import devices as engine_devices
from ..engine import rpc as engine_rpc
from ..engine.devices import Device
from ..errors import EXIT_INTERRUPTED, EXIT_RUNTIME, InputError, RpcError, SpecrunError
from ..terminal import human_size
from . import fatal

WORKER = "Worker"

Host = Annotated[
    str,
    typer.Option(
        "--host",
        help="The address to listen on (an IPv4 address; 0.0.0.0: every interface). Anything but loopback exposes the "
        "worker to the network.",
        rich_help_panel=WORKER,
    ),
]
Port = Annotated[
    int, typer.Option("--port", min=1, max=65535, help="The TCP port to listen on.", rich_help_panel=WORKER)
]
Threads = Annotated[
    int,
    typer.Option(
        "--threads", "-t", min=0, help="CPU threads for the CPU device (0: all cores).", rich_help_panel=WORKER
    ),
]
DeviceNames = Annotated[
    str | None,
    typer.Option(
        "--device",
        "-dev",
        metavar="NAME[,NAME…]",
        help="Devices to serve, by llama.cpp's names (CPU, CUDA0, …). Default: every GPU, else the CPU.",
        rich_help_panel=WORKER,
    ),
]
Cache = Annotated[
    Path | None,
    typer.Option(
        "--cache",
        metavar="DIR",
        help="llama.cpp's tensor cache: large tensors received are kept here, so a restarted worker is not sent the "
        "weights again.",
        rich_help_panel=WORKER,
    ),
]

INSECURE = (
    "specrun worker: WARNING: listening on {host}, beyond this machine. llama.cpp's RPC has no authentication and no "
    "encryption: anyone who can reach this port can run code on these devices and read what they compute. Make it "
    "reachable only from trusted machines (a private network, a firewall rule, an SSH tunnel)."
)


def register(app: typer.Typer) -> None:
    """Add `worker` to the `specrun` app."""
    app.command(name="worker")(worker)


def worker(
    host: Host = "127.0.0.1",
    port: Port = engine_rpc.DEFAULT_PORT,
    threads: Threads = 0,
    device: DeviceNames = None,
    cache: Cache = None,
) -> None:
    """Serve this machine's CPU or GPUs to `specrun run/chat/bench --rpc HOST:PORT` on other machines, until Ctrl-C."""
    address = listen_address(host)
    engine_rpc.require_rpc()
    endpoint = engine_rpc.Endpoint(host, port)
    served = served_devices(device)
    if not served:
        raise InputError("this machine has no device to serve", "pass --device with one of `specrun doctor`'s devices")
    if cache is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise InputError(f"--cache {cache}: {error.strerror}", "give a folder this user can write") from None
    check_port_free(host, port)
    threads = threads or defaults.threads()
    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    if not address.is_loopback:
        say(INSECURE.format(host=host))
    for d in served:
        say(f"specrun worker: serving {d.name} ({d.description}, {human_size(d.free)} free of {human_size(d.total)})")
    say(
        f"specrun worker: listening at {endpoint} with {threads} threads"
        + (f", tensor cache {cache}" if cache else "")
        + f"; use it with --rpc {'THIS_HOST' if address.is_unspecified else host}:{port}"
    )
    fatal.install()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # llama.cpp's server prints on stdout
    failed: list[BaseException] = []

    def serve() -> None:
        try:
            engine_rpc.serve(endpoint, served, threads=threads, cache_dir=cache)
        except BaseException as error:  # noqa: BLE001 - said once, by the main thread, below
            failed.append(error)

    server = threading.Thread(target=serve, daemon=True, name="rpc-server")
    server.start()
    signal.signal(signal.SIGTERM, _terminated)
    try:
        while server.is_alive():
            server.join(0.2)
    except KeyboardInterrupt:
        say("specrun worker: interrupted")
        os._exit(EXIT_INTERRUPTED)
    if failed:
        line, code = stopped_by(failed[0])
        say(line)
        os._exit(code)
    say(f"specrun worker: error: llama.cpp's RPC server stopped (could not listen at {endpoint}?)")
    os._exit(EXIT_RUNTIME)


def stopped_by(error: BaseException) -> tuple[str, int]:
    """The line and exit code for an error that ended the server thread (a traceback only with
    SPECRUN_DEBUG=1)."""
    if isinstance(error, SpecrunError):
        return f"specrun worker: error: {error.one_line()}", error.exit_code
    if os.environ.get("SPECRUN_DEBUG"):
        traceback.print_exception(error)
    return (
        f"specrun worker: internal error: {type(error).__name__}: {error} (SPECRUN_DEBUG=1 shows the traceback)",
        EXIT_RUNTIME,
    )


def _terminated(signum: int, frame) -> None:  # noqa: ARG001 - signal handler signature
    """SIGTERM (a service manager, `kill`): stop as on Ctrl-C, with the conventional 128 + 15."""
    print("specrun worker: terminated", file=sys.stderr, flush=True)
    os._exit(128 + signal.SIGTERM)


def listen_address(host: str) -> ipaddress.IPv4Address:
    """llama.cpp's server listens on IPv4 addresses only (inet_addr)."""
    try:
        return ipaddress.IPv4Address(host)
    except ValueError:
        raise InputError(
            f"--host {host!r} is not an IPv4 address", "e.g. --host 127.0.0.1 (this machine only) or --host 0.0.0.0"
        ) from None


def served_devices(names: str | None) -> list[Device]:
    """--device as this machine's devices (the CPU allowed); default every GPU, else the CPU, as
    llama.cpp's rpc-server."""
    local = [d for d in engine_devices.devices() if not d.remote]
    if names is None:
        return [d for d in local if d.kind not in ("cpu", "accel")] or [d for d in local if d.kind == "cpu"]
    out = []
    for name in (n.strip() for n in names.split(",")):
        found = [d for d in local if d.name.lower() == name.lower()]
        if not found:
            raise InputError(
                f"--device: unknown device '{name}'", f"available here: {', '.join(d.name for d in local)}"
            )
        out += [d for d in found if d not in out]
    return out


def check_port_free(host: str, port: int) -> None:
    """Fail with one line before llama.cpp would (it only prints and returns)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as error:
        raise RpcError(
            f"cannot listen at {host}:{port}: {error.strerror}",
            "another worker may be running there; choose another --port",
        ) from None
    finally:
        probe.close()
