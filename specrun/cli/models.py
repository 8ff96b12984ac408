"""`specrun pairs`, `pull`, `check` and `drafts`: the commands that find, fetch and vet models.

Results go to stdout (a table, or one JSON document with --json); progress goes to stderr, as a bar
while stderr is a terminal and as one line per download or assembly otherwise.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ..errors import IncompatibleModelsError, InputError, ModelFileError, SpecrunError
from ..models import digests, discover
from ..models.fetch import (
    availability,
    fetch_model,
    hf_cached,
    hf_fetch,
    model_paths,
    parse_hf_spec,
    resolve_spec,
    say_unverified,
    shard_paths,
)
from ..models.registry import ModelEntry, Registry, load_registry
from ..terminal import human_size, progress_display

RegistryOpt = Annotated[
    Path | None,
    typer.Option("--registry", metavar="FILE", help="Extra models.toml merged over the shipped and user registries."),
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


def _model_dict(model: ModelEntry) -> dict:
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
            "name": p.name,
            "default": p.default,
            "verified": p.verified,
            "draft_max": p.draft_max,
            "note": p.note,
            "available": models[p.target]["offline"] and models[p.draft]["offline"],
            "infill": _infill(models[p.target]),
            "target": models[p.target],
            "draft": models[p.draft],
        }
        for p in ordered
    ]
    if json_output:
        _print_json({"registry_files": list(reg.files), "pairs": records, "models": list(models.values())})
        return
    rows = []
    for r in records:
        t, d = r["target"], r["draft"]
        rows.append(
            [
                r["name"] + (" *" if r["default"] else ""),
                t["name"],
                d["name"],
                f"{human_size(t['size'])} + {human_size(d['size'])}",
                _pair_local(t, d, r["name"]),
                "yes" if r["verified"] else "no",
                "?" if r["infill"] is None else "yes" if r["infill"] else "no",
            ]
        )
        if long and r["note"]:
            rows.append(["", f"  {r['note']}", "", "", "", "", ""])
    print(_table(rows, ["PAIR (* default)", "TARGET", "DRAFT", "SIZE", "LOCAL", "VERIFIED", "INFILL"]))
    if any(r["infill"] is None for r in records):
        print("\nINFILL ?: the target is not on disk yet; `specrun check` says once it is")
    loose = sorted(set(reg.models) - {n for p in reg.pairs.values() for n in (p.target, p.draft)})
    if loose:
        print(f"\nother models: {', '.join(loose)} (specrun pull NAME; `specrun drafts NAME` finds partners)")


def _infill(target: dict) -> str | None:
    """How the target fills in the middle ("" when it cannot; None: not on disk, so not known)."""
    if not target["path"]:
        return None
    from ..engine.model import read_vocabulary  # llama.cpp loads only here

    try:
        fim = read_vocabulary(target["path"]).fim
    except SpecrunError:
        return None
    return fim.describe() if fim is not None else ""


def _pair_local(t: dict, d: dict, pair_name: str) -> str:
    """Whether both models can be had without the network, and from where."""
    if not (t["offline"] and d["offline"]):
        return f"no (specrun pull {pair_name})"
    wheres = sorted({m["where"] if m["path"] else "pip bundle, assembled on first use" for m in (t, d)})
    return f"yes ({'; '.join(wheres)})"


# ---- pull ----------------------------------------------------------------------------------------


def pull(
    name: Annotated[
        str | None,
        typer.Argument(help="A pair or model name, or hf:OWNER/REPO/FILE.gguf[@REVISION]. Default: the default pair."),
    ] = None,
    registry: RegistryOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Download or assemble models ahead of time; prints their paths, and each fetched file's sha256
    (to pin it) on stderr. Running it again does nothing."""
    reg = load_registry(registry)
    results = []
    with progress_display() as hook:
        if name is not None and name.strip().lower().startswith("hf:"):
            src = parse_hf_spec(name)
            was = "present" if hf_cached(src) else "fetched"
            path = hf_fetch(src, hook)
            results.append(_pulled(name, path, shard_paths(src, path), was, hook))
        else:
            for model in _models_to_pull(name, reg):
                before = availability(model)
                if not model.verified:
                    say_unverified(model)
                path = fetch_model(model, hook)
                results.append(
                    _pulled(model.name, path, model_paths(model, path), "present" if before.path else "fetched", hook)
                )
    if json_output:
        _print_json({"pulled": results})
        return
    for r in results:
        hashes = ", ".join(r["sha256"] or [])
        if r["was"] == "present":
            sys.stderr.write(f"{r['name']}: already present" + (f", sha256 {hashes}" if hashes else "") + "\n")
        else:
            sys.stderr.write(f"{r['name']}: sha256 {hashes}\n")
        print(r["path"])


