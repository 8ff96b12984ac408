"""Load for `specrun bench --serve`: a burst of chat requests from concurrent HTTP clients against a
running server, what each client saw, and the figures of a run.

The workload mixes short and long answers and copy-heavy and free text: every chosen prompt twice,
once with the full answer budget and once with a quarter of it, shuffled by the seed. All requests
arrive together, each from its own client (one thread and connection each, stdlib HTTP, streaming),
submitted in workload order (each after the previous one was taken), so the server holds
`--parallel` of them in its batch and queues the rest, and the schedule decides who goes next.
Client-side times: time to first token (the first text), completion time (from sending to the
last event); the server's `timings` give decode speed and drafted and accepted tokens.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from urllib.parse import urlsplit

from .. import defaults
from .prompts import BenchPrompt

SHORT_SHARE = 4  # a short answer gets max_tokens // SHORT_SHARE
CPU_SHARE_WARN = 0.8
TIMEOUT_S = 3600.0


@dataclass(frozen=True)
class LoadRequest:
    """One request of the workload."""

    id: str
    category: str
    prompt: str
    system: str | None
    max_tokens: int
    seed: int


def workload(prompts: Sequence[BenchPrompt], max_tokens: int, seed: int) -> list[LoadRequest]:
    """Each prompt with a long and a short answer budget, in an order shuffled by `seed`."""
    items: list[tuple[str, BenchPrompt, int]] = []
    for p in prompts:
        items.append((f"{p.id}/long", p, max_tokens))
        items.append((f"{p.id}/short", p, max(1, max_tokens // SHORT_SHARE)))
    random.Random(seed).shuffle(items)
    return [LoadRequest(rid, p.category, p.prompt, p.system, n, seed + i) for i, (rid, p, n) in enumerate(items)]


@dataclass
class RequestOutcome:
    """What one client saw."""

    id: str
    category: str
    max_tokens: int
    status: int = 0
    ttft_s: float | None = None
    completion_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    decode_tokens_per_s: float | None = None
    draft_n: int = 0
    draft_n_accepted: int = 0
    finish_reason: str | None = None
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None and self.finish_reason is not None


def send(
    url: str,
    request: LoadRequest,
    temperature: float,
    *,
    api_key: str | None = None,
    submitted: threading.Event | None = None,
    variables: dict | None = None,
) -> RequestOutcome:
    """One streamed chat request; `submitted` is set once the server has taken it (its first event);
    `variables` go to the chat template as the request's chat_template_kwargs (e.g. enable_thinking)."""
    out = RequestOutcome(request.id, request.category, request.max_tokens)
    messages = ([{"role": "system", "content": request.system}] if request.system else []) + [
        {"role": "user", "content": request.prompt}
    ]
    body = json.dumps(
        {
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": temperature,
            "seed": request.seed,
            "stream": True,
            "return_tokens": True,
            **({"chat_template_kwargs": variables} if variables else {}),
        }
    ).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {api_key}"} if api_key else {})}
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)
    start = time.perf_counter()
    try:
        connection.request("POST", "/v1/chat/completions", body, headers)
        response = connection.getresponse()
        out.status = response.status
        if response.status != 200:
            out.error = response.read().decode("utf-8", "replace")
            return out
        _read_events(response, out, start, submitted)
    except (OSError, http.client.HTTPException, ValueError) as error:
        out.error = f"{type(error).__name__}: {error}"
    finally:
        if submitted is not None:
            submitted.set()
        connection.close()
        out.completion_s = time.perf_counter() - start
    return out


def _read_events(response, out: RequestOutcome, start: float, submitted: threading.Event | None) -> None:
    pieces: list[str] = []
    for raw in response:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data: "):
            continue
        if submitted is not None:
            submitted.set()
        data = line[len("data: ") :]
        if data == "[DONE]":
            break
        event = json.loads(data)
        if "error" in event:
            out.error = event["error"].get("message", "error")
            break
        choice = event["choices"][0]
        out.tokens.extend(choice.get("tokens", []))
        text = choice["delta"].get("content") or ""
        if text:
            if out.ttft_s is None:
                out.ttft_s = time.perf_counter() - start
            pieces.append(text)
        if choice.get("finish_reason"):
            out.finish_reason = choice["finish_reason"]
            usage, timings = event.get("usage") or {}, event.get("timings") or {}
            out.prompt_tokens = usage.get("prompt_tokens", 0)
            out.completion_tokens = usage.get("completion_tokens", 0)
            out.decode_tokens_per_s = timings.get("predicted_per_second")
            out.draft_n = timings.get("draft_n", 0)
            out.draft_n_accepted = timings.get("draft_n_accepted", 0)
    out.text = "".join(pieces)


def burst(
    url: str,
    requests: Sequence[LoadRequest],
    temperature: float,
    *,
    api_key: str | None = None,
    variables: dict | None = None,
) -> tuple[list[RequestOutcome], float]:
    """Send every request at once, each from its own client, submitted in order; returns the
    outcomes (in workload order) and the seconds from the first send to the last answer."""
    outcomes: list[RequestOutcome | None] = [None] * len(requests)
    taken = [threading.Event() for _ in requests]

    def client(i: int) -> None:
        if i > 0:
            taken[i - 1].wait()
        outcomes[i] = send(url, requests[i], temperature, api_key=api_key, submitted=taken[i], variables=variables)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(len(requests))]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [o for o in outcomes if o is not None], time.perf_counter() - start


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered), max(1, math.ceil(0.95 * len(ordered)))) - 1], 4)


