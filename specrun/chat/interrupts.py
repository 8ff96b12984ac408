"""Ctrl-C while text streams: stop between steps, so what was printed, what was counted and what
the caches hold all describe the same tokens.

Python raises KeyboardInterrupt at whatever instruction the main thread is on. Inside a step that
can fall between appending a token and feeding its text on, and the summary then counts a token
whose text was never printed; in a chat it leaves the caches half updated. Deferring the first
press to the end of the step costs at most one step; a second press still stops at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Interrupts:
    """Ctrl-C during an answer: the first press asks the loop to stop after the current step (so the
    caches stay consistent); a second press stops at once. A press after the answer has ended is
    ignored until the next prompt takes Ctrl-C over, so a quick double press never quits the chat.
    Keys typed meanwhile are not echoed into the answer (`fd`: the terminal)."""

    def __init__(self, fd: int | None = None) -> None:
        self.requested = False
        self.active = False
        self.fd = fd

    def _handler(self, signum, frame) -> None:  # noqa: ARG002 - signal signature
        if not self.active:
            return
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    @contextmanager
    def armed(self) -> Iterator[Interrupts]:
        """Take Ctrl-C over for the block. Off the main thread (where signals never arrive) it only
        resets `requested`."""
        self.requested, self.active = False, True
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, self._handler) if main else None
        saved = _quiet_keys(self.fd) if main else None
        try:
            yield self
        finally:
            self.active = False
            if main:
                signal.signal(signal.SIGINT, previous)
            _restore_keys(self.fd, saved)


def _quiet_keys(fd: int | None) -> list | None:
    """Turn off the terminal's echo (and its ^C echo); returns the settings to restore."""
    if fd is None:
        return None
    try:
        import termios
    except ImportError:
        return None
    try:
        saved = termios.tcgetattr(fd)
        quiet = list(saved)
        quiet[3] &= ~(termios.ECHO | termios.ECHOCTL)
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
        return saved
    except (termios.error, OSError, ValueError):
        return None


def _restore_keys(fd: int | None, saved: list | None) -> None:
    if saved is None:
        return
    import termios

    try:
        termios.tcsetattr(fd, termios.TCSANOW, saved)
    except (termios.error, OSError, ValueError):
        pass