def _pulled(name: str, path: Path, files: list[Path], was: str, hook) -> dict:
    """One result of `pull`: where the model is and the sha256 of each of its files, so it can be
    pinned. A fresh fetch is hashed (from its check when it had one); a file already present shows
    the hash known without reading it, if any (null otherwise: pull never re-reads what it did not fetch)."""
    if was == "fetched":
        hashes: list[str] | None = [digests.fetched_sha256(f, hook) for f in files]
    else:
        known = [digests.known_sha256(f) for f in files]
        hashes = known if all(known) else None  # type: ignore[assignment]
    return {"name": name, "path": str(path), "was": was, "sha256": hashes}


def _models_to_pull(name: str | None, reg: Registry) -> list[ModelEntry]:
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
    target: Annotated[
        str | None,
        typer.Argument(
            help="Target: a .gguf path, a registry name or hf:OWNER/REPO/FILE.gguf. Default: the default pair's."
        ),
    ] = None,
    draft: Annotated[
        str | None,
        typer.Argument(help="Draft, in the same forms. Default: the draft of a registry pair with this target."),
    ] = None,
    registry: RegistryOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Report whether DRAFT can draft for TARGET, from GGUF metadata only: through shared tokens, or
    through text. Exit 0 when it can, 3 when it cannot."""
    from ..models.compat import check_pair
    from ..models.modelfile import a_feature_head, assists, feature_head, is_assistant, require_feature_fit

    reg = load_registry(registry)
    target_spec, draft_spec = _specs(target, draft, reg)
    with progress_display() as hook:
        target_path = resolve_spec(target_spec, reg, hook)
        if is_assistant(target_path):
            raise InputError(
                f"{target_path.name} is a Gemma 4 MTP assistant: it drafts for a Gemma 4 target, "
                "and is no target itself",
                f"run `specrun check GEMMA4_TARGET {target_path.name}`",
            )
        if (kind := feature_head(target_path)) is not None:
            raise InputError(
                f"{target_path.name} is {a_feature_head(kind)}: it drafts for the target it was made for, "
                "and is no target itself",
                f"run `specrun check TARGET {target_path.name}`",
            )
        facts = target_facts(target_path)
        if draft_spec is None:
            if facts["mtp_heads"]:  # it drafts for itself, or says why its heads cannot
                if json_output:
                    _print_json({"target": str(target_path), **facts})
                else:
                    print(f"target  {target_path}\n\n{render_facts(facts)}")
                if facts["mtp_drafting"] is None:
                    raise typer.Exit(code=3)
                return
            raise InputError(
                f"no draft given for '{target_spec}'", "pass a DRAFT too, or run `specrun drafts TARGET` to find one"
            )
        draft_path = resolve_spec(draft_spec, reg, hook)
    if assists(target_path, draft_path):  # it drafts over the target's cache, or cannot: one line naming why
        facts["assistant"] = True
    if feature_head(draft_path) is not None:  # it reads the target's layer inputs, or cannot: one line naming why
        facts["feature_head"] = require_feature_fit(target_path, draft_path)
    report = check_pair(target_path, draft_path)
    if json_output:
        _print_json({**report.to_dict(), **facts})
    else:
        print(render_report(report, facts))
    if report.drafting is None:
        raise typer.Exit(code=3)


def target_facts(path: Path) -> dict:
    """What the target's own file says about speculating on it: its MTP heads, and how its cache
    takes draft tokens back (the most a step may verify; None: any)."""
    from .. import defaults
    from ..models.modelfile import mtp_chain, mtp_layers, rollback_kind

    kind = rollback_kind(path)
    return {
        "mtp_heads": mtp_layers(path),
        "mtp_drafting": mtp_chain(path),
        "rollback": {"kind": kind, "limit": defaults.RECURRENT_K_MAX if kind == "snapshots" else None},
    }


def render_facts(facts: dict) -> str:
    from ..models.modelfile import UNCHAINED_HEADS

    back = facts["rollback"]
    limit = "any number of" if back["limit"] is None else f"up to {back['limit']}"
    n, drafting = facts["mtp_heads"], facts.get("mtp_drafting")
    if not n:
        heads = "none"
    elif drafting == "chained":
        heads = f"{n}, chained (--spec mtp drafts up to {n} tokens a step, one per head)"
    elif drafting == "one":
        heads = "1 (--spec mtp drafts with it)"
    else:
        heads = f"{n}, unused ({UNCHAINED_HEADS})"
    return f"MTP heads  {heads}\nrollback   {back['kind']}: {limit} draft tokens a step"


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def render_report(report, facts: dict | None = None) -> str:
    """The report as text: paths, llama.cpp's rules with both values, the non-blocking facts (with
    the target's own `facts`), then the verdict."""
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
    if facts is not None:
        lines += [render_facts(facts), ""]
    if report.compatible and facts is not None and facts.get("assistant"):
        lines.append(
            "compatible: the draft is a Gemma 4 MTP assistant, which drafts over the target's own cache "
            "(--spec mtp, or auto)"
        )
    elif report.compatible and facts is not None and facts.get("feature_head"):
        from ..models.modelfile import a_feature_head

        kind = facts["feature_head"]
        lines.append(
            f"compatible: the draft is {a_feature_head(kind)} made for this target, which drafts from the "
            f"target's own layer inputs (--spec {kind}, or auto)"
        )
    elif report.compatible:
        lines.append("compatible: the draft can speculate for the target")
    else:
        lines.append(f"incompatible tokens: {report.first_failure}")
        if report.text_drafting:
            lines.append(
                "drafts through text: both tokenizers give text back as it was, so the draft's text is "
                "re-tokenized for the target (--spec text, or draft, hybrid, auto)"
            )
        else:
            which = "target's" if not report.round_trips[0] else "draft's"
            lines.append(f"cannot draft through text either: the {which} tokenizer does not give text back as it was")
    return "\n".join(lines)


