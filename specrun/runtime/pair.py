"""A loaded target (and optional draft), placed on devices: what every generation needs of the models.

Loading checks the vocabularies first (no weights read), picks AMX-safe load options and places
the layers. Generations run in a Session (runtime.session) on these models: the pair's own
session (`pair.session`, made on first use) keeps its contexts across generations so a
conversation's KV cache is reused; a server makes a session of many sequences instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..engine import devices as engine_devices
from ..engine import lib as engine_lib
from ..engine import rpc as engine_rpc
from ..engine.drafting.vocab_bridge import VocabBridge
from ..engine.generation import Generation, Step
from ..engine.model import LoadOptions, Model
from ..engine.sequence import GenerationSettings, check_prediction_fits
from ..errors import IncompatibleModelsError
from ..models.compat import require_draftable
from ..models.modelfile import (
    UNCHAINED_HEADS,
    a_feature_head,
    assists,
    check_gguf_file,
    feature_head,
    mtp_chain,
    mtp_layers,
    require_feature_fit,
)
from ..models.sizes import model_size
from . import cost_cache
from .chat_format import ChatFormat, ChatPrompt
from .placement import DeviceSpace, ModelPlacement, Placement, Request, plan
from .session import Models, Session


@dataclass(frozen=True)
class PairConfig:
    """Where the models are and how they run; identical settings for every configuration compared.

    Layers: None fits them into free device memory (runtime.placement), a negative number puts all
    of them on the devices. devices / draft_devices: llama.cpp device names the models may use
    (None: the default choice; ("cpu",): none). rpc: HOST:PORT of RPC workers whose devices join in.
    cache_ram_mib: host RAM for the caches of earlier prompts, restored when a prompt comes back (0: none).
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
    cache_ram_mib: int = 0
    flash_attn: str = "auto"  # fused attention: "on", "off", or "auto" (engine/attention.py)


_AMX_WARNED = False


def extra_buffers_allowed(warn: Callable[[str], None]) -> bool:
    """llama.cpp's extra buffer types are turned off on AMX builds (their matmul path crashes on some CPUs)."""
    global _AMX_WARNED
    engine_lib.init_backend()
    amx = engine_lib.has_amx()
    if amx and not _AMX_WARNED:
        warn(engine_lib.AMX_WARNING)
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


def require_layers(target: Model, head: Model) -> None:
    """Refuse a head that reads layers its target does not have (llama.cpp would abort on them)."""
    layers = head.feature_head.layers
    if not layers or any(not 0 <= layer < target.n_layer for layer in layers):
        raise IncompatibleModelsError(
            f"{head.path.name} is {a_feature_head(head.arch)} that reads layers {list(layers)}, and "
            f"{target.path.name} has {target.n_layer}",
            "use the head published with this target",
        )


