"""The order in which waiting requests get a sequence (serve.scheduler): shortest predicted
remaining time first, aging so nothing starves, or first come first served; and the running
estimates the predictions come from. Arrival times are given, never read from a clock."""

from __future__ import annotations

import pytest

from specrun.serve.scheduler import (
    DEFAULT_ANSWER_TOKENS,
    LengthEstimates,
    Scheduler,
    predicted_seconds,
)


def queue(schedule: str, items: list[tuple[str, float]], aging: float = 0.5) -> Scheduler:
    scheduler: Scheduler[str] = Scheduler(schedule, aging=aging)
    for name, arrival in items:
        scheduler.push(name, arrival)
    return scheduler


PREDICTED = {"long": 10.0, "medium": 4.0, "short": 1.0, "tiny": 0.5}


def test_srpt_serves_the_shortest_predicted_first():
    scheduler = queue("srpt", [("long", 0.0), ("medium", 0.0), ("short", 0.0)])
    assert [scheduler.pop(PREDICTED.get) for _ in range(3)] == ["short", "medium", "long"]


def test_fcfs_serves_in_arrival_order_whatever_the_predictions():
    scheduler = queue("fcfs", [("long", 0.0), ("medium", 1.0), ("short", 2.0)])
    assert scheduler.order(PREDICTED.get) == ["long", "medium", "short"]


def test_equal_keys_keep_arrival_order():
    scheduler = queue("srpt", [("a", 0.0), ("b", 0.0), ("c", 0.0)])
    assert scheduler.order(lambda _: 1.0) == ["a", "b", "c"]


def test_a_long_request_that_waited_long_enough_goes_before_a_new_short_one():
    # long: 10 s predicted, arrived at 0; short: 1 s predicted. With aging 0.5, each second waited
    # forgives half a second of prediction: short ones arriving before t = 18 go first, later ones after.
    assert queue("srpt", [("long", 0.0), ("short", 17.0)]).order(PREDICTED.get) == ["short", "long"]
    assert queue("srpt", [("long", 0.0), ("short", 19.0)]).order(PREDICTED.get) == ["long", "short"]


def test_a_stream_of_short_requests_does_not_starve_a_long_one():
    scheduler: Scheduler[str] = Scheduler("srpt", aging=0.5)
    scheduler.push("long", 0.0)
    served, now = [], 0.0
    for i in range(100):  # one short request arrives per second; one request is served per second
        scheduler.push(f"short{i}", now)
        served.append(scheduler.pop(lambda name: 10.0 if name == "long" else 1.0))
        now += 1.0
        if "long" in served:
            break
    assert "long" in served and len(served) <= 10.0 / 0.5 + 2


def test_pop_uses_the_predictions_of_the_moment():
    scheduler = queue("srpt", [("a", 0.0), ("b", 0.0)])
    assert scheduler.pop({"a": 5.0, "b": 1.0}.get) == "b"
    scheduler.push("c", 0.0)
    assert scheduler.pop({"a": 1.0, "c": 5.0}.get) == "a"


def test_a_removed_request_is_never_served():
    scheduler = queue("srpt", [("long", 0.0), ("short", 0.0)])
    assert scheduler.remove("short") and not scheduler.remove("short")
    assert scheduler.pop(PREDICTED.get) == "long" and len(scheduler) == 0
    with pytest.raises(IndexError):
        scheduler.pop(PREDICTED.get)


def test_an_unknown_schedule_is_refused():
    with pytest.raises(ValueError, match="srpt"):
        Scheduler("lifo")


def test_remaining_tokens_come_from_max_tokens_then_from_the_class_answers():
    estimates = LengthEstimates()
    chat = estimates.class_of("chat", 512)
    assert estimates.remaining_tokens(chat, 512) == 512
    assert estimates.remaining_tokens(estimates.class_of("chat", None), None) == DEFAULT_ANSWER_TOKENS
    estimates.observe(chat, 40, 39)
    estimates.observe(chat, 60, 20)
    assert estimates.remaining_tokens(chat, 512) == pytest.approx(50.0)  # the running mean, under max_tokens
    assert estimates.remaining_tokens(chat, 512, generated=30) == pytest.approx(20.0)
    assert estimates.remaining_tokens(estimates.class_of("chat", 16), 16) == 16  # another class: its own cap
    assert estimates.tokens_per_step(chat) == pytest.approx((1.0 + (59 / 20)) / 2)


def test_classes_are_an_endpoint_and_a_power_of_two_of_max_tokens():
    assert LengthEstimates.class_of("chat", 300) == LengthEstimates.class_of("chat", 500)
    assert LengthEstimates.class_of("chat", 300) != LengthEstimates.class_of("chat", 100)
    assert LengthEstimates.class_of("chat", 300) != LengthEstimates.class_of("completion", 300)


def test_predicted_seconds_read_the_prompt_then_decode_the_rest():
    assert predicted_seconds(100, 50, 2.0, prompt_token_seconds=0.001, step_seconds=0.04) == pytest.approx(0.1 + 1.0)
