"""Is this path a complete GGUF file? Asked before llama.cpp sees it, because llama.cpp's own
errors are cryptic and a truncated file can crash it."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ..errors import IncompatibleModelsError, ModelFileError
from .gguf_header import GGUFHeader, NotGGUF, Truncated, check_complete, read_header


def check_gguf_file(path: str | os.PathLike) -> Path:
    """Make sure `path` is a complete GGUF file before llama.cpp sees it (its errors are cryptic)."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelFileError(
            f"model file {path} does not exist", "check the path, or name a model from `specrun pairs`"
        )
    if path.is_dir():
        raise ModelFileError(f"{path} is a directory, not a model file", "pass the .gguf file inside it")
    try:
        st = path.stat()
        _check_complete_cached(str(path.resolve()), st.st_size, st.st_mtime_ns)
    except (ValueError, OSError) as exc:
        raise model_file_error(path, exc) from exc
    return path


def read_model_header(path: str | os.PathLike) -> GGUFHeader:
    """The header of `path`, or a ModelFileError that says what is wrong with it. Read once per
    file version per process: loading a pair asks it for sizes, heads, cache kind and architecture."""
    try:
        st = os.stat(path)
        return _read_header_cached(os.fspath(path), st.st_size, st.st_mtime_ns)
    except (ValueError, OSError) as exc:
        raise model_file_error(Path(path), exc) from exc


@functools.lru_cache(maxsize=16)  # a header without its arrays is small
def _read_header_cached(path: str, size: int, mtime_ns: int) -> GGUFHeader:  # noqa: ARG001 - cache keys
    return read_header(path)


def _nextn_layers(header: GGUFHeader) -> int:
    arch = header.metadata.get("general.architecture")
    value = header.metadata.get(f"{arch}.nextn_predict_layers", 0)
    return value if isinstance(value, int) and value > 0 else 0


def mtp_layers(path: str | os.PathLike) -> int:
    """How many multi-token-prediction ("nextn") layers the file's metadata declares (0: none, or
    a header that does not say): a target with some drafts with them, loaded with its MTP layers."""
    return _nextn_layers(read_model_header(path))


# Architectures whose MTP graph in the bundled llama.cpp runs any one of several blocks (chosen by
# llama_set_nextn_layer_offset), so a model of several heads drafts head by head; elsewhere the
# graph takes exactly one block and aborts on more.
CHAINED_MTP_ARCHS = ("step35", "mimo2", "hy_v3")
UNCHAINED_HEADS = (
    f"this llama.cpp drafts with several heads only for {', '.join(CHAINED_MTP_ARCHS[:-1])} and "
    f"{CHAINED_MTP_ARCHS[-1]} models"
)


def mtp_chain(path: str | os.PathLike) -> str | None:
    """How the file's MTP layers draft: "one" (a single head, reused at every depth), "chained"
    (several heads, one per depth, so a step drafts at most that many tokens), or None (no heads,
    or several on an architecture whose MTP graph runs only one: drafting with them would abort)."""
    header = read_model_header(path)
    heads = _nextn_layers(header)
    if heads <= 1:
        return "one" if heads else None
    return "chained" if header.metadata.get("general.architecture") in CHAINED_MTP_ARCHS else None


def is_assistant(path: str | os.PathLike) -> bool:
    """Whether the file is a Gemma 4 MTP assistant (gemma4-assistant): a small model with no cache
    of its own that drafts by attending over its target's."""
    return read_model_header(path).metadata.get("general.architecture") == "gemma4-assistant"


def assists(target: str | os.PathLike, draft: str | os.PathLike) -> bool:
    """Whether `draft` is a Gemma 4 MTP assistant (False for any other draft). An assistant reads a
    Gemma 4 target's cache and hidden state, so only a `gemma4` target of the width it was made
    for will do; for any other target it is an IncompatibleModelsError, one line before llama.cpp
    sees the pair."""
    if not is_assistant(draft):
        return False
    _require_fit(target, draft)
    return True


def _require_fit(target: str | os.PathLike, assistant: str | os.PathLike) -> None:
    meta, own = read_model_header(target).metadata, read_model_header(assistant).metadata
    arch = meta.get("general.architecture")
    if arch != "gemma4":
        raise IncompatibleModelsError(
            f"{Path(assistant).name} is a Gemma 4 MTP assistant, which drafts only for a Gemma 4 target, and "
            f"{Path(target).name} is {arch or 'of no stated architecture'}",
            "give the assistant with its Gemma 4 target, or use --spec ngram",
        )
    width, wanted = meta.get("gemma4.embedding_length"), own.get("gemma4-assistant.embedding_length_out")
    if width != wanted:
        raise IncompatibleModelsError(
            f"{Path(assistant).name} was made for a Gemma 4 target {wanted} wide, and {Path(target).name} is {width}",
            "use the assistant published with this target",
        )


