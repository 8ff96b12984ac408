"""Where a pair's layers go: which devices, how many layers on each, and the bytes that takes.

Pure arithmetic over plain numbers (device memory, model sizes), so the rules can be tested with
made-up machines. The rules, under `auto`:

- The draft goes first and whole onto one local GPU it fits on (weights and KV cache): its latency
  is paid on every step, and a draft split between devices pays a transfer per token. If it fits
  nowhere it runs on the CPU. `--draft-device` names where it may go (`cpu`: the CPU).
- The target then gets as many layers as fit beside it on the offload devices (RPC workers first,
  then local GPUs, as llama.cpp orders them), split in proportion to their free memory or to
  `--tensor-split`; what does not fit stays on the CPU. When every offload device is an RPC
  worker, the local CPU takes a share too, in proportion to its free memory.

Layers are counted as llama.cpp counts them: `n_gpu_layers` includes the output layer (norm and
head), offloaded first; the token embeddings always stay on the CPU. Which device gets which layer
follows llama.cpp's own rule (`llama_model_base::load_tensors`), computed in float32 as it does,
so the placement reported is the one llama.cpp makes with the split handed to it.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..models.sizes import ModelSize

MiB = 1 << 20
RESERVE_BYTES = 512 * MiB  # kept free on every offload device for llama.cpp's compute buffers
CPU = "CPU"
NO_OFFLOAD = ("cpu", "none")  # --device / --draft-device values meaning: keep everything on the CPU


@dataclass(frozen=True)
class DeviceSpace:
    """A device and its memory, in bytes. kind: cpu, gpu (local: GPU or iGPU) or remote (RPC)."""

    name: str
    free: int
    total: int
    kind: str = "gpu"
    endpoint: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name}[{self.endpoint}]" if self.endpoint else self.name

    @property
    def budget(self) -> int:
        """What a model may take here: free memory less the compute-buffer reserve."""
        return max(0, self.free - RESERVE_BYTES)


@dataclass(frozen=True)
class Request:
    """What the flags ask for. Layers: None is auto, a negative number all."""

    ctx_size: int
    gpu_layers: int | None = None
    draft_gpu_layers: int | None = None
    devices: tuple[str, ...] | None = None
    draft_devices: tuple[str, ...] | None = None
    tensor_split: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Share:
    """One device's part of a model: repeating layers, bytes (weights and KV), whether it holds the output layer."""

    device: str
    endpoint: str | None
    layers: int
    bytes: int
    output: bool = False

    @property
    def label(self) -> str:
        return f"{self.device}[{self.endpoint}]" if self.endpoint else self.device

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "endpoint": self.endpoint,
            "layers": self.layers,
            "bytes": self.bytes,
            "output_layer": self.output,
        }


@dataclass(frozen=True)
class ModelPlacement:
    """One model's placement, and the llama_model_params that make it."""

    n_layer: int
    gpu_layers: int  # llama.cpp's n_gpu_layers (the output layer counts as one)
    offload: tuple[str, ...]  # device names handed to llama.cpp (model_params.devices), in order
    tensor_split: tuple[float, ...] | None  # one proportion per offload device
    shares: tuple[Share, ...]  # every device holding a part, the CPU last

    def describe(self) -> str:
        """'14/28 layers RPC0[10.0.0.2:50052] (0.6 GB) + 14/28 CPU (0.7 GB)'."""
        parts = [
            f"{s.layers}/{self.n_layer}{' layers' if not i else ''} {s.label} ({size_text(s.bytes)})"
            for i, s in enumerate(s for s in self.shares if s.layers or s.output)
        ]
        return " + ".join(parts)

    def to_dict(self) -> dict:
        return {
            "n_layer": self.n_layer,
            "gpu_layers": self.gpu_layers,
            "devices": [s.to_dict() for s in self.shares],
            "tensor_split": list(self.tensor_split) if self.tensor_split else None,
        }

    def signature(self) -> list:
        """Devices, endpoints and layers: what decode speed depends on."""
        return [[s.device, s.endpoint, s.layers, s.output] for s in self.shares]


