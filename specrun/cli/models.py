"""`specrun pairs`, `pull`, `check` and `drafts`: the commands that find, fetch and vet models.

Results go to stdout (a table, or one JSON document with --json); progress goes to stderr, as a bar
while stderr is a terminal and as one line per download or assembly otherwise.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..errors import InputError, ModelFileError
from ..models import discover
from ..models.fetch import (
    availability,
    fetch_model,
    hf_cached,
    hf_fetch,
    parse_hf_spec,
    resolve_spec,
)
from ..models.registry import Model, Registry, load_registry
from ..terminal import human_size, progress_display

RegistryOpt = Annotated[
    Optional[Path], typer.Option("--registry", metavar="FILE", help="Extra models.toml merged over the shipped and user registries.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of a table.")]


def register(app: typer.Typer) -> None:
    """Add the model commands to the `specrun` app."""
    app.command(name="pairs")(pairs)
    app.command(name="pull")(pull)
    app.command(name="check")(check)
    app.command(name="drafts")(drafts)


def _table(rows: list[list[str]], header: list[str]) -> str:
    """Aligned plain-text columns: readable on a terminal, easy to cut and grep."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(out)


def _print_json(data: dict) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
    sys.stdout.flush()


# ---- pairs ---------------------------------------------------------------------------------------


def _model_dict(model: Model) -> dict:
    found = availability(model)
    return {
        "name": model.name,
        "family": model.family,
        "params": model.params,
        "quant": model.quant,
        "size": model.size,
        "available": found.path is not None,
        "offline": found.offline,
        "where": found.where,
        "path": str(found.path) if found.path else None,
        "sources": [k for k in ("path", "package", "bundle", "hf") if getattr(model, k) is not None],
        "hf": model.hf.spec if model.hf else None,
    }


def pairs(
    registry: RegistryOpt = None,
    json_output: JsonOpt = False,
    long: Annotated[bool, typer.Option("--long", "-l", help="Also print each pair's note: where it pays off.")] = False,
) -> None:
    """List the registry's model pairs, their sizes, and whether they are available locally."""
    reg = load_registry(registry)
    models = {name: _model_dict(m) for name, m in reg.models.items()}
    ordered = sorted(reg.pairs.values(), key=lambda p: not p.default)
    records = [
        {
            "name": p.name, "default": p.default, "verified": p.verified, "draft_max": p.draft_max, "note": p.note,
            "available": models[p.target]["offline"] and models[p.draft]["offline"],
            "target": models[p.target], "draft": models[p.draft],
        }
        for p in ordered
    ]
    if json_output:
        _print_json({"registry_files": list(reg.files), "pairs": records, "models": list(models.values())})
        return
    rows = []
    for r in records:
        t, d = r["target"], r["draft"]
        rows.append([
            r["name"] + (" *" if r["default"] else ""), t["name"], d["name"], f"{human_size(t['size'])} + {human_size(d['size'])}",
            _pair_local(t, d, r["name"]), "yes" if r["verified"] else "no",
        ])
        if long and r["note"]:
            rows.append(["", f"  {r['note']}", "", "", "", ""])
    print(_table(rows, ["PAIR (* default)", "TARGET", "DRAFT", "SIZE", "LOCAL", "VERIFIED"]))
    loose = sorted(set(reg.models) - {n for p in reg.pairs.values() for n in (p.target, p.draft)})
    if loose:
        print(f"\nother models: {', '.join(loose)} (specrun pull NAME; `specrun drafts NAME` finds partners)")


def _pair_local(t: dict, d: dict, pair_name: str) -> str:
    """Whether both models can be had without the network, and from where."""
    if not (t["offline"] and d["offline"]):
        return f"no (specrun pull {pair_name})"
    wheres = sorted({m["where"] if m["path"] else "pip bundle, assembled on first use" for m in (t, d)})
    return f"yes ({'; '.join(wheres)})"


# ---- pull ----------------------------------------------------------------------------------------


