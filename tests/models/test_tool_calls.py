"""Tool calls: each family's syntax read from its template, the template's own rendering of a call
read back, bare JSON, malformed calls, streams cut anywhere, and the grammars that force a call
(checked byte by byte with llguidance over a one-byte-per-token vocabulary)."""

from __future__ import annotations

import json
from datetime import datetime

import llguidance
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paths import DATA

from specrun.models.chat_template import ChatTemplate
from specrun.models.reasoning import ReasoningTags, reasoning_tags, split_reasoning
from specrun.models.tool_calls import CallArguments, CallStart, Content, ToolCallStream, parse_tool_calls
from specrun.models.tool_grammar import call_grammar, opened_call_grammar, tool_names_of, validate_tools
from specrun.models.tool_syntax import (
    COMMAND_R,
    DEEPSEEK_R1,
    DEEPSEEK_V3,
    GEMMA,
    GLM,
    GPT_OSS,
    GRANITE,
    HERMES,
    LFM2,
    LLAMA3,
    MISTRAL_ARGS,
    MISTRAL_LIST,
    QWEN3_CODER,
    SEED_OSS,
    ToolCall,
    tool_syntax,
)

TEMPLATES = DATA / "chat_templates"
CONVERSATIONS = json.loads((TEMPLATES / "conversations.json").read_text(encoding="utf-8"))
MANIFEST = json.loads((TEMPLATES / "templates.json").read_text(encoding="utf-8"))
CLOCK = datetime.fromisoformat(CONVERSATIONS["clock"])
WEATHER = CONVERSATIONS["tools"][0]
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "A file's text",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
TOOLS = [WEATHER, READ_FILE]
NAMES = ["get_weather", "read_file"]
ZURICH = ToolCall("get_weather", '{"city":"Zürich","unit":"celsius"}')


def source(name: str) -> str:
    return (TEMPLATES / "templates" / f"{name}.jinja").read_text(encoding="utf-8")


# --- families -----------------------------------------------------------------------------------

FAMILIES = {  # every kept template -> the syntax read from it (None: it shows no tool calls)
    "ByteDance-Seed-OSS": SEED_OSS,
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": COMMAND_R,
    "GLM-4.6": GLM,
    "HuggingFaceTB-SmolLM3-3B": None,
    "LFM2.5-8B-A1B": LFM2,
    "Mistral-Small-3.2-24B-Instruct-2506": MISTRAL_ARGS,
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": HERMES,
    "Qwen-QwQ-32B": HERMES,
    "Qwen-Qwen2.5-7B-Instruct": HERMES,
    "Qwen-Qwen2.5-Coder-1.5B-Instruct-GGUF": HERMES,
    "Qwen-Qwen3-0.6B": HERMES,
    "Qwen3-Coder": QWEN3_CODER,
    "Qwen3.5-4B": QWEN3_CODER,
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": DEEPSEEK_R1,
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": DEEPSEEK_R1,
    "deepseek-ai-DeepSeek-V3.1": DEEPSEEK_V3,
    "google-gemma-2-2b-it": None,
    "google-gemma-3-4b-it": None,
    "google-gemma-4-31B-it": GEMMA,
    "ibm-granite-granite-3.3-2B-Instruct": GRANITE,
    "meta-llama-Llama-3.1-8B-Instruct": LLAMA3,
    "meta-llama-Llama-3.2-3B-Instruct": LLAMA3,
    "microsoft-Phi-3.5-mini-instruct": None,
    "mistralai-Ministral-3-14B-Reasoning-2512": MISTRAL_ARGS,
    "mistralai-Mistral-Nemo-Instruct-2407": MISTRAL_LIST,
    "openai-gpt-oss-120b": GPT_OSS,
}


def test_the_table_covers_every_kept_template():
    assert set(FAMILIES) == set(MANIFEST)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_is_read_from_the_template(name):
    assert tool_syntax(source(name)) == FAMILIES[name]


def test_no_template_no_syntax():
    assert tool_syntax(None) is None and tool_syntax("") is None
    assert tool_syntax("{{ messages[0].content }}") is None


