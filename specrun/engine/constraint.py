"""What an answer must look like: a JSON schema, any JSON object, a regex or a grammar (Lark or
llama.cpp's GBNF), compiled by llguidance into one grammar and checked before any model sees it.

A constraint is model-free: the server checks a request's schema before it queues the request, and
the CLI before it loads a model, so a bad schema is a 400 or exit 2 naming the problem, decided
within llguidance's parser limits (never a hang). Matching it token by token needs the model's
vocabulary: engine/matcher.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from .. import defaults
from ..errors import InputError


class ConstraintError(InputError):
    """A schema, regex or grammar that cannot constrain an answer (exit 2; 400 `invalid_schema`)."""


@dataclass(frozen=True)
class Constraint:
    """A compiled constraint: its kind, what the user gave (for reports), and llguidance's grammar."""

    kind: str
    source: str
    grammar: str


def one_of(options: Mapping[str, object]) -> tuple[str, object] | None:
    """The one constraint option given, as (name, value); None when none is (a value of None is
    not given). Several are a ConstraintError naming them: an answer is constrained one way."""
    given = [(name, value) for name, value in options.items() if value is not None]
    if len(given) > 1:
        named = " and ".join(name for name, _ in given)
        raise ConstraintError(f"{named} given together", "constrain the answer one way")
    return given[0] if given else None


def limits():
    """llguidance's parser limits: the bounds that keep a hostile schema or regex from hanging a step."""
    import llguidance

    return llguidance.LLParserLimits(
        max_items_in_row=defaults.GRAMMAR_MAX_ITEMS_IN_ROW,
        initial_lexer_fuel=defaults.GRAMMAR_INITIAL_LEXER_FUEL,
        step_lexer_fuel=defaults.GRAMMAR_STEP_LEXER_FUEL,
        step_max_items=defaults.GRAMMAR_STEP_MAX_ITEMS,
        max_lexer_states=defaults.GRAMMAR_MAX_LEXER_STATES,
        max_grammar_size=defaults.GRAMMAR_MAX_SIZE,
        verbose_errors=False,
    )


def json_schema(schema: Mapping | str | bool, *, what: str = "the JSON schema") -> Constraint:
    """A constraint from a JSON schema (a mapping, or its JSON text)."""
    if isinstance(schema, str):
        text = schema
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as error:
            raise ConstraintError(
                f"{what} is not valid JSON: {error.msg} at line {error.lineno} column {error.colno}",
                "give a JSON schema object",
            ) from None
    if not isinstance(schema, (dict, bool)):
        raise ConstraintError(f"{what} must be a JSON object, not {type(schema).__name__}", "give a JSON schema object")
    text = json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
    _check_size(text, what)
    _check_depth(schema, what)
    import llguidance

    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=_json_options())
    except (ValueError, TypeError) as error:
        raise ConstraintError(f"{what} is invalid: {_first_line(error)}", "fix the schema") from None
    return _checked(Constraint("json_schema", text, grammar), what)


def json_object() -> Constraint:
    """Any JSON object (OpenAI's `{"type": "json_object"}`)."""
    return json_schema({"type": "object"}, what="json_object")


def regex(pattern: str) -> Constraint:
    """A constraint that the whole answer matches `pattern` (Rust regex syntax, anchored both ends)."""
    import llguidance

    _check_size(pattern, "the regex")
    try:
        compiled = llguidance.LLMatcher.grammar_from_regex(pattern)
    except (ValueError, TypeError) as error:
        raise ConstraintError(f"the regex is invalid: {_first_line(error)}", "fix the regex") from None
    return _checked(Constraint("regex", pattern, compiled), "the regex")


def grammar(text: str, *, what: str = "the grammar") -> Constraint:
    """A Lark grammar, or llama.cpp's GBNF (told apart by its `::=` rules)."""
    import llguidance
    from llguidance.gbnf_to_lark import any_to_lark, is_lark_syntax

    _check_size(text, what)
    kind = "lark" if is_lark_syntax(text) else "gbnf"
    try:
        lark = text if kind == "lark" else any_to_lark(text)
    except Exception as error:  # the converter raises its own and Python's errors alike
        raise ConstraintError(f"{what} is not valid GBNF: {_first_line(error)}", "fix the grammar") from None
    try:
        compiled = llguidance.LLMatcher.grammar_from_lark(lark)
    except (ValueError, TypeError) as error:
        raise ConstraintError(f"{what} is invalid: {_first_line(error)}", "fix the grammar") from None
    return _checked(Constraint(kind, text, compiled), what)


def _json_options() -> dict:
    """Compact JSON with no whitespace between tokens: what a parser reads the same, with fewer
    tokens to generate and more of them forced."""
    return {"whitespace_flexible": False}


def _checked(constraint: Constraint, what: str) -> Constraint:
    """`constraint` once llguidance accepts its grammar within the limits."""
    import llguidance

    error = llguidance.LLMatcher.validate_grammar(constraint.grammar, None, limits=limits())
    if error:
        raise ConstraintError(f"{what} is invalid: {_first_line(error)}", "fix it or simplify it")
    return constraint


def _check_size(text: str, what: str) -> None:
    if len(text) > defaults.CONSTRAINT_MAX_CHARS:
        raise ConstraintError(
            f"{what} is {len(text)} characters, more than {defaults.CONSTRAINT_MAX_CHARS}",
            "send a smaller one",
        )


def _check_depth(value, what: str, depth: int = 0) -> None:
    if depth > defaults.CONSTRAINT_MAX_DEPTH:
        raise ConstraintError(
            f"{what} nests deeper than {defaults.CONSTRAINT_MAX_DEPTH} levels", "flatten it or use $ref"
        )
    if isinstance(value, dict):
        for item in value.values():
            _check_depth(item, what, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_depth(item, what, depth + 1)


def _first_line(error: object) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0][:300]
