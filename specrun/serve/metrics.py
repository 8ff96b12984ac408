"""The server's counters in Prometheus' text format, kept and written by `prometheus_client`.

Requests by endpoint and outcome, prompt and generated tokens, drafted and accepted tokens in
total, by drafter and by draft position, steps and their batch sizes, the queue, and histograms
of time to first token, decode speed and completion time; the mean and 95th percentile of recent
completion times, so SRPT and FCFS can be compared from a scrape. Every server has a registry of
its own, so several in one process (the tests, `bench --serve`) never share a count.
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

disable_created_metrics()  # a `_created` sample beside every counter says nothing a scrape needs

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SPEED_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 500.0)
COMPLETION_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
RECENT = 1000  # completion times the mean and 95th percentile are taken over
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def percentile(values: list[float], q: float) -> float:
    """The q-quantile by the nearest-rank method (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered))))
    return ordered[rank - 1]


class _ReadAtScrape(Collector):
    """Values read when scraped: the service's gauges, and the recent completion times' summary."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        mean, p95 = self.metrics.completion_summary()
        yield GaugeMetricFamily(
            "specrun_completion_seconds_mean", f"Mean completion time of the last {RECENT} requests.", value=mean
        )
        yield GaugeMetricFamily(
            "specrun_completion_seconds_p95",
            f"95th percentile of the completion time of the last {RECENT} requests.",
            value=p95,
        )
        for name, (help_text, value) in sorted(self.metrics.gauges().items()):
            if name.endswith("_total"):
                yield CounterMetricFamily(name.removesuffix("_total"), help_text, value=value)
            else:
                yield GaugeMetricFamily(name, help_text, value=value)


class Metrics:
    """Counters fed by the engine thread and the request handlers (prometheus_client's are
    thread-safe); `gauges` gives the current values (name → (help, value)) read at each scrape,
    such as the queue length."""

    def __init__(self, gauges: Callable[[], dict[str, tuple[str, float]]] | None = None):
        self.gauges = gauges or (lambda: {})
        self.registry = CollectorRegistry(auto_describe=False)  # gauges are read at scrapes only
        on = {"registry": self.registry}
        self._requests = Counter("specrun_requests", "Requests by endpoint and outcome.", ["endpoint", "outcome"], **on)
        self._prompt = Counter("specrun_prompt_tokens", "Prompt tokens of answered requests.", **on)
        self._cached = Counter(
            "specrun_prompt_tokens_cached", "Prompt tokens found in the cache instead of read.", **on
        )
        self._generated = Counter("specrun_generated_tokens", "Tokens generated.", **on)
        self._drafted = Counter("specrun_draft_tokens", "Draft tokens verified.", **on)
        self._accepted = Counter("specrun_draft_tokens_accepted", "Draft tokens accepted.", **on)
        self._by_drafter = Counter(
            "specrun_drafter_tokens",
            "Draft tokens verified, by drafter (ngram: prompt lookup; draft: the draft model).",
            ["drafter"],
            **on,
        )
        self._accepted_by_drafter = Counter(
            "specrun_drafter_tokens_accepted", "Draft tokens accepted, by drafter.", ["drafter"], **on
        )
        self._at = Counter(
            "specrun_draft_position_tokens",
            "Draft tokens verified at each draft position (1: the first).",
            ["position"],
            **on,
        )
        self._accepted_at = Counter(
            "specrun_draft_position_accepted", "Draft tokens accepted at each draft position.", ["position"], **on
        )
        self._steps = Counter("specrun_steps", "Target passes (one batch each).", **on)
        self._batch = Histogram("specrun_batch_tokens", "Tokens per target pass.", buckets=BATCH_BUCKETS, **on)
        self._ttft = Histogram(
            "specrun_time_to_first_token_seconds", "From arrival to the first token.", buckets=TTFT_BUCKETS, **on
        )
        self._speed = Histogram(
            "specrun_decode_tokens_per_second",
            "Tokens after the first over the time after the first, per request.",
            buckets=SPEED_BUCKETS,
            **on,
        )
        self._completion = Histogram(
            "specrun_completion_seconds", "From arrival to the last token.", buckets=COMPLETION_BUCKETS, **on
        )
        self.registry.register(_ReadAtScrape(self))
        self._lock = threading.Lock()  # the recent completion times
        self._recent: deque[float] = deque(maxlen=RECENT)
        self.steps = 0  # target passes so far, read without a scrape

    def request(self, endpoint: str, outcome: str) -> None:
        """A request ended: completed, cancelled, rejected (503), invalid (400), unauthorized (401), failed (500)."""
        self._requests.labels(endpoint, outcome).inc()

    def step(self, rows: int, drafts: Iterable[tuple[str | None, int, int]]) -> None:
        """One engine step: its batch size and each request's (drafter, drafted, accepted)."""
        self._steps.inc()
        self._batch.observe(rows)
        for drafter, drafted, accepted in drafts:
            if not drafter or not drafted:
                continue
            self._drafted.inc(drafted)
            self._accepted.inc(accepted)
            self._by_drafter.labels(drafter).inc(drafted)
            self._accepted_by_drafter.labels(drafter).inc(accepted)
            for position in range(1, drafted + 1):
                self._at.labels(str(position)).inc()
                if position <= accepted:
                    self._accepted_at.labels(str(position)).inc()
                else:
                    self._accepted_at.labels(str(position))  # listed at 0 beside its verified count
        self.steps += 1

    def tokens(self, generated: int) -> None:
        self._generated.inc(generated)

    def finished(self, *, prompt: int, cached: int, ttft: float | None, speed: float | None, completion: float) -> None:
        """A request answered in full: its prompt, time to first token, decode speed, completion time."""
        self._prompt.inc(prompt)
        self._cached.inc(cached)
        if ttft is not None:
            self._ttft.observe(ttft)
        if speed is not None:
            self._speed.observe(speed)
        self._completion.observe(completion)
        with self._lock:
            self._recent.append(completion)

    def completion_summary(self) -> tuple[float, float]:
        """Mean and 95th percentile of recent completion times."""
        with self._lock:
            recent = list(self._recent)
        return (sum(recent) / len(recent) if recent else 0.0), percentile(recent, 0.95)

    def render(self) -> str:
        """The exposition text."""
        return generate_latest(self.registry).decode()
