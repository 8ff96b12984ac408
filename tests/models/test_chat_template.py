"""The chat template renderer against Hugging Face transformers' own renderings of real templates
(tests/data/chat_templates, written by scripts/chat_template_references.py), byte for byte, and
its sandbox, errors and helpers."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from paths import DATA

from specrun.errors import ChatTemplateError, InputError
from specrun.models.chat_template import ChatTemplate, prepare_messages

TEMPLATES = DATA / "chat_templates"
CONVERSATIONS = json.loads((TEMPLATES / "conversations.json").read_text(encoding="utf-8"))
CLOCK = datetime.fromisoformat(CONVERSATIONS["clock"])
REFERENCES = sorted((TEMPLATES / "references").glob("*.json"))


def _cases():
    for path in REFERENCES:
        document = json.loads(path.read_text(encoding="utf-8"))
        for case in document["cases"]:
            variables = ",".join(f"{k}={v}" for k, v in case["variables"].items())
            yield pytest.param(
                document, case, id=f"{path.stem}:{case['conversation']}{':' + variables if variables else ''}"
            )


def template_of(document: dict) -> ChatTemplate:
    source = (TEMPLATES / "templates" / document["template"]).read_text(encoding="utf-8")
    return ChatTemplate(
        source,
        bos_token=document["bos_token"],
        eos_token=document["eos_token"],
        name=document["template"],
        now=lambda: CLOCK,
    )


def test_every_kept_template_has_references():
    templates = {p.stem for p in (TEMPLATES / "templates").glob("*.jinja")}
    manifest = set(json.loads((TEMPLATES / "templates.json").read_text(encoding="utf-8")))
    assert templates == manifest == {p.stem for p in REFERENCES}
    families = " ".join(sorted(templates)).lower()
    for family in ("qwen2.5", "qwen3", "llama-3", "gemma-3", "gpt-oss", "mistral", "phi", "deepseek"):
        assert family in families


@pytest.mark.parametrize("document,case", list(_cases()))
def test_renders_as_transformers_does(document, case):
    template = template_of(document)
    messages = CONVERSATIONS["conversations"][case["conversation"]]
    tools = CONVERSATIONS["tools"] if case["tools"] else None

    def render():
        return template.render(
            messages, add_generation_prompt=case["add_generation_prompt"], tools=tools, variables=case["variables"]
        )

    if "error" in case:
        with pytest.raises(ChatTemplateError) as raised:
            render()
        message = raised.value.message
        assert document["template"] in message and case["error"] in message
        assert ("refused the conversation" in message) == case["raised"]
    else:
        assert render() == case["rendered"]


def test_references_cover_tools_thinking_and_errors():
    """The reference set exercises what the renderer must get right, not only the easy cases."""
    cases = [(p.stem, c) for p in REFERENCES for c in json.loads(p.read_text(encoding="utf-8"))["cases"]]
    assert sum(1 for _, c in cases if c["tools"] and "rendered" in c) >= 15
    assert any(c.get("raised") for _, c in cases) and any("error" in c and not c["raised"] for _, c in cases)
    qwen3 = {
        json.dumps(c["variables"]): c["rendered"]
        for n, c in cases
        if n == "Qwen-Qwen3-0.6B" and c["conversation"] == "user"
    }
    assert qwen3['{"enable_thinking": false}'].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert qwen3['{"enable_thinking": true}'].endswith("<|im_start|>assistant\n") == qwen3["{}"].endswith(
        "<|im_start|>assistant\n"
    )
    dated = [c["rendered"] for n, c in cases if n == "meta-llama-Llama-3.2-3B-Instruct" and "rendered" in c]
    assert all("Today Date: 14 Mar 2025" in text for text in dated)


def test_every_code_point_and_nul_pass_through():
    template = ChatTemplate("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    content = "a\u0000b\u2028\U0001f327\ufe0f\x7f\x1b\U0010ffff"
    assert template.render([{"role": "user", "content": content}]) == f"[{content}]"


def test_tojson_is_plain_json_dumps():
    template = ChatTemplate(
        "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=(',', ':'), sort_keys=true) }}"
    )
    value = {"b": "<é>&'", "a": [1, 2.5, None, True]}
    assert template.render([], variables={"x": value}) == "|".join(
        [
            json.dumps(value, ensure_ascii=False),
            json.dumps(value, ensure_ascii=False, indent=2),
            json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True),
        ]
    )


def test_loop_controls_generation_blocks_and_namespace():
    template = ChatTemplate(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{% if loop.index > 3 %}{% break %}{% endif %}{% generation %}{{ m.content }}{% endgeneration %}"
        "{% set ns.n = ns.n + 1 %}{% endfor %}={{ ns.n }}"
    )
    messages = [{"role": "system", "content": "S"}] + [{"role": "user", "content": str(i)} for i in range(5)]
    assert template.render(messages) == "01=2"  # loop.index counts the skipped system message


def test_a_template_that_raises_is_one_line_naming_the_model():
    template = ChatTemplate("{{ raise_exception('System role not supported') }}", name="gemma.gguf")
    with pytest.raises(ChatTemplateError) as raised:
        template.render([{"role": "system", "content": "x"}])
    error = raised.value
    assert isinstance(error, InputError) and error.exit_code == 2
    assert error.one_line().startswith(
        "the chat template of gemma.gguf refused the conversation: System role not supported ("
    )
    assert "\n" not in error.one_line()


def test_syntax_errors_and_runtime_failures_are_chat_template_errors():
    with pytest.raises(ChatTemplateError, match=r"does not parse: .* \(line 1\)"):
        ChatTemplate("{% for m in messages %}", name="broken.gguf").render([])
    with pytest.raises(ChatTemplateError, match="failed"):
        ChatTemplate("{{ messages[0].content + 1 }}").render([{"role": "user", "content": "x"}])


@pytest.mark.parametrize(
    "source",
    [
        "{{ ''.__class__.__mro__ }}",
        "{{ messages.append(1) }}",
        "{% set ns = namespace(_secret=1) %}",
        "{{ cycler.__init__.__globals__ }}",
    ],
)
def test_the_sandbox_holds(source):
    with pytest.raises(ChatTemplateError):
        ChatTemplate(source).render([{"role": "user", "content": "x"}])


def test_strftime_now_reads_the_clock():
    template = ChatTemplate("{{ strftime_now('%d %b %Y') }}", now=lambda: datetime(2024, 2, 29))
    assert template.render([]) == "29 Feb 2024"


def test_messages_are_prepared_as_transformers_prepares_them():
    prepared = prepare_messages([{"role": "assistant", "content": "x", "tool_calls": None, "reasoning": "r"}])
    assert prepared == [
        {"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r", "reasoning_content": "r"}
    ]
    assert list(prepared[0]) == ["thinking", "role", "content", "reasoning", "reasoning_content"]


def test_reserved_variables_and_odd_values_are_refused():
    template = ChatTemplate("{{ messages | length }}")
    with pytest.raises(ChatTemplateError, match="messages"):
        template.render([], variables={"messages": []})
    with pytest.raises(ChatTemplateError, match="cannot be given"):
        template.render([], variables={"enable_thinking": object()})