# --- the template's own call, read back ---------------------------------------------------------

# template -> (text that opens the assistant's turn, text that ends it, the id the syntax carries)
RENDERED_CALLS = {
    "Qwen-Qwen2.5-Coder-1.5B-Instruct-GGUF": ("<|im_start|>assistant\n", "<|im_end|>", None),
    "Qwen-Qwen2.5-7B-Instruct": ("<|im_start|>assistant\n", "<|im_end|>", None),
    "Qwen-Qwen3-0.6B": ("<|im_start|>assistant\n", "<|im_end|>", None),
    "Qwen-QwQ-32B": ("<|im_start|>assistant\n", "<|im_end|>", None),
    "Qwen3.5-4B": ("<|im_start|>assistant\n", "<|im_end|>", None),
    "Qwen3-Coder": ("<|im_start|>assistant\n", "<|im_end|>", None),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|im_start|>assistant\n", "<|im_end|>", None),
    "LFM2.5-8B-A1B": ("<|im_start|>assistant\n", "<|im_end|>", None),
    "meta-llama-Llama-3.1-8B-Instruct": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", None),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", None),
    "google-gemma-4-31B-it": ("<|turn>model\n", "<|tool_response>", None),
    "openai-gpt-oss-120b": ("<|start|>assistant", "<|start|>functions", None),
    "mistralai-Mistral-Nemo-Instruct-2407": ("[/INST]", "</s>", "call12345"),
    "Mistral-Small-3.2-24B-Instruct-2506": ("[/INST]", "</s>", "call12345"),
    "mistralai-Ministral-3-14B-Reasoning-2512": ("[/INST]", "</s>", None),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<｜Assistant｜>", "<｜end▁of▁sentence｜>", None),
    "deepseek-ai-DeepSeek-V3.1": ("<｜Assistant｜>", "<｜end▁of▁sentence｜>", None),
    "GLM-4.6": ("<|assistant|>", "<|observation|>", None),
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": ("<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "0"),
    "ByteDance-Seed-OSS": ("<seed:bos>assistant\n", "<seed:eos>", None),
}
# Not rendered: Granite's template drops an assistant's tool_calls, and R1-Distill-Llama's writes
# them only for a message whose content is None, which a chat message never has here (None keys are
# dropped, as transformers drops them). Their syntax is tested on hand-written answers below.


def rendered_call(name: str) -> str:
    """The assistant's turn of the "tool_call" conversation as the template renders it, its
    reasoning split off as the server splits it: the text the model was trained to answer with."""
    head, end, _ = RENDERED_CALLS[name]
    entry = MANIFEST[name]
    template = ChatTemplate(source(name), bos_token=entry["bos_token"], eos_token=entry["eos_token"], now=lambda: CLOCK)
    rendered = template.render(
        CONVERSATIONS["conversations"]["tool_call"], tools=[WEATHER], add_generation_prompt=False
    )
    turn = rendered.split("How warm is it in Zürich?", 1)[1]
    turn = turn[turn.index(head) + len(head) :]
    return split_reasoning(turn[: turn.index(end)], reasoning_tags(source(name))).content


def test_every_template_that_renders_calls_is_read_back():
    families = {FAMILIES[name].family for name in RENDERED_CALLS}
    assert families == {syntax.family for syntax in FAMILIES.values() if syntax} - {"granite"}


@pytest.mark.parametrize("name", sorted(RENDERED_CALLS))
def test_the_templates_own_call_is_read_back(name):
    text = rendered_call(name)
    parsed = parse_tool_calls(text, FAMILIES[name], NAMES)
    assert parsed.content == ""
    assert parsed.calls == [ToolCall(ZURICH.name, ZURICH.arguments, RENDERED_CALLS[name][2])]
    assert parse_tool_calls(text, FAMILIES[name], ["read_file"]).calls == []  # undeclared: content
    assert stream(FAMILIES[name], NAMES, list(text)) == (parsed.content, parsed.calls)


# --- hand-written answers -----------------------------------------------------------------------

