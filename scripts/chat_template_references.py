"""Write the reference renderings of tests/data/chat_templates with Hugging Face transformers.

specrun's tests compare its chat template renderer with these files byte for byte and never need
transformers. To regenerate them (after adding a template or a conversation), run this script with
a Python that has transformers and jinja2, kept apart from specrun's own environment:

    python3 -m venv /tmp/hfref && /tmp/hfref/bin/pip install transformers jinja2
    /tmp/hfref/bin/python scripts/chat_template_references.py

Each template in templates/ is rendered, through transformers' public `apply_chat_template`, for
every conversation in conversations.json and every variable set its entry in templates.json lists
(thinking switches); the tool conversation is rendered, with the tools, for templates that read
`tools`. strftime_now is pinned to the file's clock. A rendering that raises is kept as the error
it raised.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "tests" / "data" / "chat_templates"


def pin_clock(moment: datetime) -> None:
    """transformers' strftime_now reads datetime.now(); make it return `moment`."""
    import transformers.utils.chat_template_utils as utils

    class Pinned(datetime):
        @classmethod
        def now(cls, tz=None):
            return moment

    utils.datetime = Pinned


def tokenizer():
    """A tokenizer with no special tokens of its own: bos_token and eos_token are passed per template."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"a": 0})))


def cases(source: str, entry: dict, data: dict) -> list[dict]:
    out = []
    for name in data["conversations"]:
        with_tools = name == "tool_call"
        if with_tools and "tools" not in source:
            continue
        for variables in entry.get("variables", entry.get("variants", [{}])):
            out.append(
                {
                    "conversation": name,
                    "variables": variables,
                    "tools": with_tools,
                    "add_generation_prompt": name != "ends_with_assistant",
                }
            )
    return out


def render(tok, source: str, entry: dict, case: dict, data: dict) -> dict:
    import jinja2

    messages = data["conversations"][case["conversation"]]
    try:
        text = tok.apply_chat_template(
            messages,
            tools=data["tools"] if case["tools"] else None,
            tokenize=False,
            add_generation_prompt=case["add_generation_prompt"],
            chat_template=source,
            bos_token=entry["bos_token"],
            eos_token=entry["eos_token"],
            **case["variables"],
        )
        return {**case, "rendered": text}
    except jinja2.exceptions.TemplateError as error:
        raised = type(error) is jinja2.exceptions.TemplateError  # raise_exception() raises exactly this type
        return {**case, "error": str(error), "raised": raised}
    except Exception as error:  # noqa: BLE001 - a template's own failure is part of the reference
        return {**case, "error": str(error), "raised": False}


def main() -> int:
    import transformers

    data = json.loads((HERE / "conversations.json").read_text(encoding="utf-8"))
    manifest = json.loads((HERE / "templates.json").read_text(encoding="utf-8"))
    pin_clock(datetime.fromisoformat(data["clock"]))
    tok = tokenizer()
    out_dir = HERE / "references"
    out_dir.mkdir(exist_ok=True)
    for name, entry in manifest.items():
        source = (HERE / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
        rendered = [render(tok, source, entry, case, data) for case in cases(source, entry, data)]
        document = {
            "template": f"{name}.jinja",
            "bos_token": entry["bos_token"],
            "eos_token": entry["eos_token"],
            "transformers": transformers.__version__,
            "cases": rendered,
        }
        path = out_dir / f"{name}.json"
        path.write_text(json.dumps(document, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        errors = sum("error" in c for c in rendered)
        print(f"{name}: {len(rendered)} cases, {errors} raise", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
