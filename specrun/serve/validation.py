"""A request body that fails validation, as one error: its message and the field at fault."""

from __future__ import annotations

import re

from pydantic import ValidationError

from .answers import ApiError
from .schemas import ChatRequest

UNION_TAG = re.compile(
    r"[\[\]\-,=]|^(str|int|float|bool|dict|list|none)$"
)  # pydantic's names of a union's members in an error's loc (schemas.py tags its own with a `=`)


def validation_error(errors: list[dict]) -> ApiError:
    """The validation error that matters as OpenAI reports one: a message and the parameter at
    fault. Of a union's failed members, the one whose type matched says what is wrong."""
    if not errors:
        return ApiError(400, "invalid request", "invalid_request_error")
    first = next((e for e in errors if not str(e.get("type", "")).endswith("_type")), errors[0])
    if first.get("type") == "json_invalid":
        return ApiError(
            400,
            f"the request body is not valid JSON ({first.get('ctx', {}).get('error', first['msg'])})",
            "invalid_request_error",
            None,
            "invalid_json",
        )
    param = _param(first.get("loc", ()))
    if param is None and first.get("type") in ("model_attributes_type", "dict_type", "model_type"):
        return ApiError(
            400,
            "the request body must be a JSON object (sent with Content-Type: application/json)",
            "invalid_request_error",
            None,
            "invalid_json",
        )
    where = f"{param}: " if param else ""
    return ApiError(400, f"{where}{first['msg']}", "invalid_request_error", param, first.get("type"))


def _param(loc) -> str | None:
    """The parameter an error's loc names: the path to the field, without pydantic's union tags;
    for a bad key of an object, the object (the key itself may be text that cannot be shown)."""
    parts = list(loc)
    path: list[str] = []
    for i, part in enumerate(parts):
        if part == "[key]" or (i + 1 < len(parts) and parts[i + 1] == "[key]"):
            continue
        if part != "body" and not (isinstance(part, str) and UNION_TAG.search(part)):
            path.append(str(part))
    return ".".join(path) or None


def chat_request(body: dict) -> ChatRequest:
    """The chat request another API's body was turned into; what chat refuses is a 400 naming its field."""
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as error:
        raise validation_error(error.errors(include_url=False)) from None