BERN = ToolCall("get_weather", '{"city":"Bern"}')
README = ToolCall("read_file", '{"path":"README.md"}')

ANSWERS = [  # (syntax, answer, content, calls)
    (
        HERMES,
        'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bern"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "README.md"}}\n</tool_call>',
        "Let me check.",
        [BERN, README],
    ),
    (HERMES, '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Bern\\"}"}</tool_call>', "", [BERN]),
    (LLAMA3, '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Bern"}}', "", [BERN]),
    (
        GRANITE,
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Bern"}}, '
        '{"name": "read_file", "arguments": {"path": "README.md"}}]',
        "",
        [BERN, README],
    ),
    (
        DEEPSEEK_R1,  # R1-Distill-Llama's template leaves out the closing; the answer's end closes it
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Bern"}\n```<｜tool▁call▁end｜>',
        "",
        [BERN],
    ),
    (
        DEEPSEEK_V3,
        'On it.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Bern"}'
        '<｜tool▁call▁end｜><｜tool▁call▁begin｜>read_file<｜tool▁sep｜>{"path": "README.md"}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "On it.",
        [BERN, README],
    ),
    (
        GPT_OSS,
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city":"Bern"}<|call|>',
        "<|channel|>analysis<|message|>Need the weather.<|end|>",
        [BERN],
    ),
    (
        GPT_OSS,  # <|call|> is a stop token: the answer may end before it
        '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Bern"}',
        "",
        [BERN],
    ),
    (
        GPT_OSS,
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hi!",
        [],
    ),
    (
        MISTRAL_ARGS,
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Bern"}[TOOL_CALLS]read_file[CALL_ID]a1b2c3d4e[ARGS]'
        '{"path": "README.md"}',
        "",
        [BERN, ToolCall("read_file", '{"path":"README.md"}', "a1b2c3d4e")],
    ),
    (
        GEMMA,
        '<|tool_call>call:get_weather{city:<|"|>Bern, CH<|"|>,days:3,opts:{deep:[1,2.5,true,None,<|"|>x<|"|>]}}'
        "<tool_call|>",
        "",
        [ToolCall("get_weather", '{"city":"Bern, CH","days":3,"opts":{"deep":[1,2.5,true,null,"x"]}}')],
    ),
    (
        LFM2,
        "<|tool_call_start|>[get_weather(city='Bern', days=-2, exact=true), read_file(path=\"README.md\")]"
        "<|tool_call_end|>Checking both.",
        "Checking both.",
        [ToolCall("get_weather", '{"city":"Bern","days":-2,"exact":true}'), README],
    ),
    (
        QWEN3_CODER,
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n<parameter=days>\n3\n"
        '</parameter>\n<parameter=hours>\n[1, 2]\n</parameter>\n<parameter=note>\n"7"\n</parameter>\n'
        "</function>\n</tool_call>",
        "",
        [ToolCall("get_weather", '{"city":"New\\nYork","days":3,"hours":[1,2],"note":"7"}')],
    ),
    (
        GLM,
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Bern</arg_value>\n</tool_call>",
        "",
        [BERN],
    ),
]


@pytest.mark.parametrize("syntax,answer,content,calls", ANSWERS)
def test_hand_written_answers(syntax, answer, content, calls):
    parsed = parse_tool_calls(answer, syntax, NAMES)
    assert (parsed.content, parsed.calls) == (content, calls)


# --- bare JSON ----------------------------------------------------------------------------------

BARE = [
    '{"name": "get_weather", "arguments": {"city": "Bern"}}',
    '  {"name": "get_weather", "parameters": {"city": "Bern"}}\n',
    '```json\n{"name": "get_weather", "arguments": {"city": "Bern"}}\n```',
    '```\n[{"name": "get_weather", "arguments": {"city": "Bern"}}]\n```',
    '{"type": "function", "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Bern\\"}"}}',
    '{"name": "get_weather", "parameters": {"city": "Bern"}}; '
    '{"name": "read_file", "parameters": {"path": "README.md"}}',
]


