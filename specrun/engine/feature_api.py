"""llama.cpp's calls for heads that read a target's layer inputs (EAGLE-3, DFlash), which its
extension header (`llama-ext.h`) declares as C++ and llama-cpp-python does not bind: each is
found under the symbol names its compilers give it and bound here once.
"""

from __future__ import annotations

import ctypes
import functools

from .lib import _llama


def _bind(names: tuple[str, ...], argtypes: list, restype):
    lib = _llama().llama_cpp._lib
    for name in names:
        function = getattr(lib, name, None)
        if function is not None:
            function.argtypes = argtypes
            function.restype = restype
            return function
    raise AttributeError(f"this llama.cpp build has none of {', '.join(names)}")


@functools.cache
def api() -> dict[str, object]:
    """The bound calls by their C names (built on first use)."""
    ctx, model = ctypes.c_void_p, ctypes.c_void_p
    return {
        "llama_set_embeddings_layer_inp": _bind(
            (
                "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
                "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z",
                "llama_set_embeddings_layer_inp",
            ),
            [ctx, ctypes.c_uint32, ctypes.c_bool],
            None,
        ),
        "llama_get_embeddings_layer_inp": _bind(
            (
                "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
                "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z",
                "llama_get_embeddings_layer_inp",
            ),
            [ctx, ctypes.c_uint32],
            ctypes.c_void_p,
        ),
        "llama_model_target_layer_ids": _bind(
            (
                "_Z28llama_model_target_layer_idsPK11llama_model",
                "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z",
                "llama_model_target_layer_ids",
            ),
            [model],
            ctypes.POINTER(ctypes.c_int32),
        ),
        "llama_model_target_layer_ids_n": _bind(
            (
                "_Z30llama_model_target_layer_ids_nPK11llama_model",
                "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z",
                "llama_model_target_layer_ids_n",
            ),
            [model],
            ctypes.c_uint32,
        ),
        "llama_model_dflash_selector_top_k": _bind(
            (
                "_Z33llama_model_dflash_selector_top_kPK11llama_model",
                "?llama_model_dflash_selector_top_k@@YAHPEBUllama_model@@@Z",
                "llama_model_dflash_selector_top_k",
            ),
            [model],
            ctypes.c_int32,
        ),
    }


def target_layers(model_ptr) -> tuple[int, ...]:
    """The target layers whose inputs a head model reads (empty for any other model)."""
    calls = api()
    n = int(calls["llama_model_target_layer_ids_n"](model_ptr))
    ids = calls["llama_model_target_layer_ids"](model_ptr)
    return tuple(int(ids[i]) for i in range(n)) if n and ids else ()


def capture_layer_inputs(ctx_ptr, layer: int, on: bool = True) -> None:
    """Have a target context keep (or stop keeping) the input of `layer` for every token of each pass."""
    api()["llama_set_embeddings_layer_inp"](ctx_ptr, layer, on)


def layer_inputs_address(ctx_ptr, layer: int) -> int:
    """Where the last pass's inputs of `layer` lie: one row of n_embd floats per token."""
    return api()["llama_get_embeddings_layer_inp"](ctx_ptr, layer) or 0
