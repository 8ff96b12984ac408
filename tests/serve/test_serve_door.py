"""What the server checks before it reads a body, on real servers on loopback: the body's size
(413 from Content-Length, or as chunks pass the limit, with the server's memory unchanged), its
type (415 unless JSON), the Host header (403 unless a loopback name), CORS only for the origins
given, and a bounded number of connections (503 beyond)."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from cli_helpers import specrun
from serve_helpers import FLAT_COSTS, WAIT, load_pair, served, start, stop

from specrun.defaults import SERVE_MAX_BODY

LIMIT = 64 * 1024
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0}


@pytest.fixture(scope="module")
def pair(tiny_target):
    loaded = load_pair(tiny_target, None)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def server(pair):
    with served(pair, costs=FLAT_COSTS, mode="off", max_body=LIMIT, cors_origins=("http://localhost:3000",)) as running:
        yield running


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host.strip("[]"), int(port)


def read_status(sock: socket.socket) -> tuple[int, bytes]:
    """The status and the raw bytes of a response read until the connection closes (or WAIT)."""
    sock.settimeout(WAIT)
    data = b""
    while b"\r\n\r\n" not in data or not _complete(data):
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        data += chunk
    return int(data.split(b" ", 2)[1]), data


def _complete(data: bytes) -> bool:
    head, _, body = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def send_body(url: str, head: bytes, chunks, *, chunked: bool) -> tuple[int, int, bytes]:
    """Send a request's head, then its body chunk by chunk from a thread, while reading the
    response: the status, the bytes of body sent before the server closed, and the response."""
    sock = socket.create_connection(address(url))
    sent = 0
    stop_sending = threading.Event()

    def sender() -> None:
        nonlocal sent
        try:
            for chunk in chunks:
                if stop_sending.is_set():
                    return
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk)
                sent += len(chunk)
            if chunked:
                sock.sendall(b"0\r\n\r\n")
        except OSError:  # the server answered and closed: the rest of the body was never wanted
            pass

    sock.sendall(head)
    thread = threading.Thread(target=sender)
    thread.start()
    try:
        status, response = read_status(sock)
    finally:
        stop_sending.set()
        thread.join(WAIT)
        sock.close()
    return status, sent, response


def head(path: str, url: str, *, length: int | None = None, extra: str = "") -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return (
        f"POST {path} HTTP/1.1\r\nHost: {':'.join(map(str, address(url)))}\r\nContent-Type: application/json\r\n"
        f"{framing}\r\n{extra}\r\n"
    ).encode()


def chunks_of(total: int, size: int = 64 * 1024):
    prefix = b'{"prompt": "'
    yield prefix
    left = total - len(prefix)
    while left > 0:
        n = min(size, left)
        yield b"a" * n
        left -= n


# -- size ----------------------------------------------------------------------------------------


def test_a_body_declared_too_large_is_a_413_before_any_of_it_is_sent(server):
    sock = socket.create_connection(address(server.url))
    try:
        sock.sendall(head("/v1/completions", server.url, length=50_000_000))
        status, response = read_status(sock)
    finally:
        sock.close()
    assert status == 413
    error = json.loads(response.partition(b"\r\n\r\n")[2])["error"]
    assert error["code"] == "request_too_large" and "--max-body" in error["message"]


def test_a_chunked_body_is_refused_once_its_bytes_pass_the_limit(server):
    status, sent, _ = send_body(server.url, head("/v1/completions", server.url), chunks_of(50_000_000), chunked=True)
    assert status == 413
    assert sent < 50_000_000 // 4  # the limit, plus what socket buffers took before the server closed


def test_a_body_within_the_limit_is_answered(server):
    text = "word " * 100
    assert len(json.dumps({"prompt": text})) < LIMIT
    answer = httpx.post(server.url + "/v1/completions", json={"prompt": text, "max_tokens": 2}, timeout=WAIT)
    assert answer.status_code == 200


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="peak memory is read from /proc")
def test_a_50_mb_body_leaves_the_servers_memory_as_it_was(tiny_target):
    """With the default limit: a declared 50 MB body costs the server nothing; one sent in chunks,
    at most the limit's bytes (read before they pass it)."""
    process, url, _ = start("-m", str(tiny_target), "-md", "none", "-c", "512", "-t", "1", "-q")
    try:
        assert httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=WAIT).status_code == 200
        body = 50_000_000
        before = peak_rss_kib(process.pid)
        status, sent, _ = send_body(
            url, head("/v1/completions", url, length=body), chunks_of(body, 1 << 20), chunked=False
        )
        declared = peak_rss_kib(process.pid) - before
        assert status == 413 and sent < body
        assert declared < 2 * 1024, f"the server's peak memory grew by {declared} KiB"
        status, sent, _ = send_body(url, head("/v1/completions", url), chunks_of(body, 1 << 20), chunked=True)
        streamed = peak_rss_kib(process.pid) - before
        assert status == 413 and sent < body
        assert streamed < (SERVE_MAX_BODY + 4 * 1024 * 1024) // 1024, f"the server's peak memory grew by {streamed} KiB"
        assert httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=WAIT).status_code == 200
    finally:
        stop(process, signal.SIGTERM)
    print(f"peak memory growth: declared 50 MB body {declared} KiB, chunked 50 MB body {streamed} KiB")