# ---- drafts --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraftCandidate:
    """A local GGUF file vetted as a draft for the target; `readable` is false for a file that is no
    usable GGUF model (`reason` says why)."""

    path: Path
    found_in: str
    name: str | None
    size: int
    ratio: float
    compatible: bool
    reason: str | None
    readable: bool = True
    # "token", "text" (another vocabulary, through text), ASSISTANT, a head's kind ("eagle3", "dflash"), or None
    drafting: str | None = None

    def to_dict(self) -> dict:
        return {
            "path": str(self.path),
            "name": self.name,
            "found_in": self.found_in,
            "size": self.size,
            "ratio": round(self.ratio, 4),
            "compatible": self.compatible,
            "drafting": self.drafting,
            "first_failure": self.reason,
        }


BUILT_IN_MTP = "built-in MTP heads"
ASSISTANT = "assistant"  # a Gemma 4 MTP assistant, which drafts over the target's cache


def find_drafts(target: Path, reg: Registry, search: list[Path]) -> list[DraftCandidate]:
    """Every local GGUF smaller than the target, vetted against it: those sharing its tokens
    first, then those that can draft through text, then the rest, smallest first in each.

    A file that is no readable model is a candidate that failed, never the end of the listing: the
    folders scanned (the Hugging Face cache, --search) hold whatever was put there."""
    from ..models.compat import check_pair, read_vocab
    from ..models.modelfile import FEATURE_HEAD_NAMES, assists, feature_head, require_feature_fit

    target_size = target.stat().st_size
    vetted = []
    for found in discover.local_models(reg, search, exclude=target):
        if found.size >= target_size:
            continue
        if not vetted:
            read_vocab(target)  # a target llama.cpp cannot read is the command's error, not every candidate's
        try:
            report = check_pair(target, found.path)
            ok, reason, readable, drafting = report.compatible, report.first_failure, True, report.drafting
            try:  # an assistant drafts over a Gemma 4 target's cache, a head from its target's layers, or neither
                if assists(target, found.path):
                    drafting = ASSISTANT if drafting == "token" else None
                elif feature_head(found.path) is not None:
                    kind = require_feature_fit(target, found.path)
                    drafting = kind if drafting == "token" else None
            except IncompatibleModelsError as exc:
                ok, reason, drafting = False, exc.message, None
        except ModelFileError as exc:
            ok, reason, readable, drafting = False, exc.message, False, None
        vetted.append(
            DraftCandidate(
                found.path,
                found.found_in,
                found.name,
                found.size,
                found.size / target_size,
                ok,
                reason,
                readable,
                drafting,
            )
        )
    rank = {ASSISTANT: 0, **dict.fromkeys(FEATURE_HEAD_NAMES, 0), "token": 0, "text": 1, None: 2}
    return sorted(vetted, key=lambda c: (rank[c.drafting], c.size, str(c.path)))


