"""Checks at the door, before a request body is read: who may ask (Host, API key), how much (body
size) and in what form (JSON only).

A server on a developer's machine is reachable by every web page the developer opens. A page may
send a POST to http://127.0.0.1:8080 without asking first only if its body is a "simple" type such
as text/plain, so `/v1/*` takes nothing but application/json: anything else would need a CORS
preflight, which this server answers only for `--cors-origin` origins. A page that makes its own
name resolve to 127.0.0.1 (DNS rebinding) sends its own name as Host, so a server listening on
loopback answers only requests addressed to a loopback name or address. A body larger than the
limit is refused from its Content-Length, or, sent in chunks, as soon as its bytes pass the limit.

Each check is a pure ASGI wrapper: streams, disconnects and the other checks pass through untouched.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable

from . import anthropic_render
from .schemas import error_body

ANTHROPIC = "/v1/messages"  # Anthropic's Messages API: its errors in Anthropic's envelope
OPEN = ("/health", "/openapi.json")  # what --api-key leaves open: load balancers and API browsers; all else needs it
JSON_ONLY = "/v1/"  # POSTs under this prefix must be application/json
LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}

Send = Callable[[dict], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, no port) is reachable from this machine only."""
    host = host.lower().rstrip(".")
    if host in LOOPBACK_NAMES or host.endswith(
        ".localhost"
    ):  # *.localhost: loopback by RFC 6761, as browsers resolve it
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_of(header: str) -> str | None:
    """The name or address of a Host header (`name`, `name:port`, `[v6]`, `[v6]:port`); None if malformed."""
    if header.startswith("["):
        end = header.find("]")
        rest = header[end + 1 :] if end > 0 else None
        if rest is None or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return header[1:end]
    name, colon, port = header.partition(":")
    if colon and not port.isdigit():
        return None
    return name


def _header(scope: dict, name: bytes) -> bytes | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value
    return None


def envelope(
    path: str, status: int, message: str, kind: str, param: str | None = None, code: str | None = None
) -> dict:
    """An error's body in the envelope of the API at `path`: Anthropic's for its Messages API,
    OpenAI's everywhere else (OpenAI's `kind`, `param` and `code` there)."""
    if path.startswith(ANTHROPIC):
        return anthropic_render.error_body(message, anthropic_render.error_kind(status))
    return error_body(message, kind, param, code)


async def refuse(
    scope: dict, send: Send, status: int, message: str, kind: str, code: str, headers: dict | None = None
) -> None:
    """Answer in the API's error envelope, without reading the request body."""
    body = json.dumps(envelope(scope.get("path", ""), status, message, kind, None, code)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


class LoopbackHostOnly:
    """On a server listening on loopback: a Host header that is not a loopback name or address is a 403."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            header = _header(scope, b"host")
            if header is not None:  # HTTP/1.0 may send none; browsers always do
                text = header.decode("latin-1").strip()
                host = host_of(text)
                if host is None or not is_loopback(host):
                    await refuse(
                        scope,
                        send,
                        403,
                        f"Host {text!r} is not a name of this machine: the server listens on loopback and "
                        "answers requests addressed to localhost, 127.0.0.1 or [::1] only (start it with --host "
                        "and --api-key to serve other names)",
                        "invalid_request_error",
                        "host_not_allowed",
                    )
                    return
        await self.app(scope, receive, send)


class BearerAuth:
    """Requests to every path but the OPEN ones need `Authorization: Bearer <key>`, or
    `x-api-key: <key>` as Anthropic's clients send it, checked before the body is read: the
    endpoints outside /v1 (/infill, /tokenize, …) run the model or read its vocabulary too."""

    def __init__(self, app, key: str):
        self.app = app
        self.key = key.encode()
        self.expected = b"Bearer " + self.key

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in OPEN:
            given = _header(scope, b"authorization") or b""
            keyed = _header(scope, b"x-api-key") or b""
            if not (hmac.compare_digest(given, self.expected) or hmac.compare_digest(keyed, self.key)):
                await refuse(
                    scope,
                    send,
                    401,
                    "invalid or missing API key (send Authorization: Bearer <key>, or x-api-key: <key>)",
                    "authentication_error",
                    "invalid_api_key",
                )
                return
        await self.app(scope, receive, send)


class JsonOnly:
    """A POST to /v1/* must say `Content-Type: application/json` (parameters such as charset allowed): 415 otherwise."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].startswith(JSON_ONLY):
            given = (_header(scope, b"content-type") or b"").decode("latin-1")
            if given.split(";", 1)[0].strip().lower() != "application/json":
                shown = f"Content-Type {given!r}" if given else "no Content-Type"
                await refuse(
                    scope,
                    send,
                    415,
                    f"the request body must be JSON sent with Content-Type: application/json ({shown} was sent)",
                    "invalid_request_error",
                    "unsupported_media_type",
                )
                return
        await self.app(scope, receive, send)


class BodyLimit:
    """A request body over `limit` bytes is a 413: at once from its Content-Length, else as soon as
    the chunks received pass the limit. The application then sees the client as gone, and nothing
    it sends afterwards goes out; the connection is closed, so the rest of the body is not read."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    def _message(self) -> str:
        return (
            f"the request body is larger than this server takes ({self.limit} bytes; start it with a larger --max-body)"
        )

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = (_header(scope, b"content-length") or b"").strip()
        if length.isdigit() and int(length) > self.limit:
            await refuse(
                scope, send, 413, self._message(), "invalid_request_error", "request_too_large", {"Connection": "close"}
            )
            return
        received = 0
        refused = False
        started = False

        async def limited_receive() -> dict:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    refused = True
                    if not started:
                        await refuse(
                            scope,
                            send,
                            413,
                            self._message(),
                            "invalid_request_error",
                            "request_too_large",
                            {"Connection": "close"},
                        )
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: dict) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, limited_receive, guarded_send)
