"""A TCP proxy that delays every chunk by a fixed time in each direction: network latency without
`tc netem` (some kernels are built without it). Order is kept; bandwidth is not limited.

Usage: python scripts/delay_proxy.py LISTEN_HOST:PORT TARGET_HOST:PORT DELAY_MS
Prints "listening" on stderr once it accepts connections; runs until killed.
"""

from __future__ import annotations

import asyncio
import socket
import sys


async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy reader to writer, each chunk released `delay` seconds after it arrived."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(1 << 16)
            queue.put_nowait((loop.time() + delay, data))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
    finally:
        writer.close()


def no_delay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def main(listen: str, target: str, delay_ms: float) -> None:
    delay = delay_ms / 1000
    target_host, target_port = target.rsplit(":", 1)

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, int(target_port))
        except OSError:
            client_writer.close()
            return
        no_delay(client_writer)
        no_delay(server_writer)
        await asyncio.gather(forward(client_reader, server_writer, delay), forward(server_reader, client_writer, delay))

    host, port = listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, host, int(port))
    print(
        f"delay_proxy: listening at {listen}, forwarding to {target} with {delay_ms:g} ms each way",
        file=sys.stderr,
        flush=True,
    )
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        sys.exit(2)
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
