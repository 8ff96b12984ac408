"""What a target pass costs deep into a context, with llama.cpp's fused attention kernel and
without: passes of 1, 6 and 20 rows (a decoded token, a verification batch of K = 5, the new
tokens of an agent's next turn) at each depth, and the prefill rate between depths.

    python scripts/attention_depth.py [MODEL] [--depths 0,2048,8192] [--threads 0] [--reps 3]

MODEL defaults to the default pair's target. Each setting gets its own context, filled with the
same tokens, after one untimed pass of each size; each pass is timed REPS times and the fastest
kept (load only ever adds time), then cut away again. Prints markdown tables: docs/benchmarks.md,
"Attention on the CPU".
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from specrun import defaults
from specrun.engine.lib import init_backend
from specrun.engine.llama import Context
from specrun.engine.model import Model
from specrun.engine.segments import Segment
from specrun.models.registry import load_registry

ROWS = (1, 6, 20)


def default_target() -> str:
    from specrun.models.fetch import resolve_models

    return str(resolve_models(None, None, None, load_registry()).target)


def measure(model: Model, fused: bool, depths: list[int], threads: int, reps: int) -> dict:
    """Pass milliseconds by (depth, rows), and prefill tokens per second into each depth."""
    ctx = Context(model, n_ctx=max(depths) + max(ROWS) + 64, n_threads=threads, fused_attention=fused)
    tokens = [int(t) for t in np.random.default_rng(0).integers(100, 20000, size=max(depths) + max(ROWS))]
    out: dict = {"pass_ms": {}, "prefill": {}}
    for rows in ROWS:  # every weight read once and every graph built before anything is timed
        ctx.decode([Segment(0, tokens[:rows], "all")])
        ctx.trim(0, 0)
    filled = 0
    for depth in depths:
        start, before = time.perf_counter(), filled
        while filled < depth:
            n = min(ctx.n_batch, depth - filled)
            ctx.decode([Segment(0, tokens[filled : filled + n], "none")])
            filled += n
        if depth > before:
            out["prefill"][before, depth] = (depth - before) / (time.perf_counter() - start)
        for rows in ROWS:
            best = float("inf")
            for _ in range(reps):
                begun = time.perf_counter()
                ctx.decode([Segment(0, tokens[depth : depth + rows], "all")])
                best = min(best, time.perf_counter() - begun)
                ctx.trim(0, depth)
            out["pass_ms"][depth, rows] = 1000 * best
            print(f"fused={fused} depth {depth} rows {rows}: {1000 * best:.0f} ms", flush=True)
    ctx.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?")
    parser.add_argument("--depths", default="0,2048,8192")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    init_backend()
    depths = sorted({int(d) for d in args.depths.split(",")})
    model = Model(args.model or default_target())
    threads = args.threads or defaults.threads()
    runs = {fused: measure(model, fused, depths, threads, args.reps) for fused in (False, True)}
    print("\n| depth | rows | unfused (ms) | fused (ms) | fused / unfused |")
    print("|---:|---:|---:|---:|---:|")
    for depth in depths:
        for rows in ROWS:
            off, on = runs[False]["pass_ms"][depth, rows], runs[True]["pass_ms"][depth, rows]
            print(f"| {depth} | {rows} | {off:.0f} | {on:.0f} | {on / off:.2f}× |")
    print("\n| prefill | unfused (tokens/s) | fused (tokens/s) |")
    print("|---|---:|---:|")
    for span, rate in runs[False]["prefill"].items():
        print(f"| {span[0]} → {span[1]} | {rate:.1f} | {runs[True]['prefill'][span]:.1f} |")


if __name__ == "__main__":
    main()
