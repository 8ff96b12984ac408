"""Option types shared by the commands (run, chat, bench), named as llama.cpp names them, and the
groups they come in.

Each option is an `Annotated` alias, so a flag is spelled and documented in one place. The flags
several commands share come in groups (frozen dataclasses: models, sampling, speculation, runtime):
a command declares one parameter per group, `flag_groups` spreads each group's fields into the
signature typer reads (so `--help`, defaults and validation stay typer's own), and the command gets
the group back as one object.
"""

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from .. import defaults

MODELS = "Models"
SAMPLING = "Sampling"
SPECULATION = "Speculation"
RUNTIME = "Runtime"
OUTPUT = "Output"

Target = Annotated[
    str | None,
    typer.Option(
        "--target",
        "-m",
        help="Target model: a .gguf path, a registry name, or hf:OWNER/REPO/FILE.gguf. Default: the default pair's "
        "target.",
        rich_help_panel=MODELS,
    ),
]
Draft = Annotated[
    str | None,
    typer.Option(
        "--draft",
        "-md",
        help="Draft model (same forms as --target), a Gemma 4 MTP assistant for a Gemma 4 target, an EAGLE-3 or "
        "DFlash head made for the target, or 'none' for plain decoding. Default: the pair's draft.",
        rich_help_panel=MODELS,
    ),
]
PairName = Annotated[
    str | None, typer.Option("--pair", help="A pair from the registry (see `specrun pairs`).", rich_help_panel=MODELS)
]
Registry = Annotated[
    Path | None,
    typer.Option(
        "--registry", help="Extra models.toml merged over the shipped and user registries.", rich_help_panel=MODELS
    ),
]
MaxTokens = Annotated[
    int, typer.Option("--max-tokens", "-n", min=0, help="Tokens to generate at most.", rich_help_panel=SAMPLING)
]
Temperature = Annotated[
    float,
    typer.Option(
        "--temperature", "--temp", min=0.0, help="Sampling temperature; 0 is greedy.", rich_help_panel=SAMPLING
    ),
]
TopK = Annotated[
    int, typer.Option("--top-k", min=0, help="Keep the k most likely tokens (0: all).", rich_help_panel=SAMPLING)
]
TopP = Annotated[
    float, typer.Option("--top-p", min=0.0, max=1.0, help="Nucleus sampling mass (1: off).", rich_help_panel=SAMPLING)
]
MinP = Annotated[
    float,
    typer.Option(
        "--min-p",
        min=0.0,
        max=1.0,
        help="Drop tokens below this fraction of the top probability (0: off).",
        rich_help_panel=SAMPLING,
    ),
]
Seed = Annotated[
    int | None,
    typer.Option(
        "--seed",
        "-s",
        help="Random seed for reproducible sampling (default: random, reported in --json).",
        rich_help_panel=SAMPLING,
    ),
]
Stop = Annotated[
    list[str] | None,
    typer.Option(
        "--stop",
        help="Stop when this text appears (repeatable); the stop text is not printed.",
        rich_help_panel=SAMPLING,
    ),
]
IgnoreEos = Annotated[
    bool,
    typer.Option(
        "--ignore-eos", help="Keep generating past end-of-generation tokens (for benchmarks).", rich_help_panel=SAMPLING
    ),
]
DraftMax = Annotated[
    int | None,
    typer.Option(
        "--draft-max",
        min=0,
        help="K: the most draft tokens verified per target pass, in every mode (default: the pair's recommendation, "
        f"else {defaults.DRAFT_MAX}; under auto, which picks K each step, {defaults.AUTO_K_MAX}).",
        rich_help_panel=SPECULATION,
    ),
]
Spec = Annotated[
    str | None,
    typer.Option(
        "--spec",
        help="Speculation: off (plain decoding), draft (the draft model), ngram (prompt lookup), hybrid (lookup when "
        "it has a confident match, else the draft model), text (a draft model of another vocabulary, through "
        "text), mtp (the target's own multi-token-prediction heads), eagle3 or dflash (an EAGLE-3 or DFlash head "
        "given as --draft), auto (picks plain, lookup or draft and K "
        "each step from measured speed). Default: auto; off with --draft none.",
        rich_help_panel=SPECULATION,
    ),
]
DraftMin = Annotated[
    int,
    typer.Option(
        "--draft-min",
        min=0,
        help="Draft at least this many tokens before --draft-p-min may stop the draft model.",
        rich_help_panel=SPECULATION,
    ),
]
DraftPMin = Annotated[
    float,
    typer.Option(
        "--draft-p-min",
        min=0.0,
        max=1.0,
        help="The draft model stops drafting when its top probability falls below this.",
        rich_help_panel=SPECULATION,
    ),
]
NgramMin = Annotated[
    int,
    typer.Option(
        "--ngram-min",
        min=1,
        help="Prompt lookup: the fewest trailing tokens a match must share with earlier text.",
        rich_help_panel=SPECULATION,
    ),
]
NgramMax = Annotated[
    int,
    typer.Option(
        "--ngram-max",
        min=1,
        help="Prompt lookup: the most trailing tokens matched; longer matches earn longer drafts.",
        rich_help_panel=SPECULATION,
    ),
]
CtxSize = Annotated[
    int | None,
    typer.Option(
        "--ctx-size",
        "-c",
        min=16,
        help=f"Context size in tokens (prompt + answer). Default: {defaults.CTX_SIZE}; for serve, the model's "
        "trained context, as far as the KV caches fit in half the memory available.",
        rich_help_panel=RUNTIME,
    ),
]
Threads = Annotated[
    int, typer.Option("--threads", "-t", min=0, help="CPU threads (0: all cores).", rich_help_panel=RUNTIME)
]
GpuLayers = Annotated[
    str,
    typer.Option(
        "--gpu-layers",
        "-ngl",
        metavar="N|auto|all",
        help="Target layers on the offload devices (GPUs, RPC workers): a number, all, or auto: as many as fit in "
        "their free memory beside the draft and both KV caches, the rest on the CPU.",
        rich_help_panel=RUNTIME,
    ),
]
DraftGpuLayers = Annotated[
    str,
    typer.Option(
        "--draft-gpu-layers",
        "-ngld",
        metavar="N|auto|all",
        help="Draft layers on the offload devices: a number, all, or auto: the whole draft on one local GPU it fits "
        "on, else the CPU.",
        rich_help_panel=RUNTIME,
    ),
]
Device = Annotated[
    str | None,
    typer.Option(
        "--device",
        "-dev",
        metavar="NAME[,NAME…]",
        help="Devices the target may use, by llama.cpp's names (CUDA0, Vulkan1, RPC0 or RPC[host:port]; `specrun "
        "doctor` lists them); cpu: none. Default: every RPC worker and GPU.",
        rich_help_panel=RUNTIME,
    ),
]
DraftDevice = Annotated[
    str | None,
    typer.Option(
        "--draft-device",
        "-devd",
        "--device-draft",
        metavar="NAME[,NAME…]",
        help="Devices the draft may use (cpu: the CPU). Default: a local GPU it fits on whole, else the CPU; never an "
        "RPC worker unless named here.",
        rich_help_panel=RUNTIME,
    ),
]
TensorSplit = Annotated[
    str | None,
    typer.Option(
        "--tensor-split",
        "-ts",
        metavar="N0,N1,…",
        help="The target's share of each device, as proportions (e.g. 3,1), in the order of its devices: RPC workers, "
        "then GPUs, then the CPU when only RPC workers offload. Default: by free memory.",
        rich_help_panel=RUNTIME,
    ),
]
Rpc = Annotated[
    str | None,
    typer.Option(
        "--rpc",
        metavar="HOST:PORT[,…]",
        help="RPC workers (`specrun worker`) whose devices take a share of the target's layers. llama.cpp's RPC has "
        "no authentication or encryption: use it only between trusted machines.",
        rich_help_panel=RUNTIME,
    ),
]
Mlock = Annotated[
    bool,
    typer.Option(
        "--mlock", help="Lock both models' weights in RAM, so they are never swapped out.", rich_help_panel=RUNTIME
    ),
]
FlashAttn = Annotated[
    str,
    typer.Option(
        "--flash-attn",
        "-fa",
        metavar="auto|on|off",
        help="llama.cpp's fused attention kernel. auto: off for one sequence whose layers all run on the CPU "
        "(unfused attention reads deep contexts several times faster there) unless its score buffer would take "
        "over an eighth of the memory available, else llama.cpp's choice.",
        rich_help_panel=RUNTIME,
    ),
]
NoMmap = Annotated[
    bool,
    typer.Option(
        "--no-mmap", help="Read the weights into memory instead of mapping the model files.", rich_help_panel=RUNTIME
    ),
]
Chat = Annotated[
    bool,
    typer.Option(
        "--chat/--raw",
        help="Format the prompt with the target's chat template (default) or feed it as is.",
        rich_help_panel=SAMPLING,
    ),
]
System = Annotated[str | None, typer.Option("--system", help="System prompt (chat mode).", rich_help_panel=SAMPLING)]
Think = Annotated[
    bool | None,
    typer.Option(
        "--think/--no-think",
        help="Thinking models: switch reasoning on or off (the chat template's enable_thinking). Default: the "
        "template's own default.",
        rich_help_panel=SAMPLING,
    ),
]
HideThinking = Annotated[
    bool,
    typer.Option(
        "--hide-thinking",
        help="Do not show a thinking model's reasoning (by default it goes to stderr, dimmed on a terminal).",
        rich_help_panel=OUTPUT,
    ),
]
Json = Annotated[
    bool,
    typer.Option(
        "--json", help="Print one JSON document (text and statistics) instead of streaming.", rich_help_panel=OUTPUT
    ),
]
Quiet = Annotated[
    bool, typer.Option("--quiet", "-q", help="No status line or summary on stderr.", rich_help_panel=OUTPUT)
]


