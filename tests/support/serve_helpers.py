"""Helpers for the server tests: a gate that lets the engine thread take steps only when a test says
so, a server on a free loopback port serving tiny models from a thread of this process, and
`specrun serve` as a process."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from cli_helpers import popen

from specrun.engine.auto.costs import DecodeCosts
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig
from specrun.serve.server import BackgroundServer
from specrun.serve.service import ServeOptions, Service

WAIT = 60.0  # seconds a test waits for a state before failing (never reached when things work)

# Fixed costs for tests that must not depend on timing: a pass costs the same whatever its size
# (as on a GPU), so under auto every draft that might be accepted pays.
FLAT_COSTS = {n: 0.01 for n in (1, 2, 4, 8, 16, 32, 64)}


def costs_of(verify: dict[int, float], draft: dict[int, float] | None = None) -> DecodeCosts:
    """Batch costs to start a server from instead of measuring them."""
    return DecodeCosts(dict(verify), (draft or {}).get(1), None, None, dict(draft) if draft else None)


class StepGate:
    """The worker's `before_step`: blocks the engine thread until the test allows a step (or opens
    the gate for good), and counts the steps it let through."""

    def __init__(self, open_: bool = False):
        self._cond = threading.Condition()
        self._open = open_
        self._permits = 0
        self.passed = 0

    def __call__(self) -> None:
        with self._cond:
            self._cond.wait_for(lambda: self._open or self._permits > 0)
            if not self._open:
                self._permits -= 1
            self.passed += 1
            self._cond.notify_all()

    def allow(self, n: int = 1) -> None:
        with self._cond:
            self._permits += n
            self._cond.notify_all()

    def open(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()


def load_pair(target: Path, draft: Path | None, ctx_size: int = 512, flash_attn: str = "auto") -> Pair:
    return Pair(PairConfig(target, draft, ctx_size=ctx_size, threads=1, flash_attn=flash_attn))


@contextmanager
def served(
    pair: Pair,
    *,
    gate: StepGate | None = None,
    costs: dict | None = None,
    draft_costs: dict | None = None,
    host: str = "127.0.0.1",
    warn=None,
    **options,
) -> Iterator[BackgroundServer]:
    """A running server for `pair` on `host` (ServeOptions fields as keywords; `base` defaults to
    greedy-friendly settings; `warn` receives what the server logs); stopped, with its gate
    opened, on exit."""
    options.setdefault("base", GenerationSettings())
    seeded = costs_of(costs, draft_costs) if costs is not None else None
    service = Service(pair, ServeOptions(**options), costs=seeded, before_step=gate, warn=warn)
    server = BackgroundServer(service, host=host)
    try:
        yield server
    finally:
        if gate is not None:
            gate.open()
        server.stop()
        service.close()


def with_temperature(settings: GenerationSettings, temperature: float) -> GenerationSettings:
    return replace(settings, sampling=replace(settings.sampling, temperature=temperature))


def start(*args: str) -> tuple[subprocess.Popen, str, list[str]]:
    """Start `specrun serve ARGS --port 0`; return it, its URL, and the stderr lines before it listened."""
    process = popen(
        "serve",
        *args,
        "--port",
        "0",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "listening on" in line:
            url = line.split("listening on ")[1].split(" ")[0]
            return process, url.replace("0.0.0.0", "127.0.0.1"), lines
    process.wait(WAIT)
    raise AssertionError("".join(lines))


def stop(process: subprocess.Popen, sig: int) -> tuple[int, str]:
    """Send `sig`; the exit code and the rest of stderr."""
    process.send_signal(sig)
    err = process.stderr.read()
    return process.wait(WAIT), err


def alone_and_together(url: str, prompts: list[str], max_tokens: int = 24) -> tuple[list[str], list[str]]:
    """Greedy completions of `prompts` from the server at `url`, one after another and then all at
    once (each from its own thread): what a batch must not change."""
    import openai

    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=WAIT)

    def complete(prompt: str) -> str:
        return (
            client.completions.create(model="tiny", prompt=prompt, max_tokens=max_tokens, temperature=0).choices[0].text
        )

    alone = [complete(p) for p in prompts]
    together: dict[int, str] = {}
    threads = [
        threading.Thread(target=lambda i=i, p=p: together.__setitem__(i, complete(p))) for i, p in enumerate(prompts)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    return alone, [together.get(i, "") for i in range(len(prompts))]
