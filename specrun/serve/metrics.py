"""The server's counters in Prometheus' text format (version 0.0.4), written without a client library.

Requests by endpoint and outcome, prompt and generated tokens, drafted and accepted tokens in
total, by drafter and by draft position, steps and their batch sizes, the queue, and histograms
of time to first token, decode speed and completion time; the mean and 95th percentile of recent
completion times, so SRPT and FCFS can be compared from a scrape.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
SPEED_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 500.0)
COMPLETION_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
RECENT = 1000  # completion times the mean and 95th percentile are taken over


class Histogram:
    """Cumulative buckets, sum and count."""

    def __init__(self, bounds: Iterable[float]):
        self.bounds = tuple(bounds)
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1

    def lines(self, name: str) -> list[str]:
        out = [f'{name}_bucket{{le="{_number(b)}"}} {c}' for b, c in zip(self.bounds, self.counts)]
        out.append(f'{name}_bucket{{le="+Inf"}} {self.count}')
        out.append(f"{name}_sum {_number(self.sum)}")
        out.append(f"{name}_count {self.count}")
        return out


def percentile(values: list[float], q: float) -> float:
    """The q-quantile by the nearest-rank method (0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(len(ordered), max(1, math.ceil(q * len(ordered))))
    return ordered[rank - 1]


def _number(value: float) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


class Metrics:
    """Thread-safe counters fed by the engine thread and the request handlers; `gauges` gives the
    current values (name → (help, value)) read at each scrape, such as the queue length."""

    def __init__(self, gauges: Callable[[], dict[str, tuple[str, float]]] | None = None):
        self._lock = threading.Lock()
        self._gauges = gauges or (lambda: {})
        self.requests: Counter[tuple[str, str]] = Counter()  # (endpoint, outcome)
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.generated_tokens = 0
        self.drafted: Counter[str] = Counter()
        self.accepted: Counter[str] = Counter()
        self.drafted_at: Counter[int] = Counter()  # by draft position, from 1
        self.accepted_at: Counter[int] = Counter()
        self.steps = 0
        self.batch = Histogram(BATCH_BUCKETS)
        self.ttft = Histogram(TTFT_BUCKETS)
        self.speed = Histogram(SPEED_BUCKETS)
        self.completion = Histogram(COMPLETION_BUCKETS)
        self.recent: deque[float] = deque(maxlen=RECENT)

    def request(self, endpoint: str, outcome: str) -> None:
        """A request ended: completed, cancelled, rejected (503), invalid (400), unauthorized (401), failed (500)."""
        with self._lock:
            self.requests[(endpoint, outcome)] += 1

    def step(self, rows: int, drafts: Iterable[tuple[str | None, int, int]]) -> None:
        """One engine step: its batch size and each request's (drafter, drafted, accepted)."""
        with self._lock:
            self.steps += 1
            self.batch.observe(rows)
            for drafter, drafted, accepted in drafts:
                if not drafter or not drafted:
                    continue
                self.drafted[drafter] += drafted
                self.accepted[drafter] += accepted
                for position in range(1, drafted + 1):
                    self.drafted_at[position] += 1
                    if position <= accepted:
                        self.accepted_at[position] += 1

    def tokens(self, generated: int) -> None:
        with self._lock:
            self.generated_tokens += generated

    def finished(self, *, prompt: int, cached: int, ttft: float | None, speed: float | None, completion: float) -> None:
        """A request answered in full: its prompt, time to first token, decode speed, completion time."""
        with self._lock:
            self.prompt_tokens += prompt
            self.cached_tokens += cached
            if ttft is not None:
                self.ttft.observe(ttft)
            if speed is not None:
                self.speed.observe(speed)
            self.completion.observe(completion)
            self.recent.append(completion)

    def completion_summary(self) -> tuple[float, float]:
        """Mean and 95th percentile of recent completion times."""
        with self._lock:
            recent = list(self.recent)
        return (sum(recent) / len(recent) if recent else 0.0), percentile(recent, 0.95)

    def render(self) -> str:
        """The exposition text."""
        mean, p95 = self.completion_summary()
        gauges = self._gauges()
        with self._lock:
            out: list[str] = []

            def family(name: str, kind: str, help_text: str, lines: list[str]) -> None:
                out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines])

            family(
                "specrun_requests_total",
                "counter",
                "Requests by endpoint and outcome.",
                [
                    f'specrun_requests_total{{endpoint="{e}",outcome="{o}"}} {n}'
                    for (e, o), n in sorted(self.requests.items())
                ],
            )
            family(
                "specrun_prompt_tokens_total",
                "counter",
                "Prompt tokens of answered requests.",
                [f"specrun_prompt_tokens_total {self.prompt_tokens}"],
            )
            family(
                "specrun_prompt_tokens_cached_total",
                "counter",
                "Prompt tokens found in the cache instead of read.",
                [f"specrun_prompt_tokens_cached_total {self.cached_tokens}"],
            )
            family(
                "specrun_generated_tokens_total",
                "counter",
                "Tokens generated.",
                [f"specrun_generated_tokens_total {self.generated_tokens}"],
            )
            family(
                "specrun_draft_tokens_total",
                "counter",
                "Draft tokens verified.",
                [f"specrun_draft_tokens_total {sum(self.drafted.values())}"],
            )
            family(
                "specrun_draft_tokens_accepted_total",
                "counter",
                "Draft tokens accepted.",
                [f"specrun_draft_tokens_accepted_total {sum(self.accepted.values())}"],
            )
            family(
                "specrun_drafter_tokens_total",
                "counter",
                "Draft tokens verified, by drafter (ngram: prompt lookup; draft: the draft model).",
                [f'specrun_drafter_tokens_total{{drafter="{d}"}} {n}' for d, n in sorted(self.drafted.items())],
            )
            family(
                "specrun_drafter_tokens_accepted_total",
                "counter",
                "Draft tokens accepted, by drafter.",
                [
                    f'specrun_drafter_tokens_accepted_total{{drafter="{d}"}} {self.accepted[d]}'
                    for d in sorted(self.drafted)
                ],
            )
            family(
                "specrun_draft_position_tokens_total",
                "counter",
                "Draft tokens verified at each draft position (1: the first).",
                [
                    f'specrun_draft_position_tokens_total{{position="{p}"}} {n}'
                    for p, n in sorted(self.drafted_at.items())
                ],
            )
            family(
                "specrun_draft_position_accepted_total",
                "counter",
                "Draft tokens accepted at each draft position.",
                [
                    f'specrun_draft_position_accepted_total{{position="{p}"}} {self.accepted_at[p]}'
                    for p in sorted(self.drafted_at)
                ],
            )
            family(
                "specrun_steps_total",
                "counter",
                "Target passes (one batch each).",
                [f"specrun_steps_total {self.steps}"],
            )
            family(
                "specrun_batch_tokens", "histogram", "Tokens per target pass.", self.batch.lines("specrun_batch_tokens")
            )
            family(
                "specrun_time_to_first_token_seconds",
                "histogram",
                "From arrival to the first token.",
                self.ttft.lines("specrun_time_to_first_token_seconds"),
            )
            family(
                "specrun_decode_tokens_per_second",
                "histogram",
                "Tokens after the first over the time after the first, per request.",
                self.speed.lines("specrun_decode_tokens_per_second"),
            )
            family(
                "specrun_completion_seconds",
                "histogram",
                "From arrival to the last token.",
                self.completion.lines("specrun_completion_seconds"),
            )
            family(
                "specrun_completion_seconds_mean",
                "gauge",
                f"Mean completion time of the last {RECENT} requests.",
                [f"specrun_completion_seconds_mean {_number(mean)}"],
            )
            family(
                "specrun_completion_seconds_p95",
                "gauge",
                f"95th percentile of the completion time of the last {RECENT} requests.",
                [f"specrun_completion_seconds_p95 {_number(p95)}"],
            )
        for name, (help_text, value) in sorted(gauges.items()):
            kind = "counter" if name.endswith("_total") else "gauge"
            out.extend([f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name} {_number(value)}"])
        return "\n".join(out) + "\n"
