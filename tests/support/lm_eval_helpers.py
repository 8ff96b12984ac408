"""Running lm-evaluation-harness's own evaluator against `specrun serve`: its `local-completions`
model with the remote tokenizer, on the tasks of tests/data/lm_eval (no downloads)."""

from __future__ import annotations

from pathlib import Path

from serve_helpers import FLAT_COSTS, served

TASKS = Path(__file__).resolve().parents[1] / "data" / "lm_eval"
CHEAP_DRAFTS = {n: 0.001 for n in FLAT_COSTS}  # under auto, drafting pays


def scores(url: str, model: str) -> dict[str, float]:
    """The tasks' scores, through the server at `url`."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=f"base_url={url}/v1/completions,model={model},tokenizer_backend=remote,tokenized_requests=True",
        tasks=["specrun_mc", "specrun_gen"],
        task_manager=TaskManager(include_path=str(TASKS)),
        random_seed=0,
        numpy_random_seed=0,
    )["results"]
    return {"mc": results["specrun_mc"]["acc,none"], "gen": results["specrun_gen"]["exact_match,none"]}


def run_modes(pair, model: str, modes: tuple[str, ...], monkeypatch) -> list[dict[str, float]]:
    """The scores of one run per mode, in order, each against a fresh server."""
    monkeypatch.chdir(TASKS)  # the task files name their data relative to themselves
    out = []
    for mode in modes:
        with served(pair, costs=FLAT_COSTS, draft_costs=CHEAP_DRAFTS, mode=mode) as running:
            out.append(scores(running.url, model))
    return out
