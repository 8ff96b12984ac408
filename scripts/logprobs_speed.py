"""What log-probabilities cost `specrun serve`: a long prompt scored with `echo` against the same
prompt only read, and answers with `logprobs` on against off (same prompts, greedy, interleaved),
through the HTTP API of a running server.

    python scripts/logprobs_speed.py URL [--prompt-tokens 2000] [--repeats 3] [--max-tokens 128]

Prompt scoring must come within 1.2× of the read alone; answers with logprobs within 5% of the
tokens per second without. Each scored prompt starts with a fresh number, so no cache serves it.
The answers use the held-out prompts of `specrun bench` (chat, as its code-editing prompts are).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import httpx

HELDOUT = Path(__file__).resolve().parents[1] / "specrun" / "bench" / "data" / "heldout" / "code-editing.jsonl"


def timed(client: httpx.Client, path: str, body: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    response = client.post(path, json=body)
    response.raise_for_status()
    return time.perf_counter() - start, response.json()


def long_prompt(client: httpx.Client, tokens: int, salt: int) -> list[int]:
    text = HELDOUT.read_text() * 4
    ids = client.post("/tokenize", json={"prompt": f"{salt}: " + text, "add_special_tokens": False}).json()["tokens"]
    return ids[:tokens]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--prompt-tokens", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    client = httpx.Client(base_url=args.url, timeout=3600)
    read, scored = [], []
    for i in range(args.repeats):
        for echo in (False, True) if i % 2 == 0 else (True, False):
            body = {"prompt": long_prompt(client, args.prompt_tokens, 1000 * i + echo), "max_tokens": 0}
            if echo:
                body |= {"echo": True, "logprobs": 1}
            seconds, _ = timed(client, "/v1/completions", body)
            (scored if echo else read).append(seconds)
    prompts = [json.loads(line)["prompt"] for line in HELDOUT.read_text().splitlines() if line.strip()]
    rates: dict[bool, list[float]] = {False: [], True: []}
    for i in range(args.repeats):
        for prompt in prompts:
            for logprobs in (False, True) if i % 2 == 0 else (True, False):
                body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": args.max_tokens}
                body |= {"temperature": 0, "logprobs": logprobs}
                _, answer = timed(client, "/v1/chat/completions", body)
                timings = answer["timings"]
                rates[logprobs].append(timings["predicted_n"] / (timings["predicted_ms"] / 1000))
    read_s, scored_s = statistics.median(read), statistics.median(scored)
    off, on = statistics.median(rates[False]), statistics.median(rates[True])
    ratio = scored_s / read_s
    print(f"prompt of {args.prompt_tokens} tokens: read {read_s:.2f} s, scored {scored_s:.2f} s ({ratio:.2f}×)")
    print(f"answers: {off:.2f} tokens/s without logprobs, {on:.2f} with ({(1 - on / off) * 100:+.1f}% lost)")


if __name__ == "__main__":
    main()
