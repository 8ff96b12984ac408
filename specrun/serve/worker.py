"""The engine thread: admits waiting requests in the schedule's order, steps the batch engine, and
hands each request's progress to whoever waits for it.

llama.cpp calls block, so the engine runs on a thread of its own and is touched by no other. The
HTTP side submits a job with a `sink` (called on the engine thread with every event; the app
passes it on to its event loop) and gets a Handle to cancel it by. A cancelled request leaves the
batch at the next step. Draining stops admissions, fails what waits, and lets active requests
finish until a grace period ends, then cancels them.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from .batch_engine import BatchEngine, StepReport, Update
from .metrics import Metrics
from .scheduler import LengthEstimates, Scheduler, predicted_seconds
from .sequence import Generation, Job


class QueueFull(Exception):
    """Every sequence is busy and the queue is full; `retry_after` seconds is a fair guess."""

    def __init__(self, retry_after: int):
        super().__init__("the server is busy")
        self.retry_after = retry_after


class ShuttingDown(Exception):
    """The server is stopping and takes no new requests."""


@dataclass
class Event:
    """A request's progress: new text and tokens; on the last event, why it ended and its report.
    `error` ("shutting_down", "server_error") ends a request that was not answered in full."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    done: bool = False
    finish_reason: str | None = None
    report: dict | None = None
    error: str | None = None
    message: str | None = None


class Handle:
    """A submitted request, as its submitter sees it."""

    def __init__(self, job: Job, sink: Callable[[Event], None], arrived: float, notify: Callable[[], None]):
        self.job = job
        self.sink = sink
        self.arrived = arrived
        self.generation: Generation | None = None
        self.done = False
        self._cancelled = threading.Event()
        self._notify = notify

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def cancel(self) -> None:
        """Leave the queue, or the batch at its next step (nothing once done)."""
        if not self.done and not self._cancelled.is_set():
            self._cancelled.set()
            self._notify()