# ---- groups -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelFlags:
    """Which models: --target, --draft, --pair, --registry."""

    target: Target = None
    draft: Draft = None
    pair: PairName = None
    registry: Registry = None


@dataclasses.dataclass(frozen=True)
class FilterFlags:
    """Sampling filters, applied to target and draft alike."""

    top_k: TopK = defaults.TOP_K
    top_p: TopP = defaults.TOP_P
    min_p: MinP = defaults.MIN_P


@dataclasses.dataclass(frozen=True)
class SamplingFlags:
    """How tokens are chosen and when generation stops (run, chat)."""

    temperature: Temperature = defaults.TEMPERATURE
    filters: FilterFlags = FilterFlags()
    seed: Seed = None
    stop: Stop = None
    ignore_eos: IgnoreEos = False


@dataclasses.dataclass(frozen=True)
class TuningFlags:
    """Drafters' fine settings: the draft model's early stop, prompt lookup's match lengths."""

    draft_min: DraftMin = defaults.DRAFT_MIN
    draft_p_min: DraftPMin = defaults.DRAFT_P_MIN
    ngram_min: NgramMin = defaults.NGRAM_MIN
    ngram_max: NgramMax = defaults.NGRAM_MAX


@dataclasses.dataclass(frozen=True)
class SpeculationFlags:
    """The mode and K (run, chat), and the drafters' fine settings."""

    spec: Spec = None
    draft_max: DraftMax = None
    tuning: TuningFlags = TuningFlags()


