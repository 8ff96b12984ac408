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
from ..engine import llama as engine_llama
from ..engine.drafting.model import VocabBridge
from ..engine.llama import Context, LoadOptions, Model
from ..engine.loop import GenerationSettings, SpeculativeLoop, Step
from ..engine.sampling import make_rng
from ..models.compat import require_compatible
from ..models.modelfile import check_gguf_file
from .speculation import Speculation


@dataclass(frozen=True)
class PairConfig:
    """Where the models are and how they run; identical settings for every configuration compared."""

    target: Path
    draft: Path | None = None
    ctx_size: int = defaults.CTX_SIZE
    threads: int = 0  # 0: defaults.threads()
    gpu_layers: int | None = None  # None: all layers when the build can offload, else 0
    draft_gpu_layers: int | None = None
    n_batch: int = defaults.N_BATCH


_AMX_WARNED = False


def load_options(gpu_layers: int | None, warn: Callable[[str], None]) -> LoadOptions:
    """GPU layers default to all when offload exists; extra buffers are turned off on AMX builds."""
    global _AMX_WARNED
    engine_llama.init_backend()
    if gpu_layers is None:
        gpu_layers = 999 if engine_llama.supports_gpu_offload() else 0
    amx = engine_llama.has_amx()
    if amx and not _AMX_WARNED:
        warn(engine_llama.AMX_WARNING)
        _AMX_WARNED = True
    return LoadOptions(gpu_layers=gpu_layers, use_extra_bufts=not amx)


class Pair:
    """Target and draft models with one context each."""

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
        target_options = load_options(config.gpu_layers, warn)
        self.gpu_layers = target_options.gpu_layers
        self.draft_gpu_layers = 0
        self.target_model = Model(config.target, target_options)
        self.target_ctx = Context(self.target_model, n_ctx=config.ctx_size, n_threads=threads, n_batch=config.n_batch) if contexts else None
        self.draft_model = self.draft_ctx = self.bridge = None
        if config.draft is not None:
            draft_layers = config.draft_gpu_layers if config.draft_gpu_layers is not None else config.gpu_layers
            draft_options = load_options(draft_layers, warn)
            self.draft_gpu_layers = draft_options.gpu_layers
            self.draft_model = Model(config.draft, draft_options)
            self.draft_ctx = Context(self.draft_model, n_ctx=config.ctx_size, n_threads=threads, n_batch=config.n_batch) if contexts else None
            self.bridge = VocabBridge(self.target_model, self.draft_model)
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