class Worker:
    """Runs a BatchEngine for submitted jobs; at most `parallel` decode at once and `queue` wait."""

    def __init__(self, engine: BatchEngine, *, parallel: int, queue: int, schedule: str = "srpt",
                 metrics: Metrics | None = None, before_step: Callable[[], None] | None = None):
        self.engine = engine
        self.parallel = parallel
        self.queue_limit = queue
        self.scheduler: Scheduler[Handle] = Scheduler(schedule)
        self.estimates = LengthEstimates()
        self.metrics = metrics or Metrics()
        self.before_step = before_step
        self.changed = threading.Condition()  # notified at every change of state; tests wait on it
        self._active: dict[int, Handle] = {}  # job id → handle
        self._draining = False
        self._deadline: float | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.served = 0

    # -- the submitting side -----------------------------------------------------------------

    def submit(self, job: Job, sink: Callable[[Event], None]) -> Handle:
        """Queue a job; raises QueueFull or ShuttingDown instead when it cannot be taken."""
        with self.changed:
            if self._draining or self._stopping:
                raise ShuttingDown()
            if len(self._active) + len(self.scheduler) >= self.parallel + self.queue_limit:
                raise QueueFull(self._retry_after())
            handle = Handle(job, sink, time.perf_counter(), self._notify)
            self.scheduler.push(handle, handle.arrived)
            self.changed.notify_all()
        return handle

    def _notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def snapshot(self) -> dict:
        """Active and waiting requests right now."""
        with self.changed:
            return {"parallel": self.parallel, "active": len(self._active), "queued": len(self.scheduler),
                    "draining": self._draining, "served": self.served}

    def requests(self) -> list[Handle]:
        """Every request in the server: active, then waiting."""
        with self.changed:
            return list(self._active.values()) + self.scheduler.items()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until `predicate()` holds (checked at every change of state) or `timeout` passes."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def _retry_after(self) -> int:
        """Seconds until the soonest active request is predicted to end, at least 1."""
        times = [self._remaining(h) for h in self._active.values()]
        return max(1, math.ceil(min(times))) if times else 1

    # -- predictions -------------------------------------------------------------------------

    def _class(self, job: Job):
        return self.estimates.class_of(job.kind, job.max_tokens_given)

    def _remaining(self, handle: Handle) -> float:
        """Predicted seconds of service left for a request (all of it while it waits)."""
        job, gen = handle.job, handle.generation
        cls = self._class(job)
        generated = len(gen.generated) if gen is not None else 0
        tokens = min(self.estimates.remaining_tokens(cls, job.max_tokens_given, generated), job.settings.max_tokens - generated)
        prompt = len(gen.pending) if gen is not None else len(job.prompt)
        costs = self.engine.costs
        return predicted_seconds(prompt, max(tokens, 1.0), self.estimates.tokens_per_step(cls),
                                 prompt_token_seconds=costs.prompt_token_seconds(self.engine.n_batch),
                                 step_seconds=costs.verify(self.parallel))

    # -- the engine thread -------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="specrun-engine", daemon=True)
        self._thread.start()

    def drain(self, grace: float) -> None:
        """Take no new requests, fail the waiting ones, and cancel active ones after `grace` seconds."""
        with self.changed:
            first = not self._draining
            self._draining = True
            deadline = time.perf_counter() + grace
            self._deadline = deadline if self._deadline is None else min(self._deadline, deadline)
            waiting = self.scheduler.items() if first else []
            for handle in waiting:
                self.scheduler.remove(handle)
            self.changed.notify_all()
        for handle in waiting:
            self._fail(handle, "shutting_down", "the server is shutting down")

    def stop(self, grace: float = 0.0) -> None:
        """Drain, then end the engine thread once no request is left."""
        self.drain(grace)
        with self.changed:
            self._stopping = True
            self.changed.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self.changed:
                self.changed.wait_for(self._has_work)
                if self._stopping and not self._active and not len(self.scheduler):
                    return
            if self.before_step is not None:
                self.before_step()
            self._cancel_requested()
            self._admit()
            if not self._active:
                continue
            try:
                report = self.engine.step()
            except Exception as error:  # noqa: BLE001 - a failed step fails its requests, not the server
                self._fail_active(f"{type(error).__name__}: {error}")
                continue
            self._deliver(report)

    def _has_work(self) -> bool:
        expired = self._deadline is not None and time.perf_counter() >= self._deadline and self._active
        return bool(self._active) or bool(len(self.scheduler)) or self._stopping or bool(expired)

    def _admit(self) -> None:
        """Fill free sequences from the queue, in the schedule's order."""
        while True:
            with self.changed:
                if len(self._active) >= self.parallel or not len(self.scheduler):
                    return
                handle = self.scheduler.pop(self._remaining)
                if handle.cancelled:
                    handle.done = True
                    self.metrics.request(handle.job.kind, "cancelled")
                    self.changed.notify_all()
                    continue
                self._active[handle.job.id] = handle
            try:
                handle.generation = self.engine.admit(handle.job, handle.arrived)
            except Exception as error:  # noqa: BLE001 - one request that cannot start fails alone
                self._fail(handle, "server_error", f"{type(error).__name__}: {error}", outcome="failed")
                continue
            self._notify()

    def _cancel_requested(self) -> None:
        """Take cancelled requests out of the batch; past the drain deadline, all of them."""
        expired = self._deadline is not None and time.perf_counter() >= self._deadline
        for handle in list(self._active.values()):
            if handle.generation is None:
                continue
            if handle.cancelled:
                self._end(handle, self.engine.cancel(handle.generation), "cancelled")
            elif expired:
                self.engine.cancel(handle.generation)
                self._fail(handle, "shutting_down", "the server is shutting down", outcome="cancelled")
        with self.changed:
            for handle in self.scheduler.items():
                if handle.cancelled:
                    self.scheduler.remove(handle)
                    handle.done = True
                    self.metrics.request(handle.job.kind, "cancelled")
            self.changed.notify_all()

    def _deliver(self, report: StepReport) -> None:
        self.metrics.step(report.rows, [(u.drafter, u.drafted, u.accepted) for u in report.updates])
        for update in report.updates:
            gen = update.generation
            handle = self._active.get(gen.job.id)
            if handle is None:
                continue
            self.metrics.tokens(len(update.tokens))
            if update.done:
                self._end(handle, update, "completed")
            elif update.text or update.tokens:
                self._send(handle, Event(update.text, update.tokens))
        self._notify()

    def _end(self, handle: Handle, update: Update, outcome: str) -> None:
        gen = update.generation
        with self.changed:
            self._active.pop(handle.job.id, None)
            handle.done = True
            self.served += outcome == "completed"
            self.changed.notify_all()
        self.metrics.request(handle.job.kind, outcome)
        if outcome != "completed":
            return
        self.estimates.observe(self._class(handle.job), len(gen.generated), gen.stats.steps)
        t = gen.timings
        end = t.finished or time.perf_counter()
        self.metrics.finished(prompt=len(handle.job.prompt), cached=gen.cached,
                              ttft=(t.first_token - t.arrived) if t.first_token else None,
                              speed=gen.stats.decode_rate_at(end - (t.admitted or t.arrived)) or None,
                              completion=end - t.arrived)
        self._send(handle, Event(update.text, update.tokens, True, gen.finish_reason, gen.report()))

    def _fail(self, handle: Handle, error: str, message: str, outcome: str = "rejected") -> None:
        with self.changed:
            self._active.pop(handle.job.id, None)
            handle.done = True
            self.changed.notify_all()
        self.metrics.request(handle.job.kind, outcome)
        self._send(handle, Event(done=True, error=error, message=message))

    def _fail_active(self, message: str) -> None:
        for handle in list(self._active.values()):
            if handle.generation is not None:
                self.engine.abort(handle.generation)
            self._fail(handle, "server_error", message, outcome="failed")

    @staticmethod
    def _send(handle: Handle, event: Event) -> None:
        try:
            handle.sink(event)
        except Exception:  # noqa: BLE001 - a sink whose client is gone must not stop the engine
            pass
