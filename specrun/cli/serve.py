"""`specrun serve`: an OpenAI-compatible HTTP server decoding its requests together, speculation
budgeted across them."""

from __future__ import annotations

import re
import signal
from dataclasses import replace
from typing import Annotated

import typer

from .. import defaults
from ..errors import EXIT_INTERRUPTED, InputError
from ..runtime import heap
from ..runtime.context_size import serve_context
from ..runtime.pair import Pair
from ..runtime.session import Offer, check_mode
from ..serve.scheduler import SCHEDULES
from ..terminal import Output
from . import options as opt
from .options import flag_groups
from .settings import generation_settings, pair_config, resolve, spec_mode

SERVER = "Server"
MAX_PARALLEL = 128  # llama.cpp holds at most 256 sequences: the busy ones and as many kept caches

Host = Annotated[
    str,
    typer.Option(
        "--host", help="Address to listen on; anything but loopback needs --api-key to be safe.", rich_help_panel=SERVER
    ),
]
Port = Annotated[
    int,
    typer.Option(
        "--port", min=0, max=65535, help="Port to listen on (0: any free port, said on stderr).", rich_help_panel=SERVER
    ),
]
Parallel = Annotated[
    int,
    typer.Option(
        "--parallel",
        "-np",
        min=1,
        max=MAX_PARALLEL,
        help="Requests decoded together in one batch.",
        rich_help_panel=SERVER,
    ),
]
Queue = Annotated[
    int,
    typer.Option(
        "--queue",
        min=0,
        help="Requests that may wait for a free sequence; beyond them the server answers 503 with Retry-After.",
        rich_help_panel=SERVER,
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="SPECRUN_API_KEY",
        help="Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on /v1 and /metrics (also read from "
        "SPECRUN_API_KEY).",
        rich_help_panel=SERVER,
    ),
]
Schedule = Annotated[
    str,
    typer.Option(
        "--schedule",
        help="Order of admission from the queue: srpt (shortest predicted remaining time first, with aging) or fcfs.",
        rich_help_panel=SERVER,
    ),
]
MaxBody = Annotated[
    int,
    typer.Option(
        "--max-body",
        min=1024,
        metavar="BYTES",
        help="Largest request body taken; a larger one is answered 413 before it is read.",
        rich_help_panel=SERVER,
    ),
]
MaxConnections = Annotated[
    int | None,
    typer.Option(
        "--max-connections",
        min=1,
        help="Connections served at once; beyond them the server answers 503 (default: --parallel + --queue + 16).",
        rich_help_panel=SERVER,
    ),
]
CorsOrigin = Annotated[
    list[str] | None,
    typer.Option(
        "--cors-origin",
        metavar="ORIGIN",
        help="Let web pages of ORIGIN (scheme://host[:port]) call the server from a browser; repeatable. Default: no "
        "origin may.",
        rich_help_panel=SERVER,
    ),
]
CacheRam = Annotated[
    int | None,
    typer.Option(
        "--cache-ram",
        min=0,
        metavar="MIB",
        help="Host RAM for the caches of finished requests, restored when a prompt comes back (0: off; default: "
        f"the smaller of {defaults.CACHE_RAM_MAX_MIB} MiB and a quarter of the machine's memory).",
        rich_help_panel=SERVER,
    ),
]
LookupPool = Annotated[
    str,
    typer.Option(
        "--lookup-pool",
        help="on: prompt lookup also drafts from earlier requests of the same client or conversation opening; off: "
        "from each request's own text only.",
        rich_help_panel=SERVER,
    ),
]
CacheReuse = Annotated[
    int,
    typer.Option(
        "--cache-reuse",
        min=0,
        metavar="N",
        help="Keep every run of at least N cached tokens that a prompt holds after the point where it parts from "
        "the cache (an editor's suffix after the line being typed), moved into place instead of read again. A run "
        "was computed after the old text, so an answer may differ from a cold read's (llama.cpp's --cache-reuse "
        "does the same). 0: off.",
        rich_help_panel=SERVER,
    ),
]
LogRequests = Annotated[
    bool,
    typer.Option(
        "--log-requests/--no-log-requests",
        help="One line on stderr per answered request: prompt tokens cached and read, tokens written, the time of "
        "each, drafts kept.",
        rich_help_panel=SERVER,
    ),
]
ORIGIN = re.compile(r"^https?://[^/\s?#]+$")


def register(app: typer.Typer) -> None:
    """Add `serve` to the app (once, however often it is called)."""
    if any(info.name == "serve" for info in app.registered_commands):
        return
    app.command(name="serve")(serve)


