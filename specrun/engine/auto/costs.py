"""What decoding costs on this machine: a target pass by batch size, a draft token.

Speculation pays only where verifying K+1 tokens costs much less than K+1 single passes, and that
curve is a property of the hardware and build, not of the text (a CPU's batched kernels work in
tiles, so a larger pass can even cost less than a smaller one). Measuring it once lets `auto`
decide from its first step instead of learning the curve by trial.

A measurement is only worth keeping if the process had the machine to itself: timings taken while
other processes held the CPU, or while weights were read back from disk (paged out while idle),
are inflated many times over, and a curve cached from them misleads every later run. So every
layer is warmed before timing, each size is timed several times and its minimum kept (load only
ever adds time), and the measurement records how much CPU the process got and how many pages it
had to read (`Conditions`); `judge` says whether the curve may be kept.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

import numpy as np

from ... import defaults
from ..llama import Context
from ..segments import HeadSegment

CALIBRATION_SIZES = defaults.CALIBRATION_SIZES
CALIBRATION_REPS = defaults.CALIBRATION_REPS
MIN_CPU_SHARE = 0.8  # of the CPU time the timed passes needed: less means other processes competed
MIN_RATIO = 0.95  # a pass over n > 1 tokens may not cost less than this share of a single one
MIN_RATIO_OFFLOADED = 0.8  # on a GPU or over a link, where small passes cost alike and timings jitter
PREFILL_BATCH = 32  # draft tokens per timed catch-up pass
MAX_CALIBRATED = 64  # larger batches are extrapolated


def calibration_sizes(parallel: int = 1, limit: int | None = None) -> tuple[list[int], list[int]]:
    """Target batch sizes and draft pass sizes to time: small drafts and the edges of CPU tiles,
    and with several sequences decoded together, multiples of their number (up to MAX_CALIBRATED)."""
    verify = set(CALIBRATION_SIZES)
    draft = {1, PREFILL_BATCH}
    if parallel > 1:
        verify |= {48, 64, parallel, parallel + 1, 2 * parallel, 4 * parallel, 8 * parallel}
        draft |= {2, 4, parallel, 2 * parallel}
    top = min(MAX_CALIBRATED, limit) if limit is not None else MAX_CALIBRATED
    return sorted(s for s in verify if 1 <= s <= top), sorted(s for s in draft if 1 <= s <= top)


@dataclass(frozen=True)
class Conditions:
    """How a measurement went: the CPU its timed passes got, the pages it read back, the load."""

    cpu_share: float | None  # process CPU seconds over wall seconds × threads, while timing
    major_faults: int  # pages read from disk while timing (paged-out weights)
    load_average: float | None  # the 1-minute load average when timing began
    reps: int = CALIBRATION_REPS
    estimator: str = "min"
    measured_at: str = ""
    offloaded: bool = False  # layers ran on a GPU or an RPC worker, where a pass costs about the same at any small size


@dataclass
class DecodeCosts:
    """Seconds of a target pass by batch size, and of a draft-model pass by its rows (one row: a
    draft token; PREFILL_BATCH rows: a cache catching up); how they were measured."""

    verify_s: dict[int, float]
    draft_token_s: float | None = None
    conditions: Conditions | None = field(default=None, compare=False)
    draft_prefill_token_s: float | None = None  # per token of a draft pass over PREFILL_BATCH
    draft_s: dict[int, float] | None = None  # draft pass seconds by rows, every size timed
    head_s: dict[int, float] | None = None  # the head (MTP, assistant, EAGLE-3, DFlash): pass seconds by rows

    @property
    def head_pass_s(self) -> float | None:
        """The head's smallest pass: one row (a DFlash head: its last token and one mask)."""
        return self.head_s[min(self.head_s)] if self.head_s else None

    def draft_passes(self) -> dict[int, float]:
        """Draft pass seconds by rows, from what was timed."""
        if self.draft_s:
            return dict(self.draft_s)
        out = {1: self.draft_token_s} if self.draft_token_s else {}
        if self.draft_prefill_token_s:
            out[PREFILL_BATCH] = PREFILL_BATCH * self.draft_prefill_token_s
        return out

    def to_dict(self) -> dict:
        data = {
            "verify_s": {str(k): v for k, v in self.verify_s.items()},
            "draft_token_s": self.draft_token_s,
            "draft_prefill_token_s": self.draft_prefill_token_s,
            "draft_s": {str(k): v for k, v in self.draft_s.items()} if self.draft_s else None,
            # the head's passes, under the key saved cost caches already use
            "mtp_s": {str(k): v for k, v in self.head_s.items()} if self.head_s else None,
        }
        if self.conditions is not None:
            data["conditions"] = asdict(self.conditions)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> DecodeCosts:
        conditions = data.get("conditions")
        draft, head = data.get("draft_s"), data.get("mtp_s")
        return cls(
            {int(k): float(v) for k, v in data["verify_s"].items()},
            data.get("draft_token_s"),
            Conditions(**conditions) if conditions else None,
            data.get("draft_prefill_token_s"),
            {int(k): float(v) for k, v in draft.items()} if draft else None,
            {int(k): float(v) for k, v in head.items()} if head else None,
        )


