"""The default pair over a loopback `specrun worker`, and its sizes as placement reads them."""

from __future__ import annotations

import json

import pytest
from cli_helpers import specrun
from rpc_helpers import start_worker

from specrun.models.sizes import model_size

pytestmark = pytest.mark.real


def test_sizes_read_from_the_header_add_up_to_the_files(real_pair_paths):
    for path in real_pair_paths:
        size = model_size(path)
        assert size.n_layer in (24, 28) and all(b > 0 for b in size.layer_bytes)
        file_size = path.stat().st_size
        assert file_size * 0.97 < size.weight_bytes <= file_size  # all but the header and the padding
        assert (
            size.kv_bytes_per_token == {28: 1024, 24: 512}[size.n_layer]
        )  # 2 KV heads × head size 128 (64) × K and V × f16


def test_default_pair_over_a_loopback_worker_gives_the_local_text(real_pair_paths, tmp_path):
    """Also: the worker's tensor cache keeps the large tensors it was sent (here the output layer)."""
    target, draft = real_pair_paths
    cache = tmp_path / "tensor-cache"
    worker = start_worker(tmp_path, "--cache", str(cache))
    try:
        args = [
            "def fib(n):",
            "--target",
            str(target),
            "--draft",
            str(draft),
            "--raw",
            "--spec",
            "draft",
            "--temp",
            "0",
            "-n",
            "32",
            "-t",
            "1",
            "--json",
        ]
        local = specrun("run", *args, timeout=600)
        remote = specrun("run", *args, "--rpc", worker.endpoint, timeout=600)
    finally:
        worker.stop()
    assert local.returncode == 0 and remote.returncode == 0, remote.stderr
    local_doc, remote_doc = json.loads(local.stdout), json.loads(remote.stdout)
    assert remote_doc["text"] == local_doc["text"]
    on_worker = [s for s in remote_doc["placement"]["target"]["devices"] if s["endpoint"] == worker.endpoint]
    assert on_worker and on_worker[0]["layers"] > 0 and on_worker[0]["output_layer"]
    assert any(cache.iterdir())