# Architectures whose graph in the bundled llama.cpp hands out its layer inputs, which EAGLE-3 and
# DFlash heads read; on any other target llama.cpp would abort when asked for them.
LAYER_INPUT_ARCHS = (
    "llama",
    "llama-embed",
    "qwen3",
    "qwen3moe",
    "qwen3next",
    "qwen35",
    "qwen35moe",
    "gpt-oss",
    "lfm2",
    "gemma4",
    "deepseek4",
    "minimax-01",
    "minimax-m2",
    "bailingmoe3",
    "nemotron_h",
    "nanbeige",
    "hunyuan_vl",
    "mimo2",
    "muse-glimmer",
    "qwen4exp",
)
FEATURE_HEAD_NAMES = {"eagle3": "EAGLE-3 head", "dflash": "DFlash head"}


def a_feature_head(kind: str) -> str:
    """ "an EAGLE-3 head", "a DFlash head": a head's kind as messages name it."""
    name = FEATURE_HEAD_NAMES[kind]
    return ("an " if name[0] in "AEIOU" else "a ") + name


def feature_head(path: str | os.PathLike) -> str | None:
    """ "eagle3" or "dflash" when the file is a head that drafts from a target's layer inputs."""
    arch = read_model_header(path).metadata.get("general.architecture")
    return arch if arch in FEATURE_HEAD_NAMES else None


def require_feature_fit(target: str | os.PathLike, head: str | os.PathLike) -> str:
    """The head's kind, once the target is one it can read: an architecture that hands out its
    layer inputs, of the width the head was made for. Anything else is one line, before llama.cpp
    sees the pair (the layers it reads are checked once both are loaded: their ids are in arrays)."""
    meta, own = read_model_header(target).metadata, read_model_header(head).metadata
    kind = own.get("general.architecture")
    what = a_feature_head(kind)
    arch = meta.get("general.architecture")
    if arch not in LAYER_INPUT_ARCHS:
        raise IncompatibleModelsError(
            f"{Path(head).name} is {what}, which reads its target's layer inputs, and this llama.cpp does not hand "
            f"them out for {Path(target).name} ({arch or 'no stated architecture'})",
            "use the head with a Llama, Qwen3 or gpt-oss target, or use --spec ngram",
        )
    width = meta.get(f"{arch}.embedding_length")
    wanted = own.get("eagle3.target_hidden_size") if kind == "eagle3" else own.get("dflash.embedding_length")
    if width != wanted:
        raise IncompatibleModelsError(
            f"{Path(head).name} is {what} made for a target {wanted} wide, and {Path(target).name} is {width}",
            "use the head published with this target",
        )
    return kind


def rollback_kind(path: str | os.PathLike) -> str:
    """How the file's cache takes draft tokens back, from its metadata: "positions" (attention
    caches, sliding windows kept in full) or "snapshots" (a recurrent state: Mamba, gated delta
    nets and their hybrids, which snapshot up to RECURRENT_K_MAX tokens a step)."""
    header = read_model_header(path)
    arch = header.metadata.get("general.architecture")
    recurrent = any(key.startswith(f"{arch}.ssm.") or key.startswith(f"{arch}.rwkv") for key in header.metadata)
    return "snapshots" if recurrent else "positions"


def model_file_error(path: Path, exc: ValueError | OSError) -> ModelFileError:
    """One line for a file the header reader refused (or could not open)."""
    if isinstance(exc, NotGGUF):
        return ModelFileError(
            f"{path} is not a GGUF model: {exc}",
            "pass a .gguf file (llama.cpp's convert_hf_to_gguf.py converts others)",
        )
    if isinstance(exc, Truncated):
        state = (
            "incomplete" if exc.expected is not None else "incomplete or damaged"
        )  # a header cut short or lying about a length
        return ModelFileError(f"{path} is {state}: {exc}", "download or copy it again")
    if isinstance(exc, OSError):
        return ModelFileError(
            f"{path} cannot be read: {exc.strerror or exc}", "check its permissions, or download or copy it again"
        )
    return ModelFileError(f"{path} is not a readable GGUF model: {exc}", "download or copy it again")


@functools.lru_cache(maxsize=64)
def _check_complete_cached(path: str, size: int, mtime_ns: int) -> None:  # noqa: ARG001 - cache keys
    """One header walk per file version per process (resolving and checking both ask)."""
    check_complete(path)
