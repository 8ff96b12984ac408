"""llama.cpp's RPC backend: serve this machine's devices to others, and use other machines' devices.

llama-cpp-python does not bind ggml-rpc.h, so its two entry points are bound here with ctypes on
the libggml-rpc library it ships: `ggml_backend_rpc_start_server` (blocks, serving one client at a
time) and `ggml_backend_rpc_add_server` (whose devices are then registered with ggml).

llama.cpp aborts the process when it cannot reach a worker or the worker answers with another
protocol version. So every endpoint is checked here first, with a TCP connection and the protocol's
HELLO under a timeout, and a failure becomes one line that names the endpoint and the fix. Once
connected, a worker that dies makes llama.cpp abort mid-decode; `fatal.py` turns that into one line
too (see `describe_abort`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, RpcError, SpecrunError
from .devices import Device, devices, ggml

# The protocol of ggml-rpc.h in the llama.cpp this package is built with (RPC_PROTO_*_VERSION);
# tests check it against what a `specrun worker` of this build answers.
PROTOCOL = (7, 0)
HELLO = 14  # RPC_CMD_HELLO: the first command of every connection, in every protocol version
CONN_CAPS_SIZE = 24  # the HELLO request: transport capabilities (all zero: plain TCP)
CHECK_TIMEOUT_S = 5.0
DEFAULT_PORT = 50052
DEAD_WORKER = "Remote RPC server crashed or returned malformed response"  # ggml-rpc.cpp's abort message
DEAD_LINK_TIMEOUT_S = 10  # a link that acknowledges nothing for this long counts as dead

_REGISTERED: list[str] = []  # endpoints whose devices this process has registered (once each: ggml cannot unregister)


@dataclass(frozen=True)
class Endpoint:
    """HOST:PORT of an RPC worker."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoints(text: str, flag: str = "--rpc") -> list[Endpoint]:
    """'host:port,host2:port' → endpoints, in order, without duplicates; a malformed one is a usage error."""
    items = [item.strip() for item in text.split(",")]
    if not text.strip() or any(not item for item in items):
        raise InputError(
            f"{flag} needs HOST:PORT[,HOST:PORT…], got {text!r}", f"e.g. {flag} 192.168.1.20:{DEFAULT_PORT}"
        )
    out: list[Endpoint] = []
    for item in items:
        endpoint = parse_endpoint(item, flag)
        if endpoint not in out:
            out.append(endpoint)
    return out


def parse_endpoint(item: str, flag: str = "--rpc") -> Endpoint:
    host, sep, port = item.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(
            f"{flag}: {item!r} is not HOST:PORT",
            f"e.g. {flag} 192.168.1.20:{DEFAULT_PORT} (the port `specrun worker` prints)",
        )
    if ":" in host or any(c.isspace() for c in host):
        raise InputError(
            f"{flag}: {item!r} is not HOST:PORT",
            "give an IPv4 address or a host name (llama.cpp's RPC does not take IPv6 addresses)",
        )
    return Endpoint(host, int(port))


@functools.lru_cache(maxsize=1)
def _rpc_lib():
    """libggml-rpc, shipped beside libggml (already loaded by it: this returns the same library)."""
    from llama_cpp import _ctypes_extensions, _ggml

    lib = _ctypes_extensions.load_shared_library("ggml-rpc", Path(_ggml.libggml_base_path))
    p, s = ctypes.c_void_p, ctypes.c_size_t
    lib.ggml_backend_rpc_add_server.argtypes, lib.ggml_backend_rpc_add_server.restype = [ctypes.c_char_p], p
    lib.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, s, s, ctypes.POINTER(p)]
    lib.ggml_backend_rpc_start_server.restype = None
    return lib


def supported() -> bool:
    """This llama.cpp build has the RPC backend."""
    from .lib import _llama

    return bool(_llama().llama_supports_rpc())


def require_rpc() -> None:
    """Refuse, in one line, a llama.cpp built without the RPC backend (before any thread or socket)."""
    if not supported():
        raise RpcError(
            "this llama.cpp build has no RPC backend",
            "rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_RPC=on (scripts/setup.sh does)",
        )


def check(endpoint: Endpoint, timeout: float = CHECK_TIMEOUT_S) -> tuple[int, int, int]:
    """Connect and exchange HELLO with a worker, within `timeout`; return its protocol version.

    llama.cpp's own connect would abort the process on a refused connection or a version mismatch,
    and wait forever on a worker that is busy (it serves one client at a time).
    """
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(bytes([HELLO]) + struct.pack("<Q", CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE))
            reply = _receive(conn, 8 + 4)
    except socket.gaierror as error:
        raise RpcError(
            f"cannot resolve the RPC worker host {endpoint.host!r}: {error.strerror}", "check the name in --rpc"
        ) from None
    except ConnectionRefusedError:
        raise RpcError(
            f"nothing listens at {endpoint} (connection refused)",
            f"start `specrun worker --host HOST --port {endpoint.port}` there, or fix --rpc",
        ) from None
    except TimeoutError:
        raise RpcError(
            f"the RPC worker at {endpoint} did not answer within {timeout:g} s",
            "it may be serving another client (a worker serves one at a time), or a firewall drops the connection",
        ) from None
    except OSError as error:
        raise RpcError(
            f"cannot reach the RPC worker at {endpoint}: {error.strerror or error}", "check the address and the network"
        ) from None
    if reply is None:
        raise RpcError(
            f"the RPC worker at {endpoint} closed the connection during the handshake: it runs a llama.cpp with "
            "another RPC "
            f"protocol than this one ({PROTOCOL[0]}.{PROTOCOL[1]})",
            "install the same llama-cpp-python version on both machines (upgrade the older one)",
        )
    major, minor, patch = reply[8], reply[9], reply[10]
    if major != PROTOCOL[0] or minor > PROTOCOL[1]:
        older = "the worker" if (major, minor) < PROTOCOL else "specrun's llama-cpp-python"
        raise RpcError(
            f"the RPC worker at {endpoint} speaks protocol {major}.{minor}.{patch}, this llama.cpp "
            f"{PROTOCOL[0]}.{PROTOCOL[1]}",
            f"upgrade {older} so both run the same llama.cpp version",
        )
    return major, minor, patch


