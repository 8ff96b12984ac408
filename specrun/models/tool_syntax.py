"""The tool-call syntaxes of the model families (tool_calls.py shows each) and which one a chat
template teaches: what reading an answer's calls (tool_calls.py, tool_call_bodies.py) and making a
model write one (tool_grammar.py) both start from."""

from __future__ import annotations

from dataclasses import dataclass

# --- syntaxes -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolSyntax:
    """How one model family writes its tool calls.

    `opening` starts a call block; `closing` ends it ("" where the block's own JSON ends it).
    `closed_by_end`: the end of the answer also closes a block (its closing is a stop token, or
    templates leave it out). `answer_opens`: the generation prompt ends with the opening, so the
    answer itself starts as a block would. `variant` picks between a family's forms.
    """

    family: str
    opening: str
    closing: str = ""
    variant: str = ""
    closed_by_end: bool = False
    answer_opens: bool = False


DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"

HERMES = ToolSyntax("hermes", "<tool_call>", "</tool_call>")
QWEN3_CODER = ToolSyntax("qwen3-coder", "<tool_call>", "</tool_call>")
GLM = ToolSyntax("glm", "<tool_call>", "</tool_call>")
SEED_OSS = ToolSyntax("seed-oss", "<seed:tool_call>", "</seed:tool_call>")
LLAMA3 = ToolSyntax("llama3", "<|python_tag|>")
MISTRAL_LIST = ToolSyntax("mistral", "[TOOL_CALLS]", variant="list")
MISTRAL_ARGS = ToolSyntax("mistral", "[TOOL_CALLS]", variant="args")
GPT_OSS = ToolSyntax("gpt-oss", "<|start|>assistant", "<|call|>", closed_by_end=True, answer_opens=True)
DEEPSEEK_V3 = ToolSyntax("deepseek", DS_CALLS_BEGIN, DS_CALLS_END, variant="v3", closed_by_end=True)
DEEPSEEK_R1 = ToolSyntax("deepseek", DS_CALLS_BEGIN, DS_CALLS_END, variant="r1", closed_by_end=True)
GRANITE = ToolSyntax("granite", "<|tool_call|>")
GEMMA = ToolSyntax("gemma", "<|tool_call>", "<tool_call|>")
LFM2 = ToolSyntax("lfm2", "<|tool_call_start|>", "<|tool_call_end|>")
COMMAND_R = ToolSyntax("command-r", "<|START_ACTION|>", "<|END_ACTION|>")


def tool_syntax(template_source: str | None) -> ToolSyntax | None:
    """The tool-call syntax a chat template teaches, from the markers in its source (the most
    specific first: GLM and Qwen3-Coder also use <tool_call>); None when it shows none (the answer
    is then read as content, bare JSON aside)."""
    s = template_source or ""
    if "<|channel|>" in s and "<|call|>" in s:
        return GPT_OSS
    if "<seed:tool_call>" in s:
        return SEED_OSS
    if "<tool_call>" in s:
        return GLM if "<arg_key>" in s else QWEN3_CODER if "<function=" in s else HERMES
    if DS_CALLS_BEGIN in s:
        return DEEPSEEK_R1 if "```json" in s else DEEPSEEK_V3
    if "[TOOL_CALLS]" in s:
        return MISTRAL_ARGS if "[ARGS]" in s else MISTRAL_LIST
    if "<|tool_call|>" in s:
        return GRANITE
    if "<|tool_call>" in s and "<tool_call|>" in s:
        return GEMMA
    if "<|tool_call_start|>" in s:
        return LFM2
    if "<|START_ACTION|>" in s:
        return COMMAND_R
    if "<|python_tag|>" in s or ('{"name": "' in s and '"parameters": ' in s):
        return LLAMA3
    return None


# --- a call ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """One call as OpenAI sends it: `arguments` is a JSON object as compact JSON text; `id` is the
    one the model wrote, where its syntax carries one."""

    name: str
    arguments: str
    id: str | None = None
