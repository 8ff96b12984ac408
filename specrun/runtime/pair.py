"""A loaded target (and optional draft) with their contexts: the object scripts and the CLI drive.

Loading checks the vocabularies first (no weights read), picks AMX-safe load options, and keeps
the contexts alive across generations so a conversation's KV cache is reused. What drafts in each
generation is the pair's `speculation` (runtime.speculation).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .. import defaults
from ..engine import devices as engine_devices
from ..engine import llama as engine_llama
from ..engine import rpc as engine_rpc
from ..engine.drafting.model import VocabBridge
from ..engine.llama import Context, LoadOptions, Model
from ..engine.loop import GenerationSettings, SpeculativeLoop, Step
from ..engine.sampling import make_rng
from ..models.compat import require_compatible
from ..models.modelfile import check_gguf_file
from ..models.sizes import model_size
from .placement import DeviceSpace, ModelPlacement, Placement, Request, plan
from .speculation import Speculation


@dataclass(frozen=True)
class PairConfig:
    """Where the models are and how they run; identical settings for every configuration compared.

    Layers: None fits them into free device memory (runtime.placement), a negative number puts all
    of them on the devices. devices / draft_devices: llama.cpp device names the models may use
    (None: the default choice; ("cpu",): none). rpc: HOST:PORT of RPC workers whose devices join in.
    """

    target: Path
    draft: Path | None = None
    ctx_size: int = defaults.CTX_SIZE
    threads: int = 0  # 0: defaults.threads()
    gpu_layers: int | None = None
    draft_gpu_layers: int | None = None
    n_batch: int = defaults.N_BATCH
    devices: tuple[str, ...] | None = None
    draft_devices: tuple[str, ...] | None = None
    tensor_split: tuple[float, ...] | None = None
    rpc: tuple[str, ...] = ()
    mmap: bool = True
    mlock: bool = False


_AMX_WARNED = False


def extra_buffers_allowed(warn: Callable[[str], None]) -> bool:
    """llama.cpp's extra buffer types are turned off on AMX builds (their matmul path crashes on some CPUs)."""
    global _AMX_WARNED
    engine_llama.init_backend()
    amx = engine_llama.has_amx()
    if amx and not _AMX_WARNED:
        warn(engine_llama.AMX_WARNING)
        _AMX_WARNED = True
    return not amx


def device_spaces(endpoints: Sequence[str]) -> tuple[list[DeviceSpace], dict[str, int]]:
    """This process's devices as placement sees them (RPC devices only of `endpoints`), and their handles by name."""
    spaces, handles = [], {}
    for device in engine_devices.devices(endpoints):
        kind = "remote" if device.remote else device.kind
        spaces.append(DeviceSpace(device.name, device.free, device.total, kind, device.endpoint))
        handles[device.name] = device.handle
    return spaces, handles


class Pair:
    """Target and draft models with one context each, placed on devices (`placement`)."""

    def __init__(self, config: PairConfig, warn: Callable[[str], None] | None = None, *, contexts: bool = True):
        """`contexts=False` loads the models only (a server makes its own multi-sequence contexts)."""
        warn = warn or (lambda message: print(message, file=sys.stderr))
        self.config = config
        check_gguf_file(config.target)  # before llama.cpp sees it: its errors are cryptic, a truncated file can crash it
        if config.draft is not None:
            check_gguf_file(config.draft)
            require_compatible(Path(config.target), Path(config.draft))
        threads = config.threads or defaults.threads()
        self.threads = threads
        self.warn = warn
        workers = [engine_rpc.parse_endpoint(e) for e in config.rpc]
        engine_rpc.connect(workers)  # unreachable, busy or of another protocol: one line, before any weight is read
        spaces, handles = device_spaces([str(w) for w in workers])
        request = Request(config.ctx_size, config.gpu_layers, config.draft_gpu_layers, config.devices, config.draft_devices,
                          config.tensor_split)
        self.placement: Placement = plan(model_size(config.target), model_size(config.draft) if config.draft else None, spaces, request)
        for warning in self.placement.warnings:
            warn(f"specrun: warning: {warning}")
        extra = extra_buffers_allowed(warn)

        def options(placed: ModelPlacement) -> LoadOptions:
            return LoadOptions(gpu_layers=placed.gpu_layers, use_extra_bufts=extra, devices=tuple(handles[n] for n in placed.offload),
                               tensor_split=placed.tensor_split, mmap=config.mmap, mlock=config.mlock)

        self.gpu_layers = self.placement.target.gpu_layers
        self.draft_gpu_layers = self.placement.draft.gpu_layers if self.placement.draft else 0
        self.target_model = Model(config.target, options(self.placement.target))
        self.target_ctx = Context(self.target_model, n_ctx=config.ctx_size, n_threads=threads, n_batch=config.n_batch) if contexts else None
        self.draft_model = self.draft_ctx = self.bridge = None
        if config.draft is not None:
            self.draft_model = Model(config.draft, options(self.placement.draft))
            self.draft_ctx = Context(self.draft_model, n_ctx=config.ctx_size, n_threads=threads, n_batch=config.n_batch) if contexts else None
            self.bridge = VocabBridge(self.target_model, self.draft_model)
        engine_rpc.harden_connections(workers)
        self.speculation = Speculation(self)

    @property
    def has_draft(self) -> bool:
        return self.draft_model is not None

    def prompt_tokens(self, prompt: str, *, chat: bool = True, system: str | None = None) -> list[int]:
        """Tokenize a prompt, formatted with the target's chat template unless `chat` is False."""
        if chat:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
            return self.tokens_for_messages(messages)
        text = f"{system}\n\n{prompt}" if system else prompt
        return self.target_model.tokenize(text, add_special=True, parse_special=True)

    def tokens_for_messages(self, messages: Sequence[dict], add_assistant: bool = True) -> list[int]:
        """Token ids for a conversation, ending with the assistant's turn opened."""
        text = self.target_model.apply_chat_template(messages, add_assistant)
        return self.target_model.tokenize(text, add_special=True, parse_special=True)

    def loop(self, settings: GenerationSettings, *, mode: str | None = None, use_draft: bool = True) -> SpeculativeLoop:
        """A generation loop over this pair's contexts.

        mode: "off" (plain decoding), "draft" (the draft model), "ngram" (prompt lookup), "hybrid"
        (lookup when it has a confident match, else the draft model) or "auto" (chosen per step from
        measured costs and acceptance); None is the default mode. `use_draft=False` means "off".
        """
        mode = "off" if not use_draft else (mode or defaults.SPEC_MODE)
        rng = make_rng(settings.seed)
        policy = self.speculation.policy(mode, settings, rng)
        return SpeculativeLoop(self.target_ctx, policy, settings, rng=rng, draft_ctx=self.draft_ctx)

    def stream(self, prompt_tokens: Sequence[int], settings: GenerationSettings, *, mode: str | None = None) -> Iterator[Step]:
        """Generate, yielding steps; the loop's `stats` are complete when the iterator ends."""
        return self.loop(settings, mode=mode).run(prompt_tokens)

    def close(self) -> None:
        for obj in (self.draft_ctx, self.target_ctx, self.draft_model, self.target_model):
            if obj is not None:
                obj.close()


def load_pair(target: str | Path, draft: str | Path | None = None, **options) -> Pair:
    """Load a target and optional draft from local GGUF paths (see PairConfig for options)."""
    return Pair(PairConfig(Path(target), Path(draft) if draft else None, **options))
