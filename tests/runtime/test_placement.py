"""Placement arithmetic against made-up machines: the draft first and whole, a target that does not
fit, two GPUs split by free memory, a draft forced to the CPU, RPC workers sharing with the CPU,
device names, and llama.cpp's own layer rule."""

from __future__ import annotations

import pytest

from specrun.errors import InputError
from specrun.models.sizes import ModelSize
from specrun.runtime.placement import (
    RESERVE_BYTES,
    DeviceSpace,
    Request,
    layer_devices,
    plan,
    resolve_devices,
)

GB = 10**9
MB = 10**6
CPU = DeviceSpace("CPU", 64 * GB, 64 * GB, "cpu")
# A 28-layer target of 100 MB a layer (KV: 1 KB per token and layer), a 24-layer draft of 20 MB a layer.
TARGET = ModelSize(layer_bytes=(100 * MB,) * 28, output_bytes=200 * MB, input_bytes=150 * MB, kv_bytes_per_token=1000)
DRAFT = ModelSize(layer_bytes=(20 * MB,) * 24, output_bytes=100 * MB, input_bytes=80 * MB, kv_bytes_per_token=500)
CTX = 4096


def gpu(name: str, free_gb: float) -> DeviceSpace:
    return DeviceSpace(name, int(free_gb * GB) + RESERVE_BYTES, 80 * GB, "gpu")


def layers_on(placed, device: str) -> int:
    return sum(s.layers for s in placed.shares if s.device == device)


def test_everything_fits_on_one_gpu_draft_whole_and_target_whole():
    placement = plan(TARGET, DRAFT, [CPU, gpu("CUDA0", 24)], Request(CTX))
    assert placement.draft.offload == ("CUDA0",) and placement.draft.gpu_layers == 25  # 24 layers + output
    assert layers_on(placement.draft, "CUDA0") == 24 and layers_on(placement.draft, "CPU") == 0
    assert placement.target.gpu_layers == 29 and layers_on(placement.target, "CUDA0") == 28
    assert (
        placement.describe().startswith("target 28/28 layers CUDA0")
        and "draft 24/24 layers CUDA0" in placement.describe()
    )


def test_draft_goes_first_and_the_target_gets_what_is_left():
    """3.2 GB free: the draft (0.68 GB with its KV cache) takes its share first, whole."""
    placement = plan(TARGET, DRAFT, [CPU, gpu("CUDA0", 3.2)], Request(CTX))
    draft_bytes = sum(s.bytes for s in placement.draft.shares if s.device == "CUDA0")
    assert layers_on(placement.draft, "CUDA0") == 24
    on_gpu = layers_on(placement.target, "CUDA0")
    target_bytes = sum(s.bytes for s in placement.target.shares if s.device == "CUDA0")
    assert 0 < on_gpu < 28 and layers_on(placement.target, "CPU") == 28 - on_gpu
    assert draft_bytes + target_bytes <= 3.2 * GB
    # One more layer would not have fitted.
    per_layer = 100 * MB + TARGET.kv_bytes(CTX)
    assert draft_bytes + target_bytes + per_layer > 3.2 * GB


def test_a_target_that_does_not_fit_keeps_its_first_layers_on_the_cpu():
    placement = plan(TARGET, None, [CPU, gpu("CUDA0", 1.0)], Request(CTX))
    shares = {s.device: s for s in placement.target.shares}
    assert shares["CUDA0"].output  # llama.cpp offloads the output layer first
    assert shares["CUDA0"].bytes <= 1.0 * GB and shares["CPU"].layers == 28 - shares["CUDA0"].layers
    assert shares["CPU"].bytes >= TARGET.input_bytes  # the embeddings always stay on the CPU


def test_a_draft_that_fits_nowhere_runs_on_the_cpu_and_the_target_takes_the_gpu():
    placement = plan(TARGET, DRAFT, [CPU, gpu("CUDA0", 0.3)], Request(CTX))
    assert placement.draft.gpu_layers == 0 and placement.draft.offload == ()
    assert layers_on(placement.draft, "CPU") == 24


def test_two_gpus_split_in_proportion_to_free_memory():
    placement = plan(TARGET, None, [CPU, gpu("CUDA0", 30), gpu("CUDA1", 10)], Request(CTX))
    assert placement.target.offload == ("CUDA0", "CUDA1")
    first, second = layers_on(placement.target, "CUDA0"), layers_on(placement.target, "CUDA1")
    assert first + second == 28 and 20 <= first <= 22  # 3:1 of 29 layers (the output one on CUDA1)
    assert [s.device for s in placement.target.shares if s.output] == ["CUDA1"]


def test_two_gpus_and_a_draft_the_draft_whole_on_the_first_that_fits():
    placement = plan(TARGET, DRAFT, [CPU, gpu("CUDA0", 0.5), gpu("CUDA1", 8)], Request(CTX))
    assert placement.draft.offload == ("CUDA1",) and layers_on(placement.draft, "CUDA1") == 24


