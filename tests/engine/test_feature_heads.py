"""Drafting with heads that read the target's layer inputs, EAGLE-3 (`--spec eagle3`) and DFlash
(`--spec dflash`), on the tiny fixtures: greedy output is plain decoding's, sampled output follows
the target's distribution (and would not with a wrong q), auto drafts with them only where their
measured passes pay, and a head meets only a target it can read."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from cli_helpers import run_json, specrun
from test_engine import CHI2_999, RUNS, sampled_fit

from specrun import defaults
from specrun.engine.auto.costs import DecodeCosts
from specrun.engine.drafting import depth, dflash
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig

PROMPT = "the quick brown fox"
WARM = SamplingParams(temperature=0.8, top_k=3, top_p=1.0, min_p=0.0)
SAMPLED = "def f(x):"  # no near-tie at the top-k edge for the first two tokens (see first_two_distribution)
VERIFY = {n: 0.010 + 0.0001 * n for n in (1, 2, 4, 8, 16, 32)}  # a batch costs about one token, as on a GPU
HEAD_PAYS = DecodeCosts(VERIFY, None, head_s={1: 0.0005, 2: 0.0005, 8: 0.0006, 32: 0.002})
HEAD_COSTS_TOO_MUCH = DecodeCosts(VERIFY, None, head_s={1: 0.2, 2: 0.2, 8: 0.25, 32: 0.5})  # a block beats no pass
HEADS = ["eagle3", "dflash", "dflash2"]  # DFlash2 drafts under --spec dflash


def mode_of(head: str) -> str:
    return "dflash" if head == "dflash2" else head


@pytest.fixture
def heads(feature_target, eagle3_head, dflash_head, dflash2_head) -> dict:
    return {"eagle3": eagle3_head, "dflash": dflash_head, "dflash2": dflash2_head, "target": feature_target}


def run_head(*args: str) -> dict:
    return run_json(PROMPT, *args, "--threads", "1")


@pytest.mark.parametrize("kind", HEADS)
def test_greedy_output_is_plain_decoding_and_the_heads_drafts_are_accepted(heads, kind):
    common = ("--target", str(heads["target"]), "--temp", "0", "-n", "100", "--ignore-eos")
    plain = run_head(*common, "--draft", "none")
    doc = run_head(*common, "--draft", str(heads[kind]), "--spec", mode_of(kind))
    assert doc["text"] == plain["text"]
    stats = doc["stats"]
    assert stats["generated_tokens"] == 100 and stats["by_drafter"][mode_of(kind)]["drafted"] > 0
    assert stats["accepted"] > 0 and stats["steps"] < plain["stats"]["steps"]
    drafted, accepted = stats["drafted_by_position"], stats["accepted_by_position"]
    assert len(drafted) == len(accepted) == 4 and sum(accepted) == stats["accepted"]
    assert accepted == sorted(accepted, reverse=True) and accepted[0] > drafted[0] // 5


def pinned(pair: Pair, costs: DecodeCosts):
    """Have auto start from `costs` at every generation (the head's passes as its drafter's)."""
    session = pair.session

    def afresh() -> None:
        session.costs, session._auto = costs, None

    return afresh


@pytest.fixture(scope="module", params=HEADS)
def head_pair(request, feature_target, eagle3_head, dflash_head, dflash2_head):
    head = {"eagle3": eagle3_head, "dflash": dflash_head, "dflash2": dflash2_head}[request.param]
    pair = Pair(PairConfig(feature_target, head, ctx_size=512, threads=1))
    saved = pair.session.costs, pair.session._auto
    yield mode_of(request.param), pair
    pair.session.costs, pair.session._auto = saved
    pair.close()


def test_the_head_reads_the_layers_it_was_made_for(head_pair):
    kind, pair = head_pair
    session = pair.session
    assert session.target_ctx.features == pair.feature_model.feature_head.layers
    assert (
        session.head_ctx.other is session.target_ctx
        and session.head_drafter is not None
        and session.head_drafter.name == kind
    )
    assert defaults.MTP not in session.engine.drafters  # the head is not taken for the target's own heads
    if kind == "dflash":
        assert session.head_drafter.k_max == 7 and session.head_drafter.mask == 3
        assert session.head_drafter.top_k == pair.feature_model.feature_head.selector_top_k


@pytest.mark.parametrize("mode", ["head", "auto"])
@pytest.mark.slow
def test_sampled_first_two_tokens_follow_the_target_distribution(head_pair, mode):
    kind, pair = head_pair
    mode = kind if mode == "head" else mode
    chi2, drafted, detail = sampled_fit(
        pair, pair.prompt_tokens(SAMPLED, chat=False), mode, pinned(pair, HEAD_PAYS), sampling=WARM
    )
    assert drafted > RUNS // 10
    assert chi2 < CHI2_999, detail


@pytest.mark.parametrize("kind", ["eagle3", "dflash"])  # a DFlash2 draft is deterministic: it has no q
@pytest.mark.slow
def test_a_wrong_q_shows_in_the_sampled_distribution(heads, kind, monkeypatch):
    """The same check fails when each draft token reports a flatter q than it was drawn from: the
    fit above is a test that can fail."""
    pair = Pair(PairConfig(heads["target"], heads[kind], ctx_size=512, threads=1))
    real = depth.choose

    def flatter(request, logits, draft, at, tuning):
        token = real(request, logits, draft, at, tuning)
        if token is not None and draft.q:
            draft.q[-1] = replace(request.sampling, temperature=3.0).dist(logits)
        return token

    monkeypatch.setattr(depth, "choose", flatter)
    monkeypatch.setattr(dflash, "choose", flatter)
    try:
        chi2, drafted, detail = sampled_fit(
            pair, pair.prompt_tokens(SAMPLED, chat=False), kind, pinned(pair, HEAD_PAYS), sampling=WARM
        )
    finally:
        pair.close()
    assert drafted > RUNS // 10
    assert chi2 > CHI2_999, detail


@pytest.mark.parametrize("costs", ["pays", "costs too much"])
def test_auto_drafts_with_the_head_only_where_its_passes_pay(head_pair, costs):
    kind, pair = head_pair
    start = pinned(pair, HEAD_PAYS if costs == "pays" else HEAD_COSTS_TOO_MUCH)
    settings = GenerationSettings(max_tokens=64, sampling=SamplingParams(temperature=0), ignore_eos=True)
    prompt = pair.prompt_tokens(PROMPT, chat=False)
    texts = {}
    for mode in ("off", "auto"):
        start()
        generation = pair.generation(prompt, settings, mode=mode)
        texts[mode] = "".join(step.text for step in generation.run())
    assert texts["auto"] == texts["off"]
    drafted = generation.stats.by_drafter.get(kind, {}).get("drafted", 0)
    assert (drafted > 0) == (costs == "pays")


def test_a_dflash_block_costs_one_pass_over_its_rows(head_pair):
    """Auto's cost model: a DFlash draft of m tokens is one pass over m + 1 rows; an EAGLE-3
    draft is m one-row passes."""
    kind, pair = head_pair
    pinned(pair, HEAD_PAYS)()
    controller = pair.session.controller(8)
    costs = controller.costs()
    assert (kind in costs.blocks) == (kind == "dflash")
    one, eight = costs.draft_seconds(kind, 1), costs.draft_seconds(kind, 7)
    if kind == "dflash":
        assert one == pytest.approx(0.0005) and eight == pytest.approx(0.0006)
    else:
        assert eight == pytest.approx(7 * one)


@pytest.mark.slow
def test_serve_answers_four_concurrent_requests_as_alone(heads):
    from serve_helpers import FLAT_COSTS, alone_and_together, load_pair, served

    prompts = ["hello", "abc abc abc abc", PROMPT, "def f(x):"]
    for kind in HEADS:
        pair = load_pair(heads["target"], heads[kind])
        try:
            with served(pair, costs=FLAT_COSTS, parallel=4, mode=mode_of(kind), draft_max=4) as running:
                alone, together = alone_and_together(running.url, prompts)
            assert together == alone, kind
        finally:
            pair.close()


def test_the_head_keeps_only_the_target_rows_it_has_not_read(head_pair):
    kind, pair = head_pair
    settings = GenerationSettings(max_tokens=40, sampling=SamplingParams(temperature=0), ignore_eos=True)
    pinned(pair, HEAD_PAYS)()
    generation = pair.generation(pair.prompt_tokens(PROMPT, chat=False), settings, mode=kind)
    list(generation.run())
    kept = pair.session.head_drafter.hidden._rows.get(0, {})
    read = len(pair.session.head_ctx.tokens[0])  # EAGLE-3's cache is a position behind: its next pair reads `read`
    assert kept and min(kept) >= read - 1
    width = len(pair.feature_model.feature_head.layers) * 64
    assert all(row.shape == (width,) and np.isfinite(row).all() for row in kept.values())


@pytest.mark.slow
def test_a_head_refuses_a_target_it_cannot_read(heads, swa_target, tmp_path):
    """One line each, exit 3: a target whose architecture does not hand out its layer inputs, one
    of another width, one with fewer layers than the head reads; and a head mode without a head."""
    from head_models import write_eagle3_gguf

    narrow = write_eagle3_gguf(tmp_path / "narrow.gguf", target_embd=32)
    deep = write_eagle3_gguf(tmp_path / "deep.gguf", target_layers=(0, 1, 5))
    for target, head, says in (
        (swa_target, heads["eagle3"], "does not hand them out"),
        (heads["target"], narrow, "32 wide"),
        (heads["target"], deep, "reads layers [0, 1, 5]"),
    ):
        result = specrun("run", PROMPT, "--target", str(target), "--draft", str(head), "-n", "4")
        assert result.returncode == 3, result.stderr
        assert result.stderr.count("\n") <= 1 and says in result.stderr and "Traceback" not in result.stderr
    result = specrun("run", PROMPT, "--target", str(heads["target"]), "--spec", "dflash", "-n", "4")
    assert result.returncode == 2 and "DFlash head" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_check_drafts_and_doctor_say_what_the_head_is_and_which_target_it_serves(heads, tmp_path):
    import shutil

    target, head = str(heads["target"]), str(heads["eagle3"])
    check = specrun("check", target, head)
    assert check.returncode == 0, check.stderr
    assert "an EAGLE-3 head made for this target" in check.stdout and "--spec eagle3" in check.stdout
    as_target = specrun("check", head)
    assert as_target.returncode == 2 and "is no target itself" in as_target.stderr
    folder = tmp_path / "heads"
    folder.mkdir()
    shutil.copy(heads["dflash"], folder / "dflash-head.gguf")
    listed = specrun("drafts", target, "--search", str(folder))
    assert listed.returncode == 0 and "DFlash head (--spec dflash)" in listed.stdout, listed.stdout + listed.stderr
    doctor = specrun("doctor", "--target", target, "--draft", str(heads["dflash"]), "--threads", "1")
    assert doctor.returncode == 0, doctor.stderr
    assert "DFlash head for tiny-feature-target" not in doctor.stdout  # file names, not model names
    assert f"DFlash head for {heads['target'].name}, reading its layers [0, 1], blocks of 8" in doctor.stdout
    assert "DFlash head  K=1" in doctor.stdout


def test_an_eagle3_catch_up_reads_its_rows_without_outputs_before_the_row_it_drafts_from(heads, monkeypatch):
    """EAGLE-3's pass makes every row an output when it returns one, so a long catch-up is read in
    a pass of its own first: one pass for a few rows, two for many, with the same answer."""
    import llama_cpp

    from specrun.engine.head_passes import QUIET_ROWS
    from specrun.engine.segments import HeadSegment

    pair = Pair(PairConfig(heads["target"], heads["eagle3"], ctx_size=512, threads=1))
    head = pair.session.head_ctx
    calls = []
    real = llama_cpp.llama_process
    monkeypatch.setattr(llama_cpp, "llama_process", lambda *a: calls.append(1) or real(*a))
    rows = np.random.default_rng(0).standard_normal((QUIET_ROWS * 3, 64)).astype(np.float32)
    tokens = list(range(40, 40 + len(rows)))
    try:
        answers = []
        for n in (QUIET_ROWS // 2, len(rows)):
            head.clear(0)
            calls.clear()
            ((logits, _),) = head.feed_head([HeadSegment(0, tokens[:n], list(rows[:n]), True)])
            answers.append((len(calls), logits))
            head.clear(0)
            head.feed_head([HeadSegment(0, tokens[: n - 1], list(rows[: n - 1]), False)])
            ((alone, _),) = head.feed_head([HeadSegment(0, tokens[n - 1 : n], list(rows[n - 1 : n]), True)])
            np.testing.assert_allclose(logits, alone, rtol=1e-4, atol=1e-4)
        assert [count for count, _ in answers] == [1, 2]
    finally:
        pair.close()


def test_the_calibration_times_the_heads_passes_as_they_run(head_pair):
    """EAGLE-3 by one depth's rows; DFlash by blocks no longer than the head's (a DFlash2 selector
    takes no longer one), the rows of more sequences read off the curve."""
    kind, pair = head_pair
    costs = pair.session.calibrate()
    sizes = sorted(costs.head_s)
    if kind == "dflash":
        assert sizes[0] == 2 and sizes[-1] == pair.feature_model.feature_head.block
    else:
        assert sizes[0] == 1
    assert all(seconds > 0 for seconds in costs.head_s.values())


def test_the_target_keeps_its_layer_inputs_only_while_the_head_may_draft(head_pair):
    kind, pair = head_pair
    settings = GenerationSettings(max_tokens=8, sampling=SamplingParams(temperature=0), ignore_eos=True)
    prompt = pair.prompt_tokens(PROMPT, chat=False)
    pinned(pair, HEAD_PAYS)()
    target = pair.session.target_ctx
    for mode, keeps in (("off", False), ("ngram", False), (kind, True), ("auto", True), ("off", False)):
        list(pair.generation(prompt, settings, mode=mode).run())
        assert target._capturing is keeps, mode


@pytest.mark.slow
def test_bench_has_rows_of_its_own_for_each_head(heads, tmp_path):
    """With a head as the draft, bench compares plain with the head's mode by default: its rows
    have acceptance by position and the cost model's GPU prediction, its greedy text checked."""
    import json

    for kind in ("eagle3", "dflash"):
        report = tmp_path / f"{kind}.json"
        result = specrun(
            "bench",
            "--target",
            str(heads["target"]),
            "--draft",
            str(heads[kind]),
            "--quick",
            "--category",
            "code-generation",
            "--max-tokens",
            "16",
            "--warmup",
            "0",
            "--json",
            report,
            "--quiet",
            "--threads",
            "1",
            timeout=600,
        )
        assert result.returncode == 0, result.stderr
        doc = json.loads(report.read_text())
        assert doc["settings"]["spec"] == ["off", kind]
        (row,) = [r for r in doc["categories"] if r["mode"] == kind and r["category"] == "code-generation"]
        assert row["drafted"] > 0 and len(row["acceptance_by_position"]) == row["draft_max"]
        assert row["predicted_gpu_speedup"] is not None
        correctness = doc["correctness"]
        assert correctness["diverged"] == 0 and correctness["identical"] == correctness["checked"] > 0