def pull(
    name: Annotated[Optional[str], typer.Argument(help="A pair or model name, or hf:OWNER/REPO/FILE.gguf[@REVISION]. Default: the default pair.")] = None,
    registry: RegistryOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Download or assemble models ahead of time; prints their paths. Running it again does nothing."""
    reg = load_registry(registry)
    results = []
    with progress_display() as hook:
        if name is not None and name.strip().lower().startswith("hf:"):
            src = parse_hf_spec(name)
            was = "present" if hf_cached(src) else "fetched"
            results.append({"name": name, "path": str(hf_fetch(src, hook)), "was": was})
        else:
            for model in _models_to_pull(name, reg):
                before = availability(model)
                path = fetch_model(model, hook)
                results.append({"name": model.name, "path": str(path), "was": "present" if before.path else "fetched"})
    if json_output:
        _print_json({"pulled": results})
        return
    for r in results:
        if r["was"] == "present":
            sys.stderr.write(f"{r['name']}: already present\n")
        print(r["path"])


def _models_to_pull(name: str | None, reg: Registry) -> list[Model]:
    if name is None:
        p = reg.default_pair()
        return [reg.models[p.target], reg.models[p.draft]]
    if name in reg.pairs:
        p = reg.pairs[name]
        return [reg.models[p.target], reg.models[p.draft]]
    if name in reg.models:
        return [reg.models[name]]
    raise InputError(f"unknown pair or model '{name}'", reg.suggest(name))


# ---- check ---------------------------------------------------------------------------------------


def _specs(target: str | None, draft: str | None, reg: Registry) -> tuple[str, str | None]:
    """Both given, or a registry target with its pair's draft, or the default pair; None: no draft known."""
    if target is None:
        p = reg.default_pair()
        return p.target, p.draft
    if draft is not None:
        return target, draft
    paired = reg.pairs_for_target(target) if target in reg.models else []
    return target, paired[0].draft if paired else None


def check(
    target: Annotated[Optional[str], typer.Argument(help="Target: a .gguf path, a registry name or hf:OWNER/REPO/FILE.gguf. Default: the default pair's.")] = None,
    draft: Annotated[Optional[str], typer.Argument(help="Draft, in the same forms. Default: the draft of a registry pair with this target.")] = None,
    registry: RegistryOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Report whether DRAFT can draft for TARGET, from GGUF metadata only. Exit 0 compatible, 3 not."""
    from ..models.compat import check_pair

    reg = load_registry(registry)
    target_spec, draft_spec = _specs(target, draft, reg)
    with progress_display() as hook:
        target_path = resolve_spec(target_spec, reg, hook)
        if draft_spec is None:
            raise InputError(f"no draft given for '{target_spec}'", "pass a DRAFT too, or run `specrun drafts TARGET` to find one")
        draft_path = resolve_spec(draft_spec, reg, hook)
    report = check_pair(target_path, draft_path)
    if json_output:
        _print_json(report.to_dict())
    else:
        print(render_report(report))
    if not report.compatible:
        raise typer.Exit(code=3)


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_report(report) -> str:
    """The report as text: paths, llama.cpp's rules with both values, then the non-blocking facts."""
    lines = [f"target  {report.target}", f"draft   {report.draft}", ""]
    rows = []
    for r in report.rules:
        result = "ok" if r.ok else "FAIL"
        if r.name == "token text":
            diff = report.first_diff
            note = r.detail if diff is None else f"first difference at id {diff.id}; {diff.count} tokens differ"
            rows.append([r.name, result, _show(r.target), _show(r.draft), note])
        elif r.name == "vocab size":
            rows.append([r.name, result, _show(r.target), _show(r.draft), r.detail])
        else:
            rows.append([r.name, result, _show(r.target), _show(r.draft), ""])
    lines.append(_table(rows, ["RULE", "RESULT", "TARGET", "DRAFT", "NOTE"]))
    lines.append("")
    info = [[i.name, _show(i.target), _show(i.draft), "yes" if i.same else "no"] for i in report.info]
    lines.append(_table(info, ["DOES NOT BLOCK PAIRING", "TARGET", "DRAFT", "SAME"]))
    lines.append("")
    if report.compatible:
        lines.append("compatible: the draft can speculate for the target")
    else:
        lines.append(f"incompatible: {report.first_failure}")
    return "\n".join(lines)


# ---- drafts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftCandidate:
    """A local GGUF file vetted as a draft for the target."""

    path: Path
    found_in: str
    name: str | None
    size: int
    ratio: float
    compatible: bool
    reason: str | None

    def to_dict(self) -> dict:
        return {
            "path": str(self.path), "name": self.name, "found_in": self.found_in, "size": self.size,
            "ratio": round(self.ratio, 4), "compatible": self.compatible, "first_failure": self.reason,
        }


def find_drafts(target: Path, reg: Registry, search: list[Path]) -> list[DraftCandidate]:
    """Every local GGUF smaller than the target, vetted against it, smallest first."""
    from ..models.compat import check_pair

    target_size = target.stat().st_size
    vetted = []
    for found in discover.local_models(reg, search, exclude=target):
        if found.size >= target_size:
            continue
        try:
            report = check_pair(target, found.path)
            ok, reason = report.compatible, report.first_failure
        except ModelFileError as exc:
            ok, reason = False, exc.message
        vetted.append(DraftCandidate(found.path, found.found_in, found.name, found.size, found.size / target_size, ok, reason))
    return sorted(vetted, key=lambda c: (c.size, str(c.path)))


def drafts(
    target: Annotated[Optional[str], typer.Argument(help="Target: a .gguf path, a registry name or hf:OWNER/REPO/FILE.gguf. Default: the default pair's.")] = None,
    search: Annotated[Optional[list[Path]], typer.Option("--search", metavar="DIR", help="Also look for .gguf files under this directory (repeatable).")] = None,
    show_all: Annotated[bool, typer.Option("--all", "-a", help="Also list incompatible files, with the rule they fail.")] = False,
    registry: RegistryOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """List local GGUF files that can draft for TARGET, smallest first, with their size ratio.

    Looks in the Hugging Face cache, specrun's cache, registry models already on disk, and --search.
    """
    reg = load_registry(registry)
    for directory in search or []:
        if not directory.is_dir():
            raise InputError(f"--search {directory} is not a directory", "pass a directory that holds .gguf files")
    with progress_display() as hook:
        target_path = resolve_spec(target or reg.default_pair().target, reg, hook)
    found = find_drafts(target_path, reg, list(search or []))
    shown = [c for c in found if show_all or c.compatible]
    if json_output:
        _print_json({"target": str(target_path), "target_size": target_path.stat().st_size, "drafts": [c.to_dict() for c in shown]})
        return
    if not shown:
        more = "" if show_all or not found else f" ({len(found)} incompatible; --all lists them)"
        sys.stderr.write(f"no compatible draft found for {target_path.name}{more}; --search DIR looks in more places\n")
        return
    header = ["DRAFT", "SIZE", "RATIO", "FOUND IN"] + (["COMPATIBLE"] if show_all else [])
    rows = []
    for c in shown:
        row = [c.name or str(c.path), human_size(c.size), f"{c.ratio:.1%}", c.found_in]
        if show_all:
            row.append("yes" if c.compatible else f"no: {c.reason}")
        rows.append(row)
    print(_table(rows, header))