@dataclass(frozen=True)
class Placement:
    """Target and draft placements, and warnings about explicit choices that may not fit."""

    target: ModelPlacement
    draft: ModelPlacement | None = None
    warnings: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """The startup line: 'target 28/28 layers CPU (1.2 GB) · draft 24/24 layers CPU (0.5 GB)'."""
        return f"target {self.target.describe()}" + (f" · draft {self.draft.describe()}" if self.draft else "")

    def brief(self) -> str:
        """The summary's form: 'target RPC0[10.0.0.2:50052] 14 + CPU 14 layers, draft CPU'."""

        def short(placed: ModelPlacement) -> str:
            parts = [s for s in placed.shares if s.layers or s.output]
            if len(parts) == 1:
                return parts[0].label
            return " + ".join(f"{s.label} {s.layers}" for s in parts) + " layers"

        return f"target {short(self.target)}" + (f", draft {short(self.draft)}" if self.draft else "")

    @property
    def remote(self) -> bool:
        """Part of a model runs on an RPC worker."""
        return any(s.endpoint for placed in (self.target, self.draft) if placed for s in placed.shares)

    def to_dict(self) -> dict:
        return {"target": self.target.to_dict(), "draft": self.draft.to_dict() if self.draft else None}

    def signature(self) -> dict:
        """A stable, JSON-able description (devices, endpoints, layers per device): costs measured
        under one placement are kept apart from another's."""
        return {"target": self.target.signature(), "draft": self.draft.signature() if self.draft else None}

    def key(self) -> str:
        """The signature as one canonical string, for cache keys."""
        return json.dumps(self.signature(), sort_keys=True, separators=(",", ":"))


def size_text(nbytes: int) -> str:
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e8 else f"{nbytes / 1e6:.1f} MB"


# ---- llama.cpp's rule ---------------------------------------------------------------------------


def layer_devices(n_layer: int, gpu_layers: int, splits: Sequence[float]) -> list[int | None]:
    """The offload device (an index into `splits`) of llama.cpp's layers 0..n_layer, where n_layer is
    the output layer; None for the CPU. The last `gpu_layers` layers are offloaded, cut where the
    cumulative split passes each layer's fraction of them."""
    n_all = n_layer + 1
    ngl = n_all if gpu_layers < 0 else min(gpu_layers, n_all)
    if not splits or ngl == 0 or sum(splits) <= 0:
        return [None] * n_all
    cumulative = np.cumsum(np.asarray(splits, dtype=np.float32), dtype=np.float32)
    cumulative = (cumulative / cumulative[-1]).astype(np.float32).tolist()
    start = n_all - ngl
    out: list[int | None] = []
    for il in range(n_all):
        if il < start:
            out.append(None)
        else:
            fraction = float(np.float32(il - start) / np.float32(ngl))
            out.append(min(bisect_right(cumulative, fraction), len(splits) - 1))
    return out


def usage(
    size: ModelSize, n_ctx: int, assignment: Sequence[int | None], n_devices: int
) -> tuple[list[int], list[int], int | None]:
    """(bytes per offload device, layers per offload device, the output layer's device) for an
    assignment; the CPU's part is what is left."""
    nbytes, layers = [0] * n_devices, [0] * n_devices
    for il, device in enumerate(assignment[: size.n_layer]):
        if device is not None:
            nbytes[device] += size.layer_bytes[il] + size.kv_bytes(n_ctx)
            layers[device] += 1
    output = assignment[size.n_layer]
    if output is not None:
        nbytes[output] += size.output_bytes
    return nbytes, layers, output


