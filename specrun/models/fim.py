"""Fill-in-the-middle prompts, built from the model's own FIM tokens.

A code model trained to infill reads the code before the cursor and the code after it, each behind
its marker token, and writes what goes between. The markers are vocabulary tokens; llama.cpp finds
them from the GGUF keys (`tokenizer.ggml.fim_pre_token_id`, …) or, for files without the keys, by
their text in the families it knows (Qwen2.5-Coder `<|fim_prefix|>`, StarCoder and Granite
`<fim_prefix>`, CodeLlama `<PRE>`, DeepSeek-Coder `<｜fim▁begin｜>`, …). Mistral's Codestral
(`[SUFFIX]`, `[PREFIX]`) puts the suffix first and has no middle marker; it is found here by text.

The layout (prefix-suffix-middle):

    [BOS] extra [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]

`prompt` is the start of the cursor's line, which editors send apart from the lines above it.
`extra` holds chunks of other files: with the repo-level tokens (Qwen2.5-Coder's `<|repo_name|>`,
`<|file_sep|>`) as `[FIM_REP]myproject\n` then `[FIM_SEP]filename\ntext` per chunk and
`[FIM_SEP]filename\n` for the file being edited; without them each chunk follows a plain-text
separator. Without chunks the prompt is the file-level layout alone. The pieces are tokenized one
by one, so a piece that does not change between two requests keeps its tokens. The budgets: the
prefix keeps its last FIM_PREFIX_TOKENS, the suffix its first FIM_SUFFIX_TOKENS less the cursor
line (llama-server's, at its default batch), and the chunks what the context leaves after the code
and the answer, their newest tokens kept; in a context too small for the budgets, the prefix and
the suffix share what the answer leaves 3:1 (an answer counts for at most a quarter of the
context). CodeLlama's suffix is read without the space SentencePiece puts before a text, as its
own infilling reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import defaults
from ..engine.fim_tokens import FimTokens
from ..errors import InputError

CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"  # between chunks of a vocabulary without a file separator
REPO_NAME = "myproject"
CURRENT_FILE = "filename"


def missing_fim(model_name: str) -> InputError:
    """The error a model without FIM tokens answers an infill request with."""
    return InputError(
        f"{model_name} cannot fill in the middle: its vocabulary has no FIM tokens (prefix, suffix, middle)",
        "serve a code model trained for it (Qwen2.5-Coder, StarCoder2, CodeLlama, DeepSeek-Coder, Codestral, …)",
    )


@dataclass(frozen=True)
class Chunk:
    """A piece of another file sent for context."""

    filename: str
    text: str


@dataclass(frozen=True)
class FimPrompt:
    """An infill prompt's tokens; `extra` of them are the other files' chunks (where a request that
    keeps its chunks and changes the code parts from the rest)."""

    tokens: list[int]
    extra: int


def within_budgets(prefix: str, suffix: str, longest_piece: int) -> tuple[str, str]:
    """`prefix` and `suffix` cut, before they are tokenized, to what their token budgets can take:
    no token covers more than `longest_piece` bytes, nor less than one character's worth, so the
    last FIM_PREFIX_TOKENS × longest_piece characters hold at least the prefix's budget, and the
    first so many of the suffix its own. A whole file sent as the prefix then costs no more than
    its end."""
    reach = max(1, longest_piece)
    keep_prefix, keep_suffix = defaults.FIM_PREFIX_TOKENS * reach, defaults.FIM_SUFFIX_TOKENS * reach
    return prefix[max(0, len(prefix) - keep_prefix) :], suffix[:keep_suffix]


def build_fim_prompt(
    fim: FimTokens,
    tokenize: Callable[[str], list[int]],
    *,
    prefix: str,
    suffix: str,
    prompt: str = "",
    extra: Sequence[Chunk] = (),
    n_ctx: int,
    n_predict: int,
    bos: int | None = None,
) -> FimPrompt:
    """The infill prompt for `prefix` + `prompt` | cursor | `suffix` with `extra` chunks before it
    (module docstring), within the budgets for a context of `n_ctx` and an answer of `n_predict`.
    `tokenize` reads plain text (no special tokens); `bos` is put first when the vocabulary adds one."""
    chunks: list[int] = []
    if fim.rep is not None and extra:
        chunks += [fim.rep] + tokenize(REPO_NAME + "\n")
    for chunk in extra:
        if fim.sep is not None:
            chunks += [fim.sep] + tokenize(chunk.filename + "\n")
        else:
            chunks += tokenize(CHUNK_SEPARATOR)
        chunks += tokenize(chunk.text)
    if fim.sep is not None and extra:
        chunks += [fim.sep] + tokenize(CURRENT_FILE + "\n")
    line = tokenize(prompt) if prompt else []
    before = tokenize(prefix) if prefix else []
    after = (without_space_prefix(tokenize) if fim.bare_suffix else tokenize)(suffix) if suffix else []
    before = before[max(0, len(before) - defaults.FIM_PREFIX_TOKENS) :]
    after = after[: max(0, defaults.FIM_SUFFIX_TOKENS - 2 - len(line))]
    head = [bos] if bos is not None else []
    answer = min(max(0, n_predict), n_ctx // 4)  # an answer asked longer than the context keeps the code in
    room = n_ctx - answer - len(head) - len(line) - 4  # the markers, and a token to spare
    if len(before) + len(after) > room:  # a small context: the code shares it 3:1, as the budgets do
        after = after[: max(0, room // 4)]
        before = before[max(0, len(before) - max(0, room - len(after))) :]
    code_before = [fim.pre] + before + line
    code_after = [fim.suf] + after
    code = code_after + code_before if fim.suffix_first else code_before + code_after
    tail = [fim.mid] if fim.mid is not None else []
    room = n_ctx - len(head) - len(code) - len(tail) - answer - 1  # the answer's room is kept
    chunks = chunks[max(0, len(chunks) - max(0, room)) :]
    return FimPrompt(head + chunks + code + tail, len(head) + len(chunks))


def without_space_prefix(tokenize: Callable[[str], list[int]]) -> Callable[[str], list[int]]:
    """`tokenize` without the space a SentencePiece vocabulary puts before a text: the text is read
    after a newline, whose tokens (the space and the newline's) are then dropped; where they do
    not come apart so, the text is read as it is."""
    marker = tokenize("\n")

    def bare(text: str) -> list[int]:
        tokens = tokenize("\n" + text)
        return tokens[len(marker) :] if tokens[: len(marker)] == marker else tokenize(text)

    return bare


def model_fim_prompt(model, *, n_ctx: int, n_predict: int, **parts) -> FimPrompt:
    """The FIM prompt of `parts` (build_fim_prompt's) for a loaded model (engine.model.Model); an
    InputError (missing_fim) when it cannot infill."""
    if model.fim is None:
        raise missing_fim(model.path.name)
    return build_fim_prompt(
        model.fim,
        lambda text: model.tokenize(text, add_special=False, parse_special=False),
        n_ctx=n_ctx,
        n_predict=n_predict,
        bos=model.bos if model.add_bos and model.bos >= 0 else None,
        **parts,
    )
