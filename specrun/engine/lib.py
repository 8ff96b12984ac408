"""The llama.cpp library itself: loaded lazily, initialised once, and what its build says of itself.

Every module of the engine that calls llama.cpp reaches it through here, so `specrun --help` and
pure code never pay for loading it, and its log goes to stderr only when SPECRUN_DEBUG is set.
"""

from __future__ import annotations

import ctypes
import os
import sys

_LOG_CALLBACK = None  # module-level reference: llama.cpp keeps the pointer
_BACKEND_READY = False

AMX_WARNING = (
    "warning: this llama-cpp-python build uses AMX, which crashes on some CPUs; loading models "
    "without extra buffer types instead (slower). Rebuild without AMX: "
    "CFLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' CXXFLAGS=\"$CFLAGS\" "
    "pip install --no-cache-dir --force-reinstall llama-cpp-python"
)


def _llama():
    """The llama_cpp module (imported on first use)."""
    import llama_cpp

    return llama_cpp


def _llama_ext():
    """llama_cpp's extension bindings (the models' multi-token-prediction heads)."""
    from llama_cpp import llama_cpp_ext

    return llama_cpp_ext


def init_backend() -> None:
    """Initialise llama.cpp once and route its log output to our stderr only in debug mode."""
    global _BACKEND_READY, _LOG_CALLBACK
    if _BACKEND_READY:
        return
    lib = _llama()
    debug = bool(os.environ.get("SPECRUN_DEBUG"))

    def _log(level, text, user_data):  # noqa: ARG001 - C signature
        if debug and text:
            sys.stderr.write(text.decode("utf-8", "replace"))

    _LOG_CALLBACK = lib.llama_log_callback(_log)
    lib.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
    lib.llama_backend_init()
    _BACKEND_READY = True


def version() -> str:
    """llama-cpp-python's version (it pins the llama.cpp it builds)."""
    return str(_llama().__version__)


def system_info() -> str:
    """llama.cpp's build description (CPU features, backends)."""
    return _llama().llama_print_system_info().decode("utf-8", "replace")


def has_amx() -> bool:
    """True when the loaded llama.cpp was built with AMX, whose matmul path segfaults on some CPUs."""
    return "AMX_INT8 = 1" in system_info()
