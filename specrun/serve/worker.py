"""The engine thread: admits waiting requests in the schedule's order, steps the batch engine, and
hands each request's progress to whoever waits for it.

llama.cpp calls block, so the engine runs on a thread of its own and is touched by no other. The
HTTP side submits a job with a `sink` (called on the engine thread with every event; the app
passes it on to its event loop) and gets a Handle to cancel it by. A cancelled request leaves the
batch at the next step. Draining stops admissions, fails what waits, and lets active requests
finish until a grace period ends, then cancels them.

Every part of a cycle (cancellation, admission, the batch step, delivery) runs under a guard: an
exception fails the requests it concerns and frees their sequences, and the engine goes on. Should
the thread end anyway, every request in the server fails, `failure` says why (the HTTP side answers
503 with it) and `submit` refuses at once: nothing waits for an engine that is gone.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..engine import compute_thread
from ..engine.auto.control import Controller
from ..engine.constraint import ConstraintError
from ..engine.drafting.prediction import Predicted
from ..engine.drafting.protocol import handed
from ..engine.sequence import SequenceState
from ..engine.step import Engine, StepReport, Update
from .metrics import Metrics
from .requests import Job, finish_reason, log_line, report
from .scheduler import LengthEstimates, Scheduler, predicted_seconds


class QueueFull(Exception):
    """Every sequence is busy and the queue is full; `retry_after` seconds is a fair guess."""

    def __init__(self, retry_after: int):
        super().__init__("the server is busy")
        self.retry_after = retry_after


class ShuttingDown(Exception):
    """The server is stopping and takes no new requests."""


class EngineStopped(Exception):
    """The engine thread has ended, so no request can be answered; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


RETRY_AFTER_MAX_S = 600  # a Retry-After beyond this says nothing a client can use


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


