"""A chat transcript on disk, as Markdown or JSON by the file's extension.

Written to a temporary file in the same folder, fsynced and renamed, so an existing transcript is
never left half-written; and an existing file is only replaced when asked (`/save!`), so a typo in
a name never destroys a file. A `/reset` shows in the transcript as a marker, not as a loss.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from ..atomic import write_atomic
from ..errors import InputError

FORMATS = {".md": "markdown", ".markdown": "markdown", ".json": "json"}


RESET = {"role": "reset"}  # the marker a /reset leaves in the messages


def save_transcript(path: str | Path, document: dict, *, replace: bool = False) -> str:
    """Write `document` (models, settings, messages, totals) to `path`; returns the path written.
    An existing `path` is refused unless `replace`."""
    target = Path(path).expanduser()
    kind = FORMATS.get(target.suffix.lower())
    if kind is None:
        raise InputError(f"cannot tell the format of {target.name}", "name the file .md (Markdown) or .json")
    document = {"saved": datetime.now(timezone.utc).isoformat(timespec="seconds"), **document}
    text = to_markdown(document) if kind == "markdown" else json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    try:
        write_atomic(target, text, exclusive=not replace)
    except FileExistsError as error:
        raise InputError(f"{target} already exists", f"/save! {path} overwrites it") from error
    except OSError as error:
        raise InputError(
            f"could not write {target}: {error.strerror or error}", "check the folder exists and is writable"
        ) from error
    return str(target)


def to_markdown(document: dict) -> str:
    """Headings per speaker, the answer's figures in italics under it."""
    models = document["models"]
    lines = [
        "# Chat transcript",
        "",
        f"- saved: {document['saved']}",
        f"- target: `{models['target']}`",
        f"- draft: `{models['draft']}`" if models.get("draft") else "- draft: none",
        "",
    ]
    for message in document["messages"]:
        role = message["role"]
        if role == RESET["role"]:
            lines += ["---", "", "_/reset: the conversation started afresh here (the system prompt stayed)_", ""]
            continue
        if role == "system":
            lines += ["## System", "", message["content"] or "_(cleared)_", ""]
            continue
        lines += ["## You" if role == "user" else "## Assistant", "", message["content"], ""]
        stats = message.get("stats")
        if stats:
            speed = stats.get("decode_tokens_per_s")
            figures = [
                f"{stats['generated_tokens']} tokens",
                f"{speed:.1f} tok/s" if speed else None,
                f"mode {stats['mode']}",
            ]
            if stats.get("drafted"):
                figures.append(f"accepted {stats['accepted']}/{stats['drafted']} drafted")
            if message.get("interrupted"):
                figures.append("interrupted")
            lines += ["_" + " · ".join(f for f in figures if f) + "_", ""]
    return "\n".join(lines)
