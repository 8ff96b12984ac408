"""/metrics: what the server counts, in a format Prometheus' own parser reads, one registry per server."""

from prometheus_client.parser import text_string_to_metric_families

from specrun.serve.metrics import Metrics, percentile


def samples(metrics: Metrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render()):
        for sample in family.samples:
            out[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_steps_count_drafts_by_drafter_and_position():
    metrics = Metrics()
    metrics.step(6, [("draft", 5, 3), ("ngram", 2, 0), (None, 0, 0)])
    seen = samples(metrics)
    assert seen["specrun_draft_tokens_total", ()] == 7 and seen["specrun_draft_tokens_accepted_total", ()] == 3
    assert seen["specrun_drafter_tokens_accepted_total", (("drafter", "ngram"),)] == 0
    assert seen["specrun_draft_position_tokens_total", (("position", "2"),)] == 2
    assert seen["specrun_draft_position_accepted_total", (("position", "5"),)] == 0
    assert seen["specrun_batch_tokens_bucket", (("le", "4.0"),)] == 0
    assert seen["specrun_batch_tokens_bucket", (("le", "8.0"),)] == 1
    assert metrics.steps == 1


def test_finished_requests_feed_the_histograms_and_the_recent_summary():
    metrics = Metrics()
    for seconds in (1.0, 2.0, 9.0):
        metrics.finished(prompt=10, cached=4, ttft=0.2, speed=None, completion=seconds)
    metrics.request("chat", "completed")
    seen = samples(metrics)
    assert seen["specrun_prompt_tokens_total", ()] == 30 and seen["specrun_prompt_tokens_cached_total", ()] == 12
    assert seen["specrun_completion_seconds_count", ()] == 3
    assert seen["specrun_decode_tokens_per_second_count", ()] == 0
    assert seen["specrun_completion_seconds_mean", ()] == 4.0 and seen["specrun_completion_seconds_p95", ()] == 9.0
    assert seen["specrun_requests_total", (("endpoint", "chat"), ("outcome", "completed"))] == 1


def test_gauges_are_read_at_each_scrape_and_servers_never_share_a_count():
    queue = [3]
    one = Metrics(
        gauges=lambda: {"specrun_queue_length": ("Requests waiting.", queue[0]), "specrun_hits_total": ("Hits.", 5)}
    )
    other = Metrics()
    one.tokens(4)
    assert samples(one)["specrun_queue_length", ()] == 3
    queue[0] = 0
    seen = samples(one)
    assert seen["specrun_queue_length", ()] == 0 and seen["specrun_hits_total", ()] == 5
    assert samples(other)["specrun_generated_tokens_total", ()] == 0


def test_the_percentile_is_the_nearest_rank():
    assert percentile([], 0.95) == 0.0
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0
    assert percentile([float(i) for i in range(1, 101)], 0.95) == 95.0
