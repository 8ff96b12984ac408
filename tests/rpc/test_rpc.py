"""RPC workers: `specrun worker` serves a loopback client, output over --rpc equals local output,
the placement names the worker, and every fault is one line and an exit code, never a hang."""

from __future__ import annotations

import fcntl
import json
import re
import signal
import subprocess
import sys
import time

import pytest
from cli_helpers import env as cli_env
from cli_helpers import popen, run_json, specrun
from rpc_helpers import FakeWorker, free_port, start_worker
from test_cli_run import F_SETPIPE_SZ, _unread, one_line_error

from specrun.engine import rpc as engine_rpc
from specrun.engine.auto.costs import Conditions, DecodeCosts
from specrun.errors import RpcError
from specrun.runtime import cost_cache
from specrun.runtime.pair import Pair, PairConfig

GREEDY = ["--temp", "0", "--raw", "--ignore-eos"]


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    handle = start_worker(tmp_path_factory.mktemp("worker"))
    yield handle
    handle.stop()


def test_the_protocol_specrun_expects_is_what_its_own_worker_speaks(worker):
    host, port = worker.endpoint.split(":")
    major, minor, _ = engine_rpc.check(engine_rpc.Endpoint(host, int(port)))
    assert (major, minor) == engine_rpc.PROTOCOL


@pytest.mark.parametrize("layers", [["-ngl", "all"], []], ids=["all-on-the-worker", "auto-split-with-the-cpu"])
def test_greedy_output_over_rpc_equals_local_and_the_json_names_the_worker(worker, tiny_target, tiny_draft, layers):
    # One thread, as the worker computes: llama.cpp's sums depend on the thread count, which can flip near-ties.
    args = [
        "hello",
        "--target",
        str(tiny_target),
        "--draft",
        str(tiny_draft),
        "--spec",
        "draft",
        "-n",
        "48",
        "-t",
        "1",
        *GREEDY,
    ]
    local = run_json(*args)
    remote = run_json(*args, "--rpc", worker.endpoint, *layers)
    assert remote["text"] == local["text"]
    shares = remote["placement"]["target"]["devices"]
    on_worker = [s for s in shares if s["endpoint"] == worker.endpoint]
    assert on_worker and on_worker[0]["device"].startswith("RPC") and on_worker[0]["layers"] >= 1
    assert sum(s["layers"] for s in shares) == remote["placement"]["target"]["n_layer"]
    assert [s["device"] for s in remote["placement"]["draft"]["devices"]] == ["CPU"]  # the draft stays local
    assert [s["device"] for s in local["placement"]["target"]["devices"]] == ["CPU"]


