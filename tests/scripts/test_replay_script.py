"""scripts/replay_auto.py: the offline replay that auto's replayed figures (docs/benchmarks.md) come from."""

import importlib.util

import pytest
from paths import SCRIPTS

SCRIPT = SCRIPTS / "replay_auto.py"


def load():
    spec = importlib.util.spec_from_file_location("replay_auto", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FLAT = "1:0.010,2:0.0102,4:0.0105,8:0.011,16:0.0125,32:0.016"


def answers():
    source = list(range(100, 180))
    return {
        "copy": {"category": "code-editing", "prompt": source, "output": source[:64]},
        "fresh": {"category": "creative-writing", "prompt": source[:10], "output": list(range(500, 564))},
    }


def test_a_copied_answer_replays_faster_than_plain_and_new_text_does_not():
    replay = load()
    result = replay.replay_all(answers(), replay.parse_curve(FLAT), [("auto", 31)], carry=False, max_tokens=128)
    assert result[("code-editing", "auto:31")][0] > 2
    assert result[("creative-writing", "auto:31")][0] <= 1.0


def test_a_session_counts_each_answer_once_per_order_on_the_second_pass():
    """One controller and lookup go on from answer to answer; the first pass over an order only
    warms them, so each answer is counted once per order."""
    replay = load()
    result = replay.replay_all(
        answers(), replay.parse_curve(FLAT), [("auto", 31)], carry=False, max_tokens=128, session=True, orders=3
    )
    assert len(result[("code-editing", "auto:31")]) == 3
    assert len(result[("creative-writing", "auto:31")]) == 3
    assert min(result[("code-editing", "auto:31")]) > 2


def test_a_prediction_of_text_the_prompt_lacks_replays_faster_and_none_replays_as_auto():
    replay = load()
    fresh = {"category": "code-editing", "prompt": list(range(100, 110)), "output": list(range(500, 564))}
    predicted = {**fresh, "prediction": list(range(500, 564))}
    curve = replay.parse_curve(FLAT)
    configs = [("auto", 31), ("auto+prediction", 31)]
    result = replay.replay_all({"p": predicted}, curve, configs, carry=False, max_tokens=128)
    assert result[("code-editing", "auto:31")][0] <= 1.0 < 2 < result[("code-editing", "auto+prediction:31")][0]
    without = replay.replay_all({"p": fresh}, curve, configs, carry=False, max_tokens=128)
    assert without[("code-editing", "auto+prediction:31")] == without[("code-editing", "auto:31")]


def test_the_oracle_takes_the_cheapest_schedule_of_the_tokens_each_step_would_keep():
    """Drafting 3 at the first position keeps 3 and adds the target's own (4 tokens for one pass of
    4 rows), and the last position can only decode plain: 2.5 + 1, cheaper than any other split."""
    replay = load()
    curve = replay.parse_curve("1:1.0,2:1.5,3:2.0,4:2.5,5:3.0")
    rows = [[(3, 8, 0)], [(2, 8, 1)], [(1, 8, 2)], [(0, 8, 3)], [(0, 0, 0)]]
    assert replay.oracle_seconds(rows, curve) == 3.5
    steep = replay.parse_curve("1:1.0,2:2.5,3:4.0,4:5.5,5:7.0")  # a row costs more than a pass over one
    assert replay.oracle_seconds(rows, steep) == 5.0


def test_a_fitted_rule_reads_the_run_before_each_position_and_drafts_no_more_than_proposed():
    replay = load()
    curve = replay.parse_curve("1:1.0,2:1.5,3:2.0,4:2.5,5:3.0")
    rows = [[(0, 2, 0)], [(3, 3, 0)], [(2, 3, 1)], [(1, 3, 2)], [(0, 3, 3)], [(0, 0, 0)]]
    # No run at the first two positions: plain there; a run of 1 at the third: draft up to 4 (3 proposed).
    assert replay.rule_seconds(rows, curve, (0, 4, 4, 4, 4)) == 1.0 + 1.0 + 2.5 + 1.0
    assert replay.rule_seconds(rows, curve, (0, 0, 0, 0, 0)) == 6.0


def test_the_ceilings_bound_auto_and_read_the_prediction_only_with_it():
    replay = load()
    replay.FITTED_KS = (0, 3, 31)  # a small grid: the fit tries every rule of it
    curve = replay.parse_curve(FLAT)
    data = answers()
    data["predicted"] = {**data["fresh"], "prediction": data["fresh"]["output"]}
    configs = [("auto", 31), ("fitted", 31), ("oracle", 31), ("oracle+prediction", 31)]
    result = replay.replay_all(data, curve, configs, carry=False, max_tokens=128)
    auto, fitted, oracle = (result[("code-editing", f"{mode}:31")][0] for mode in ("auto", "fitted", "oracle"))
    assert 2 < auto <= oracle and 2 < fitted <= oracle
    assert result[("creative-writing", "oracle:31")] == pytest.approx([1.0, 1.0])  # nothing of it was written before
    assert result[("creative-writing", "oracle+prediction:31")][1] > 2


def test_a_prediction_of_the_text_in_the_prompt_replays_as_auto_without_it():
    """The file is in the prompt and is the prediction: both follow one copy, so the prediction
    changes no choice (taking the more confident of two estimates of it drafted long and lost)."""
    replay = load()
    source = list(range(100, 180))
    edited = source[:20] + [7] + source[21:50] + [8, 9] + source[52:]
    item = {"category": "code-editing", "prompt": source, "output": edited[:64], "prediction": source}
    curve = replay.parse_curve("1:0.010,2:0.016,4:0.028,8:0.05,16:0.09,32:0.17")  # a pass over many rows is dear
    configs = [("auto", 31), ("auto+prediction", 31)]
    result = replay.replay_all({"p": item}, curve, configs, carry=False, max_tokens=128)
    assert result[("code-editing", "auto+prediction:31")] == result[("code-editing", "auto:31")]
