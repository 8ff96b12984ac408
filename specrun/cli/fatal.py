"""llama.cpp's fatal errors (an RPC worker lost mid-decode) as one line and exit 1, after the text
generated so far.

llama.cpp meets them on its own thread while the command waits inside a llama.cpp call, so nothing
can be raised into the command: the handler flushes what the running command registered, writes
the error line and ends the process itself. With SPECRUN_DEBUG=1 llama.cpp's own message and
backtrace are kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator

from ..engine import fatal as engine_fatal
from ..engine.rpc import describe_abort

_FLUSHERS: list[Callable[[], None]] = []


def install() -> None:
    """Route llama.cpp's fatal errors to `handle` (once is enough; again is harmless)."""
    if not os.environ.get("SPECRUN_DEBUG"):
        engine_fatal.on_fatal(handle)


def handle(message: str) -> None:
    """Flush, say what happened in one line, exit with the error's code (never returns)."""
    for flush in list(_FLUSHERS):
        try:
            flush()
        except Exception:  # noqa: BLE001 - the process is ending; the error line matters more
            pass
    error = describe_abort(message)
    try:
        sys.stdout.flush()
    except Exception:  # noqa: BLE001
        pass
    os.write(sys.stderr.fileno(), f"specrun: error: {error.one_line()}\n".encode())
    os._exit(error.exit_code)


@contextlib.contextmanager
def flushing(flush: Callable[[], None]) -> Iterator[None]:
    """While the block runs, a fatal error first calls `flush` (to write text held back)."""
    _FLUSHERS.append(flush)
    try:
        yield
    finally:
        _FLUSHERS.remove(flush)
