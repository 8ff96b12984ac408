"""Structured output against an OpenAI-compatible server: every prompt of a bench file that carries a
JSON schema, sent as a chat request with `response_format` `json_schema`, one at a time, timed by
the client. The same client and requests serve specrun's server and llama.cpp's llama-server, so
their throughputs compare:

    specrun serve --port 8080
    python scripts/structured_workload.py --url http://127.0.0.1:8080 --label "specrun auto" --out specrun.json

    llama-server -m TARGET.gguf --port 8081
    python scripts/structured_workload.py --url http://127.0.0.1:8081 --label "llama-server" --out llama.json

First `--warmup` requests of a small schema prompt that is not measured (the server loads what a
first constrained request needs), then every prompt `--repeats` times. Keep one repeat to compare
servers on answers they have not seen: a repeated request finds its own earlier answer in a
server's caches (specrun's lookup pool drafts from it). Reported: the summed wall time of the
measured requests (request to last byte), and their completion tokens over it (the servers may
write the same JSON in different numbers of tokens: llama-server's grammar lets the model indent,
specrun's JSON has no whitespace). Every answer is parsed and validated against its schema (with
`jsonschema` where installed); one that fails is counted and named, one cut by `--max-tokens`
before it closed is counted as cut off, not judged. The table goes to stdout;
`--out` writes the records as JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

PROMPTS = Path(__file__).resolve().parent.parent / "specrun" / "bench" / "data" / "structured-output.jsonl"


def schema_prompts(path: Path) -> list[dict]:
    """The prompts of a bench JSONL file that carry a `schema`."""
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            if isinstance(item.get("schema"), dict):
                found.append(item)
    return found


def request_body(item: dict, max_tokens: int) -> dict:
    messages = ([{"role": "system", "content": item["system"]}] if item.get("system") else []) + [
        {"role": "user", "content": item["prompt"]}
    ]
    return {
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": item["schema"], "strict": True},
        },
    }


def post(url: str, body: dict, timeout: float) -> tuple[dict, float]:
    """The JSON answer to one chat request and its wall time."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    data = json.dumps(body).encode()
    started = time.perf_counter()
    try:
        connection.request("POST", "/v1/chat/completions", data, {"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
    finally:
        connection.close()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise SystemExit(f"structured_workload: HTTP {response.status}: {payload[:300]!r}")
    return json.loads(payload), elapsed


def valid(text: str, schema: dict) -> str | None:
    """None when `text` is JSON that validates against `schema`, else why not."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return f"not JSON: {error.msg}"
    try:
        import jsonschema
    except ImportError:
        return None
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as error:
        return f"invalid: {error.message}"
    return None


WARMUP = {
    "id": "warm-up",
    "prompt": "Greet the user as JSON.",
    "schema": {
        "type": "object",
        "properties": {"greeting": {"type": "string"}},
        "required": ["greeting"],
        "additionalProperties": False,
    },
}


def run(url: str, prompts: Sequence[dict], *, max_tokens: int, warmup: int, repeats: int, timeout: float) -> dict:
    records = []
    for _ in range(warmup):
        post(url, request_body(WARMUP, 32), timeout)
    for item in prompts:
        body = request_body(item, max_tokens)
        for repeat in range(repeats):
            answer, seconds = post(url, body, timeout)
            choice = answer["choices"][0]
            text = choice["message"].get("content") or ""
            tokens = int(answer.get("usage", {}).get("completion_tokens", 0))
            timings = answer.get("timings") or {}
            cut = choice.get("finish_reason") == "length"
            problem = None if cut else valid(text, item["schema"])
            records.append(
                {
                    "id": item.get("id"),
                    "repeat": repeat,
                    "seconds": seconds,
                    "tokens": tokens,
                    "decode_tokens": timings.get("predicted_n"),
                    "decode_ms": timings.get("predicted_ms"),
                    "problem": problem,
                    "cut_off": cut,
                }
            )
            print(
                f"{item.get('id')} #{repeat}: {tokens} tokens in {seconds:.2f} s"
                + (f" {problem}" if problem else " (cut off)" if cut else ""),
                file=sys.stderr,
            )
    tokens = sum(r["tokens"] for r in records)
    seconds = sum(r["seconds"] for r in records)
    timed = [r for r in records if r["decode_tokens"] and r["decode_ms"]]
    decode_ms = sum(r["decode_ms"] for r in timed)
    return {
        "records": records,
        "tokens": tokens,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds if seconds else None,
        # as the server's own `timings` report the decoding after the first token (where it reports them)
        "decode_tokens_per_s": 1000 * sum(r["decode_tokens"] for r in timed) / decode_ms if decode_ms else None,
        "invalid": [r["id"] for r in records if r["problem"]],
        "cut_off": [r["id"] for r in records if r["cut_off"]],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="structured_workload", description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--label", default="server", help="the name of this run in the table")
    parser.add_argument("--prompts", type=Path, default=PROMPTS, help="a bench JSONL file; its schema prompts are sent")
    parser.add_argument("--max-tokens", type=int, default=256, help="the most tokens an answer may have")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured requests of a small schema prompt first")
    parser.add_argument("--repeats", type=int, default=1, help="measured requests per prompt")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds one request may take")
    parser.add_argument("--out", type=Path, help="write the records and totals as JSON here")
    args = parser.parse_args(argv)
    prompts = schema_prompts(args.prompts)
    if not prompts:
        print(f"structured_workload: {args.prompts} holds no prompt with a schema", file=sys.stderr)
        return 2
    result = run(
        args.url, prompts, max_tokens=args.max_tokens, warmup=args.warmup, repeats=args.repeats, timeout=args.timeout
    )
    result["label"] = args.label
    rate, decode = result["tokens_per_s"], result["decode_tokens_per_s"]
    decoding = f"{decode:.1f} tok/s" if decode else "—"
    print(
        f"| {args.label} | {len(prompts)} prompts × {args.repeats} | {result['seconds']:.2f} s | "
        f"{result['tokens']} tokens | {rate:.1f} tok/s | {decoding} | {len(result['invalid'])} invalid, "
        f"{len(result['cut_off'])} cut off |"
    )
    if args.out:
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 1 if result["invalid"] else 0


if __name__ == "__main__":
    sys.exit(main())