# -- type ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind", ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data", None]
)
def test_a_post_that_is_not_json_is_a_415(server, kind):
    headers = {"content-type": kind} if kind else {}
    for path in ("/v1/chat/completions", "/v1/completions"):
        response = httpx.post(server.url + path, content=json.dumps(CHAT).encode(), headers=headers, timeout=WAIT)
        assert response.status_code == 415, response.text
        assert response.json()["error"]["code"] == "unsupported_media_type"


def test_json_with_a_charset_is_json(server):
    response = httpx.post(
        server.url + "/v1/chat/completions",
        content=json.dumps(CHAT).encode(),
        headers={"content-type": "application/json; charset=utf-8"},
        timeout=WAIT,
    )
    assert response.status_code == 200


# -- Host ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8080",
        "127.0.0.1.evil.example",
        "localhost.evil.example",
        "10.0.0.1",
        "[::1",
        "localhost:http",
    ],
)
def test_a_host_that_is_not_loopback_is_a_403(server, host):
    for method, path in (("POST", "/v1/chat/completions"), ("GET", "/health"), ("GET", "/v1/models")):
        response = httpx.request(
            method, server.url + path, json=CHAT if method == "POST" else None, headers={"host": host}, timeout=WAIT
        )
        assert response.status_code == 403, (host, path, response.text)
        assert response.json()["error"]["code"] == "host_not_allowed"


@pytest.mark.parametrize(
    "host", ["localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.2:80", "[::1]", "[::1]:8080", "app.localhost"]
)
def test_a_loopback_host_is_answered(server, host):
    assert (
        httpx.post(server.url + "/v1/chat/completions", json=CHAT, headers={"host": host}, timeout=WAIT).status_code
        == 200
    )


def test_a_server_beyond_loopback_answers_any_host(pair):
    with served(pair, costs=FLAT_COSTS, mode="off", host="0.0.0.0", api_key="k") as running:
        url = running.url.replace("0.0.0.0", "127.0.0.1")
        response = httpx.post(
            url + "/v1/chat/completions",
            json=CHAT,
            headers={"host": "specrun.lan", "authorization": "Bearer k"},
            timeout=WAIT,
        )
        assert response.status_code == 200


# -- CORS ----------------------------------------------------------------------------------------


def preflight(url: str, origin: str) -> httpx.Response:
    return httpx.options(
        url + "/v1/chat/completions",
        headers={
            "origin": origin,
            "access-control-request-method": "POST",
            "access-control-request-headers": "content-type",
        },
        timeout=WAIT,
    )