def fit_gpu_layers(
    size: ModelSize, n_ctx: int, splits: Sequence[float], budgets: Sequence[int], most: int | None = None
) -> int:
    """The most layers (llama.cpp's count, at most `most`) whose share of each device fits its budget."""
    n_all = size.n_layer + 1
    for ngl in range(min(n_all, n_all if most is None else most), 0, -1):
        nbytes, _, _ = usage(size, n_ctx, layer_devices(size.n_layer, ngl, splits), len(budgets))
        if all(b <= budget for b, budget in zip(nbytes, budgets)):
            return ngl
    return 0


def model_placement(
    size: ModelSize, n_ctx: int, offload: Sequence[DeviceSpace], gpu_layers: int, splits: Sequence[float]
) -> ModelPlacement:
    """The placement llama.cpp makes of `size` with these devices, layers and split."""
    n_all = size.n_layer + 1
    ngl = n_all if gpu_layers < 0 else min(gpu_layers, n_all)
    if not offload or sum(splits) <= 0:
        ngl = 0
    assignment = layer_devices(size.n_layer, ngl, splits)
    nbytes, layers, output = usage(size, n_ctx, assignment, len(offload))
    shares = [
        Share(d.name, d.endpoint, layers[i], nbytes[i], output == i)
        for i, d in enumerate(offload)
        if layers[i] or output == i
    ]
    on_cpu = [il for il in range(size.n_layer) if assignment[il] is None]
    cpu_bytes = size.input_bytes + sum(size.layer_bytes[il] + size.kv_bytes(n_ctx) for il in on_cpu)
    cpu_bytes += size.output_bytes if output is None else 0
    shares.append(Share(CPU, None, len(on_cpu), cpu_bytes, output is None))
    used = tuple(d.name for d in offload) if ngl else ()
    return ModelPlacement(size.n_layer, ngl, used, tuple(float(s) for s in splits) if ngl else None, tuple(shares))


# ---- the plan -------------------------------------------------------------------------------------


def resolve_devices(names: Sequence[str], devices: Sequence[DeviceSpace], flag: str) -> list[DeviceSpace]:
    """Device names (llama.cpp's, case-insensitive; `RPC[host:port]` for a worker's devices) →
    devices; `cpu` or `none` alone means none. An unknown name is a usage error listing the known ones."""
    wanted = [n.strip() for n in names if n.strip()]
    if len(wanted) == 1 and wanted[0].lower() in NO_OFFLOAD:
        return []
    offloadable = [d for d in devices if d.kind != "cpu"]
    out: list[DeviceSpace] = []
    for name in wanted:
        if name.lower() in NO_OFFLOAD:
            raise InputError(
                f"{flag}: '{name}' means no offload and cannot be combined with other devices",
                f"give {flag} {name} alone, or only offload devices",
            )
        found = [d for d in offloadable if name.lower() in (d.name.lower(), d.label.lower())]
        if name.upper().startswith("RPC[") and not found:
            found = [d for d in offloadable if d.endpoint and f"rpc[{d.endpoint}]" == name.lower()]
        if not found:
            known = ", ".join(["cpu"] + [d.label for d in offloadable])
            raise InputError(
                f"{flag}: unknown device '{name}'", f"available here: {known} (`specrun doctor` lists them)"
            )
        out += [d for d in found if d not in out]
    return out


def default_offload(devices: Sequence[DeviceSpace], *, remote: bool) -> list[DeviceSpace]:
    """llama.cpp's default order: RPC workers first (when `remote`), then GPUs (iGPUs only without a GPU)."""
    local = [d for d in devices if d.kind == "gpu"] or [d for d in devices if d.kind == "igpu"]
    return ([d for d in devices if d.kind == "remote"] if remote else []) + local


def _space_left(devices: Sequence[DeviceSpace], taken: dict[str, int]) -> list[DeviceSpace]:
    return [DeviceSpace(d.name, d.free - taken.get(d.name, 0), d.total, d.kind, d.endpoint) for d in devices]