def drafts(
    target: Annotated[
        str | None,
        typer.Argument(
            help="Target: a .gguf path, a registry name or hf:OWNER/REPO/FILE.gguf. Default: the default pair's."
        ),
    ] = None,
    search: Annotated[
        list[Path] | None,
        typer.Option("--search", metavar="DIR", help="Also look for .gguf files under this directory (repeatable)."),
    ] = None,
    show_all: Annotated[
        bool, typer.Option("--all", "-a", help="Also list files that cannot draft for TARGET, with the rule they fail.")
    ] = False,
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
    shown = [c for c in found if show_all or c.drafting is not None]
    from ..models.modelfile import FEATURE_HEAD_NAMES, mtp_chain, mtp_layers

    heads = mtp_layers(target_path) if mtp_chain(target_path) is not None else 0
    builtin = (
        {"path": str(target_path), "name": BUILT_IN_MTP, "mtp_heads": heads, "drafting": "mtp", "spec": "--spec mtp"}
        if heads
        else None
    )
    if not show_all:  # with --all the table says it; otherwise one line each, so a broken file is not missed
        for c in found:
            if not c.readable:
                sys.stderr.write(f"specrun drafts: skipped an unreadable file: {c.reason}\n")
    if json_output:
        _print_json(
            {
                "target": str(target_path),
                "target_size": target_path.stat().st_size,
                "drafts": ([builtin] if builtin else []) + [c.to_dict() for c in shown],
            }
        )
        return
    if builtin:  # drafts without a second model: listed first
        print(f"{BUILT_IN_MTP}: {heads} in {target_path.name} (--spec mtp, no --draft needed)")
        if not shown:
            return
        print()
    if not shown:
        more = "" if show_all or not found else f" ({len(found)} incompatible; --all lists them)"
        sys.stderr.write(f"no compatible draft found for {target_path.name}{more}; --search DIR looks in more places\n")
        return
    header = ["DRAFT", "SIZE", "RATIO", "DRAFTS", "FOUND IN"] + (["COMPATIBLE"] if show_all else [])
    rows = []
    for c in shown:
        row = [
            c.name or str(c.path),
            human_size(c.size),
            f"{c.ratio:.1%}",
            {
                "token": "tokens",
                "text": "text",
                ASSISTANT: "assistant (--spec mtp)",
                **{kind: f"{name} (--spec {kind})" for kind, name in FEATURE_HEAD_NAMES.items()},
            }.get(c.drafting, "-"),
            c.found_in,
        ]
        if show_all:
            row.append("yes" if c.compatible else f"no: {c.reason}")
        rows.append(row)
    print(_table(rows, header))
