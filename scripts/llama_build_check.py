"""Does the installed llama-cpp-python fit? Prints why not and exits 1; exits 0 when it does.

Usage: python scripts/llama_build_check.py BACKEND X86
  BACKEND  cpu, cuda, hip, metal or vulkan: the backend the build must have, besides RPC
  X86      1 on an x86 machine, where the build must not use AMX (it segfaults on some Xeons)

Backends are matched by the names llama.cpp registers them under (ggml_backend_reg_name): CPU, CUDA,
ROCm, MTL, Vulkan, RPC. Shared by scripts/setup.sh (after a build, or a wheel given with
SPECRUN_LLAMA_WHEEL) and scripts/gpu-wheel.sh (on the wheel it made).
"""

import ctypes
import re
import sys


def unfit(reason):
    print(reason)
    sys.exit(1)


backend, x86 = sys.argv[1], sys.argv[2] == "1"
try:
    import llama_cpp
except Exception as error:  # a missing library (libcublas.so.13, say) is named in the error
    first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    unfit(f"llama-cpp-python is not installed or does not import: {first_line}")
version = tuple(int(x) for x in re.findall(r"\d+", llama_cpp.__version__)[:3])
if not (0, 3, 36) <= version < (0, 4):
    unfit(f"llama-cpp-python {llama_cpp.__version__} is outside >=0.3.36,<0.4")
if not getattr(llama_cpp, "llama_supports_rpc", lambda: False)():  # also loads every backend
    unfit("the llama-cpp-python build has no RPC backend")
info = llama_cpp.llama_print_system_info().decode(errors="replace")
if x86 and "AMX_INT8 = 1" in info:
    unfit("the llama-cpp-python build uses AMX")
try:
    from llama_cpp._ggml import libggml

    libggml.ggml_backend_reg_count.restype = ctypes.c_size_t
    libggml.ggml_backend_reg_get.argtypes = [ctypes.c_size_t]
    libggml.ggml_backend_reg_get.restype = ctypes.c_void_p
    libggml.ggml_backend_reg_name.argtypes = [ctypes.c_void_p]
    libggml.ggml_backend_reg_name.restype = ctypes.c_char_p
    names = {
        libggml.ggml_backend_reg_name(libggml.ggml_backend_reg_get(i)).decode()
        for i in range(libggml.ggml_backend_reg_count())
    }
except (ImportError, AttributeError, OSError):
    names = set(re.findall(r"(\w+) : ", info))  # the backends that list features (Vulkan does not)
wanted = {"cpu": "CPU", "cuda": "CUDA", "hip": "ROCm", "metal": "MTL", "vulkan": "Vulkan"}[backend]
if wanted not in names:
    unfit(f"the llama-cpp-python build has no {backend} backend (it has {', '.join(sorted(names))})")
