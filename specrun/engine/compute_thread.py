"""One long-lived thread for the llama.cpp passes of a process that decodes from several threads.

llama.cpp's CPU backend is built with OpenMP: every thread that opens a parallel region gets a team
of workers of its own. A server that measured its batch costs on the main thread and then decoded on
its engine thread kept two teams, more threads than CPUs; libgomp then stops spinning at its
barriers (one per graph operation) and sleeps in the kernel instead, and every pass gets slower.
Running all of a server's passes on this one thread keeps one team.

A job submitted while a long one (an engine loop) holds the thread runs on a thread of its own:
correct, only without that benefit (two servers in one process, as in tests).
"""

from __future__ import annotations

import ctypes
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")


class Task:
    """A submitted call: its future, and the thread that runs it (for an interrupt)."""

    def __init__(self, fn: Callable[..., Any], args: tuple):
        self.fn, self.args = fn, args
        self.future: Future = Future()
        self.thread_id: int | None = None

    def execute(self, done: Callable[[], None] | None = None) -> None:
        self.thread_id = threading.get_ident()
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result, error = self.fn(*self.args), None
        except BaseException as caught:  # noqa: BLE001 - handed to whoever waits on the future
            result, error = None, caught
        if done is not None:
            done()  # the thread is free before the waiter wakes, so its next job finds it free
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)

    def interrupt(self) -> None:
        """Raise KeyboardInterrupt in the running call, at its next Python instruction (after a C call returns)."""
        if self.thread_id is not None and not self.future.done():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self.thread_id), ctypes.py_object(KeyboardInterrupt)
            )


class ComputeThread:
    """The thread, started on first use, running one job at a time."""

    def __init__(self, name: str = "specrun-compute"):
        self.name = name
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[Task] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._busy = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Task:
        job = Task(fn, args)
        with self._lock:
            if self._busy:
                threading.Thread(target=job.execute, name=f"{self.name}-extra", daemon=True).start()
                return job
            self._busy = True
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
                self._thread.start()
            self._jobs.put(job)
        return job

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) on the compute thread, waited for. A Ctrl-C while waiting (signals reach only
        the main thread) is raised inside the call too, and the caller waits for it to stop before
        raising it: no pass is left running on a model the caller is about to close."""
        if threading.current_thread() is self._thread:
            return fn(*args)
        job = self.submit(fn, *args)
        try:
            return job.future.result()
        except KeyboardInterrupt:
            if job.future.done():
                raise
            job.interrupt()
            try:
                job.future.result()
            except BaseException:  # noqa: BLE001 - the interrupt, or what the call raised on its way out
                pass
            raise

    def _free(self) -> None:
        with self._lock:
            self._busy = False

    def _serve(self) -> None:
        while True:
            job = None
            try:
                job = self._jobs.get()
                job.execute(self._free)
            except BaseException:  # noqa: BLE001 - an interrupt that came late: the thread stays
                if job is not None and not job.future.done():
                    self._free()
                    job.future.set_exception(KeyboardInterrupt())


COMPUTE = ComputeThread()


def call(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) on the process's compute thread (see ComputeThread.call)."""
    return COMPUTE.call(fn, *args)


def submit(fn: Callable[..., Any], *args: Any) -> Task:
    """fn(*args) on the process's compute thread, not waited for."""
    return COMPUTE.submit(fn, *args)
