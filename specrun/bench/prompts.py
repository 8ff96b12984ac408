"""Benchmark prompts: the built-in categories shipped with the package, or a user's JSONL file.

One JSON object per line: {"prompt": ..., "category": ..., "id": ..., "system": ..., "schema": ...};
only "prompt" is required. A "schema" (a JSON Schema object) constrains every run of its prompt; it
is compiled here, so a bad one fails before any model loads. Every bad line is reported with its
number in one error, so a file is fixed in one go rather than line by line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..engine import constraint as constraints
from ..engine.constraint import Constraint, ConstraintError
from ..errors import InputError, read_text_file

CATEGORIES = ("code-generation", "code-editing", "structured-output", "question-answering", "creative-writing")
ALL = "all"  # the pseudo-category of the summary rows; not allowed in prompt files
DEFAULT_CATEGORY = "custom"
SHOWN_ERRORS = 5


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt to benchmark, formatted with the target's chat template unless --raw."""

    id: str
    category: str
    prompt: str
    system: str | None = None
    constraint: Constraint | None = None  # the prompt's JSON schema, compiled: every run's answer must match it

    @property
    def schema(self) -> dict | None:
        """The JSON schema every answer is checked against (None: unconstrained)."""
        return json.loads(self.constraint.source) if self.constraint is not None else None

    def prediction(self) -> str | None:
        """The prompt's last fenced code block (the file an edit starts from), as OpenAI's predicted
        outputs are sent; None without one."""
        blocks = FENCED.findall(self.prompt)
        return blocks[-1] if blocks else None


FENCED = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)  # a code block's body, its fences and language left out


def normalise_category(name: str) -> str:
    """'Code_Editing' and 'code editing' both mean 'code-editing'."""
    return "-".join(name.strip().lower().replace("_", " ").split())


def parse_lines(lines: Iterable[str], origin: str) -> list[BenchPrompt]:
    """Prompts from JSONL text; every bad line is collected and reported with its line number."""
    prompts: list[BenchPrompt] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    count: dict[str, int] = {}
    bad_schemas = 0
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        item, why = _parse_line(line)
        if why is None:
            category = item.get("category")
            category = normalise_category(category) if category else DEFAULT_CATEGORY
            count[category] = count.get(category, 0) + 1
            pid = item.get("id") or f"{category}/{count[category]}"
            if category == ALL:
                why = f'category "{ALL}" is reserved for the summary rows'
            elif pid in seen:
                why = f'id "{pid}" repeats line {seen[pid]}'
            else:
                seen[pid] = number
                compiled, why = _compile(item.get("schema"), pid)
                if why is None:
                    prompts.append(BenchPrompt(pid, category, item["prompt"], item.get("system"), compiled))
                else:
                    bad_schemas += 1
        if why is not None:
            errors.append(f"line {number}: {why}")
    if errors:
        shown = "; ".join(errors[:SHOWN_ERRORS]) + (
            f"; and {len(errors) - SHOWN_ERRORS} more" if len(errors) > SHOWN_ERRORS else ""
        )
        hint = 'each line must be a JSON object with a "prompt" string'
        if bad_schemas == len(errors):
            hint = "fix the schema"
        raise InputError(f"{origin}: {len(errors)} bad line(s): {shown}", hint)
    if not prompts:
        raise InputError(
            f"{origin} holds no prompts", 'write one JSON object per line, e.g. {"prompt": "...", "category": "qa"}'
        )
    return prompts


def _parse_line(line: str) -> tuple[dict, str | None]:
    """(the object, None) or ({}, why the line is bad)."""
    try:
        item = json.loads(line)
    except json.JSONDecodeError as error:
        return {}, f"not valid JSON ({error.msg} at column {error.colno})"
    if not isinstance(item, dict):
        return {}, f"a JSON {type(item).__name__}, not an object"
    prompt = item.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return {}, 'no "prompt" string' if prompt is None else '"prompt" must be a non-empty string'
    for key in ("category", "id", "system"):
        if key in item and item[key] is not None and not isinstance(item[key], str):
            return {}, f'"{key}" must be a string'
    if item.get("schema") is not None and not isinstance(item["schema"], dict):
        return {}, '"schema" must be a JSON object (a JSON Schema)'
    return item, None


def _compile(schema: dict | None, pid: str) -> tuple[Constraint | None, str | None]:
    """(the prompt's compiled schema, None), (None, None) without one, or (None, why it is bad)."""
    if schema is None:
        return None, None
    try:
        return constraints.json_schema(schema, what=f"the schema of prompt {pid}"), None
    except ConstraintError as error:
        return None, error.message
    except ImportError:
        raise InputError(
            f"prompt {pid} has a schema, and constrained answers need the llguidance package",
            "pip install llguidance",
        ) from None


def load_file(path: Path) -> list[BenchPrompt]:
    """Prompts from a user's JSONL file."""
    return parse_lines(read_text_file(path, "--prompts").splitlines(), str(path))


def builtin() -> list[BenchPrompt]:
    """The shipped prompts, in the order of CATEGORIES."""
    folder = resources.files("specrun.bench") / "data"
    prompts: list[BenchPrompt] = []
    for category in CATEGORIES:
        text = (folder / f"{category}.jsonl").read_text(encoding="utf-8")
        prompts.extend(parse_lines(text.splitlines(), f"built-in {category}.jsonl"))
    return prompts


def select(
    prompts: Sequence[BenchPrompt],
    categories: Sequence[str] | None,
    per_category: int | None = None,
    shortest: bool = False,
) -> list[BenchPrompt]:
    """Keep the chosen categories (unknown names are an error), then at most `per_category` of each:
    the first ones, or the shortest when `shortest` (quick runs spend their time on decoding)."""
    available = list(dict.fromkeys(p.category for p in prompts))
    chosen = available
    if categories:
        wanted = [normalise_category(c) for item in categories for c in item.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in available]
        if unknown:
            raise InputError(
                f"unknown category {', '.join(map(repr, unknown))}", f"choose from: {', '.join(available)}"
            )
        chosen = [c for c in available if c in wanted]
    out: list[BenchPrompt] = []
    for category in chosen:
        group = [p for p in prompts if p.category == category]
        if shortest:
            group = sorted(group, key=lambda p: len(p.prompt) + len(p.system or ""))
        out.extend(group[:per_category] if per_category else group)
    return out
