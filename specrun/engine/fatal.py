"""llama.cpp's fatal errors, routed to Python before the process ends.

ggml ends the process with abort() on errors it cannot return (GGML_ABORT): an RPC worker that
stops answering mid-decode is one, seen from the thread that talks to the worker while the caller
waits in llama_decode. By default that prints a C backtrace and dumps core. `on_fatal` installs
ggml's abort callback instead, so a handler can flush what was generated and say in one line what
happened; the handler must end the process (os._exit), because abort() follows when it returns.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

_CALLBACK_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_INSTALLED: list = []  # keeps the ctypes callback alive: ggml holds a pointer to it


def on_fatal(handler: Callable[[str], None]) -> None:
    """Call `handler(message)` on llama.cpp's fatal errors, from whichever thread hits them."""
    from .devices import ggml

    lib = ggml()
    lib.ggml_set_abort_callback.argtypes = [_CALLBACK_TYPE]
    lib.ggml_set_abort_callback.restype = ctypes.c_void_p

    def callback(raw: bytes | None) -> None:
        handler(raw.decode("utf-8", "replace") if raw else "")

    c_callback = _CALLBACK_TYPE(callback)
    _INSTALLED[:] = [c_callback]
    lib.ggml_set_abort_callback(c_callback)