class Pair:
    """Target and draft models placed on devices (`placement`)."""

    def __init__(self, config: PairConfig, warn: Callable[[str], None] | None = None):
        warn = warn or (lambda message: print(message, file=sys.stderr))
        self.config = config
        check_gguf_file(
            config.target
        )  # before llama.cpp sees it: its errors are cryptic, a truncated file can crash it
        self.drafting: str | None = None  # how the draft drafts: "token" (shared vocabulary) or "text"
        self.assisted = False  # the draft is a Gemma 4 MTP assistant, which drafts over the target's cache
        self.feature_kind: str | None = None  # the draft is an EAGLE-3 or DFlash head on the target's layer inputs
        if config.draft is not None:
            check_gguf_file(config.draft)
            self.assisted = assists(config.target, config.draft)
            if feature_head(config.draft):
                self.feature_kind = require_feature_fit(config.target, config.draft)
            if self.assisted or self.feature_kind:  # it reads the target's own rows: only its vocabulary will do
                if require_draftable(Path(config.target), Path(config.draft)).drafting != "token":
                    raise IncompatibleModelsError(
                        f"{Path(config.draft).name} does not share the vocabulary of {Path(config.target).name}",
                        f"use the {'assistant' if self.assisted else 'head'} published with this target",
                    )
            else:
                self.drafting = require_draftable(Path(config.target), Path(config.draft)).drafting
        threads = config.threads or defaults.threads()
        self.threads = threads
        self.warn = warn
        workers = [engine_rpc.parse_endpoint(e) for e in config.rpc]
        engine_rpc.connect(workers)  # unreachable, busy or of another protocol: one line, before any weight is read
        spaces, handles = device_spaces([str(w) for w in workers])
        request = Request(
            config.ctx_size,
            config.gpu_layers,
            config.draft_gpu_layers,
            config.devices,
            config.draft_devices,
            config.tensor_split,
        )
        self.placement: Placement = plan(
            model_size(config.target), model_size(config.draft) if config.draft else None, spaces, request
        )
        for warning in self.placement.warnings:
            warn(f"specrun: warning: {warning}")
        extra = extra_buffers_allowed(warn)

        def options(placed: ModelPlacement, load_mtp: bool = False) -> LoadOptions:
            return LoadOptions(
                gpu_layers=placed.gpu_layers,
                use_extra_bufts=extra,
                devices=tuple(handles[n] for n in placed.offload),
                tensor_split=placed.tensor_split,
                mmap=config.mmap,
                mlock=config.mlock,
                load_mtp=load_mtp,
            )

        self.gpu_layers = self.placement.target.gpu_layers
        self.draft_gpu_layers = self.placement.draft.gpu_layers if self.placement.draft else 0
        self.mtp_chain = mtp_chain(config.target)
        if self.mtp_chain is None and (heads := mtp_layers(config.target)):
            warn(
                f"specrun: warning: {Path(config.target).name} has {heads} MTP heads, and {UNCHAINED_HEADS}; its "
                "heads are not used"
            )
        self.target_model = Model(config.target, options(self.placement.target, load_mtp=self.mtp_chain is not None))
        self.draft_model = self.bridge = self.assistant_model = self.feature_model = None
        if self.assisted:
            self.assistant_model = Model(config.draft, options(self.placement.draft))
        elif self.feature_kind is not None:
            self.feature_model = Model(config.draft, options(self.placement.draft))
            require_layers(self.target_model, self.feature_model)
        elif config.draft is not None:
            self.draft_model = Model(config.draft, options(self.placement.draft))
            self.bridge = VocabBridge(self.target_model, self.draft_model) if self.drafting == "token" else None
        engine_rpc.harden_connections(workers)
        self.chat_format = ChatFormat(self.target_model, warn)  # the draft reads the same token ids
        self._session: Session | None = None

    @property
    def session(self) -> Session:
        """The pair's own session of one sequence (made on first use), kept across generations."""
        if self._session is None:
            self._session = Session(self.models(), cache_ram=self.config.cache_ram_mib * 2**20)
        return self._session

    def models(self) -> Models:
        """What a session needs of this pair."""
        config = self.config
        return Models(
            self.target_model,
            self.draft_model,
            self.bridge,
            self.drafting,
            Path(config.target),
            Path(config.draft) if config.draft else None,
            config.ctx_size,
            config.n_batch,
            self.threads,
            offloaded=bool(self.gpu_layers or self.draft_gpu_layers),
            costs_key=self.costs_key(),
            warn=self.warn,
            mtp_chain=self.mtp_chain,
            assistant=self.assistant_model,
            feature_head=self.feature_model,
            flash_attn=config.flash_attn,
        )

    def costs_key(self) -> str:
        """The cost cache's key for this pair: models, threads, offload, build and placement."""
        config = self.config
        return cost_cache.cache_key(
            Path(config.target),
            Path(config.draft) if config.draft else None,
            threads=self.threads,
            gpu_layers=self.gpu_layers,
            draft_gpu_layers=self.draft_gpu_layers,
            build=engine_lib.system_info() + self.placement.key(),
        )

    @property
    def n_ctx(self) -> int:
        return self.config.ctx_size

    @property
    def has_draft(self) -> bool:
        return self.draft_model is not None

    def prompt_tokens(
        self, prompt: str, *, chat: bool = True, system: str | None = None, variables: Mapping | None = None
    ) -> list[int]:
        """Tokenize a prompt, formatted with the target's chat template unless `chat` is False;
        `variables` reach the template (e.g. {"enable_thinking": False})."""
        if chat:
            return self.chat_prompt(prompt, system=system, variables=variables).tokens
        text = f"{system}\n\n{prompt}" if system else prompt
        return self.target_model.tokenize(text, add_special=True, parse_special=True)

    def chat_prompt(self, prompt: str, *, system: str | None = None, variables: Mapping | None = None) -> ChatPrompt:
        """One user message (after an optional system prompt), rendered and tokenized."""
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        return self.chat_format.prompt(messages, variables=variables)

    def tokens_for_messages(self, messages: Sequence[dict], variables: Mapping | None = None) -> list[int]:
        """Token ids for a conversation, ending with the assistant's turn opened."""
        return self.chat_format.prompt(messages, variables=variables).tokens

    def generation(
        self,
        tokens: Sequence[int],
        settings: GenerationSettings,
        *,
        mode: str | None = None,
        prediction: Sequence[int] | None = None,
    ) -> Generation:
        """A generation on the pair's own session (see Session.generation)."""
        return self.session.generation(tokens, settings, mode=mode, prediction=prediction)

    def stream(
        self,
        prompt_tokens: Sequence[int],
        settings: GenerationSettings,
        *,
        mode: str | None = None,
        prediction: Sequence[int] | None = None,
    ) -> Iterator[Step]:
        """Generate, yielding steps; the generation's `stats` are complete when the iterator ends."""
        return self.generation(prompt_tokens, settings, mode=mode, prediction=prediction).run()

    def prediction_tokens(self, text: str) -> list[int]:
        """A predicted output's tokens, as the answer would hold them; refused when longer than the context."""
        tokens = self.target_model.tokenize(text, add_special=False, parse_special=False)
        check_prediction_fits(len(tokens), self.config.ctx_size)
        return tokens

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        for model in (self.assistant_model, self.draft_model, self.target_model):
            if model is not None:
                model.close()


def load_pair(target: str | Path, draft: str | Path | None = None, **options) -> Pair:
    """Load a target and optional draft from local GGUF paths (see PairConfig for options)."""
    return Pair(PairConfig(Path(target), Path(draft) if draft else None, **options))