def judge(costs: DecodeCosts, threads: int = 1) -> list[str]:
    """Why these costs must not be kept and reused (empty: they may). Costs with no record of how
    they were measured are not trusted either."""
    reasons = []
    c = costs.conditions
    if c is None:
        reasons.append("no record of how they were measured")
    else:
        if c.cpu_share is not None and c.cpu_share < MIN_CPU_SHARE:
            reasons.append(
                f"the process got {c.cpu_share:.0%} of the CPU its {threads} threads needed (other processes competed)"
            )
        if c.major_faults:
            reasons.append(f"{c.major_faults} pages were read back from disk while timing (weights had been paged out)")
    single = costs.verify_s.get(1)
    if not single or single <= 0:
        reasons.append("no single-token pass was timed")
    else:
        floor = MIN_RATIO_OFFLOADED if c is not None and c.offloaded else MIN_RATIO
        cheap = [n for n, s in costs.verify_s.items() if n > 1 and s < floor * single]
        if cheap:
            reasons.append(f"a pass over {min(cheap)} tokens timed cheaper than a single token")
        if costs.draft_token_s is not None and costs.draft_token_s > single:
            reasons.append("a draft token timed slower than a target pass")
    return reasons


class Meter:
    """Process CPU time and major page faults over a stretch of wall time."""

    def __init__(self, threads: int, clock: Callable[[], float] = time.perf_counter):
        self.threads = max(1, threads)
        self.clock = clock
        self.wall = 0.0
        self.cpu = 0.0
        self.faults = 0

    def __enter__(self) -> Meter:
        self._start = (self.clock(), _cpu_seconds(), _major_faults())
        return self

    def __exit__(self, *exc) -> None:
        wall, cpu, faults = self._start
        self.wall += self.clock() - wall
        self.cpu += _cpu_seconds() - cpu
        self.faults += _major_faults() - faults

    @property
    def cpu_share(self) -> float | None:
        return self.cpu / (self.wall * self.threads) if self.wall > 0 else None


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _major_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_majflt


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def time_batches(
    ctx: Context, tokens: Sequence[int], sizes: Sequence[int], reps: int, meter: Meter | None = None, seq: int = 0
) -> dict[int, float]:
    """Fastest seconds of a pass over a batch of each size on sequence `seq`, on top of `tokens` as context.

    Every size is decoded once untimed first, so each weight has been read and each kernel used.
    Sizes are interleaved within each repetition and the cache is trimmed back after every pass,
    so each one sees the same context length. The cache is left holding `tokens`.
    """

    def feed(items: Sequence[int], last: bool) -> None:
        ctx.feed(seq, list(items), ("all" if len(items) > 1 else "last") if last else "none")

    return _time_passes(ctx, seq, feed, tokens, sizes, reps, meter)


def time_head(
    head: Context, tokens: Sequence[int], sizes: Sequence[int], reps: int, meter: Meter | None = None, seq: int = 0
) -> dict[int, float]:
    """Fastest seconds of a head pass over each number of rows, as `time_batches` times a model's
    passes: a head pass costs the same whatever hidden rows it is given, so zeros stand in."""
    spec = head.model.feature_head
    if spec is not None and spec.drafts_blocks:
        return _time_blocks(head, tokens, sizes, reps, meter, seq)
    zeros = np.zeros(head.model.n_embd if spec is not None else head.model.n_embd_out, dtype=np.float32)
    if head.other is not None and spec is None:
        return _time_assistant(head, seq, tokens[-1], zeros, reps, meter) if 1 in sizes else {}

    def feed(items: Sequence[int], last: bool) -> None:
        head.feed_head([HeadSegment(seq, list(items), [zeros] * len(items), last)])

    return _time_passes(head, seq, feed, tokens, sizes, reps, meter)


