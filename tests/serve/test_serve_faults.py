"""The engine thread under failure, on a real server on loopback: a failure in admission, a trim,
a delivery or a cancellation fails only its request and gives its sequence back; a number too
large for any prediction is a 400 (or, inside, never a 500); an engine thread that ends anyway is
said by /health and answered 503 at once, never a wait."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import httpx
import pytest
from serve_helpers import FLAT_COSTS, WAIT, StepGate, load_pair, served

from specrun.engine import step
from specrun.errors import SpecrunError
from specrun.serve.requests import Job

PARALLEL = 2
BIG = int("1" + "0" * 309)  # 310 digits: more than a float holds


@pytest.fixture(scope="module")
def pair(tiny_target, tiny_draft):
    loaded = load_pair(tiny_target, tiny_draft)
    yield loaded
    loaded.close()


def post(url: str, body: dict, path: str = "/v1/chat/completions", timeout: float = WAIT) -> httpx.Response:
    return httpx.post(
        url + path, content=json.dumps(body).encode(), headers={"content-type": "application/json"}, timeout=timeout
    )


def ask(url: str, message: str = "hello", max_tokens: int = 6, timeout: float = WAIT, **fields) -> httpx.Response:
    body = {"messages": [{"role": "user", "content": message}], "max_tokens": max_tokens, "temperature": 0, **fields}
    return post(url, body, timeout=timeout)


def assert_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if code is not None:
        assert error["code"] == code, error
    return error


def assert_free(engine) -> None:
    assert not engine.slots.busy


class Failures:
    """Make a callable raise its next `n` calls (then behave as itself)."""

    def __init__(self, real, error: Exception):
        self.real = real
        self.error = error
        self.left = 0
        self.raised = 0

    def arm(self, n: int) -> None:
        self.left = n

    def __call__(self, *args, **kwargs):
        if self.left > 0:
            self.left -= 1
            self.raised += 1
            raise self.error
        return self.real(*args, **kwargs)


# -- a failure fails its request and frees its sequence ----------------------------------------------


def test_a_trim_that_fails_at_admission_frees_the_sequence(pair):
    with served(pair, costs=FLAT_COSTS, parallel=PARALLEL) as running:
        engine = running.service.engine
        trim = Failures(engine.target.trim, SpecrunError("llama.cpp could not trim its KV cache"))
        engine.target.trim = trim
        trim.arm(2 * PARALLEL)  # as many as there are sequences, idle ones included
        for _ in range(2 * PARALLEL):
            assert "could not trim" in assert_error(ask(running.url), 500)["message"]
        assert trim.raised == 2 * PARALLEL
        assert_free(engine)
        assert ask(running.url).status_code == 200


def test_a_request_that_cannot_start_fails_alone(pair, monkeypatch):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, parallel=PARALLEL, mode="off") as running:  # one token a step
        worker, engine = running.service.worker, running.service.engine
        answer: dict[str, httpx.Response] = {}
        first = threading.Thread(target=lambda: answer.__setitem__("first", ask(running.url, max_tokens=40)))
        first.start()
        assert worker.wait_for(lambda: len(worker.requests()) == 1, WAIT)
        gate.allow(1)
        assert worker.wait_for(lambda: worker.metrics.steps >= 1, WAIT)  # the first request is decoding
        make = Failures(step.SequenceState, RuntimeError("injected at admission"))
        monkeypatch.setattr(step, "SequenceState", make)
        make.arm(2 * PARALLEL)
        failed: list[httpx.Response] = []
        for _ in range(2 * PARALLEL):
            thread = threading.Thread(target=lambda: failed.append(ask(running.url)))
            thread.start()
            assert worker.wait_for(lambda: len(worker.requests()) == 2, WAIT)
            gate.allow(1)
            thread.join(WAIT)
        gate.open()
        first.join(WAIT)
        assert [r.status_code for r in failed] == [500] * (2 * PARALLEL)
        assert answer["first"].status_code == 200 and answer["first"].json()["usage"]["completion_tokens"] == 40
        assert_free(engine)
        assert ask(running.url).status_code == 200


@pytest.mark.parametrize("where", ["tokens", "end"])
def test_a_delivery_that_fails_ends_its_request_alone(pair, where):
    with served(pair, costs=FLAT_COSTS, parallel=PARALLEL) as running:
        worker, engine = running.service.worker, running.service.engine
        # "tokens": while the answer is being sent; "end": when it is done (its sequence already given back)
        target = worker.metrics if where == "tokens" else worker.estimates
        name = "tokens" if where == "tokens" else "observe"
        failing = Failures(getattr(target, name), RuntimeError(f"injected in delivery ({where})"))
        setattr(target, name, failing)
        failing.arm(2 * PARALLEL)
        for _ in range(2 * PARALLEL):
            assert "injected in delivery" in assert_error(ask(running.url, timeout=10.0), 500)["message"]
        assert failing.raised == 2 * PARALLEL
        assert_free(engine)
        assert ask(running.url).status_code == 200


def test_a_cancellation_that_fails_still_frees_the_sequence(pair):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, parallel=PARALLEL) as running:
        worker, engine = running.service.worker, running.service.engine
        cancel = Failures(engine.cancel, RuntimeError("injected in cancellation"))
        engine.cancel = cancel
        cancel.arm(1)
        body = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 400, "stream": True}
        with httpx.Client(timeout=WAIT) as http:
            with http.stream("POST", running.url + "/v1/chat/completions", json=body) as response:
                # the line iterator is kept: a dropped one closes the connection, which cancels the request early
                lines = response.iter_lines()
                assert next(lines).startswith("data: ")
                gate.allow(1)
                assert worker.wait_for(lambda: worker.metrics.steps >= 1, WAIT)
        assert worker.wait_for(lambda: all(h.cancelled for h in worker.requests()), WAIT)
        gate.open()
        assert worker.wait_for(lambda: worker.snapshot()["active"] == 0, WAIT)
        assert cancel.raised == 1
        assert_free(engine)
        assert ask(running.url).status_code == 200
        assert worker.failure() is None


# -- numbers no prediction can hold ------------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_a_310_digit_max_tokens_is_clamped_to_the_context_and_the_server_goes_on(pair, field):
    with served(pair, costs=FLAT_COSTS, parallel=PARALLEL) as running:
        answer = post(running.url, {"messages": [{"role": "user", "content": "hi"}], field: BIG}, timeout=WAIT)
        assert answer.status_code == 200, answer.text
        usage = answer.json()["usage"]
        assert usage["prompt_tokens"] + usage["completion_tokens"] <= 512
        whole = post(running.url, {"prompt": "abc", "max_tokens": 513, "temperature": 0}, "/v1/completions")
        assert whole.status_code == 200, whole.text
        assert ask(running.url).status_code == 200
        assert httpx.get(running.url + "/health").json()["status"] == "ok"


def test_a_310_digit_seed_is_a_seed(pair):
    with served(pair, costs=FLAT_COSTS, parallel=PARALLEL) as running:
        for seed in (BIG, -BIG):
            answer = ask(running.url, temperature=1.0, seed=seed)
            assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 6


def test_a_full_fcfs_queue_is_a_503_whatever_the_active_request_asks(pair):
    gate = StepGate()
    with served(pair, gate=gate, costs=FLAT_COSTS, parallel=1, queue=0, schedule="fcfs") as running:
        worker, service = running.service.worker, running.service
        tokens = pair.target_model.tokenize("hello", add_special=True, parse_special=True)
        huge = Job(
            "chat", tokens, replace(service.options.base, max_tokens=BIG), max_tokens_given=BIG
        )  # past the door's bound
        handle = worker.submit(huge, lambda event: None)
        gate.allow(1)
        assert worker.wait_for(lambda: worker.snapshot()["active"] == 1, WAIT)
        refused = ask(running.url)
        assert_error(refused, 503, "queue_full")
        assert 1 <= int(refused.headers["retry-after"]) <= 600
        handle.cancel()
        gate.open()
        assert worker.wait_for(lambda: worker.snapshot()["active"] == 0, WAIT)
        assert ask(running.url).status_code == 200


# -- an engine thread that ends ---------------------------------------------------------------------


class EngineCrash(BaseException):
    """Escapes every guard (they take Exception): the engine thread ends."""


class Tripwire:
    """A before_step that ends the engine thread once armed."""

    def __init__(self):
        self.armed = False

    def __call__(self) -> None:
        if self.armed:
            raise EngineCrash("injected crash")

    def open(self) -> None:
        self.armed = False


def test_an_engine_thread_that_ends_is_said_by_health_and_answered_503_at_once(pair):
    tripwire = Tripwire()
    with served(pair, gate=tripwire, costs=FLAT_COSTS, parallel=PARALLEL) as running:
        assert ask(running.url).status_code == 200
        tripwire.armed = True
        assert_error(ask(running.url, timeout=10.0), 503, "engine_stopped")  # the request in flight is not left waiting
        health = httpx.get(running.url + "/health")
        assert health.status_code == 503
        assert health.json()["status"] == "error" and "EngineCrash: injected crash" in health.json()["reason"]
        start = time.perf_counter()
        for path, body in (
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
            ("/v1/completions", {"prompt": "hi"}),
        ):
            assert_error(post(running.url, body, path, timeout=10.0), 503, "engine_stopped")
        assert time.perf_counter() - start < 5.0