def _receive(conn: socket.socket, n: int) -> bytes | None:
    """Exactly n bytes, or None when the peer closes first."""
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def connect(endpoints: Sequence[Endpoint]) -> list[Device]:
    """Check each worker, then add its devices to ggml's registry (once per process).

    Returns the workers' devices in the order of `endpoints`.
    """
    if not endpoints:
        return []
    require_rpc()
    lib = _rpc_lib()
    for endpoint in endpoints:
        check(endpoint)  # every time: a worker registered earlier in this process may have gone since
        key = str(endpoint)
        if key in _REGISTERED:
            continue
        reg = lib.ggml_backend_rpc_add_server(key.encode())
        if not reg:
            raise RpcError(
                f"the RPC worker at {key} offers no device", "start it with a device (specrun worker --device)"
            )
        ggml().ggml_backend_register(reg)
        _REGISTERED.append(key)
    listed = [d for d in devices([str(e) for e in endpoints]) if d.remote]
    return [d for e in endpoints for d in listed if d.endpoint == str(e)]


def harden_connections(endpoints: Sequence[Endpoint], timeout_s: int = DEAD_LINK_TIMEOUT_S) -> int:
    """Make llama.cpp's connections to `endpoints` fail when the link dies instead of waiting forever.

    A worker that is killed closes its connections, and llama.cpp notices at once. A worker whose
    machine or network vanishes closes nothing: llama.cpp would wait for TCP to give up (a quarter
    of an hour). So its sockets (found in /proc, Linux only) get TCP_USER_TIMEOUT (data unacknowledged
    for `timeout_s` fails the connection) and keepalive probes while idle; llama.cpp then aborts, which
    `fatal.py` turns into one line. Returns how many sockets were changed.
    """
    wanted = set()
    for endpoint in endpoints:
        try:
            wanted.add((socket.gethostbyname(endpoint.host), endpoint.port))
        except OSError:
            continue
    inodes = {inode for inode, peer in _tcp_peers() if peer in wanted}
    changed = 0
    for fd, inode in _socket_fds():
        if inode not in inodes:
            continue
        try:
            with socket.socket(fileno=os.dup(fd)) as sock:  # a duplicate: the options apply to the shared socket
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, timeout_s * 1000)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, timeout_s)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, timeout_s // 3))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
            changed += 1
        except (OSError, AttributeError):  # not Linux, or the socket went away meanwhile
            continue
    return changed


def _tcp_peers() -> list[tuple[int, tuple[str, int]]]:
    """(socket inode, (remote IPv4, port)) of this process's network namespace's TCP sockets."""
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) < 10:
            continue
        address, port = fields[2].split(":")
        host = socket.inet_ntoa(struct.pack("<I", int(address, 16)))
        out.append((int(fields[9]), (host, int(port, 16))))
    return out


def _socket_fds() -> list[tuple[int, int]]:
    """(file descriptor, socket inode) of this process's sockets."""
    out = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.append((int(name), int(target[8:-1])))
    return out


def connected() -> list[str]:
    """Endpoints whose devices this process has registered."""
    return list(_REGISTERED)


def describe_abort(message: str) -> SpecrunError:
    """The error a user should see for one of llama.cpp's fatal messages (GGML_ABORT)."""
    text = message.split(": ", 1)[-1].strip() if ": " in message else message.strip()
    workers = ", ".join(connected()) or "the RPC worker"
    if DEAD_WORKER in message:
        return RpcError(
            f"lost the RPC worker {workers}: it stopped, crashed or became unreachable",
            "restart `specrun worker` there, or run without --rpc",
        )
    if "Failed to connect to" in message or "RPC handshake failed" in message:
        return RpcError(
            f"llama.cpp could not connect to the RPC worker: {text}", "check that `specrun worker` still runs there"
        )
    return SpecrunError(f"llama.cpp stopped: {text}", "SPECRUN_DEBUG=1 shows llama.cpp's log and a backtrace")


def serve(endpoint: Endpoint, served: Sequence[Device], *, threads: int, cache_dir: Path | None = None) -> None:
    """Serve `served` devices at `endpoint`; blocks for as long as the server runs (normally forever).

    llama.cpp's server prints its banner and connection events on stdout.
    """
    require_rpc()
    if not served:
        raise InputError("no device to serve", "pass --device with a device of this machine")
    handles = (ctypes.c_void_p * len(served))(*[d.handle for d in served])
    cache = str(cache_dir).encode() if cache_dir else None
    _rpc_lib().ggml_backend_rpc_start_server(str(endpoint).encode(), cache, threads, len(served), handles)
