"""Counters and timers of one generation, and the figures users see (JSON-ready)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Stats:
    """Everything measured during one generation. Times in seconds."""

    prompt_tokens: int = 0
    generated_tokens: int = 0
    steps: int = 0  # target verification passes after the first token
    drafted: int = 0
    accepted: int = 0
    forced_tokens: int = 0  # tokens a constraint forced ahead of the drafts (certain, not in drafted)
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_by_position: list[int] = field(default_factory=list)
    prefill_time: float = 0.0
    time_to_first_token: float = 0.0
    total_time: float = 0.0
    draft_time: float = 0.0
    verify_time: float = 0.0
    llama_decode_time: float = 0.0  # inside llama_decode after the prefill
    host_time: float = 0.0  # outside llama_decode in the steps after the prefill: the Python side of decoding
    cpu_time: float = 0.0  # CPU seconds this process used during the generation, all threads
    major_faults: int = 0  # pages read back from disk during the generation (weights paged out while idle)
    stop_reason: str = ""
    by_drafter: dict = field(default_factory=dict)  # name → {"steps", "drafted", "accepted"}; "plain" for K=0
    policy: dict | None = None  # the auto controller's summary (choices, estimates)

    def record_step(
        self, drafted: int, accepted: int, draft_time: float, verify_time: float, drafter: str | None = None
    ) -> None:
        """Count one draft → verify step."""
        self.steps += 1
        counts = self.by_drafter.setdefault(drafter or "plain", {"steps": 0, "drafted": 0, "accepted": 0})
        counts["steps"] += 1
        counts["drafted"] += drafted
        counts["accepted"] += accepted
        self.drafted += drafted
        self.accepted += accepted
        self.draft_time += draft_time
        self.verify_time += verify_time
        while len(self.drafted_by_position) < drafted:
            self.drafted_by_position.append(0)
            self.accepted_by_position.append(0)
        for i in range(drafted):
            self.drafted_by_position[i] += 1
            if i < accepted:
                self.accepted_by_position[i] += 1

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def decode_tokens_per_second(self) -> float | None:
        """Tokens after the first, over the time after the first: the steady-state speed."""
        span = self.total_time - self.time_to_first_token
        return (self.generated_tokens - 1) / span if self.generated_tokens > 1 and span > 0 else None

    def decode_rate_at(self, elapsed: float) -> float:
        """The steady speed while generation is still running, `elapsed` seconds after it began."""
        span = elapsed - self.time_to_first_token
        return (
            (self.generated_tokens - 1) / span
            if self.generated_tokens > 1 and self.time_to_first_token and span > 0
            else 0.0
        )

    def steps_by_drafter(self) -> str:
        """How many steps each drafter (or plain decoding) got, most first: "plain 75 steps, ngram 36 steps"."""
        ranked = sorted(self.by_drafter.items(), key=lambda item: -item[1]["steps"])
        return ", ".join(f"{name} {counts['steps']} steps" for name, counts in ranked)

    @property
    def mean_tokens_per_step(self) -> float | None:
        return (self.generated_tokens - 1) / self.steps if self.steps else None

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_position, self.drafted_by_position)]

    @property
    def host_ms_per_step(self) -> float | None:
        """Milliseconds of host work (outside llama_decode) per step after the prefill."""
        return 1000.0 * self.host_time / self.steps if self.steps else None

    @property
    def overhead_fraction(self) -> float | None:
        """Share of the post-prefill time spent outside llama_decode (Python, sampling, bookkeeping)."""
        span = self.total_time - self.prefill_time
        return max(0.0, 1.0 - self.llama_decode_time / span) if span > 0 else None

    def to_dict(self) -> dict:
        """The statistics as documented in docs/run.md's JSON schema."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "time_to_first_token_s": round(self.time_to_first_token, 6),
            "decode_tokens_per_s": _round(self.decode_tokens_per_second),
            "total_time_s": round(self.total_time, 6),
            "prefill_time_s": round(self.prefill_time, 6),
            "steps": self.steps,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "forced_tokens": self.forced_tokens,
            "acceptance_rate": _round(self.acceptance_rate),
            "mean_tokens_per_step": _round(self.mean_tokens_per_step),
            "acceptance_by_position": [round(x, 4) for x in self.acceptance_by_position],
            "drafted_by_position": list(self.drafted_by_position),
            "accepted_by_position": list(self.accepted_by_position),
            "draft_time_s": round(self.draft_time, 6),
            "verify_time_s": round(self.verify_time, 6),
            "llama_decode_time_s": round(self.llama_decode_time, 6),
            "overhead_fraction": _round(self.overhead_fraction),
            "host_ms_per_step": _round(self.host_ms_per_step, 3),
            "cpu_time_s": round(self.cpu_time, 6),
            "major_faults": self.major_faults,
            "stop_reason": self.stop_reason,
            "by_drafter": {name: dict(c) for name, c in self.by_drafter.items()},
            "policy": self.policy,
        }


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
