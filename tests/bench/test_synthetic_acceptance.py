"""`bench --synthetic-acceptance`: drafts accepted at a set rate instead of by the target, so the
pipeline's speed can be measured at a chosen acceptance. The rule converges to its rate and
repeats with its seed; its rows are marked, never checked against plain decoding, and nothing
auto learns under it is kept."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import specrun
from test_bench import bench_cli, small_prompts  # noqa: F401 - a fixture

from specrun.bench.costmodel import alpha_from_steps
from specrun.bench.runner import Config, configurations
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.engine.verify import SyntheticAcceptance
from specrun.errors import EXIT_USAGE, InputError
from specrun.runtime import cost_cache

GREEDY = SamplingParams(temperature=0.0)


def verdicts(rule: SyntheticAcceptance, k: int, n: int, vocab: int = 7) -> list[tuple[int, int]]:
    rows = np.zeros((k + 1, vocab))
    rows[:, 3] = 1.0
    return [(k, rule(list(range(k)), None, rows, GREEDY, np.random.default_rng(0)).accepted) for _ in range(n)]


@pytest.mark.parametrize("p", [0.3, 0.6, 0.8, 0.9])
def test_the_rule_converges_to_its_rate(p):
    steps = verdicts(SyntheticAcceptance(p, seed=1), 4, 20000)
    assert abs(alpha_from_steps(steps) - p) < 0.01


def test_the_rule_repeats_with_its_seed_and_commits_the_target_token():
    assert verdicts(SyntheticAcceptance(0.7, 5), 3, 200) == verdicts(SyntheticAcceptance(0.7, 5), 3, 200)
    assert verdicts(SyntheticAcceptance(0.7, 5), 3, 200) != verdicts(SyntheticAcceptance(0.7, 6), 3, 200)
    rows = np.zeros((4, 9))
    rows[:, 8] = 1.0
    verdict = SyntheticAcceptance(0.0)([1, 2, 3], None, rows, GREEDY, np.random.default_rng(0))
    assert verdict.accepted == 0 and verdict.tokens == [8]
    verdict = SyntheticAcceptance(1.0)([1, 2, 3], None, rows, GREEDY, np.random.default_rng(0))
    assert verdict.accepted == 3 and verdict.tokens == [1, 2, 3, 8]
    with pytest.raises(ValueError):
        SyntheticAcceptance(1.5)


def test_configurations_run_every_speculative_one_per_rate():
    configs = configurations(["off", "draft"], [2, 4], [0.0], synthetic=[0.6, 0.9])
    assert [c.id for c in configs] == [
        "off-t0",
        "draft-k2-t0-synthetic0.6",
        "draft-k2-t0-synthetic0.9",
        "draft-k4-t0-synthetic0.6",
        "draft-k4-t0-synthetic0.9",
    ]
    assert configs[0].verifier(0) is None and configs[1].verifier(0).p == 0.6
    assert "synthetic 0.6" in configs[1].label()
    for bad in ([1.2], [-0.1], [float("nan")], []):
        with pytest.raises(InputError):
            configurations(["off", "draft"], [2], [0.0], synthetic=bad)
    with pytest.raises(InputError):
        configurations(["off"], None, [0.0], synthetic=[0.5])


def test_the_bench_accepts_at_the_rate_and_marks_its_rows(tiny_target, tiny_draft, small_prompts, tmp_path):  # noqa: F811
    result = bench_cli(
        "--target",
        tiny_target,
        "--draft",
        tiny_draft,
        "--prompts",
        small_prompts,
        "--runs",
        "1",
        "-n",
        "120",
        "--draft-max",
        "4",
        "--ignore-eos",
        "--warmup",
        "0",
        "--synthetic-acceptance",
        "0.3,0.9",
        "--json",
        "-",
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    rows = {r["config"]: r for r in doc["categories"] if r["category"] == "all"}
    assert set(rows) == {"off-t0", "draft-k4-t0-synthetic0.3", "draft-k4-t0-synthetic0.9"}
    for p in (0.3, 0.9):
        row = rows[f"draft-k4-t0-synthetic{p:g}"]
        assert row["synthetic_acceptance"] == p and abs(row["alpha"] - p) < 0.1, row["alpha"]
        assert row["identical"] is None and row["predicted_speedup"] > 0
    assert rows["off-t0"]["synthetic_acceptance"] is None
    assert doc["correctness"]["checked"] == 0  # no synthetic run is compared with plain decoding
    assert {r["config"] for r in doc["runs"]} == set(rows)
    assert doc["settings"]["synthetic_acceptance"] == [0.3, 0.9]
    assert "synthetic" in result.stderr and "| all | draft K=4 synthetic 0.9 |" in result.stderr


def test_auto_keeps_nothing_it_learned_under_a_synthetic_rate(tiny_target, tiny_draft):
    from specrun.runtime.pair import Pair, PairConfig

    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1))
    try:
        session = pair.session
        tokens = pair.prompt_tokens("hello there", chat=False)
        settings = GenerationSettings(max_tokens=24, ignore_eos=True, draft_max=4)
        key = session._learned_key((settings.ngram_min, settings.ngram_max))
        list(session.generation(tokens, settings, mode="auto", verifier=SyntheticAcceptance(0.9)).run())
        assert cost_cache.LEARNED.get(key) is None and session._auto is None
        session.reset()
        list(session.generation(tokens, settings, mode="auto").run())  # the real rule is learned from
        assert cost_cache.LEARNED.get(key) is not None and session._auto is not None
    finally:
        pair.close()


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--synthetic-acceptance", "1.5"], "--synthetic-acceptance values must lie between 0 and 1"),
        (["--synthetic-acceptance", "high"], "--synthetic-acceptance: 'high' is not a number"),
        (["--synthetic-acceptance", "0.8", "--spec", "off"], "--synthetic-acceptance needs a speculative mode"),
        (["--synthetic-acceptance", "0.8", "--serve"], "--synthetic-acceptance measures single requests only"),
    ],
)
def test_bad_values_are_one_line_before_loading_models(args, expected, tmp_path):
    result = bench_cli("--target", tmp_path / "absent.gguf", *args, tmp_path=tmp_path)
    assert result.returncode == EXIT_USAGE
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["run", "serve"])
def test_the_flag_exists_only_in_bench(command, tmp_path):
    result = specrun(command, "--synthetic-acceptance", "0.8", "hello", env={"XDG_CACHE_HOME": str(tmp_path)})
    assert result.returncode == EXIT_USAGE
    assert "No such option: --synthetic-acceptance" in result.stderr and "Traceback" not in result.stderr


def test_a_synthetic_config_is_marked_in_its_dict():
    assert Config("draft", 4, 0.0, 0.8).to_dict()["synthetic_acceptance"] == 0.8
    assert Config("draft", 4).to_dict()["synthetic_acceptance"] is None
