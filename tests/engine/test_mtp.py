"""Drafting with the target's own multi-token-prediction head (`--spec mtp`) on the tiny MTP
fixtures: greedy output is plain decoding's, sampled output follows the target's distribution, and
every mode runs on the hybrid and sliding-window targets."""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_json, specrun
from test_engine import CHI2_999, RUNS, sampled_fit

from specrun.engine.auto.costs import DecodeCosts
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig

PROMPT = "the quick brown fox"


def run_mtp(*args: str) -> dict:
    return run_json(PROMPT, *args, "--threads", "1")


@pytest.mark.parametrize("fixture", ["hybrid_mtp_target", "dense_mtp_target"])
def test_mtp_greedy_output_is_plain_decoding(request, fixture):
    target = str(request.getfixturevalue(fixture))
    common = ("--target", target, "--temp", "0", "-n", "200", "--ignore-eos")
    mtp = run_mtp(*common, "--spec", "mtp")
    plain = run_mtp(*common, "--draft", "none")
    assert mtp["text"] == plain["text"]
    stats = mtp["stats"]
    assert stats["generated_tokens"] == 200 and stats["by_drafter"]["mtp"]["drafted"] > 0
    assert stats["accepted"] > 0 and stats["steps"] < plain["stats"]["steps"]  # the head's drafts do get accepted
    drafted, accepted = stats["drafted_by_position"], stats["accepted_by_position"]
    assert len(drafted) == len(accepted) == 4 and sum(accepted) == stats["accepted"]
    assert all(a <= d for a, d in zip(accepted, drafted)) and accepted == sorted(accepted, reverse=True)


def test_mtp_on_a_model_without_heads_is_one_line_exit_3(hybrid_target):
    result = specrun("run", PROMPT, "--target", str(hybrid_target), "--spec", "mtp", "-n", "4")
    assert result.returncode == 3
    assert result.stderr.count("\n") <= 1 and "has none" in result.stderr and "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def mtp_pair(hybrid_mtp_target):
    pair = Pair(PairConfig(hybrid_mtp_target, None, ctx_size=512, threads=1))
    yield pair
    pair.close()


def test_the_target_with_heads_loads_them_and_reads_its_hidden_rows(mtp_pair):
    session = mtp_pair.session
    assert mtp_pair.target_model.mtp_heads == 1
    assert session.head_drafter is not None and session.head_ctx is not None and session.target_ctx.hidden
    assert session.head_ctx.rewind == "positions" and session.target_ctx.rewind == "snapshots"


# The head's own distribution, at a temperature below 1, is what the rejection sampler corrects.
SAMPLED = "1 2 3 4"  # no near-tie at the top-k edge for the first two tokens (see first_two_distribution)
ASSISTED = "abc"  # the same, for the gemma4 target
WARM = SamplingParams(temperature=0.8, top_k=3, top_p=1.0, min_p=0.0)
HEAD_PAYS = DecodeCosts({n: 0.010 + 0.0001 * n for n in (1, 2, 4, 8, 16, 32)}, None, head_s={1: 0.0005, 32: 0.002})


