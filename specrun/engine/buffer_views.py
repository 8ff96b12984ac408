"""numpy views of the buffers llama.cpp returns, and its functions called by address.

Every pass reads its outputs through these, the context's own (llama.py) and its head passes'
(head_passes.py), so they sit below both.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ..errors import SpecrunError
from .lib import _llama


class _FloatBlock:
    """Describes a block of C floats (or int32s) to numpy (its array interface), so that a view
    costs one small dict; np.ctypeslib.as_array builds a ctypes array type for every call, which
    is slow once a pass has flushed the CPU's caches."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, shape: tuple[int, ...], typestr: str = "<f4", row_stride: int | None = None):
        self.__array_interface__ = {"data": (address, False), "shape": shape, "typestr": typestr, "version": 3}
        if row_stride is not None and len(shape) == 2:
            self.__array_interface__["strides"] = (row_stride, 4)


def address_function(name: str, argtypes: list, restype=ctypes.c_void_p):
    """llama.cpp's function `name` returning a plain int (an address, or a count by `restype`):
    the binding's own returns a ctypes pointer object, which costs a cast on every pass."""
    lib = _llama()
    handle = getattr(getattr(lib, "llama_cpp", None), "_lib", None)
    if handle is None:
        binding = getattr(lib, name)
        if restype is not ctypes.c_void_p:
            return binding
        return lambda *args: ctypes.cast(binding(*args), ctypes.c_void_p).value
    function = handle[name]
    function.argtypes, function.restype = argtypes, restype
    return function


def float_view(pointer, shape: tuple[int, ...], typestr: str = "<f4", row_stride: int | None = None) -> np.ndarray:
    """A numpy view of the C floats (or, by `typestr`, int32s) at `pointer` (a ctypes pointer
    llama.cpp returned, or its address), rows `row_stride` bytes apart when given, valid as long
    as llama.cpp keeps that buffer."""
    address = pointer if isinstance(pointer, int) else ctypes.cast(pointer, ctypes.c_void_p).value
    if not address:
        raise SpecrunError("llama.cpp returned no output for this pass", "SPECRUN_DEBUG=1 shows details")
    return np.asarray(_FloatBlock(address, shape, typestr, row_stride))
