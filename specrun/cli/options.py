"""Option types shared by the commands (run, chat, bench), named as llama.cpp names them.

Each is an `Annotated` alias, so a flag is spelled, documented and defaulted in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import defaults

MODELS = "Models"
SAMPLING = "Sampling"
SPECULATION = "Speculation"
RUNTIME = "Runtime"
OUTPUT = "Output"

Target = Annotated[
    Optional[str],
    typer.Option("--target", "-m", help="Target model: a .gguf path, a registry name, or hf:OWNER/REPO/FILE.gguf. Default: the default pair's target.", rich_help_panel=MODELS),
]
Draft = Annotated[
    Optional[str],
    typer.Option("--draft", "-md", help="Draft model (same forms as --target), or 'none' for plain decoding. Default: the pair's draft.", rich_help_panel=MODELS),
]
PairName = Annotated[
    Optional[str], typer.Option("--pair", help="A pair from the registry (see `specrun pairs`).", rich_help_panel=MODELS)
]
Registry = Annotated[
    Optional[Path], typer.Option("--registry", help="Extra models.toml merged over the shipped and user registries.", rich_help_panel=MODELS)
]
MaxTokens = Annotated[
    int, typer.Option("--max-tokens", "-n", min=0, help="Tokens to generate at most.", rich_help_panel=SAMPLING)
]
Temperature = Annotated[
    float, typer.Option("--temperature", "--temp", min=0.0, help="Sampling temperature; 0 is greedy.", rich_help_panel=SAMPLING)
]
TopK = Annotated[int, typer.Option("--top-k", min=0, help="Keep the k most likely tokens (0: all).", rich_help_panel=SAMPLING)]
TopP = Annotated[float, typer.Option("--top-p", min=0.0, max=1.0, help="Nucleus sampling mass (1: off).", rich_help_panel=SAMPLING)]
MinP = Annotated[float, typer.Option("--min-p", min=0.0, max=1.0, help="Drop tokens below this fraction of the top probability (0: off).", rich_help_panel=SAMPLING)]
Seed = Annotated[
    Optional[int], typer.Option("--seed", "-s", help="Random seed for reproducible sampling (default: random, reported in --json).", rich_help_panel=SAMPLING)
]
Stop = Annotated[
    Optional[list[str]], typer.Option("--stop", help="Stop when this text appears (repeatable); the stop text is not printed.", rich_help_panel=SAMPLING)
]
IgnoreEos = Annotated[
    bool, typer.Option("--ignore-eos", help="Keep generating past end-of-generation tokens (for benchmarks).", rich_help_panel=SAMPLING)
]
DraftMax = Annotated[
    Optional[int],
    typer.Option("--draft-max", min=0, help=f"K: the most draft tokens verified per target pass, in every mode (default: the pair's recommendation, else {defaults.DRAFT_MAX}; under auto, which picks K each step, {defaults.AUTO_K_MAX}).", rich_help_panel=SPECULATION),
]
Spec = Annotated[
    Optional[str],
    typer.Option(
        "--spec",
        help="Speculation: off (plain decoding), draft (the draft model), ngram (prompt lookup), hybrid (lookup when it has a confident match, else the draft model), auto (picks plain, lookup or draft and K each step from measured speed). Default: auto; off with --draft none.",
        rich_help_panel=SPECULATION,
    ),
]
DraftMin = Annotated[
    int, typer.Option("--draft-min", min=0, help="Draft at least this many tokens before --draft-p-min may stop the draft model.", rich_help_panel=SPECULATION)
]
DraftPMin = Annotated[
    float,
    typer.Option("--draft-p-min", min=0.0, max=1.0, help="The draft model stops drafting when its top probability falls below this.", rich_help_panel=SPECULATION),
]
NgramMin = Annotated[
    int,
    typer.Option("--ngram-min", min=1, help="Prompt lookup: the fewest trailing tokens a match must share with earlier text.", rich_help_panel=SPECULATION),
]
NgramMax = Annotated[
    int,
    typer.Option("--ngram-max", min=1, help="Prompt lookup: the most trailing tokens matched; longer matches earn longer drafts.", rich_help_panel=SPECULATION),
]
CtxSize = Annotated[int, typer.Option("--ctx-size", "-c", min=16, help="Context size in tokens (prompt + answer).", rich_help_panel=RUNTIME)]
Threads = Annotated[int, typer.Option("--threads", "-t", min=0, help="CPU threads (0: all cores).", rich_help_panel=RUNTIME)]
GpuLayers = Annotated[
    Optional[int], typer.Option("--gpu-layers", "-ngl", min=0, help="Target layers on the GPU (default: all when the build can offload, else 0).", rich_help_panel=RUNTIME)
]
DraftGpuLayers = Annotated[
    Optional[int], typer.Option("--draft-gpu-layers", "-ngld", min=0, help="Draft layers on the GPU (default: as --gpu-layers).", rich_help_panel=RUNTIME)
]
Chat = Annotated[
    bool, typer.Option("--chat/--raw", help="Format the prompt with the target's chat template (default) or feed it as is.", rich_help_panel=SAMPLING)
]
System = Annotated[Optional[str], typer.Option("--system", help="System prompt (chat mode).", rich_help_panel=SAMPLING)]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document (text and statistics) instead of streaming.", rich_help_panel=OUTPUT)]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No status line or summary on stderr.", rich_help_panel=OUTPUT)]
