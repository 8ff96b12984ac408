"""scripts/replay_auto.py: the offline replay that auto's replayed figures (docs/benchmarks.md) come from."""

import importlib.util

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
