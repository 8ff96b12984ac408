"""On a llama.cpp build with AMX (whose matmul path segfaults on some CPUs) models load without
extra buffer types, and the user is told once why and how to rebuild."""

from __future__ import annotations

from specrun.engine import lib as engine_lib
from specrun.runtime import pair as pair_module
from specrun.runtime.pair import Pair, PairConfig


def test_amx_build_loads_without_extra_buffers_and_warns_once(monkeypatch, tiny_target, tiny_draft):
    monkeypatch.setattr(engine_lib, "has_amx", lambda: True)
    monkeypatch.setattr(pair_module, "_AMX_WARNED", False)
    seen_options = []
    real_model = pair_module.Model

    def recording_model(path, options):
        seen_options.append(options)
        return real_model(path, options)

    monkeypatch.setattr(pair_module, "Model", recording_model)
    warnings: list[str] = []
    loaded = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1), warn=warnings.append)
    loaded.close()
    assert [o.use_extra_bufts for o in seen_options] == [False, False]
    assert len(warnings) == 1 and "AMX" in warnings[0] and "-mno-amx-int8" in warnings[0]


def test_build_without_amx_keeps_extra_buffers(monkeypatch, tiny_target):
    monkeypatch.setattr(engine_lib, "has_amx", lambda: False)
    warnings: list[str] = []
    assert pair_module.extra_buffers_allowed(warnings.append) and not warnings


def test_this_build_has_no_amx():
    """The setup script must have built llama.cpp without AMX."""
    assert "AMX_INT8 = 1" not in engine_lib.system_info()