@dataclass
class Event:
    """A request's progress: new text and tokens; on the last event, why it ended and its report.
    `error` ("shutting_down", "server_error", "engine_stopped", or "invalid_schema": a constraint the
    model's vocabulary cannot match, a 400 naming the field `param`) ends a request that was not
    answered in full."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    done: bool = False
    finish_reason: str | None = None
    report: dict | None = None
    error: str | None = None
    message: str | None = None
    param: str | None = None
    stop_sequence: str | None = None  # on the last event: the stop string that ended the answer
    logprobs: list = field(default_factory=list)  # of `tokens` (engine TokenLogprob), when the request asked
    prompt_logprobs: list | None = None  # of the prompt's tokens after the first, once read, when it asked


class Handle:
    """A submitted request, as its submitter sees it."""

    def __init__(self, job: Job, sink: Callable[[Event], None], arrived: float, notify: Callable[[], None]):
        self.job = job
        self.sink = sink
        self.arrived = arrived
        self.sequence: SequenceState | None = None
        self.done = False
        self.closed = False  # its last event (the answer's end, or an error) was handed to the sink
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
    """Runs the engine for submitted jobs; at most `parallel` decode at once and `queue` wait.
    `controller`: the controller whose cost curves predict how long a request takes."""

    def __init__(
        self,
        engine: Engine,
        controller: Controller,
        *,
        parallel: int,
        queue: int,
        schedule: str = "srpt",
        metrics: Metrics | None = None,
        before_step: Callable[[], None] | None = None,
        warn: Callable[[str], None] | None = None,
        log: Callable[[str], None] | None = None,
    ):
        self.engine = engine
        self.controller = controller
        self.parallel = parallel
        self.queue_limit = queue
        self.scheduler: Scheduler[Handle] = Scheduler(schedule)
        self.estimates = LengthEstimates()
        self.metrics = metrics or Metrics()
        self.before_step = before_step
        self.warn = warn
        self.log = log  # one line per answered request (requests.log_line), when given
        self.changed = threading.Condition()  # notified at every change of state; tests wait on it
        self._active: dict[int, Handle] = {}  # job id → handle
        self._draining = False
        self._deadline: float | None = None
        self._stopping = False
        self._loop: compute_thread.Task | None = None  # the engine loop on the compute thread, once started
        self._failure: str | None = None  # why the engine thread ended, when it did
        self.served = 0

    # -- the submitting side -----------------------------------------------------------------

    def submit(self, job: Job, sink: Callable[[Event], None]) -> Handle:
        """Queue a job; raises QueueFull or ShuttingDown instead when it cannot be taken."""
        with self.changed:
            reason = self._failure_locked()
            if reason is not None:
                raise EngineStopped(reason)
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
            return {
                "parallel": self.parallel,
                "active": len(self._active),
                "queued": len(self.scheduler),
                "draining": self._draining,
                "served": self.served,
            }

    def failure(self) -> str | None:
        """Why the engine thread ended, or None while it runs (or before it started, or once stopped on purpose)."""
        with self.changed:
            return self._failure_locked()

    def _failure_locked(self) -> str | None:
        if self._failure is not None:
            return self._failure
        loop = self._loop
        if loop is not None and loop.future.done() and not self._stopping:
            return "the engine thread ended"
        return None

    def requests(self) -> list[Handle]:
        """Every request in the server: active, then waiting."""
        with self.changed:
            return list(self._active.values()) + self.scheduler.items()

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until `predicate()` holds (checked at every change of state) or `timeout` passes."""
        with self.changed:
            return self.changed.wait_for(predicate, timeout)

    def _retry_after(self) -> int:
        """Seconds until the soonest active request is predicted to end, at least 1 and at most
        RETRY_AFTER_MAX_S."""
        soonest = min((self._remaining(h) for h in self._active.values()), default=1.0)
        if not math.isfinite(soonest):
            return RETRY_AFTER_MAX_S
        return max(1, min(RETRY_AFTER_MAX_S, math.ceil(soonest)))

    # -- predictions -------------------------------------------------------------------------

    def _class(self, job: Job):
        return self.estimates.class_of(job.kind, job.max_tokens_given)

    def _remaining(self, handle: Handle) -> float:
        """Predicted seconds of service left for a request (all of it while it waits); infinite
        when the numbers overflow, so a prediction never stops admission or a 503."""
        try:
            return self._predict(handle)
        except (ArithmeticError, ValueError):
            return math.inf

    def _predict(self, handle: Handle) -> float:
        job, gen = handle.job, handle.sequence
        cls = self._class(job)
        generated = len(gen.generated) if gen is not None else 0
        tokens = min(
            self.estimates.remaining_tokens(cls, job.max_tokens_given, generated), job.settings.max_tokens - generated
        )
        prompt = len(gen.pending) if gen is not None else len(job.prompt)
        n_batch = self.engine.n_batch
        return predicted_seconds(
            prompt,
            max(tokens, 1.0),
            self.estimates.tokens_per_step(cls),
            prompt_token_seconds=self.controller.verify(n_batch) / n_batch,
            step_seconds=self.controller.verify(self.parallel),
        )

    # -- the engine thread -------------------------------------------------------------------

    def start(self) -> None:
        self._loop = compute_thread.submit(self._run)  # where the server's costs were measured: one OpenMP team

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
        if self._loop is not None:
            self._loop.future.exception()  # waits; _run says why it ended through _die

    def _run(self) -> None:
        try:
            while self._cycle():
                pass
        except BaseException as error:  # noqa: BLE001 - the thread ends: say why, and let no request wait for it
            self._die(_describe(error))

    def _cycle(self) -> bool:
        """One turn of the engine: cancel, admit, step, deliver. False once stopped and empty."""
        with self.changed:
            self.changed.wait_for(self._has_work)
            if self._stopping and not self._active and not len(self.scheduler):
                return False
        try:
            if self.before_step is not None:
                self.before_step()
            self._cancel_requested()
            self._admit()
            if not self._active:
                return True
            try:
                report = self.engine.step([h.sequence for h in self._active.values() if h.sequence is not None])
            except Exception as error:  # noqa: BLE001 - a failed step fails its requests, not the server
                self._fail_active(_describe(error))
                return True
            self._deliver(report)
        except Exception as error:  # noqa: BLE001 - a failure no finer guard took concerns the whole batch
            self._fail_active(_describe(error))
        return True

    def _die(self, reason: str) -> None:
        """The engine thread is ending: fail every request in the server; later submits are refused."""
        with self.changed:
            self._failure = reason
            handles = list(self._active.values()) + self.scheduler.items()
            self._active.clear()
            for handle in self.scheduler.items():
                self.scheduler.remove(handle)
            self.changed.notify_all()
        for handle in handles:
            try:
                self._fail(handle, "engine_stopped", f"the engine stopped ({reason})", outcome="failed")
            except Exception:  # noqa: BLE001 - one request's failure must not keep the others waiting
                pass
        if self.warn is not None:
            self.warn(
                f"specrun serve: error: the engine stopped ({reason}); every request is answered 503 until the server "
                "is restarted"
            )

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
                job = handle.job
                handle.sequence = self.engine.admit(
                    job.prompt,
                    job.settings,
                    arrived=handle.arrived,
                    given=job.given,
                    boundaries=job.boundaries,
                    expected_tokens=self.estimates.answer_tokens(self._class(job)),
                )
            except ConstraintError as error:  # the client's to fix: a 400, as when compiling it refused it
                self._fail(
                    handle, "invalid_schema", error.one_line(), outcome="invalid", param=handle.job.constraint_param
                )
                continue
            except Exception as error:  # noqa: BLE001 - one request that cannot start fails alone (admit gave its sequence back)
                self._fail(handle, "server_error", _describe(error), outcome="failed")
                continue
            if job.settings.constraint is not None:  # its constraint was taken: a stream may start now
                self._send(handle, Event())
            self._notify()

    def _cancel_requested(self) -> None:
        """Take cancelled requests out of the batch; past the drain deadline, all of them."""
        expired = self._deadline is not None and time.perf_counter() >= self._deadline
        for handle in list(self._active.values()):
            if handle.sequence is None:
                continue
            try:
                if handle.cancelled:
                    self._end(handle, self.engine.cancel(handle.sequence), "cancelled")
                elif expired:
                    self.engine.cancel(handle.sequence)
                    self._fail(handle, "shutting_down", "the server is shutting down", outcome="cancelled")
            except Exception as error:  # noqa: BLE001 - a cancellation that fails ends its request alone
                self._fail_one(handle, _describe(error))
        with self.changed:
            for handle in self.scheduler.items():
                if handle.cancelled:
                    self.scheduler.remove(handle)
                    handle.done = True
                    self.metrics.request(handle.job.kind, "cancelled")
            self.changed.notify_all()

    def _deliver(self, report: StepReport) -> None:
        try:
            self.metrics.step(report.rows, [(u.drafter, u.drafted, u.accepted) for u in report.updates])
        except Exception:  # noqa: BLE001 - a metric that fails concerns no request
            pass
        by_seq = {h.sequence.seq: h for h in self._active.values() if h.sequence is not None}
        for update in report.updates:
            handle = by_seq.get(update.sequence.seq)
            if handle is None or handle.sequence is not update.sequence:
                continue
            try:
                self.metrics.tokens(len(update.tokens))
                if update.done:
                    self._end(handle, update, "completed")
                elif update.text or update.tokens:
                    scored = {"logprobs": update.logprobs, "prompt_logprobs": update.prompt_logprobs}
                    self._send(handle, Event(update.text, update.tokens, **scored))
            except Exception as error:  # noqa: BLE001 - a delivery that fails ends its request alone
                self._fail_one(handle, _describe(error))
        self._notify()

    def _end(self, handle: Handle, update: Update, outcome: str) -> None:
        gen = update.sequence
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
        self.metrics.finished(
            prompt=len(handle.job.prompt),
            cached=gen.cached - gen.read_in_cache,
            ttft=(t.first_token - t.arrived) if t.first_token else None,
            speed=gen.stats.decode_rate_at(end - (t.admitted or t.arrived)) or None,
            completion=end - t.arrived,
        )
        predicted = handed(handle.job.given, Predicted)
        prediction = predicted.tokens if predicted is not None else None
        answer = report(gen, prediction=prediction)
        self._send(
            handle,
            Event(
                update.text,
                update.tokens,
                True,
                finish_reason(gen),
                answer,
                stop_sequence=gen.text.stopped_by,
                logprobs=update.logprobs,
                prompt_logprobs=update.prompt_logprobs,
            ),
        )
        if self.log is not None:
            self.log(log_line(handle.job.kind, answer))

    def _fail(
        self, handle: Handle, error: str, message: str, outcome: str = "rejected", param: str | None = None
    ) -> None:
        with self.changed:
            self._active.pop(handle.job.id, None)
            handle.done = True
            self.changed.notify_all()
        self._send(handle, Event(done=True, error=error, message=message, param=param))
        try:
            self.metrics.request(handle.job.kind, outcome)
        except Exception:  # noqa: BLE001 - the request has its answer; a metric that fails changes nothing for it
            pass

    def _fail_one(self, handle: Handle, message: str) -> None:
        """A request failed on its own: drop it from the batch with its caches, fail it."""
        if handle.sequence is not None:
            try:
                self.engine.abort(handle.sequence)
            except Exception:  # noqa: BLE001 - abort gives the sequence back before anything that may fail
                pass
        if not handle.closed:
            self._fail(handle, "server_error", message, outcome="failed")

    def _fail_active(self, message: str) -> None:
        for handle in list(self._active.values()):
            self._fail_one(handle, message)

    @staticmethod
    def _send(handle: Handle, event: Event) -> None:
        if handle.closed:
            return
        handle.closed = event.done
        try:
            handle.sink(event)
        except Exception:  # noqa: BLE001 - a sink whose client is gone must not stop the engine
            pass