def _time_blocks(
    head: Context, tokens: Sequence[int], sizes: Sequence[int], reps: int, meter: Meter | None, seq: int
) -> dict[int, float]:
    """A DFlash head's block passes by rows, over the calibration text injected as its cache (a
    pass costs the same whatever features were injected, so zeros stand in)."""
    spec = head.model.feature_head
    zeros = np.zeros(head.other.feature_width, dtype=np.float32)

    def feed(items: Sequence[int], last: bool) -> None:
        if last:
            head.block([(seq, [items[0]] + [spec.mask] * (len(items) - 1))])
        else:
            head.inject([HeadSegment(seq, list(items), [zeros] * len(items))])

    fits = {size for size in sizes if 2 <= size <= spec.block}
    return _time_passes(head, seq, feed, tokens, sorted(fits | set(block_sizes(spec.block))), reps, meter)


def block_sizes(block: int) -> list[int]:
    """The block rows a DFlash head's cost curve is measured at: the smallest draft's, the
    head's whole block, and one between (a block is never longer than the head's: a DFlash2
    selector cannot take one; more rows, several sequences' blocks, are read off the curve)."""
    return sorted({2, max(2, (block + 1) // 2), max(2, block)})


def _time_assistant(
    head: Context, seq: int, token: int, row: np.ndarray, reps: int, meter: Meter | None
) -> dict[int, float]:
    """A Gemma 4 assistant drafts one row per sequence a pass, at the position after the target's
    cache (which holds the calibration text): its one-row pass, the fastest of `reps` after one
    untimed."""
    entry = [(seq, len(head.other.tokens[seq]), token, row)]
    head.head_rows(entry)  # warms up
    return {1: min(_timed(lambda: head.head_rows(entry), meter) for _ in range(reps))}


def _timed(call: Callable[[], object], meter: Meter | None) -> float:
    """Seconds `call` takes, metered when a meter is given."""
    start = time.perf_counter()
    if meter is not None:
        with meter:
            call()
    else:
        call()
    return time.perf_counter() - start


def _time_passes(
    ctx: Context,
    seq: int,
    feed: Callable[[Sequence[int], bool], None],
    tokens: Sequence[int],
    sizes: Sequence[int],
    reps: int,
    meter: Meter | None,
) -> dict[int, float]:
    """The timing loop of both: `feed(items, last)` appends items to `seq` (`last`: with outputs)."""
    ctx.trim(seq, 0)
    feed(tokens, False)
    base = len(ctx.tokens[seq])
    filler = list(tokens) * (max(sizes) // max(len(tokens), 1) + 1)
    times: dict[int, list[float]] = {size: [] for size in sizes}
    for rep in range(reps + 1):
        for size in sizes:
            seconds = _timed(lambda size=size: feed(filler[:size], True), meter if rep else None)
            if rep:  # the first round warms up
                times[size].append(seconds)
            ctx.trim(seq, base)
    return {size: min(values) for size, values in times.items()}


def measure(
    target: Context,
    draft: Context | None,
    tokens: Sequence[int],
    sizes: Sequence[int] = CALIBRATION_SIZES,
    reps: int = CALIBRATION_REPS,
    threads: int = 1,
    offloaded: bool = False,
    *,
    draft_sizes: Sequence[int] = (1, PREFILL_BATCH),
    seq: int = 0,
    head: Context | None = None,
) -> DecodeCosts:
    """Time the target by batch size and the draft by pass rows, on sequence `seq` of each context
    (emptied afterwards). The result records the conditions (see `judge`). With layers `offloaded`
    to a GPU or an RPC worker the work happens elsewhere, so this process's CPU share says nothing
    and is not recorded."""
    sizes = [s for s in sizes if len(tokens) + s <= target.n_ctx]
    meter = Meter(threads)
    load = _load_average()
    try:
        verify = time_batches(target, tokens, sizes, reps, meter, seq)
        draft_tokens = [t for t in tokens if t < draft.model.n_vocab] if draft is not None else []
        fits = [s for s in draft_sizes if len(draft_tokens) + s <= (draft.n_ctx if draft is not None else 0)]
        draft_times = time_batches(draft, draft_tokens, fits, reps, meter, seq) if draft_tokens and fits else {}
        head_fits = [s for s in draft_sizes if len(tokens) + s <= head.n_ctx] if head is not None else []
        head_times = time_head(head, tokens, head_fits, reps, meter, seq) if head_fits else {}
    finally:
        for ctx in (target, draft, head):
            if ctx is not None:
                ctx.clear(seq)
    conditions = Conditions(
        cpu_share=None if meter.cpu_share is None or offloaded else round(meter.cpu_share, 3),
        major_faults=meter.faults,
        load_average=load,
        reps=reps,
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        offloaded=offloaded,
    )
    prefill = draft_times[PREFILL_BATCH] / PREFILL_BATCH if PREFILL_BATCH in draft_times else None
    return DecodeCosts(verify, draft_times.get(1), conditions, prefill, draft_times or None, head_times or None)