def test_cors_is_off_without_an_origin(pair):
    with served(pair, costs=FLAT_COSTS, mode="off") as running:
        answer = preflight(running.url, "http://localhost:3000")
        assert answer.status_code >= 400 and "access-control-allow-origin" not in answer.headers
        post = httpx.post(
            running.url + "/v1/chat/completions", json=CHAT, headers={"origin": "http://localhost:3000"}, timeout=WAIT
        )
        assert post.status_code == 200 and "access-control-allow-origin" not in post.headers


def test_cors_answers_the_origins_given_and_no_other(server):
    allowed = preflight(server.url, "http://localhost:3000")
    assert allowed.status_code == 200 and allowed.headers["access-control-allow-origin"] == "http://localhost:3000"
    assert "POST" in allowed.headers["access-control-allow-methods"]
    other = preflight(server.url, "https://evil.example")
    assert other.status_code == 400 and "access-control-allow-origin" not in other.headers
    post = httpx.post(
        server.url + "/v1/chat/completions", json=CHAT, headers={"origin": "http://localhost:3000"}, timeout=WAIT
    )
    assert post.status_code == 200 and post.headers["access-control-allow-origin"] == "http://localhost:3000"
    post = httpx.post(
        server.url + "/v1/chat/completions", json=CHAT, headers={"origin": "https://evil.example"}, timeout=WAIT
    )
    assert "access-control-allow-origin" not in post.headers


def test_a_bad_cors_origin_is_a_usage_error(tiny_target):
    result = specrun("serve", "-m", tiny_target, "-md", "none", "--port", "0", "--cors-origin", "localhost:3000/app")
    assert result.returncode == 2 and "--cors-origin" in result.stderr and "Traceback" not in result.stderr


# -- the flags ------------------------------------------------------------------------------------


def test_the_flags_reach_the_server(tiny_target):
    """--max-body, --cors-origin and --max-connections as given on the command line."""
    process, url, _ = start(
        "-m",
        str(tiny_target),
        "-md",
        "none",
        "-c",
        "512",
        "-t",
        "1",
        "-q",
        "--max-body",
        "4096",
        "--cors-origin",
        "http://localhost:3000/",
        "--max-connections",
        "1",
    )
    try:
        with httpx.Client(timeout=WAIT) as held:  # one connection, kept open between requests
            small = held.post(
                url + "/v1/completions",
                json={"prompt": "word " * 40, "max_tokens": 2},
                headers={"origin": "http://localhost:3000"},
            )
            assert small.status_code == 200 and small.headers["access-control-allow-origin"] == "http://localhost:3000"
            assert httpx.get(url + "/health", timeout=WAIT).status_code == 503  # a second connection
        wait_until_answered(url)
        large = httpx.post(url + "/v1/completions", json={"prompt": "a" * 5000, "max_tokens": 2}, timeout=WAIT)
        assert large.status_code == 413 and "4096 bytes" in large.json()["error"]["message"]
    finally:
        stop(process, signal.SIGTERM)


def wait_until_answered(url: str) -> None:
    """Until /health answers 200: the server sees closed connections soon, not at once."""
    deadline = time.perf_counter() + WAIT
    while httpx.get(url + "/health", timeout=WAIT).status_code != 200:
        assert time.perf_counter() < deadline
        time.sleep(0.05)


# -- connections ---------------------------------------------------------------------------------


def test_connections_beyond_the_limit_are_a_503(pair):
    with served(pair, costs=FLAT_COSTS, mode="off", max_connections=2) as running:
        held = []
        try:
            for _ in range(2):
                sock = socket.create_connection(address(running.url))
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert read_status(sock)[0] == 200  # answered, and kept open
                held.append(sock)
            refused = httpx.get(running.url + "/health", timeout=WAIT)
            assert refused.status_code == 503
        finally:
            for sock in held:
                sock.close()
        wait_until_answered(running.url)
        assert httpx.post(running.url + "/v1/chat/completions", json=CHAT, timeout=WAIT).status_code == 200
