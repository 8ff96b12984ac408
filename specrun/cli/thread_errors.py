"""An exception that ends a background thread is one line on stderr, never a traceback.

Python's default hook prints the whole traceback of any thread that dies (a server, a drain, a
client of `bench --serve`) in the middle of a command's own output. The command itself decides what
the thread's death means (the worker reports it and exits; the server answers 503); this hook only
makes what the user sees the CLI's usual line. SPECRUN_DEBUG=1 keeps Python's own report.
"""

from __future__ import annotations

import os
import sys
import threading

from ..errors import SpecrunError

_PYTHON_HOOK = threading.excepthook


def install() -> None:
    """Route every thread's uncaught exception to `report` (again is harmless)."""
    threading.excepthook = report


def report(args: threading.ExceptHookArgs) -> None:
    """One line for the exception that ended `args.thread`."""
    if args.exc_type is SystemExit:
        return
    if os.environ.get("SPECRUN_DEBUG"):
        _PYTHON_HOOK(args)
        return
    error = args.exc_value
    if isinstance(error, SpecrunError):
        line = f"specrun: error: {error.one_line()}"
    else:
        name = args.thread.name if args.thread is not None else "a background thread"
        line = (
            f"specrun: internal error in {name}: {args.exc_type.__name__}: {error} (SPECRUN_DEBUG=1 shows the "
            "traceback)"
        )
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: nothing left to tell
        pass