@flag_groups
def serve(
    models: opt.ModelFlags = opt.ModelFlags(),
    speculation: opt.SpeculationFlags = opt.SpeculationFlags(),
    filters: opt.FilterFlags = opt.FilterFlags(),
    runtime: opt.RuntimeFlags = opt.RuntimeFlags(),
    host: Host = defaults.SERVE_HOST,
    port: Port = defaults.SERVE_PORT,
    parallel: Parallel = defaults.SERVE_PARALLEL,
    queue: Queue = defaults.SERVE_QUEUE,
    api_key: ApiKey = None,
    schedule: Schedule = defaults.SERVE_SCHEDULE,
    max_body: MaxBody = defaults.SERVE_MAX_BODY,
    max_connections: MaxConnections = None,
    cors_origin: CorsOrigin = None,
    cache_ram: CacheRam = None,
    lookup_pool: LookupPool = "on",
    cache_reuse: CacheReuse = 0,
    log_requests: LogRequests = True,
    quiet: opt.Quiet = False,
) -> None:
    """Serve the models over OpenAI's API (chat, completions, Responses) and Anthropic's Messages API,
    with /health and /metrics."""
    from ..serve.server import bind, is_loopback, url_of  # fastapi and uvicorn load only here
    from ..serve.server import serve as serve_forever
    from ..serve.service import ServeOptions, Service

    out = Output(quiet=quiet)
    schedule = schedule.strip().lower()
    if schedule not in SCHEDULES:
        raise InputError(f"unknown --schedule {schedule!r}", f"use one of: {', '.join(SCHEDULES)}")
    pool = lookup_pool.strip().lower()
    if pool not in ("on", "off"):
        raise InputError(f"unknown --lookup-pool {lookup_pool!r}", "use on or off")
    origins = tuple(o.rstrip("/") for o in cors_origin or ())
    for origin in origins:
        if not ORIGIN.match(origin):
            raise InputError(
                f"--cors-origin {origin!r} is not an origin", "give scheme://host[:port], e.g. http://localhost:3000"
            )
    mode = spec_mode(speculation.spec, models.draft)
    check_mode(mode)
    sock = bind(host, port)
    try:
        if not is_loopback(host) and not api_key:
            out.warn(
                f"specrun serve: warning: listening on {host} without --api-key: anyone who can reach it may use it"
            )
        resolved = resolve(models)
        check_mode(mode, Offer(draft=resolved.draft is not None))  # before the models load
        k_max = defaults.draft_max_for(mode, speculation.draft_max, resolved.recommended_k)  # --draft-max 0: no drafts
        base = generation_settings(
            max_tokens=defaults.MAX_TOKENS,
            temperature=defaults.TEMPERATURE,
            filters=filters,
            tuning=speculation.tuning,
            draft_max=k_max,
            seed=None,
        )
        config = pair_config(resolved, runtime)
        if runtime.ctx_size is None:
            chosen = serve_context(config.target, config.draft, parallel)
            config = replace(config, ctx_size=chosen.n_ctx)
            out.warn(f"specrun serve: context {chosen.n_ctx} tokens a request: {chosen.reason} (--ctx-size sets it)")
        loaded = Pair(config, warn=out.warn)
        try:
            options = ServeOptions(
                parallel=parallel,
                queue=queue,
                schedule=schedule,
                api_key=api_key,
                max_body=max_body,
                max_connections=max_connections,
                cors_origins=origins,
                mode=mode,
                draft_max=k_max,
                cache_ram=defaults.cache_ram_mib() if cache_ram is None else cache_ram,
                lookup_pool=pool == "on",
                log_requests=log_requests and not quiet,
                cache_reuse=cache_reuse,
                base=base,
            )
            service = Service(loaded, options, warn=out.warn)
            heap.settle()
            try:
                enabled = ", ".join(service.engine.drafters[name].title for name in service.drafting) or "none"
                out.warn(
                    f"specrun serve: listening on {url_of(sock)} · model {service.model_name} · --spec {mode} "
                    f"(drafting: {enabled}) · --parallel {parallel} · --schedule {schedule} · "
                    f"--cache-ram {options.cache_ram} MiB · --flash-attn {service.session.attention.label}"
                )
                received = serve_forever(service, sock, defaults.SERVE_DRAIN_S)
                out.summary(f"specrun serve: stopped after {service.worker.served} answered requests")
            finally:
                service.close()
        finally:
            loaded.close()
    finally:
        sock.close()
    if received == signal.SIGINT:
        raise typer.Exit(EXIT_INTERRUPTED)
