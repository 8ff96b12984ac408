"""The `specrun` command line: commands, and the error → message/exit-code table.

Every SpecrunError becomes one line on stderr and its exit code; a closed pipe ends quietly;
Ctrl-C exits 130 after the command has flushed what it had; an exception that ends a background
thread is one line too (thread_errors.py). SPECRUN_DEBUG=1 shows tracebacks.
"""

from __future__ import annotations

import os
import sys

import typer

from .. import __version__
from ..errors import (
    EXIT_INTERRUPTED,
    EXIT_RUNTIME,
    EXIT_USAGE,
    OutputClosed,
    SpecrunError,
)
from . import thread_errors
from .run import run

app = typer.Typer(
    name="specrun",
    help="Run local GGUF models with lossless speculative decoding, never slower than plain decoding.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        print(f"specrun {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """specrun: speculative decoding for llama.cpp models."""


app.command(name="run")(run)


def _register_optional() -> None:
    """Command groups living in their own modules."""
    from . import bench as bench_command
    from . import chat as chat_command
    from . import doctor as doctor_command
    from . import models as model_commands
    from . import serve as serve_command
    from . import worker as worker_command

    model_commands.register(app)
    chat_command.register(app)
    bench_command.register(app)
    serve_command.register(app)
    doctor_command.register(app)
    worker_command.register(app)


def _debug() -> bool:
    return bool(os.environ.get("SPECRUN_DEBUG"))


def _quiet_broken_pipe() -> int:
    """Stdout's reader went away: stop writing, exit quietly (Python would complain at shutdown)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return 0


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and map failures to one line and an exit code."""
    code = 0
    thread_errors.install()
    try:
        _register_optional()  # a command group that fails to import is a bug: reported below, never hidden
        result = app(args=argv, prog_name="specrun", standalone_mode=False)
        code = result if isinstance(result, int) else 0
    except (BrokenPipeError, OutputClosed):
        code = _quiet_broken_pipe()
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write("interrupted\n")
        code = EXIT_INTERRUPTED
    except typer.Exit as done:
        code = done.exit_code
    except typer.TyperException as error:  # usage errors: bad option, missing argument
        error.show()
        code = getattr(error, "exit_code", EXIT_USAGE) or EXIT_USAGE
    except SpecrunError as error:
        if _debug():
            raise
        sys.stderr.write(f"specrun: error: {error.one_line()}\n")
        code = error.exit_code
    except Exception as error:  # noqa: BLE001 - last resort: one line, not a traceback
        if _debug():
            raise
        sys.stderr.write(
            f"specrun: internal error: {type(error).__name__}: {error} (SPECRUN_DEBUG=1 shows the traceback)\n"
        )
        code = EXIT_RUNTIME
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _quiet_broken_pipe()
    sys.exit(code)