def place_draft(size: ModelSize, request: Request, devices: Sequence[DeviceSpace]) -> tuple[ModelPlacement, list[str]]:
    """The draft first: whole on the first candidate it fits on, else the CPU (auto); or as asked."""
    named = request.draft_devices is not None
    candidates = (
        resolve_devices(request.draft_devices, devices, "--draft-device")
        if named
        else default_offload(devices, remote=False)
    )
    warnings: list[str] = []
    if request.draft_gpu_layers is not None:
        return model_placement(
            size, request.ctx_size, candidates, request.draft_gpu_layers, [d.free for d in candidates]
        ), warnings
    n_all = size.n_layer + 1
    for device in candidates:
        need = usage(size, request.ctx_size, [0] * n_all, 1)[0][0]
        if need <= device.budget:
            return model_placement(size, request.ctx_size, [device], n_all, [1.0]), warnings
    if named and candidates:
        warnings.append(f"the draft model does not fit on {', '.join(d.label for d in candidates)}: it runs on the CPU")
    return model_placement(size, request.ctx_size, [], 0, []), warnings


def place_target(size: ModelSize, request: Request, devices: Sequence[DeviceSpace], cpu: DeviceSpace) -> ModelPlacement:
    """The target beside the draft: as many layers as fit (auto) or as asked, split by free memory or --tensor-split."""
    named = request.devices is not None
    offload = resolve_devices(request.devices, devices, "--device") if named else default_offload(devices, remote=True)
    cpu_share = bool(offload) and all(d.kind == "remote" for d in offload) and request.gpu_layers is None
    order = [d.label for d in offload] + ([cpu.label] if cpu_share else [])
    if request.tensor_split is not None:
        split = list(request.tensor_split)
        if not order:
            raise InputError(
                "--tensor-split has nothing to split: the target has no device besides the CPU",
                "drop --tensor-split, or add devices with --rpc or --device",
            )
        if len(split) != len(order):
            raise InputError(
                f"--tensor-split gives {len(split)} proportions for {len(order)} devices ({', '.join(order)})",
                f"give one proportion per device, in that order, e.g. --tensor-split {','.join(['1'] * len(order))}",
            )
        if any(s < 0 for s in split) or sum(split) <= 0:
            raise InputError("--tensor-split needs proportions of 0 or more, not all 0", "e.g. --tensor-split 3,1")
    else:
        split = [float(d.free) for d in offload] + ([float(cpu.free)] if cpu_share else [])
    offload_split = split[: len(offload)]
    n_all = size.n_layer + 1
    if request.gpu_layers is not None:
        return model_placement(size, request.ctx_size, offload, request.gpu_layers, offload_split)
    most = n_all
    if cpu_share and sum(split) > 0:
        most = round(n_all * sum(offload_split) / sum(split))
    ngl = fit_gpu_layers(size, request.ctx_size, offload_split, [d.budget for d in offload], most)
    return model_placement(size, request.ctx_size, offload, ngl, offload_split)


def plan(target: ModelSize, draft: ModelSize | None, devices: Sequence[DeviceSpace], request: Request) -> Placement:
    """Place the draft, then the target in what is left (see the module docstring)."""
    cpu = next((d for d in devices if d.kind == "cpu"), DeviceSpace(CPU, 0, 0, "cpu"))
    warnings: list[str] = []
    draft_placement = None
    taken: dict[str, int] = {}
    if draft is not None:
        draft_placement, warnings = place_draft(draft, request, devices)
        taken = {s.device: s.bytes for s in draft_placement.shares if s.device != CPU}
    target_placement = place_target(target, request, _space_left(devices, taken), cpu)
    left = {d.name: d for d in _space_left(devices, taken)}
    for share in target_placement.shares:
        device = left.get(share.device)
        if share.device != CPU and device is not None and share.bytes > device.budget:
            warnings.append(
                f"the target's {share.layers} layers on {share.label} need {size_text(share.bytes)} but it has "
                f"{size_text(device.budget)} to spare: loading may fail (try --gpu-layers auto)"
            )
    return Placement(target_placement, draft_placement, tuple(warnings))
