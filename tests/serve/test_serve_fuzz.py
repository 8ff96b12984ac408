"""Requests generated from the server's own OpenAPI document (schemathesis), valid and invalid, on
a real server on loopback serving a tiny model: every one is answered with a 2xx or a 4xx, never a
5xx and never a hang, and the server answers a normal request afterwards.

The document bounds max_tokens by the context, and the server runs with a small one, so valid
requests stay short; generation is derandomized, so a run is the same on every machine.
"""

from __future__ import annotations

from collections import Counter

import httpx
import pytest
import requests
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402 - after the skip: hypothesis comes with schemathesis

CTX = 64
EXAMPLES = {"/v1/chat/completions": 150, "/v1/completions": 150}  # per generation mode; others: what their space holds
OTHERS = 30
OPERATIONS = {
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
}
AT_LEAST = 500


@pytest.fixture(scope="module")
def pair(tiny_target):
    loaded = load_pair(tiny_target, None, ctx_size=CTX)
    yield loaded
    loaded.close()


@pytest.mark.slow
def test_generated_requests_are_never_a_5xx(pair):
    with served(pair, costs=FLAT_COSTS, mode="ngram", parallel=2) as running:
        schema = schemathesis.openapi.from_url(running.url + "/openapi.json")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert {(op.method.upper(), op.path) for op in operations} == OPERATIONS
        statuses: Counter = Counter()
        session = requests.Session()
        for op in operations:
            modes = [schemathesis.GenerationMode.POSITIVE]
            if op.method.upper() == "POST":
                modes.append(schemathesis.GenerationMode.NEGATIVE)
            for mode in modes:

                @settings(
                    max_examples=EXAMPLES.get(op.path, OTHERS),
                    deadline=None,
                    database=None,
                    derandomize=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )
                @given(case=op.as_strategy(generation_mode=mode))
                def answered(case) -> None:  # run at once, inside this iteration
                    response = case.call(base_url=running.url, session=session, timeout=WAIT)
                    statuses[(op.path, mode.value, response.status_code // 100)] += 1  # noqa: B023
                    assert response.status_code < 500, (
                        f"{case.as_curl_command()} → {response.status_code} {response.text[:500]}"
                    )

                answered()
        total = sum(statuses.values())
        summary = ", ".join(f"{path} {mode} {kind}xx: {n}" for (path, mode, kind), n in sorted(statuses.items()))
        print(f"{total} generated requests: {summary}")
        assert total >= AT_LEAST, summary
        for path in EXAMPLES:
            assert statuses[(path, "positive", 2)] > 0 and statuses[(path, "negative", 4)] > 0, summary
        answer = httpx.post(
            running.url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0},
            timeout=WAIT,
        )
        assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] == 4
        health = httpx.get(running.url + "/health", timeout=WAIT)
        assert health.status_code == 200 and health.json()["active"] == 0 and not running.service.engine.slots.busy
