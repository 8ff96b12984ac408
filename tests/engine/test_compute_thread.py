"""The compute thread: one thread runs a process's llama.cpp passes (one OpenMP team), a job that
finds it held by a long one runs apart, errors and Ctrl-C reach the caller, and a server measures
its costs and decodes on the same thread."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from serve_helpers import load_pair, served

from specrun.engine import compute_thread
from specrun.engine.compute_thread import ComputeThread
from specrun.engine.llama import Context

WAIT = 60.0


def test_calls_from_any_thread_run_on_the_one_compute_thread():
    worker = ComputeThread("test-compute")
    seen = []
    callers = [threading.Thread(target=lambda: seen.append(worker.call(threading.get_ident))) for _ in range(3)]
    for caller in callers:
        caller.start()
        caller.join()
    seen.append(worker.call(threading.get_ident))
    assert len(set(seen)) == 1 and seen[0] != threading.get_ident()


def test_a_job_that_finds_the_thread_held_runs_on_its_own():
    worker = ComputeThread("test-compute")
    release, started = threading.Event(), threading.Event()

    def long_job():
        started.set()
        release.wait(WAIT)
        return threading.get_ident()

    held = worker.submit(long_job)
    assert started.wait(WAIT)
    other = worker.call(threading.get_ident)  # would wait for the long job forever if queued behind it
    release.set()
    assert held.future.result(WAIT) != other
    assert worker.call(threading.get_ident) == held.future.result()  # the thread is free again


def test_an_error_in_the_call_is_raised_to_the_caller_and_the_thread_stays():
    worker = ComputeThread("test-compute")
    with pytest.raises(ZeroDivisionError):
        worker.call(lambda: 1 / 0)
    assert worker.call(lambda: 7) == 7


def test_ctrl_c_while_waiting_stops_the_call_before_the_caller_goes_on():
    worker = ComputeThread("test-compute")
    running, finished = threading.Event(), threading.Event()

    def busy():
        running.set()
        try:
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                time.sleep(0.005)
        finally:
            finished.set()

    def press_ctrl_c():  # a real signal: it wakes the main thread from its wait, as a terminal's does
        if running.wait(WAIT):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with Ctrl-C ignored
    try:
        threading.Thread(target=press_ctrl_c, daemon=True).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            worker.call(busy)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert finished.is_set()  # the call had stopped when the caller saw the interrupt
    assert time.monotonic() - start < WAIT / 2
    assert worker.call(lambda: "still serving") == "still serving"


def test_a_server_measures_its_costs_and_decodes_on_one_thread(monkeypatch, tiny_target, tiny_draft):
    threads = set()
    decode = Context.decode

    def recording(self, *args, **kwargs):
        threads.add(threading.get_ident())
        return decode(self, *args, **kwargs)

    monkeypatch.setattr(Context, "decode", recording)
    # A compute thread of this test's own: other tests' servers may hold the process's one.
    monkeypatch.setattr(compute_thread, "COMPUTE", ComputeThread("test-compute"))
    pair = load_pair(tiny_target, tiny_draft)
    try:
        with served(pair, parallel=2, queue=4, mode="auto", draft_max=4) as server:
            import httpx

            body = {
                "model": "x",
                "messages": [{"role": "user", "content": "abc abc"}],
                "max_tokens": 8,
                "temperature": 0,
            }
            response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=WAIT)
            assert response.status_code == 200, response.text
    finally:
        pair.close()
    assert len(threads) == 1 and threading.get_ident() not in threads