def test_draft_forced_to_the_cpu():
    placement = plan(TARGET, DRAFT, [CPU, gpu("CUDA0", 24)], Request(CTX, draft_devices=("cpu",)))
    assert placement.draft.offload == () and layers_on(placement.draft, "CPU") == 24
    assert layers_on(placement.target, "CUDA0") == 28  # the target has the whole GPU


def test_explicit_layer_counts_are_llama_cpp_counts():
    placement = plan(TARGET, DRAFT, [CPU, gpu("CUDA0", 24)], Request(CTX, gpu_layers=10, draft_gpu_layers=0))
    assert placement.target.gpu_layers == 10 and layers_on(placement.target, "CUDA0") == 9  # 9 layers + output
    assert placement.draft.gpu_layers == 0
    everything = plan(TARGET, None, [CPU, gpu("CUDA0", 24)], Request(CTX, gpu_layers=-1))
    assert everything.target.gpu_layers == 29


def test_too_many_explicit_layers_warn():
    placement = plan(TARGET, None, [CPU, gpu("CUDA0", 1)], Request(CTX, gpu_layers=-1))
    assert placement.target.gpu_layers == 29 and any("CUDA0" in w and "may fail" in w for w in placement.warnings)


def test_cpu_only_machine_keeps_everything_on_the_cpu():
    placement = plan(TARGET, DRAFT, [CPU], Request(CTX))
    assert placement.target.gpu_layers == 0 and placement.target.offload == ()
    assert (
        placement.describe()
        == f"target 28/28 layers CPU ({(150 + 2800 + 200) / 1000 + 28 * 4096e3 / 1e9:.1f} GB) · draft 24/24 layers "
        "CPU (0.7 GB)"
    )
    assert placement.brief() == "target CPU, draft CPU" and not placement.remote


def test_rpc_worker_and_the_local_cpu_share_by_free_memory_and_the_draft_stays_local():
    worker = DeviceSpace("RPC0", 64 * GB, 64 * GB, "remote", "10.0.0.2:50052")
    placement = plan(TARGET, DRAFT, [CPU, worker], Request(CTX))
    remote = layers_on(placement.target, "RPC0")
    assert 13 <= remote <= 15 and layers_on(placement.target, "CPU") == 28 - remote
    assert placement.draft.offload == ()  # never sent to a worker unless asked
    assert placement.remote and "RPC0[10.0.0.2:50052]" in placement.describe()
    assert placement.signature()["target"][0][:2] == ["RPC0", "10.0.0.2:50052"]


def test_tensor_split_counts_the_cpu_when_only_workers_offload():
    worker = DeviceSpace("RPC0", 64 * GB, 64 * GB, "remote", "10.0.0.2:50052")
    placement = plan(TARGET, None, [CPU, worker], Request(CTX, tensor_split=(3, 1)))
    assert layers_on(placement.target, "RPC0") in (21, 22)
    with pytest.raises(InputError, match=r"2 devices \(RPC0\[10.0.0.2:50052\], CPU\)"):
        plan(TARGET, None, [CPU, worker], Request(CTX, tensor_split=(1, 1, 1)))
    with pytest.raises(InputError, match="nothing to split"):
        plan(TARGET, None, [CPU], Request(CTX, tensor_split=(1,)))


def test_signature_differs_with_the_placement():
    worker = DeviceSpace("RPC0", 64 * GB, 64 * GB, "remote", "10.0.0.2:50052")
    local = plan(TARGET, DRAFT, [CPU], Request(CTX))
    remote = plan(TARGET, DRAFT, [CPU, worker], Request(CTX))
    assert local.key() != remote.key() and local.key() == plan(TARGET, DRAFT, [CPU], Request(CTX)).key()


def test_device_names_are_checked_and_listed():
    devices = [CPU, gpu("CUDA0", 8), DeviceSpace("RPC0", GB, GB, "remote", "h:1")]
    assert [d.name for d in resolve_devices(["cuda0"], devices, "--device")] == ["CUDA0"]
    assert [d.name for d in resolve_devices(["RPC[h:1]"], devices, "--device")] == ["RPC0"]
    assert resolve_devices(["cpu"], devices, "--device") == []
    with pytest.raises(InputError) as error:
        resolve_devices(["CUDA7"], devices, "--device")
    assert "CUDA7" in error.value.message and "CUDA0" in error.value.hint and "RPC0[h:1]" in error.value.hint
    with pytest.raises(InputError, match="cannot be combined"):
        resolve_devices(["CUDA0", "cpu"], devices, "--device")


def test_layer_rule_matches_llama_cpp():
    """llama.cpp offloads the last n_gpu_layers of layers 0..n_layer (n_layer: the output layer),
    cut by the cumulative split: 4 layers + output, all 5 offloaded, split 1:1 → layers 0-2 on the
    first device (fractions 0, 0.2, 0.4 lie below its cut at 0.5), layer 3 and the output on the second."""
    assert layer_devices(4, 5, [1, 1]) == [0, 0, 0, 1, 1]
    assert layer_devices(4, 2, [1]) == [None, None, None, 0, 0]
    assert layer_devices(4, 0, [1]) == [None] * 5
    assert layer_devices(4, -1, [0, 1]) == [1] * 5  # a device with no share gets no layer
