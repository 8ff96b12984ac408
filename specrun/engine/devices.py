"""The compute devices llama.cpp sees (CPU, GPUs, RPC workers), with their free and total memory.

llama-cpp-python binds llama.h but not ggml's device registry, so the few functions needed are
bound here with ctypes on the ggml library it ships. llama.cpp's own `llama_supports_gpu_offload`
is true whenever the RPC backend is compiled in, so whether a GPU is present is read from the
device list instead.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

from .lib import init_backend

DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}
RPC_BACKEND = "RPC"


@dataclass(frozen=True)
class Device:
    """One device as llama.cpp registers it; memory in bytes. `handle` is ggml's device pointer."""

    index: int
    name: str
    description: str
    kind: str  # cpu | gpu | igpu | accel | meta
    backend: str  # the backend registry it belongs to: CPU, CUDA, Metal, RPC, ...
    free: int
    total: int
    handle: int = field(default=0, compare=False, repr=False)

    @property
    def remote(self) -> bool:
        """A device of an RPC worker (`specrun worker` or llama.cpp's rpc-server) on another machine or process."""
        return self.backend == RPC_BACKEND

    @property
    def endpoint(self) -> str | None:
        """HOST:PORT of an RPC worker's device (llama.cpp describes them by their endpoint)."""
        return self.description if self.remote else None

    @property
    def offloads(self) -> bool:
        """Model layers can be placed on it (a GPU, or a remote device over RPC)."""
        return self.kind in ("gpu", "igpu")

    @property
    def label(self) -> str:
        """The name users see: `RPC0[host:port]` for a worker's device, else llama.cpp's name."""
        return f"{self.name}[{self.endpoint}]" if self.remote else self.name

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "name": self.name,
            "description": self.description,
            "type": self.kind,
            "backend": self.backend,
            "endpoint": self.endpoint,
            "free_bytes": self.free,
            "total_bytes": self.total,
        }


@functools.lru_cache(maxsize=1)
def ggml():
    """The ggml library llama_cpp loaded, with the registry functions typed."""
    from llama_cpp._ggml import libggml as lib

    p, s = ctypes.c_void_p, ctypes.c_size_t
    for name, args, result in (
        ("ggml_backend_dev_count", [], s),
        ("ggml_backend_dev_get", [s], p),
        ("ggml_backend_dev_by_name", [ctypes.c_char_p], p),
        ("ggml_backend_dev_name", [p], ctypes.c_char_p),
        ("ggml_backend_dev_description", [p], ctypes.c_char_p),
        ("ggml_backend_dev_memory", [p, ctypes.POINTER(s), ctypes.POINTER(s)], None),
        ("ggml_backend_dev_type", [p], ctypes.c_int),
        ("ggml_backend_dev_backend_reg", [p], p),
        ("ggml_backend_reg_name", [p], ctypes.c_char_p),
        ("ggml_backend_reg_count", [], s),
        ("ggml_backend_reg_get", [s], p),
        ("ggml_backend_register", [p], None),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result
    return lib


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def device_info(handle: int, index: int = -1) -> Device:
    """Name, kind and memory of one device handle (an RPC device asks its worker for the memory)."""
    lib = ggml()
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(handle, ctypes.byref(free), ctypes.byref(total))
    reg = lib.ggml_backend_dev_backend_reg(handle)
    return Device(
        index=index,
        name=_text(lib.ggml_backend_dev_name(handle)),
        description=_text(lib.ggml_backend_dev_description(handle)),
        kind=DEVICE_TYPES.get(lib.ggml_backend_dev_type(handle), "unknown"),
        backend=_text(lib.ggml_backend_reg_name(reg)) if reg else "",
        free=int(free.value),
        total=int(total.value),
        handle=int(handle),
    )


def devices(endpoints: Iterable[str] = ()) -> list[Device]:
    """The local devices llama.cpp has registered, in its order, then the devices of the RPC
    workers at `endpoints` (HOST:PORT) among those registered.

    A worker's memory is asked over the network, and llama.cpp aborts the process when the worker
    has gone away: so only the workers asked for are listed, never every one registered before.
    """
    init_backend()
    lib = ggml()
    wanted = set(endpoints)
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        handle = lib.ggml_backend_dev_get(i)
        reg = lib.ggml_backend_dev_backend_reg(handle)
        if (
            reg
            and _text(lib.ggml_backend_reg_name(reg)) == RPC_BACKEND
            and _text(lib.ggml_backend_dev_description(handle)) not in wanted
        ):
            continue
        out.append(device_info(handle, i))
    return out


def backends() -> list[str]:
    """Names of the compiled-in backends (CPU, CUDA, Metal, Vulkan, RPC, ...)."""
    init_backend()
    lib = ggml()
    return [_text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i))) for i in range(lib.ggml_backend_reg_count())]


def has_gpu() -> bool:
    """A local device that model layers can be offloaded to is present (RPC workers do not count)."""
    return any(d.offloads and not d.remote for d in devices())