@pytest.mark.parametrize("mode", ["off", "mtp", "auto"])
@pytest.mark.slow
def test_sampled_first_two_tokens_follow_the_target_distribution(mtp_pair, mode):
    session = mtp_pair.session
    saved = session.costs, session._auto

    def afresh() -> None:  # auto starts from costs under which the head pays, every run
        session.costs, session._auto = HEAD_PAYS, None

    try:
        chi2, drafted, detail = sampled_fit(
            mtp_pair, mtp_pair.prompt_tokens(SAMPLED, chat=False), mode, afresh, sampling=WARM
        )
    finally:
        session.costs, session._auto = saved
    assert (drafted > RUNS // 10) == (mode != "off")
    assert chi2 < CHI2_999, detail


MODES = ["draft", "ngram", "hybrid", "auto", "mtp"]


@pytest.mark.parametrize("temperature", ["0", "0.8"])
@pytest.mark.parametrize("fixture", ["hybrid_mtp_target", "swa_target", "gemma4_target"])
@pytest.mark.slow
def test_every_mode_runs_on_hybrid_and_sliding_window_targets(request, hybrid_draft, fixture, temperature):
    target = str(request.getfixturevalue(fixture))
    common = ("--target", target, "--temp", temperature, "-n", "64", "--ignore-eos", "--seed", "1")
    plain = run_mtp(*common, "--draft", "none")
    for mode in MODES:
        if mode == "mtp" and fixture != "hybrid_mtp_target":  # no heads: the one-line refusal
            result = specrun("run", PROMPT, *common, "--spec", mode, "--json")
            assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
            continue
        draft = ("--draft", str(hybrid_draft)) if mode in ("draft", "hybrid") else ()
        doc = run_mtp(*common, *draft, "--spec", mode)
        assert doc["stats"]["generated_tokens"] == 64, mode
        if temperature == "0":
            assert doc["text"] == plain["text"], mode


def test_serve_answers_four_concurrent_requests_as_alone(
    hybrid_mtp_target, swa_target, chained_mtp_target, gemma4_target, gemma4_assistant
):
    from serve_helpers import FLAT_COSTS, alone_and_together, load_pair, served

    prompts = ["hello", "abc abc abc abc", PROMPT, "def f(x):"]
    for target, draft, mode in (
        (hybrid_mtp_target, None, "mtp"),
        (swa_target, None, "ngram"),
        (chained_mtp_target, None, "mtp"),
        (gemma4_target, gemma4_assistant, "mtp"),
    ):
        pair = load_pair(target, draft)
        try:
            with served(pair, costs=FLAT_COSTS, parallel=4, mode=mode, draft_max=4) as running:
                alone, together = alone_and_together(running.url, prompts)
            assert together == alone, target
        finally:
            pair.close()


@pytest.mark.parametrize("fixture", ["hybrid_mtp_target", "swa_target", "gemma4_target"])
@pytest.mark.slow
def test_serve_runs_every_mode_on_hybrid_and_sliding_window_targets(request, hybrid_draft, gemma4_assistant, fixture):
    """Four concurrent requests in every mode: at temperature 0 each answer is plain decoding's,
    at 0.8 each runs to its length. The gemma4 target drafts mtp with its assistant, the others
    with their heads (the hybrid) or not at all."""
    import threading

    import openai
    from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

    prompts = ["hello", "abc abc abc abc", PROMPT, "def f(x):"]
    target = request.getfixturevalue(fixture)

    def answers(pair, mode: str, temperature: float) -> list:
        with served(pair, costs=FLAT_COSTS, parallel=4, mode=mode, draft_max=4) as running:
            client = openai.OpenAI(base_url=running.url + "/v1", api_key="none", max_retries=0, timeout=WAIT)
            got: dict[int, object] = {}

            def complete(i: int, prompt: str) -> None:
                got[i] = client.completions.create(
                    model="tiny", prompt=prompt, max_tokens=24, temperature=temperature, seed=i
                )

            threads = [threading.Thread(target=complete, args=(i, p)) for i, p in enumerate(prompts)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(WAIT)
        return [got[i] for i in range(len(prompts))]

    pair = load_pair(target, hybrid_draft)
    try:
        plain = [a.choices[0].text for a in answers(pair, "off", 0)]
        modes = ["draft", "ngram", "hybrid", "auto"] + (["mtp"] if fixture == "hybrid_mtp_target" else [])
        for mode in modes:
            assert [a.choices[0].text for a in answers(pair, mode, 0)] == plain, mode
            sampled = answers(pair, mode, 0.8)
            assert all(a.usage.completion_tokens == 24 or a.choices[0].finish_reason == "stop" for a in sampled), mode
    finally:
        pair.close()
    if fixture == "gemma4_target":
        assisted = load_pair(target, gemma4_assistant)
        try:
            for mode in ("mtp", "auto"):
                assert [a.choices[0].text for a in answers(assisted, mode, 0)] == plain, mode
                sampled = answers(assisted, mode, 0.8)
                assert all(a.usage.completion_tokens == 24 or a.choices[0].finish_reason == "stop" for a in sampled), (
                    mode
                )
        finally:
            assisted.close()


def test_a_cache_that_cannot_rewind_decodes_plain_in_every_mode_said_once(hybrid_mtp_target):
    said: list[str] = []
    pair = Pair(PairConfig(hybrid_mtp_target, None, ctx_size=512, threads=1), warn=said.append)
    try:
        session = pair.session
        session.target_ctx.rewind, session.target_ctx.snapshots = "none", 0  # as a recurrent cache without snapshots
        prompt = pair.prompt_tokens(PROMPT, chat=False)
        from test_engine import settings

        for mode in ("mtp", "ngram", "auto"):
            generation = pair.generation(prompt, settings(max_tokens=12), mode=mode)
            list(generation.run())
            assert generation.stats.drafted == 0 and generation.policy.mode == "off", mode
        assert session.rollback() == {"kind": "none", "limit": 0, "mtp_heads": 1}
        assert sum("cannot take tokens back" in line for line in said) == 1
    finally:
        pair.close()


def test_run_json_reports_the_rollback_and_heads(hybrid_mtp_target, swa_target):
    hybrid = run_mtp("--target", str(hybrid_mtp_target), "--temp", "0", "-n", "4", "--spec", "mtp")["settings"][
        "rollback"
    ]
    assert hybrid == {"kind": "snapshots", "limit": 8, "mtp_heads": 1}
    swa = run_mtp("--target", str(swa_target), "--temp", "0", "-n", "4", "--draft", "none")["settings"]["rollback"]
    assert swa == {"kind": "positions", "limit": None, "mtp_heads": 0}


@pytest.mark.slow
def test_check_reports_heads_and_rollback_of_a_target_alone(
    hybrid_mtp_target, dense_mtp_target, hybrid_target, swa_target
):
    for target, heads, kind in ((hybrid_mtp_target, 1, "snapshots"), (dense_mtp_target, 1, "positions")):
        result = specrun("check", str(target), "--json")
        assert result.returncode == 0, result.stderr
        doc = json.loads(result.stdout)
        assert doc["mtp_heads"] == heads and doc["rollback"]["kind"] == kind
    result = specrun("check", str(hybrid_target), str(swa_target), "--json")  # a pair: its target's facts too
    doc = json.loads(result.stdout)
    assert doc["mtp_heads"] == 0 and doc["rollback"] == {"kind": "snapshots", "limit": 8}


def test_doctor_reports_heads_rollback_and_the_heads_break_even(hybrid_mtp_target):
    result = specrun(
        "doctor", "--target", str(hybrid_mtp_target), "--draft", "none", "--threads", "1", "--json", timeout=300
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["mtp_heads"] == 1 and doc["rollback"]["kind"] == "snapshots" and doc["rollback"]["limit"] == 8
    assert doc["costs"]["mtp_token_s"] > 0 and doc["costs"]["mtp_over_plain"] > 0
    assert [e["k"] for e in doc["break_even"]["mtp"]][:4] == [1, 2, 3, 4]


def test_drafts_lists_the_built_in_heads_first(hybrid_mtp_target, hybrid_target):
    result = specrun("drafts", str(hybrid_mtp_target), "--json")
    assert result.returncode == 0, result.stderr
    first = json.loads(result.stdout)["drafts"][0]
    assert first["name"] == "built-in MTP heads" and first["mtp_heads"] == 1
    plain = json.loads(specrun("drafts", str(hybrid_target), "--json").stdout)["drafts"]
    assert all(d["name"] != "built-in MTP heads" for d in plain)


def test_the_heads_pass_costs_are_measured_and_cached_with_the_others(mtp_pair, monkeypatch):
    from specrun.engine.auto.costs import Conditions
    from specrun.runtime import cost_cache

    session = mtp_pair.session
    measured = session.measure()
    assert measured.head_s and set(measured.head_s) >= {1} and all(s > 0 for s in measured.head_s.values())
    assert DecodeCosts.from_dict(measured.to_dict()).head_s == measured.head_s
    # costs kept before this target's head was timed are measured again, and the head is seeded
    trusted = Conditions(cpu_share=1.0, major_faults=0, load_average=0.0)
    old = DecodeCosts({1: 0.01, 2: 0.011}, None, trusted)
    monkeypatch.setattr(cost_cache, "load", lambda key, threads=1: old)
    monkeypatch.setattr(cost_cache, "store", lambda key, costs, threads=1: [])
    saved = session.costs
    try:
        session.costs = None
        assert session.decode_costs().head_s
        assert "mtp" in session.controller(4).passes
    finally:
        session.costs = saved


# -- chained heads: one head per draft depth -----------------------------------------------------


@pytest.mark.slow
def test_chained_heads_greedy_output_is_plain_and_drafts_stop_at_the_heads(chained_mtp_target):
    common = ("--target", str(chained_mtp_target), "--temp", "0", "-n", "200", "--ignore-eos")
    mtp = run_mtp(*common, "--spec", "mtp", "--draft-max", "6")
    plain = run_mtp(*common, "--draft", "none")
    assert mtp["text"] == plain["text"]
    stats = mtp["stats"]
    assert stats["accepted"] > 0 and stats["steps"] < plain["stats"]["steps"]
    assert len(stats["drafted_by_position"]) == 2 and stats["drafted_by_position"][1] > 0  # two heads: K is at most 2
    assert run_mtp(*common, "--spec", "auto")["text"] == plain["text"]


def _drafts_by_history(path, monkeypatch) -> dict[tuple, list[int]]:
    """Every proposal the MTP drafter made over one greedy generation, by the history it followed."""
    from specrun.engine.drafting.mtp import MtpDrafter
    from specrun.engine.sequence import GenerationSettings

    seen: dict[tuple, list[int]] = {}
    real = MtpDrafter.propose

    def recording(self, requests):
        made = real(self, requests)
        for r in requests:
            seen[tuple(r.history)] = list(made.drafts[r.seq].tokens)
        return made

    monkeypatch.setattr(MtpDrafter, "propose", recording)
    pair = Pair(PairConfig(path, None, ctx_size=512, threads=1))
    try:
        settings = GenerationSettings(
            max_tokens=120, sampling=SamplingParams(temperature=0.0), ignore_eos=True, draft_max=2
        )
        for _ in pair.session.generation(pair.prompt_tokens(PROMPT, chat=False), settings, mode="mtp").run():
            pass
    finally:
        pair.close()
        monkeypatch.setattr(MtpDrafter, "propose", real)
    return seen


def test_each_depth_drafts_with_its_own_head(chained_mtp_target, one_head_step35, monkeypatch):
    """The two-head model and its one-head cut share the trunk and head 0: their first draft
    tokens agree after the same history, and the second differ (head 1 drafted it, not head 0 again)."""
    chained = _drafts_by_history(chained_mtp_target, monkeypatch)
    reused = _drafts_by_history(one_head_step35, monkeypatch)
    common = [h for h in chained if h in reused and len(chained[h]) == 2 and len(reused[h]) == 2]
    assert len(common) >= 10
    assert all(chained[h][0] == reused[h][0] for h in common)
    assert sum(chained[h][1] != reused[h][1] for h in common) >= len(common) // 4


def test_chained_heads_sampling_follows_the_target_distribution(chained_mtp_target):
    pair = Pair(PairConfig(chained_mtp_target, None, ctx_size=512, threads=1))
    try:
        session = pair.session
        session.costs = HEAD_PAYS
        # "abc": no near-tie at this model's top-k edge for the first two tokens
        chi2, drafted, detail = sampled_fit(
            pair, pair.prompt_tokens("abc", chat=False), "mtp", lambda: None, sampling=WARM
        )
    finally:
        pair.close()
    assert drafted > RUNS // 10
    assert chi2 < CHI2_999, detail


def test_several_heads_the_graph_cannot_chain_are_left_unused_said_once(tmp_path):
    """This llama.cpp's glm4moe MTP graph runs exactly one block and aborts on more: such a model
    decodes without its heads (one warning), and --spec mtp says it has none."""
    from arch_models import write_glm4moe_gguf

    path = write_glm4moe_gguf(tmp_path / "two-heads.gguf", n_nextn=2)
    result = specrun("run", PROMPT, "--target", str(path), "--temp", "0", "-n", "8", "--threads", "1")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("its heads are not used") == 1
    refused = specrun("run", PROMPT, "--target", str(path), "--spec", "mtp", "-n", "4")
    assert refused.returncode == 3 and "has none" in refused.stderr


def test_check_says_how_the_heads_draft(chained_mtp_target, tmp_path):
    from arch_models import write_glm4moe_gguf

    chained = specrun("check", str(chained_mtp_target), "--json")
    assert chained.returncode == 0 and json.loads(chained.stdout)["mtp_drafting"] == "chained"
    assert "up to 2 tokens a step" in specrun("check", str(chained_mtp_target)).stdout
    unused = specrun("check", str(write_glm4moe_gguf(tmp_path / "two.gguf", n_nextn=2)))
    assert unused.returncode == 3 and "2, unused" in unused.stdout


@pytest.mark.parametrize("mode", ["mtp", "auto"])
def test_a_gemma4_assistant_drafts_and_greedy_output_is_plain_decoding(gemma4_target, gemma4_assistant, mode):
    """Whether auto drafts here depends on the costs this machine measures for the tiny models (the
    next test pins them); what it outputs does not."""
    common = ("--target", str(gemma4_target), "--temp", "0", "-n", "64", "--ignore-eos")
    plain = run_mtp(*common, "--draft", "none")
    doc = run_mtp(*common, "--draft", str(gemma4_assistant), "--spec", mode)
    assert doc["text"] == plain["text"] and doc["stats"]["generated_tokens"] == 64
    if mode == "mtp":
        assert doc["stats"]["by_drafter"]["mtp"]["drafted"] > 0


def test_auto_drafts_with_a_gemma4_assistant_where_its_passes_pay(gemma4_target, gemma4_assistant):
    pair = Pair(PairConfig(gemma4_target, gemma4_assistant, ctx_size=512, threads=1))
    session = pair.session
    saved = session.costs, session._auto
    settings = GenerationSettings(max_tokens=64, sampling=SamplingParams(temperature=0), ignore_eos=True)
    try:
        prompt = pair.prompt_tokens(PROMPT, chat=False)
        texts = {}
        for mode in ("off", "auto"):
            session.costs, session._auto = HEAD_PAYS, None
            generation = pair.generation(prompt, settings, mode=mode)
            texts[mode] = "".join(step.text for step in generation.run())
        assert texts["auto"] == texts["off"]
        assert generation.stats.by_drafter["mtp"]["drafted"] > 0
    finally:
        session.costs, session._auto = saved
        pair.close()


def test_a_gemma4_assistant_samples_from_the_target_distribution(gemma4_target, gemma4_assistant):
    pair = Pair(PairConfig(gemma4_target, gemma4_assistant, ctx_size=512, threads=1))
    session = pair.session
    saved = session.costs, session._auto
    try:
        assert session.head_ctx.other is session.target_ctx and session.head_drafter.k_max is None
        chi2, drafted, detail = sampled_fit(pair, pair.prompt_tokens(ASSISTED, chat=False), "mtp", sampling=WARM)
        assert drafted > RUNS // 10
        assert chi2 < CHI2_999, detail
    finally:
        session.costs, session._auto = saved
        pair.close()


@pytest.mark.slow
def test_a_gemma4_assistant_refuses_what_it_cannot_draft_for(gemma4_target, gemma4_assistant, swa_target, tmp_path):
    """One line each, before anything loads: a target that is not Gemma 4, one of another width,
    and a mode that needs a draft model."""
    from arch_models import write_gemma4_gguf

    result = specrun("run", PROMPT, "--target", str(swa_target), "--draft", str(gemma4_assistant), "-n", "4")
    assert result.returncode == 3 and result.stderr.count("\n") <= 1 and "only for a Gemma 4 target" in result.stderr, (
        result.stderr
    )
    wide = write_gemma4_gguf(tmp_path / "wide.gguf", n_embd=128)
    result = specrun("run", PROMPT, "--target", str(wide), "--draft", str(gemma4_assistant), "-n", "4")
    assert result.returncode == 3 and result.stderr.count("\n") <= 1 and "64 wide" in result.stderr, result.stderr
    result = specrun(
        "run", PROMPT, "--target", str(gemma4_target), "--draft", str(gemma4_assistant), "--spec", "draft", "-n", "4"
    )
    assert result.returncode == 2 and result.stderr.count("\n") <= 1 and "--spec mtp" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert specrun("check", str(swa_target), str(gemma4_assistant)).returncode == 3


@pytest.mark.slow
def test_check_says_a_gemma4_assistant_drafts_over_the_target_cache(gemma4_target, gemma4_assistant):
    result = specrun("check", str(gemma4_target), str(gemma4_assistant))
    assert result.returncode == 0 and "Gemma 4 MTP assistant" in result.stdout, result.stderr
    doc = json.loads(specrun("check", str(gemma4_target), str(gemma4_assistant), "--json").stdout)
    assert doc["assistant"] is True and doc["compatible"] is True
    alone = specrun("check", str(gemma4_assistant))
    assert alone.returncode == 2 and alone.stderr.count("\n") <= 1 and "no target itself" in alone.stderr, alone.stderr


def test_placement_counts_the_heads_weights_and_their_cache(chained_mtp_target):
    """llama.cpp places the MTP blocks as layers after the trunk (n_layer_all + 1 with the
    output), and the head context caches exactly those layers while the target caches the trunk:
    the placement's layers are the trunk and the heads, each with one layer's KV per token."""
    from specrun.models.gguf_header import read_header
    from specrun.models.sizes import model_size

    size = model_size(chained_mtp_target)
    assert size.n_layer == 4 and all(b > 0 for b in size.layer_bytes)
    heads = [
        sum(v for k, v in read_header(chained_mtp_target).tensor_bytes.items() if k.startswith(f"blk.{i}."))
        for i in (2, 3)
    ]
    assert (
        list(size.layer_bytes[2:]) == heads and heads[0] > size.layer_bytes[0]
    )  # a head is a layer plus its projection
    from specrun.runtime.placement import model_placement

    cpu = model_placement(size, 512, [], 0, []).shares[-1]
    assert cpu.layers == 4 and cpu.bytes == size.weight_bytes + 4 * size.kv_bytes(512)


def test_a_gemma4_assistant_keeps_only_the_target_rows_it_can_still_read(gemma4_target, gemma4_assistant):
    """Under plain steps the target's hidden rows would pile up by the token; the assistant reads
    only the one behind the last committed token, so no more than one pass's worth is kept."""
    from test_engine import settings

    pair = Pair(PairConfig(gemma4_target, gemma4_assistant, ctx_size=512, threads=1))
    try:
        prompt = pair.prompt_tokens(PROMPT, chat=False)
        generation = pair.generation(prompt, settings(max_tokens=40), mode="off")
        list(generation.run())
        assert generation.stats.generated_tokens == 40
        assert list(pair.session.head_drafter.hidden._rows[0]) == [
            len(prompt) + 40 - 2
        ]  # the row behind the last token
    finally:
        pair.close()


def test_a_gemma4_assistant_is_fed_as_llama_cpp_feeds_it():
    """Every depth at the position after the target's cache (x_{n-1}'s); depth 1 with x_{n-1} and
    the target's row h_{n-2}, each later depth with the token drafted before and the row the
    assistant returned with it; for every asking sequence in one pass a depth."""
    from types import SimpleNamespace

    import numpy as np

    from specrun.engine.drafting.assistant import AssistantDrafter
    from specrun.engine.drafting.protocol import DraftRequest
    from specrun.engine.sampling import make_rng

    fed: list[list[tuple]] = []

    def head_rows(entries):
        fed.append([(seq, pos, token, row.tolist()) for seq, pos, token, row in entries])
        depth = len(fed)
        out = []
        for seq, _, _, _ in entries:
            logits = np.zeros(50, dtype=np.float32)
            logits[10 * seq + depth] = 1.0  # sequence s drafts 10s + 1, 10s + 2, ...
            out.append((logits, np.full(2, 100.0 * seq + depth, dtype=np.float32)))
        return out

    head = SimpleNamespace(model=SimpleNamespace(n_embd_out=2), head_rows=head_rows)
    target = SimpleNamespace(on_hidden=None)
    drafter = AssistantDrafter(head, target)
    target.on_hidden(
        0, 0, np.array([[0.5, 0.5], [1.5, 1.5], [2.5, 2.5]], dtype=np.float32)
    )  # the target's rows at 0..2
    target.on_hidden(1, 3, np.array([[3.5, 3.5]], dtype=np.float32))  # sequence 1's row at 3
    greedy = SamplingParams(temperature=0)
    made = drafter.propose(
        [
            DraftRequest(0, [7, 8, 9, 4], 3, greedy, make_rng(0)),
            DraftRequest(1, [5, 6, 7, 8, 9], 2, greedy, make_rng(0)),
        ]
    )
    assert made.drafts[0].tokens == [1, 2, 3] and made.drafts[1].tokens == [11, 12]
    assert fed == [
        [(0, 3, 4, [2.5, 2.5]), (1, 4, 9, [3.5, 3.5])],  # x_{n-1} with the target's h_{n-2}
        [(0, 3, 1, [1.0, 1.0]), (1, 4, 11, [101.0, 101.0])],  # the draft so far with the assistant's own row
        [(0, 3, 2, [2.0, 2.0])],  # sequence 1 asked for two
    ]
    assert [p.rows for p in made.passes] == [2, 2, 1]


@pytest.mark.slow
def test_drafts_lists_a_gemma4_assistant_for_its_target_only(gemma4_target, gemma4_assistant, swa_target):
    folder = str(gemma4_assistant.parent)
    listed = json.loads(specrun("drafts", str(gemma4_target), "--search", folder, "--json").stdout)["drafts"]
    assert [d["drafting"] for d in listed if d["path"] == str(gemma4_assistant)] == ["assistant"]
    assert "assistant (--spec mtp)" in specrun("drafts", str(gemma4_target), "--search", folder).stdout
    other = json.loads(specrun("drafts", str(swa_target), "--search", folder, "--json", "--all").stdout)["drafts"]
    (entry,) = [d for d in other if d["path"] == str(gemma4_assistant)]
    assert (
        entry["compatible"] is False
        and entry["drafting"] is None
        and "only for a Gemma 4 target" in entry["first_failure"]
    )


@pytest.mark.parametrize("pair_of", ["heads", "assistant"])
def test_bench_has_rows_of_its_own_for_mtp(
    request, hybrid_mtp_target, gemma4_target, gemma4_assistant, tmp_path, pair_of
):
    """Bench times `--spec mtp` beside plain, with the target's own heads or with an assistant (by
    default with an assistant, which drafts in no other mode), and checks its greedy text against
    plain decoding's."""
    models = (
        ("--target", str(hybrid_mtp_target))
        if pair_of == "heads"
        else ("--target", str(gemma4_target), "--draft", str(gemma4_assistant))
    )
    report = tmp_path / "bench.json"
    spec = ("--spec", "off,mtp") if pair_of == "heads" else ()  # with an assistant, the default
    result = specrun(
        "bench",
        *models,
        "--quick",
        "--category",
        "code-generation",
        *spec,
        "--max-tokens",
        "8",
        "--warmup",
        "0",
        "--json",
        report,
        "-c",
        "1024",
        "--quiet",
        "--threads",
        "1",
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(report.read_text())
    (row,) = [r for r in doc["categories"] if r["mode"] == "mtp" and r["category"] == "code-generation"]
    assert row["drafted"] > 0 and len(row["acceptance_by_position"]) == row["draft_max"]
    assert doc["correctness"]["diverged"] == 0 and doc["correctness"]["identical"] == doc["correctness"]["checked"] > 0