def test_the_placement_reported_is_the_one_llama_cpp_makes(worker, tiny_dir):
    """llama.cpp's log names each layer's device; the placement must say the same."""
    from tiny_models import write_tiny_gguf

    model = write_tiny_gguf(tiny_dir / "six-layers.gguf", seed=0, n_layer=6)
    result = specrun(
        "run",
        "hi",
        "--target",
        model,
        "--draft",
        "none",
        "-n",
        "2",
        *GREEDY,
        "--rpc",
        worker.endpoint,
        "--tensor-split",
        "2,1",
        "--json",
        env={"SPECRUN_DEBUG": "1"},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    logged = {int(i): dev for i, dev in re.findall(r"layer +(\d+) assigned to device (\w+)", result.stderr)}
    assert len(logged) == 7  # six layers and the output layer
    placement = json.loads(result.stdout)["placement"]["target"]
    counted = {s["device"]: s["layers"] for s in placement["devices"]}
    assert counted == {dev: sum(1 for i, d in logged.items() if d == dev and i < 6) for dev in set(logged.values())}
    output = [s["device"] for s in placement["devices"] if s["output_layer"]]
    assert output == [logged[6]]


def test_a_refused_endpoint_exits_1_at_once_naming_it(tiny_target):
    endpoint = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = specrun("run", "hi", "--target", tiny_target, "--draft", "none", "-n", "4", "--rpc", endpoint)
    one_line_error(result, 1, endpoint, "refused")
    assert time.monotonic() - started < 30


@pytest.mark.parametrize(
    "value", ["localhost", "host:", ":50052", "host:port", "host:70000", "a:1,,b:2", "::1:50052", ""]
)
@pytest.mark.slow
def test_a_malformed_rpc_value_is_a_usage_error(tiny_target, value):
    one_line_error(specrun("run", "hi", "--target", tiny_target, "--draft", "none", "--rpc", value), 2, "--rpc")


def test_endpoints_parse_in_order_without_duplicates():
    parsed = engine_rpc.parse_endpoints("10.0.0.2:50052, gpu-box:1,10.0.0.2:50052")
    assert [str(e) for e in parsed] == ["10.0.0.2:50052", "gpu-box:1"]


@pytest.mark.parametrize(
    "reply, words",
    [
        ((6, 0, 0), ["protocol 6.0.0", "upgrade the worker"]),
        ((8, 0, 0), ["protocol 8.0.0", "upgrade specrun's llama-cpp-python"]),
        (None, ["closed the connection during the handshake"]),
    ],
    ids=["older-worker", "newer-worker", "pre-hello-worker"],
)
def test_a_protocol_mismatch_names_the_side_to_upgrade(reply, words):
    fake = FakeWorker(reply)
    try:
        with pytest.raises(RpcError) as error:
            engine_rpc.check(engine_rpc.Endpoint("127.0.0.1", fake.port), timeout=10)
    finally:
        fake.close()
    text = error.value.one_line()
    assert f"127.0.0.1:{fake.port}" in text and all(w in text for w in words), text


def test_a_worker_that_never_answers_times_out():
    fake = FakeWorker(None, silent=True)
    try:
        with pytest.raises(RpcError, match="did not answer within 0.5 s"):
            engine_rpc.check(engine_rpc.Endpoint("127.0.0.1", fake.port), timeout=0.5)
    finally:
        fake.close()


@pytest.mark.slow
def test_a_worker_killed_mid_generation_ends_the_run_with_one_line_and_the_text_so_far(tiny_target, tmp_path):
    """The run is made to block writing into a full one-page stdout pipe far from its 6000 tokens;
    then the worker is killed, the pipe drained, and the run's next decode meets the dead worker."""
    doomed = start_worker(tmp_path)
    # one attention kernel for both runs: an offloaded run keeps llama.cpp's choice, a local one runs unfused
    long_run = ["--target", str(tiny_target), "--draft", "none", "-c", "8192", "-t", "1", "-fa", "on", *GREEDY]
    proc = popen(
        "run",
        "hi",
        *long_run,
        "-n",
        "6000",
        "--rpc",
        doomed.endpoint,
        "-ngl",
        "all",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        reader = proc.stdout.fileno()
        size = fcntl.fcntl(reader, F_SETPIPE_SZ, 4096)
        deadline = time.monotonic() + 120
        while _unread(reader) < size - 64:
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before filling the pipe"
            time.sleep(0.02)
        doomed.proc.send_signal(signal.SIGKILL)
        doomed.proc.wait(timeout=20)
        killed = time.monotonic()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    assert time.monotonic() - killed < 30
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "lost the RPC worker" in lines[0] and doomed.endpoint in lines[0], lines
    assert len(out) >= size - 64  # what the loop above waited for was written before the kill
    # The worker computed with one thread, as this run does: llama.cpp's sums depend on the thread count.
    local = subprocess.run(
        [sys.executable, "-m", "specrun", "run", "hi", *long_run, "-n", "4000"],
        capture_output=True,
        timeout=300,
        env=cli_env(),
    )
    assert local.returncode == 0 and len(local.stdout) > len(out)
    assert same_text_so_far(out, local.stdout)  # exactly the text generated before the worker died


REPLACEMENT = "\ufffd".encode()


def same_text_so_far(partial: bytes, whole: bytes) -> bool:
    """Whether `partial` is what a run that stopped early printed of `whole`. A run that ends
    flushes a UTF-8 sequence its last token left unfinished as U+FFFD, where the longer run went
    on to finish the character: that last character may differ, nothing before it."""
    if whole.startswith(partial):
        return True
    head = partial[: -len(REPLACEMENT)]
    return partial.endswith(REPLACEMENT) and whole.startswith(head) and whole[len(head)] >= 0xC0


def test_the_text_so_far_may_end_in_a_character_its_last_token_left_unfinished():
    whole = "ab\u0514cd".encode()  # \u0514 is two bytes, a token may end after the first
    assert same_text_so_far(b"ab", whole)
    assert same_text_so_far(b"ab" + REPLACEMENT, whole)
    assert not same_text_so_far(b"a" + REPLACEMENT, whole)  # before the last character: a real difference
    assert not same_text_so_far(b"abc" + REPLACEMENT, whole)
    assert not same_text_so_far(b"ab" + REPLACEMENT, b"abcd")  # not where a multi-byte character starts


def test_ctrl_c_stops_the_worker_with_130(tmp_path):
    handle = start_worker(tmp_path)
    handle.proc.send_signal(signal.SIGINT)
    assert handle.proc.wait(timeout=20) == 130
    assert "interrupted" in handle.text() and "Traceback" not in handle.text()


def test_a_worker_beyond_loopback_warns_every_time(tmp_path, worker):
    exposed = start_worker(tmp_path, host="0.0.0.0")
    try:
        assert "no authentication and no encryption" in exposed.text()
    finally:
        exposed.stop()
    assert "no authentication" not in worker.text()


def test_worker_usage_errors_and_a_busy_port(worker):
    one_line_error(specrun("worker", "--host", "localhost"), 2, "IPv4")
    one_line_error(specrun("worker", "--device", "CUDA9"), 2, "CUDA9", "CPU")
    one_line_error(specrun("worker", "--port", worker.endpoint.split(":")[1]), 1, "another --port")


@pytest.mark.slow
def test_costs_measured_with_a_worker_are_kept_apart_from_local_ones(worker, tiny_target, tiny_draft):
    """A local curve is stored under the key the CLI computes; a run over the worker does not reuse
    it but measures its own, and leaves the local entry as it was. The local curve is written here
    rather than measured: whether a tiny model's measured curve passes the sanity checks depends on
    timing, which a test must not."""
    args = [
        "abc abc",
        "--target",
        tiny_target,
        "--draft",
        tiny_draft,
        "-n",
        "4",
        *GREEDY,
        "--spec",
        "auto",
        "-t",
        "1",
        "-c",
        "512",
    ]
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1), warn=lambda line: None)
    try:
        local_key = pair.session.costs_key
    finally:
        pair.close()
    plausible = DecodeCosts(
        {1: 0.002, 2: 0.0025, 4: 0.003, 16: 0.006, 32: 0.010},
        0.001,
        Conditions(cpu_share=0.97, major_faults=0, load_average=0.1),
    )
    assert cost_cache.store(local_key, plausible, 1) == []
    assert "measuring decode costs" not in specrun("run", *args).stderr  # the CLI's key is the one written
    local_entry = json.loads(cost_cache.cache_file().read_text())[local_key]
    remote = specrun("run", *args, "--rpc", worker.endpoint, "-ngl", "all")
    assert remote.returncode == 0, remote.stderr
    assert "measuring decode costs" in remote.stderr
    entries = json.loads(cost_cache.cache_file().read_text())
    assert entries[local_key] == local_entry  # the worker's curve, kept or not, went elsewhere
    assert "measuring decode costs" not in specrun("run", *args).stderr


def test_doctor_lists_the_worker_and_places_the_target_on_it(worker, tiny_target, tiny_draft):
    result = specrun(
        "doctor", "--target", tiny_target, "--draft", tiny_draft, "--rpc", worker.endpoint, "--json", "-c", "512"
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert any(d["endpoint"] == worker.endpoint and d["backend"] == "RPC" for d in doc["devices"])
    assert any(s["endpoint"] == worker.endpoint for s in doc["placement"]["target"]["devices"])


def test_bench_runs_over_rpc_and_records_the_placement(worker, tiny_target, tiny_draft, tmp_path):
    report = tmp_path / "bench.json"
    result = specrun(
        "bench",
        "--target",
        tiny_target,
        "--draft",
        tiny_draft,
        "--rpc",
        worker.endpoint,
        "--quick",
        "--category",
        "code-generation",
        "--spec",
        "off,draft",
        "--max-tokens",
        "8",
        "--warmup",
        "0",
        "--json",
        report,
        "-c",
        "1024",
        "--quiet",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    placement = json.loads(report.read_text())["environment"]["placement"]
    assert any(s["endpoint"] == worker.endpoint for s in placement["target"]["devices"])
