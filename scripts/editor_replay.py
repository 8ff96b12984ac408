"""Replay an editing session against FIM servers, as llama.vim would send it: a block of a source
file typed back line by line, a /infill request at each pause (the start of a new line, after its
indentation, and halfway through it), and a warm-up (`n_predict: 0`) whenever the chunks of other
files change. Each request goes to every server in turn, the order rotating, so a slow moment of
the machine falls on all alike. Writes every request's seconds and `timings` per server, and prints
per server the median and 90th percentile of the time to a completed suggestion and the share of
each prompt's tokens the server read again (timings.prompt_n / the prompt's tokens).

    python scripts/editor_replay.py OUT.json NAME=URL [NAME=URL ...] [--file F --lines A:B --extra F2,F3]

Requests as llama.vim's: `input_prefix` (the lines above the cursor, at most N_PREFIX), `prompt` (the
cursor's line so far), `input_suffix` (the rest of the line and at most N_SUFFIX lines below),
`input_extra` (chunks of CHUNK_LINES lines of the other files), `n_predict` 128, `n_indent`,
`top_k` 40, `top_p` 0.99, its samplers, `t_max_prompt_ms` 500, `t_max_predict_ms` 1000, its
`response_fields`. `temperature` 0 unless --temperature says otherwise (llama.vim sends none, which
leaves llama-server sampling at 0.8): the servers then write the same middles, so their times
compare.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
N_PREFIX, N_SUFFIX, CHUNK_LINES = 256, 64, 64
FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/predicted_n",
    "timings/predicted_ms",
    "tokens_cached",
    "tokens_evaluated",
    "truncated",
]


def post(url: str, body: dict, timeout: float) -> dict:
    request = urllib.request.Request(
        url.rstrip("/") + "/infill", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def chunks(paths: list[Path]) -> list[dict]:
    """The first CHUNK_LINES lines of each file, as llama.vim's ring buffer holds them."""
    out = []
    for path in paths:
        lines = path.read_text(encoding="utf-8").splitlines()
        out.append({"filename": str(path.relative_to(HERE)), "text": "\n".join(lines[:CHUNK_LINES]) + "\n", "time": 0})
    return out


def pauses(lines: list[str], start: int, end: int):
    """(buffer lines, cursor line index, text typed on it) at each pause while lines[start:end]
    are typed back into the file that lacks them."""
    for at in range(start, end):
        line = lines[at]
        indent = len(line) - len(line.lstrip())
        typed_points = [indent] + ([indent + (len(line) - indent) // 2] if len(line) - indent > 8 else [])
        for point in typed_points:
            buffer = lines[:at] + [line[:point]] + lines[end:]
            yield buffer, at, line[:point]


def request(buffer: list[str], at: int, typed: str, extra: list[dict], temperature: float) -> dict:
    """llama.vim's request for the cursor at the end of `typed` on line `at` of `buffer`."""
    blank = not typed.strip()
    prefix_lines = buffer[max(0, at - N_PREFIX) : at]
    suffix_lines = buffer[at + 1 : at + 1 + N_SUFFIX]
    body = {
        "input_prefix": "\n".join(prefix_lines) + "\n",
        "input_suffix": "\n" + "\n".join(suffix_lines) + "\n",
        "input_extra": extra,
        "prompt": "" if blank else typed,
        "n_predict": 128,
        "n_indent": 0 if blank else len(typed) - len(typed.lstrip()),
        "top_k": 40,
        "top_p": 0.99,
        "stream": False,
        "samplers": ["top_k", "top_p", "infill"],
        "cache_prompt": True,
        "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1000,
        "response_fields": FIELDS,
    }
    if temperature >= 0:
        body["temperature"] = temperature
    return body


def warm_up(extra: list[dict]) -> dict:
    return {
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": extra,
        "prompt": "",
        "n_predict": 0,
        "temperature": 0.0,
        "stream": False,
        "samplers": [],
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
    }


def summary(records: list[dict]) -> dict:
    times = sorted(r["seconds"] for r in records)
    shares = [r["prompt_n"] / r["prompt_tokens"] for r in records if r.get("prompt_tokens")]
    p90 = times[min(len(times) - 1, max(0, int(round(0.9 * len(times))) - 1))]
    return {
        "requests": len(times),
        "median_s": round(statistics.median(times), 3),
        "p90_s": round(p90, 3),
        "reread_share_median": round(statistics.median(shares), 4) if shares else None,
        "prompt_tokens_median": statistics.median(r["prompt_tokens"] for r in records) if records else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("servers", nargs="+", help="NAME=URL")
    parser.add_argument("--file", type=Path, default=HERE / "specrun/engine/kv_state.py")
    parser.add_argument("--lines", default="132,143", help="the block typed back: first,end (0-based, end excluded)")
    parser.add_argument("--extra", default="specrun/engine/llama.py,specrun/engine/text.py")
    parser.add_argument("--later-extra", default="specrun/engine/prompt_cache.py", help="a chunk added halfway")
    parser.add_argument("--temperature", type=float, default=0.0, help="-1: send none, as llama.vim")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    servers = dict(s.split("=", 1) for s in args.servers)
    lines = args.file.read_text(encoding="utf-8").splitlines()
    start, end = (int(x) for x in args.lines.split(","))
    extra = chunks([HERE / p for p in args.extra.split(",") if p])
    later = chunks([HERE / p for p in args.later_extra.split(",") if p])
    steps = list(pauses(lines, start, end))
    records: dict[str, list[dict]] = {name: [] for name in servers}
    warmups: dict[str, list[float]] = {name: [] for name in servers}
    names = list(servers)

    def each(body: dict, index: int, kind: str) -> None:
        order = names[index % len(names) :] + names[: index % len(names)]
        for name in order:
            began = time.perf_counter()
            answer = post(servers[name], body, args.timeout)
            seconds = time.perf_counter() - began
            if kind == "warm-up":
                warmups[name].append(round(seconds, 3))
                continue
            record = {
                "index": index,
                "seconds": round(seconds, 3),
                "prompt_n": answer.get("timings/prompt_n"),
                "prompt_ms": answer.get("timings/prompt_ms"),
                "predicted_n": answer.get("timings/predicted_n"),
                "predicted_ms": answer.get("timings/predicted_ms"),
                "prompt_tokens": answer.get("tokens_evaluated"),
                "content": answer.get("content", ""),
            }
            records[name].append(record)
            print(
                f"{name} #{index}: {seconds:.2f} s, read {record['prompt_n']} of {record['prompt_tokens']} prompt "
                f"tokens, wrote {record['predicted_n']}",
                flush=True,
            )

    each(warm_up(extra), 0, "warm-up")
    for index, (buffer, at, typed) in enumerate(steps):
        if index == len(steps) // 2 and later:
            extra = extra + later
            each(warm_up(extra), index, "warm-up")
        each(request(buffer, at, typed, extra, args.temperature), index, "request")
    # The first request reads the whole prompt cold on every server: reported, left out of the summary.
    result = {
        "command": " ".join(sys.argv),
        "requests": records,
        "warmups_s": warmups,
        "summary": {name: summary(recs[1:]) for name, recs in records.items()},
        "first_request_s": {name: recs[0]["seconds"] for name, recs in records.items() if recs},
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for name, row in result["summary"].items():
        print(
            f"{name}: median {row['median_s']} s, p90 {row['p90_s']} s, "
            f"re-read share {row['reread_share_median']}, prompt tokens {row['prompt_tokens_median']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
