"""uvicorn around a Service: bind, serve, and stop by draining.

The socket is bound before uvicorn starts, so a port in use is one clear error and port 0 (any
free port) is known before the first request. The first Ctrl-C or SIGTERM stops admissions, fails
what waits and gives active requests `grace` seconds to finish; a second Ctrl-C cancels them at
once. uvicorn's own handling would re-raise the signal after shutting down (killing the process
on SIGTERM); here the signal is only recorded, so the command exits with its own code. Beyond
`max_connections` connections at once uvicorn answers 503 and closes, which with the body limit
and the queue bounds what a flood of clients can make the server hold.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import socket
import threading
from collections.abc import Iterator

import uvicorn

from ..errors import SpecrunError
from .app import create_app
from .guards import is_loopback
from .service import Service


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one), or one clear error."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as error:
        raise SpecrunError(
            f"cannot resolve --host {host} ({error.strerror})", "give an address such as 127.0.0.1 or 0.0.0.0"
        ) from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise SpecrunError(
                f"port {port} on {host} is in use", "stop the other server or pass another --port"
            ) from None
        raise SpecrunError(f"cannot listen on {host}:{port} ({error.strerror})", "check --host and --port") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}"


class DrainingServer(uvicorn.Server):
    """uvicorn, draining the service on the first signal, cancelling on the second."""

    def __init__(self, config: uvicorn.Config, service: Service, grace: float):
        super().__init__(config)
        self.service = service
        self.grace = grace
        self.signals: list[int] = []
        self.ready = threading.Event()  # set once listening, or once run() ended without starting

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        self.ready.set()

    def handle_exit(self, sig: int, frame) -> None:
        """Runs inside a signal handler, which may have interrupted the event loop holding the
        worker's lock: the drain is started on a thread of its own."""
        self.signals.append(sig)
        grace = 0.0 if len(self.signals) > 1 else self.grace
        threading.Thread(target=self.service.worker.drain, args=(grace,), name="specrun-drain", daemon=True).start()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def make_server(service: Service, grace: float, sock: socket.socket) -> DrainingServer:
    """uvicorn for `service` on the bound `sock`: Host checks when that is a loopback address."""
    app = create_app(service, loopback=is_loopback(sock.getsockname()[0]))
    # uvicorn refuses a request once the open connections (its own among them) reach the limit: + 1
    # lets exactly `connections()` be served at once.
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=grace + 5.0,
        limit_concurrency=service.options.connections() + 1,
    )
    return DrainingServer(config, service, grace)


def serve(service: Service, sock: socket.socket, grace: float) -> int | None:
    """Serve until a signal; returns the first signal received (None if the server stopped otherwise)."""
    server = make_server(service, grace, sock)
    service.start()
    try:
        server.run(sockets=[sock])
    finally:
        service.stop(0.0)
    return server.signals[0] if server.signals else None


class BackgroundServer:
    """A Service served from a thread (tests, the bench): `url` is known once it is constructed."""

    def __init__(self, service: Service, host: str = "127.0.0.1", port: int = 0, grace: float = 0.0):
        self.service = service
        self.sock = bind(host, port)
        self.url = url_of(self.sock)
        self.server = make_server(service, grace, self.sock)
        self.server.config.timeout_graceful_shutdown = 1.0
        service.start()
        self.thread = threading.Thread(target=self._run, name="specrun-http", daemon=True)
        self.thread.start()
        self.server.ready.wait()
        if not self.server.started:
            service.stop(0.0)
            raise SpecrunError("the server did not start", "SPECRUN_DEBUG=1 shows why")

    def _run(self) -> None:
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.server.ready.set()

    def stop(self) -> None:
        self.service.worker.drain(0.0)
        self.server.should_exit = True
        self.thread.join()
        self.service.stop(0.0)
        self.sock.close()