@dataclasses.dataclass(frozen=True)
class FramingFlags:
    """How the prompt is framed, and whether a thinking model's reasoning is shown (run, chat)."""

    system: System = None
    think: Think = None
    hide_thinking: HideThinking = False


@dataclasses.dataclass(frozen=True)
class RuntimeFlags:
    """Where and how the models run: context, threads, devices and layers on them, RPC workers, memory."""

    ctx_size: CtxSize = None  # None: defaults.CTX_SIZE, or serve's choice (runtime.context_size)
    threads: Threads = 0
    gpu_layers: GpuLayers = "auto"
    draft_gpu_layers: DraftGpuLayers = "auto"
    device: Device = None
    draft_device: DraftDevice = None
    tensor_split: TensorSplit = None
    rpc: Rpc = None
    mlock: Mlock = False
    no_mmap: NoMmap = False
    flash_attn: FlashAttn = "auto"


@dataclasses.dataclass(frozen=True)
class GenerateFlags:
    """Everything run and chat share: the models, how tokens are chosen, speculation, the runtime
    and the prompt's framing."""

    models: ModelFlags = ModelFlags()
    sampling: SamplingFlags = SamplingFlags()
    speculation: SpeculationFlags = SpeculationFlags()
    runtime: RuntimeFlags = RuntimeFlags()
    framing: FramingFlags = FramingFlags()


def _is_group(annotation: object) -> bool:
    return isinstance(annotation, type) and dataclasses.is_dataclass(annotation)


def _spread(name: str, group: type, default: object) -> tuple[list[inspect.Parameter], Callable[[dict], object]]:
    """A group's fields as keyword parameters (nested groups spread too), and the function that
    builds the group back from the values typer passes."""
    hints = typing.get_type_hints(group, include_extras=True)
    params: list[inspect.Parameter] = []
    builders: list[tuple[str, Callable[[dict], object]]] = []
    for field in dataclasses.fields(group):
        value = getattr(default, field.name)
        if _is_group(hints[field.name]):
            inner, build = _spread(field.name, hints[field.name], value)
            params += inner
            builders.append((field.name, build))
        else:
            params.append(
                inspect.Parameter(
                    field.name, inspect.Parameter.KEYWORD_ONLY, default=value, annotation=hints[field.name]
                )
            )
            builders.append((field.name, lambda values, key=field.name: values.pop(key)))
    return params, lambda values: group(**{key: build(values) for key, build in builders})


def flag_groups(command: Callable) -> Callable:
    """Let `command` take flag groups as parameters (see the module docstring)."""
    hints = typing.get_type_hints(command, include_extras=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, Callable[[dict], object]] = {}
    for param in inspect.signature(command).parameters.values():
        annotation = hints.get(param.name, param.annotation)
        if _is_group(annotation):
            spread, groups[param.name] = _spread(param.name, annotation, param.default)
            params += spread
        else:
            params.append(param.replace(annotation=annotation, kind=inspect.Parameter.KEYWORD_ONLY))
    names = [p.name for p in params]
    if len(names) != len(set(names)):
        raise TypeError(f"{command.__name__}: a flag is declared twice")

    @functools.wraps(command)
    def wrapper(**values):
        built = {name: build(values) for name, build in groups.items()}
        return command(**values, **built)

    wrapper.__signature__ = inspect.Signature(params)
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must read the spread signature, not the command's own
    return wrapper
