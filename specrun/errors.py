"""Typed errors: each carries the one line a user sees, the hint that fixes it, and its exit code.

The CLI turns any SpecrunError into `error: <message> (<hint>)` on stderr and exits with `exit_code`;
anything else is a bug and shows a traceback only with SPECRUN_DEBUG=1.
"""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_INCOMPATIBLE = 3
EXIT_INTERRUPTED = 130


class SpecrunError(Exception):
    """A failure a user can act on; `hint` names the fix."""

    exit_code = EXIT_RUNTIME

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The single line shown on stderr."""
        return f"{self.message} ({self.hint})" if self.hint else self.message


class InputError(SpecrunError):
    """Bad input from the user: a file, a prompt, an option value (exit 2)."""

    exit_code = EXIT_USAGE


def read_text_file(path: Path | str, flag: str) -> str:
    """The UTF-8 text of the file `path` given to option `flag`; an InputError naming the file, the
    option and the fix when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{flag} {path}: file not found", f"check the path given to {flag}") from None
    except IsADirectoryError:
        raise InputError(f"{flag} {path} is a directory", f"give {flag} a file") from None
    except UnicodeDecodeError:
        raise InputError(f"{flag} {path} is not UTF-8 text", f"save the file given to {flag} as UTF-8") from None
    except OSError as error:
        raise InputError(f"{flag} {path}: {error.strerror}", f"check the path given to {flag}") from None


class ModelFileError(InputError):
    """A model path that is missing, a directory, not GGUF, or truncated."""


class ContextOverflowError(InputError):
    """The prompt does not fit in the context window."""


class ChatTemplateError(InputError):
    """A model's chat template does not parse, or refuses or fails on a conversation (exit 2; 400 from the server)."""


class IncompatibleModelsError(SpecrunError):
    """Target and draft vocabularies differ, so the draft's tokens mean nothing to the target (exit 3)."""

    exit_code = EXIT_INCOMPATIBLE


class RegistryError(InputError):
    """models.toml (shipped, user or --registry) is malformed or names something unknown."""


class FetchError(SpecrunError):
    """A model could not be fetched or assembled (offline, corrupted bundle, disk full)."""


class RpcError(SpecrunError):
    """An RPC worker cannot be used or was lost: unreachable, busy, another protocol version, gone (exit 1)."""


class OutputClosed(SpecrunError):
    """The reader of stdout went away (`| head`): stop generating and exit quietly (exit 0)."""

    exit_code = EXIT_OK

    def __init__(self) -> None:
        super().__init__("output closed")