@pytest.mark.parametrize("answer", BARE)
@pytest.mark.parametrize("syntax", [HERMES, LLAMA3, MISTRAL_ARGS, GPT_OSS, None])
def test_bare_json_with_declared_names_is_calls(answer, syntax):
    parsed = parse_tool_calls(answer, syntax, NAMES)
    assert parsed.content == "" and parsed.calls[0] == BERN
    assert parsed.calls[1:] == ([README] if "read_file" in answer else [])


@pytest.mark.parametrize(
    "answer",
    [
        '{"name": "delete_everything", "arguments": {}}',  # not a declared tool
        '[{"name": "get_weather", "arguments": {"city": "Bern"}}, {"name": "rm", "arguments": {}}]',
        'Sure: {"name": "get_weather", "arguments": {"city": "Bern"}}',  # text around it
        '{"name": "get_weather", "arguments": {"city": "Bern"}} done',
        '{"name": "get_weather", "city": "Bern"}',  # not a call's shape
        '{"name": "get_weather", "arguments": [1, 2]}',
        '```python\n{"name": "get_weather", "arguments": {}}\n```',
        '{"answer": 42}',
        "[]",
    ],
)
def test_other_json_is_content(answer):
    for syntax in (HERMES, None):
        assert parse_tool_calls(answer, syntax, NAMES) == parse_tool_calls(answer, syntax, [])
        assert parse_tool_calls(answer, syntax, NAMES).content == answer.strip()


# --- malformed calls ----------------------------------------------------------------------------