def test_chat_drafts_with_the_head_turn_after_turn(heads):
    import json
    import subprocess
    import sys

    from cli_helpers import env

    stdin = "\n".join(json.dumps({"role": "user", "content": text}) for text in ("hello", "and more")) + "\n"
    args = ["--target", str(heads["target"]), "--draft", str(heads["eagle3"]), "--spec", "eagle3"]
    result = subprocess.run(
        [sys.executable, "-m", "specrun", "chat", *args, "-n", "12", "--temp", "0", "--ignore-eos", "--jsonl"]
        + ["--threads", "1"],
        input=stdin,
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(answers) == 2 and all(a["content"] for a in answers)
    assert "eagle3 K=4" in result.stderr and "accept" in result.stderr


@pytest.mark.parametrize("kind", ["eagle3", "dflash"])
@pytest.mark.slow
def test_a_head_on_a_hybrid_target_gives_plain_decodings_text(hybrid_target, tmp_path, kind):
    """Qwen3.5/3.6 heads read hybrid targets, whose recurrent cache takes drafts back by
    snapshots: the layer inputs of a step's verification, and of its cut, still line up."""
    from head_models import write_dflash_gguf, write_eagle3_gguf

    head = (
        write_eagle3_gguf(tmp_path / "head.gguf", target_layers=(0, 2, 3))
        if kind == "eagle3"
        else write_dflash_gguf(tmp_path / "head.gguf", hybrid_target, target_layers=(0, 3))
    )
    common = ("--target", str(hybrid_target), "--temp", "0", "-n", "120", "--ignore-eos")
    plain = run_head(*common, "--draft", "none")
    doc = run_head(*common, "--draft", str(head), "--spec", kind)
    assert doc["text"] == plain["text"]
    assert doc["stats"]["accepted"] > 0 and doc["settings"]["rollback"]["kind"] == "snapshots"