def summary(outcomes: Sequence[RequestOutcome], makespan: float) -> dict:
    """A run's figures: throughput over the whole burst, and per-request times."""
    ok = [o for o in outcomes if o.ok]
    tokens = sum(o.completion_tokens for o in ok)
    drafted = sum(o.draft_n for o in ok)
    accepted = sum(o.draft_n_accepted for o in ok)
    completion = [o.completion_s for o in ok if o.completion_s is not None]
    ttft = [o.ttft_s for o in ok if o.ttft_s is not None]
    speeds = [o.decode_tokens_per_s for o in ok if o.decode_tokens_per_s]
    return {
        "requests": len(outcomes),
        "answered": len(ok),
        "failed": [{"id": o.id, "status": o.status, "error": o.error} for o in outcomes if not o.ok],
        "generated_tokens": tokens,
        "makespan_s": round(makespan, 4),
        "throughput_tokens_per_s": round(tokens / makespan, 3) if makespan > 0 else None,
        "ttft_mean_s": _mean(ttft),
        "ttft_p95_s": _p95(ttft),
        "completion_mean_s": _mean(completion),
        "completion_p95_s": _p95(completion),
        "decode_tokens_per_s_median": round(statistics.median(speeds), 3) if speeds else None,
        "drafted": drafted,
        "accepted": accepted,
        "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
    }


def mark_identical(runs: list[dict]) -> list[tuple[dict, dict, dict]]:
    """At temperature 0, compare each run's answers with plain decoding's at the same concurrency,
    schedule and repetition: `identical` is how many requests got the same tokens (None for plain
    itself). Returns the (run, outcome, plain outcome) that differ, for a closer look."""
    plain = {
        (r["concurrency"], r["schedule"], r["repetition"], r["temperature"]): r
        for r in runs
        if r["mode"] == defaults.OFF
    }
    differing = []
    for run in runs:
        base = plain.get((run["concurrency"], run["schedule"], run["repetition"], run["temperature"]))
        if run["mode"] == defaults.OFF or base is None or run["temperature"] != 0:
            run["identical"] = None
            continue
        theirs = {o["id"]: o for o in base["outcomes"]}
        run["identical"] = 0
        for outcome in run["outcomes"]:
            other = theirs.get(outcome["id"])
            if other is not None and (other["tokens"], other["text"]) == (outcome["tokens"], outcome["text"]):
                run["identical"] += 1
            elif other is not None:
                differing.append((run, outcome, other))
    return differing


def record(
    mode: str,
    schedule: str,
    concurrency: int,
    repetition: int,
    temperature: float,
    outcomes: list[RequestOutcome],
    makespan: float,
    cpu_share: float | None = None,
) -> dict:
    return {
        "mode": mode,
        "schedule": schedule,
        "concurrency": concurrency,
        "repetition": repetition,
        "temperature": temperature,
        **summary(outcomes, makespan),
        "cpu_share": cpu_share,
        "outcomes": [asdict(o) for o in outcomes],
    }


def warnings(runs: Sequence[dict], load_start: float | None, cpus: int, threads: int, on_gpu: bool) -> list[str]:
    """Signs that other processes competed for the CPU, which makes every figure unreliable:
    llama.cpp's threads wait for each other at every layer, so one descheduled thread stalls all."""
    out = []
    if load_start is not None and cpus and load_start >= 1.0 and load_start + threads > cpus:
        out.append(f"the load average was {load_start:.1f} on {cpus} CPUs when the bench started: the machine was busy")
    shares = [r["cpu_share"] for r in runs if r.get("cpu_share") is not None]
    if shares and not on_gpu and min(shares) < CPU_SHARE_WARN:
        out.append(
            f"a run got {min(shares):.0%} of the CPU time its {threads} threads needed: other processes competed for "
            "the CPU, so these timings are unreliable (rerun on an idle machine)"
        )
    return out


def table_rows(runs: list[dict]) -> tuple[list[str], list[list[str]]]:
    """The summary table: one line per run, with throughput against plain decoding's."""
    headers = [
        "parallel",
        "schedule",
        "mode",
        "tok/s",
        "vs plain",
        "completion mean s",
        "p95 s",
        "TTFT mean s",
        "p95 s",
        "decode tok/s",
        "accept",
        "identical",
    ]
    plain = {
        (r["concurrency"], r["schedule"], r["repetition"]): r["throughput_tokens_per_s"]
        for r in runs
        if r["mode"] == defaults.OFF
    }
    rows = []
    for r in runs:
        base = plain.get((r["concurrency"], r["schedule"], r["repetition"]))
        ratio = f"{r['throughput_tokens_per_s'] / base:.2f}×" if base and r["throughput_tokens_per_s"] else "—"
        identical = "—" if r.get("identical") is None else f"{r['identical']}/{r['answered']}"
        if r.get("near_ties") or r.get("violations"):
            identical += f" ({r.get('near_ties', 0)} near-ties, {r.get('violations', 0)} violations)"
        rows.append(
            [
                str(r["concurrency"]),
                r["schedule"],
                "plain" if r["mode"] == defaults.OFF else r["mode"],
                _fmt(r["throughput_tokens_per_s"], 1),
                ratio,
                _fmt(r["completion_mean_s"]),
                _fmt(r["completion_p95_s"]),
                _fmt(r["ttft_mean_s"]),
                _fmt(r["ttft_p95_s"]),
                _fmt(r["decode_tokens_per_s_median"], 1),
                "—"
                if r["acceptance_rate"] is None
                else f"{100 * r['acceptance_rate']:.0f}% ({r['accepted']}/{r['drafted']})",
                identical,
            ]
        )
    return headers, rows


def _fmt(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