MALFORMED = [
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bern"}\n</tool_call>'),  # a brace short
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": NaN}}\n</tool_call>'),
    (HERMES, '<tool_call>\n{"name": "format_disk", "arguments": {}}\n</tool_call> ok'),
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Bern"}}'),  # never closed
    (HERMES, "I would write <tool_call> here"),
    (QWEN3_CODER, "<tool_call>\n<function=get_weather>\n<parameter=city>\nBern\n</function>\n</tool_call>"),
    (GLM, "<tool_call>get_weather\n<arg_key>city</arg_key>\n</tool_call>"),
    (MISTRAL_ARGS, '[TOOL_CALLS]get_weather[ARGS]{"city": "Be'),
    (MISTRAL_ARGS, "[TOOL_CALLS] is how I would call a tool"),
    (MISTRAL_LIST, '[TOOL_CALLS][{"name": "get_weather", "arguments": "Bern"}]'),
    (GRANITE, "<|tool_call|>get_weather(city='Bern')"),
    (LLAMA3, '<|python_tag|>brave_search.call(query="Bern weather")'),
    (GPT_OSS, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{city: Bern}<|call|>"),
    (DEEPSEEK_V3, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    (GEMMA, '<|tool_call>call:get_weather{city:<|"|>Bern}<tool_call|>'),
    (LFM2, "<|tool_call_start|>[get_weather(__import__('os'))]<|tool_call_end|>"),
    (LFM2, "<|tool_call_start|>[get_weather(city=open('x'))]<|tool_call_end|>"),
    (COMMAND_R, '<|START_ACTION|>[{"tool_name": "get_weather"]<|END_ACTION|>'),
]


@pytest.mark.parametrize("syntax,answer", MALFORMED)
def test_malformed_calls_stay_content(syntax, answer):
    parsed = parse_tool_calls(answer, syntax, NAMES)
    assert (parsed.content, parsed.calls) == (answer.strip(), [])


def test_a_bad_block_does_not_hide_a_good_one_after_it():
    answer = '<tool_call>oops <tool_call>{"name": "read_file", "arguments": {"path": "README.md"}}</tool_call>'
    assert parse_tool_calls(answer, HERMES, NAMES).calls == [README]
    assert parse_tool_calls(answer, HERMES, NAMES).content == "<tool_call>oops"
    answer = '[TOOL_CALLS]oops [TOOL_CALLS]get_weather[ARGS]{"city": "Bern"}'
    assert parse_tool_calls(answer, MISTRAL_ARGS, NAMES).calls == [BERN]


def test_no_syntax_is_content():
    assert parse_tool_calls("<tool_call>x</tool_call>", None, NAMES).content == "<tool_call>x</tool_call>"


# --- streams ------------------------------------------------------------------------------------


def stream(syntax, names, pieces) -> tuple[str, list[ToolCall]]:
    """What a stream fed `pieces` hands out: its content joined, and its calls."""
    tool_stream = ToolCallStream(syntax, names)
    events = [event for piece in pieces for event in tool_stream.feed(piece)] + tool_stream.finish()
    calls: dict[int, list] = {}
    for event in events:
        if isinstance(event, CallStart):
            assert event.index == len(calls)
            calls[event.index] = [event.name, "", event.id]
        elif isinstance(event, CallArguments):
            calls[event.index][1] += event.text
    content = "".join(event.text for event in events if isinstance(event, Content))
    return content, [ToolCall(*call) for call in calls.values()]


STREAMED = (
    [(syntax, answer) for syntax, answer, _, _ in ANSWERS]
    + MALFORMED
    + [(HERMES, answer) for answer in BARE]
    + [
        (
            HERMES,
            '\n\n  Thinking aloud <tool_call>\n{"name": "get_weather", "arguments": {"city": "Bern"}}\n</tool_call>',
        ),
        (HERMES, "   "),
        (HERMES, ""),
        (HERMES, "[link](x) and <tool_"),
        (HERMES, "`code` then <tool_call>{}</tool_call>"),
        (HERMES, "``"),
        (HERMES, '```json\n{"name": "get_weather"'),
        (None, '```json\n{"name": "get_weather", "arguments": {}}\n```'),
        (None, "plain text\n"),
        (MISTRAL_ARGS, "Answer first. [TOOL_CAL"),
        (GPT_OSS, "no harmony at all"),
    ]
)


@pytest.mark.parametrize("syntax,answer", STREAMED)
def test_any_single_cut_streams_as_the_whole_answer_parses(syntax, answer):
    parsed = parse_tool_calls(answer, syntax, NAMES)
    whole = (parsed.content, parsed.calls)
    assert stream(syntax, NAMES, [answer]) == whole
    assert stream(syntax, NAMES, list(answer)) == whole
    for at in range(len(answer) + 1):
        assert stream(syntax, NAMES, [answer[:at], answer[at:]]) == whole, at


@settings(max_examples=300, deadline=None, database=None)
@given(data=st.data())
def test_any_split_streams_as_the_whole_answer_parses(data):
    syntax, answer = data.draw(st.sampled_from(STREAMED))
    points = sorted(data.draw(st.lists(st.integers(0, len(answer)), max_size=12)))
    pieces = [answer[a:b] for a, b in zip([0, *points], [*points, len(answer)])]
    parsed = parse_tool_calls(answer, syntax, NAMES)
    assert stream(syntax, NAMES, pieces) == (parsed.content, parsed.calls)


def test_content_streams_before_the_answer_ends():
    tool_stream = ToolCallStream(HERMES, NAMES)
    assert tool_stream.feed("Let me ") == [Content("Let me")]  # the space waits for what follows
    assert tool_stream.feed("check. <tool") == [Content(" check.")]  # "<tool" could open a call
    assert tool_stream.feed('_call>\n{"name": "get_weather", ') == []
    assert tool_stream.feed('"arguments": {"city": "Bern"}}\n</tool_call>') == [
        CallStart(0, "get_weather", None),
        CallArguments(0, '{"city":"Bern"}'),
    ]
    assert tool_stream.feed(" Done.") == [Content("  Done.")]
    assert tool_stream.finish() == []


def test_an_answer_that_starts_like_json_waits_for_its_end():
    tool_stream = ToolCallStream(HERMES, NAMES)
    assert tool_stream.feed('{"name": "get_weather", "arguments": ') == []
    assert tool_stream.feed('{"city": "Bern"}}') == []
    assert tool_stream.finish() == [CallStart(0, "get_weather", None), CallArguments(0, '{"city":"Bern"}')]
    tool_stream = ToolCallStream(HERMES, NAMES)
    assert tool_stream.feed("[") == [] and tool_stream.feed("see") == [Content("[see")]


def test_gpt_oss_final_messages_stream():
    tool_stream = ToolCallStream(GPT_OSS, NAMES)
    assert tool_stream.feed("<|channel|>final") == []
    assert tool_stream.feed("<|message|>Hel") == [Content("<|channel|>final<|message|>Hel")]
    assert tool_stream.feed("lo") == [Content("lo")]


# --- grammars -----------------------------------------------------------------------------------


class _ByteVocabulary:
    """One token per byte, an end token and two special tokens: any text is one way to tokenize."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([i]) for i in range(256)] + [b"<eos>", b"[TOOL_CALLS]", b"[ARGS]"]
    special_token_ids = [256, 257, 258]

    def __call__(self, text: bytes) -> list[int]:
        return list(text)


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocabulary()))


def accepts(grammar: str, answer: str | list[int]) -> bool:
    """Whether the grammar lets a model write exactly `answer`."""
    compiled = llguidance.LLMatcher.grammar_from_lark(grammar)
    assert llguidance.LLMatcher.validate_grammar(compiled, TOKENIZER) == ""
    matcher = llguidance.LLMatcher(TOKENIZER, compiled, log_level=0)
    tokens = list(answer.encode("utf-8")) if isinstance(answer, str) else answer
    return matcher.consume_tokens(tokens) and not matcher.is_error() and matcher.is_accepting()


def hermes_call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.mark.parametrize("parallel", [False, True])
def test_hermes_grammar_forces_a_valid_call(parallel):
    grammar = call_grammar(HERMES, TOOLS, parallel=parallel, required=True)
    assert llguidance.LLMatcher.validate_grammar(llguidance.LLMatcher.grammar_from_lark(grammar)) == ""
    weather = hermes_call("get_weather", '{"city": "Bern", "unit": "celsius"}')
    read = hermes_call("read_file", '{"path": "README.md"}')
    for good in (weather, read, hermes_call("get_weather", '{"city": "Zürich"}')):
        assert accepts(grammar, good)
        assert parse_tool_calls(good, HERMES, NAMES).calls
    assert accepts(grammar, weather + "\n" + read) == parallel
    for bad in (
        hermes_call("get_weather", '{"unit": "celsius"}'),  # city is required
        hermes_call("get_weather", '{"city": "Bern", "unit": "kelvin"}'),
        hermes_call("read_file", '{"path": 7}'),
        hermes_call("delete_all", "{}"),
        "Sure, here you go.",
        weather[:-1],
    ):
        assert not accepts(grammar, bad)


# Claude Code's TaskCreate tool: a metadata object whose keys are named by `propertyNames`, which
# llguidance does not implement.
TASK_CREATE = {
    "type": "function",
    "function": {
        "name": "TaskCreate",
        "parameters": {
            "type": "object",
            "properties": {
                "subject": {"type": "string"},
                "metadata": {"type": "object", "propertyNames": {"type": "string"}, "additionalProperties": {}},
            },
            "required": ["subject"],
        },
    },
}


def test_keywords_llguidance_does_not_implement_are_ignored_not_refused():
    validate_tools([TASK_CREATE, {**WEATHER}])
    grammar = call_grammar(HERMES, [TASK_CREATE], parallel=False, required=True)
    assert accepts(grammar, hermes_call("TaskCreate", '{"subject": "tests", "metadata": {"k": 1}}'))
    assert not accepts(grammar, hermes_call("TaskCreate", '{"metadata": {}}'))  # what it implements still holds
    with pytest.raises(ValueError, match="not supported"):
        validate_tools([tool(parameters={"type": "object", "properties": {"a": {"type": "frob"}}})])


def test_a_named_tool_choice_is_the_one_tool():
    grammar = call_grammar(HERMES, [READ_FILE], parallel=False, required=True)
    assert accepts(grammar, hermes_call("read_file", '{"path": "README.md"}'))
    assert not accepts(grammar, hermes_call("get_weather", '{"city": "Bern"}'))


@pytest.mark.parametrize("name", sorted(RENDERED_CALLS))
def test_grammars_accept_the_templates_own_call(name):
    syntax = FAMILIES[name]
    grammars = [call_grammar(syntax, tools, parallel=p, required=True) for tools in (TOOLS, [WEATHER]) for p in (0, 1)]
    if syntax.family in ("gemma", "lfm2"):
        assert grammars == [None] * 4  # their argument notations are not JSON
        return
    text = rendered_call(name)
    for grammar in grammars:
        assert accepts(grammar, text)
    assert not accepts(grammars[0], text.replace("celsius", "kelvin"))
    assert not accepts(call_grammar(syntax, [READ_FILE], parallel=False, required=True), text)


def test_granite_grammar():
    grammar = call_grammar(GRANITE, TOOLS, parallel=True, required=True)
    answer = (
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Bern"}}, '
        '{"name": "read_file", "arguments": {"path": "a"}}]'
    )
    assert accepts(grammar, answer)
    assert len(parse_tool_calls(answer, GRANITE, NAMES).calls) == 2


def test_special_tokens_are_named_as_tokens():
    grammar = call_grammar(
        MISTRAL_ARGS, TOOLS, parallel=False, required=True, special_tokens={"[TOOL_CALLS]": 257, "[ARGS]": 258}
    )
    assert "<[257]>" in grammar and "<[258]>" in grammar
    assert accepts(grammar, [257, *b"get_weather", 258, *b'{"city": "Bern"}'])
    assert not accepts(grammar, '[TOOL_CALLS]get_weather[ARGS]{"city": "Bern"}')  # spelled out, not the tokens


def test_a_thinking_model_may_reason_first():
    tags = ReasoningTags("<think>", "</think>")
    call = hermes_call("get_weather", '{"city": "Bern"}')
    grammar = call_grammar(HERMES, TOOLS, parallel=False, required=True, reasoning=tags)
    assert accepts(grammar, "<think>\nThe user wants Bern.\n</think>\n\n" + call)
    assert accepts(grammar, call)
    assert not accepts(grammar, "<think>x</think>\n\nIt is sunny.")
    inside = call_grammar(HERMES, TOOLS, parallel=False, required=True, reasoning=tags, inside=True)
    assert accepts(inside, "The user wants Bern.\n</think>\n\n" + call)


def test_gpt_oss_may_analyse_first():
    grammar = call_grammar(GPT_OSS, TOOLS, parallel=False, required=True)
    answer = (
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.get_weather <|constrain|>json<|message|>{"city": "Bern"}<|call|>'
    )
    assert accepts(grammar, answer)
    assert parse_tool_calls(answer, GPT_OSS, NAMES).calls == [BERN]


def test_auto_and_inexpressible_get_no_grammar():
    assert call_grammar(HERMES, TOOLS, parallel=True, required=False) is None
    assert call_grammar(GEMMA, TOOLS, parallel=False, required=True) is None
    referenced = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "$defs": {"city": {"type": "string"}},
                "properties": {"city": {"$ref": "#/$defs/city"}},
            },
        },
    }
    assert call_grammar(QWEN3_CODER, [referenced], parallel=False, required=True) is None
    grammar = call_grammar(HERMES, [referenced], parallel=False, required=True)  # JSON keeps the schema whole
    assert accepts(grammar, hermes_call("get_weather", '{"city": "Bern"}'))
    with pytest.raises(ValueError):
        call_grammar(HERMES, [], parallel=False, required=True)


def test_a_tool_without_parameters_takes_none():
    bare = {"type": "function", "function": {"name": "now"}}
    grammar = call_grammar(HERMES, [bare], parallel=False, required=True)
    assert accepts(grammar, hermes_call("now", "{}"))
    assert not accepts(grammar, hermes_call("now", '{"tz": "UTC"}'))
    assert accepts(
        call_grammar(QWEN3_CODER, [bare], parallel=False, required=True),
        "<tool_call>\n<function=now>\n</function>\n</tool_call>",
    )


# --- tools --------------------------------------------------------------------------------------


def tool(name="get_weather", parameters=None, **extra):
    function = {"name": name, **({} if parameters is None else {"parameters": parameters})}
    return {"type": "function", "function": function, **extra}


def test_valid_tools_pass_and_give_their_names():
    validate_tools(TOOLS)
    validate_tools([tool("now"), tool("a-b_C9", {"type": "object"})])
    validate_tools([])
    assert tool_names_of(TOOLS) == NAMES


@pytest.mark.parametrize(
    "tools,message",
    [
        ([{"type": "code_interpreter"}], "tools[0]: the type of a tool must be 'function'"),
        ([{"type": "function"}], "tools[0]: a function tool needs a 'function' object"),
        ([tool("")], "tools[0]: the function has no name"),
        ([{"type": "function", "function": {"description": "x"}}], "tools[0]: the function has no name"),
        ([tool("get weather")], "tools[0]: tool name 'get weather' must be 1 to 64 letters, digits, '_' or '-'"),
        ([tool("x" * 65)], "must be 1 to 64"),
        ([tool("é")], "must be 1 to 64"),
        ([tool(), tool("read_file"), tool()], "tools[2]: tool name 'get_weather' is declared twice"),
        ([tool(parameters=["city"])], "tool 'get_weather': parameters must be a JSON object"),
        ([tool(parameters={"type": "frob"})], "tool 'get_weather': its parameters schema is not supported: "),
        ([tool(parameters={"properties": {"a": {"$ref": "#/nowhere"}}})], "tool 'get_weather': its parameters schema"),
        ("get_weather", "tools must be a list"),
    ],
)
def test_invalid_tools_are_refused_in_one_line(tools, message):
    with pytest.raises(ValueError) as raised:
        validate_tools(tools)
    text = str(raised.value)
    assert message in text and "\n" not in text


# -- calls the model opens on its own ("auto") -------------------------------------------------------


def test_an_auto_answer_is_free_until_it_opens_a_call_and_the_call_is_then_held_to_the_tools():
    grammar = opened_call_grammar(HERMES, TOOLS)
    weather = hermes_call("get_weather", '{"city": "Paris", "unit": "celsius"}')
    assert accepts(grammar, "It is sunny, no call needed.")
    assert accepts(grammar, "Let me look that up.\n" + weather)
    assert accepts(grammar, weather + "\n" + hermes_call("read_file", '{"path": "a.txt"}') + "\nDone.")
    assert not accepts(grammar, "Let me look.\n" + hermes_call("launch_rockets", "{}"))
    assert not accepts(grammar, hermes_call("get_weather", '{"unit": "kelvin", "city": "Paris"}'))
    assert not accepts(grammar, hermes_call("get_weather", '{"unit": "celsius"}'))  # city is required


def test_families_without_an_opened_call_grammar_are_read_afterwards():
    assert opened_call_grammar(GEMMA, TOOLS) is None and opened_call_grammar(LLAMA3, TOOLS) is None


# -- against llama-server's parse ------------------------------------------------------------------

LLAMA_SERVER = json.loads((DATA / "llama_server" / "qwen_tool_calls.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", LLAMA_SERVER["cases"], ids=lambda c: c["request"]["messages"][-1]["content"][:24])
def test_answers_llama_server_returned_as_content_are_calls_only_where_they_are_bare_calls(case):
    """Qwen2.5-Coder-1.5B answers "auto" with a fenced JSON call; llama-server --jinja returns that
    as content. specrun reads it as the call it is when it names a declared tool, and leaves the
    rest (a call of an undeclared tool) as llama-server does."""
    names = tool_names_of(case["request"]["tools"])
    content = case["message"]["content"]
    assert not case["message"].get("tool_calls")
    parsed = parse_tool_calls(content, HERMES, names)
    fenced = json.loads(content.strip().removeprefix("```json").removesuffix("```"))
    if fenced["name"] in names:
        assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [(fenced["name"], fenced["arguments"])]
        assert parsed.content == ""
    else:
        assert parsed.calls == [] and parsed.content == content.strip()
