"""Measure the connection limits of a real `codexgate serve` on loopback.

    uv run python bench/connection_limits.py [--connections 1000]

Starts the gateway (no upstream needed), then: N connections that make one request and stay
idle (how many the gateway keeps, its open file descriptors); N connections that send nothing
(when they are closed); a slowloris head; a 16 MB header; 100,000 headers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time


async def start_gateway(extra: list[str]) -> tuple[asyncio.subprocess.Process, int]:
    args = [
        "-m",
        "codexgate.cli",
        "serve",
        "--port",
        "0",
        "--no-discover",
        "--upstream",
        "http://127.0.0.1:9/v1",
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, *extra, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL
    )
    assert proc.stderr is not None
    async with asyncio.timeout(30):
        while True:
            line = (await proc.stderr.readline()).decode()
            if not line:
                raise RuntimeError("gateway exited")
            if match := re.search(r"running on http://127\.0\.0\.1:(\d+)", line):
                return proc, int(match.group(1))


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def closed(reader: asyncio.StreamReader, bound: float) -> bool:
    try:
        async with asyncio.timeout(bound):
            while await reader.read(65536):
                pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


async def idle_connections(port: int, pid: int, n: int) -> None:
    base = fds(pid)
    conns = []
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(REQUEST)
        await reader.readuntil(b"\r\n\r\n")
        conns.append((reader, writer))
    after = fds(pid)
    closed_now = sum(await asyncio.gather(*(closed(r, 1.0) for r, _ in conns)))
    print(f"{n} idle keep-alive connections: {n - closed_now} kept open; gateway fds {base} -> {after}")
    for _, w in conns:
        w.close()


async def silent_connections(port: int, n: int) -> None:
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(n)]
    started = time.monotonic()
    results = await asyncio.gather(*(closed(r, 30) for r, _ in conns))
    print(f"{n} connections sending nothing: {sum(results)} closed after {time.monotonic() - started:.1f}s")
    for _, w in conns:
        w.close()


async def slowloris(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    started = time.monotonic()

    async def drip() -> None:
        try:
            for n in range(600):
                writer.write(f"x-{n}: y\r\n".encode())
                await writer.drain()
                await asyncio.sleep(0.1)
        except ConnectionError:
            pass

    task = asyncio.create_task(drip())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 60)
    print(
        f"slowloris (a header every 0.1 s): {head.strip().decode()} after {time.monotonic() - started:.1f}s"
    )
    task.cancel()
    writer.close()


async def big_head(port: int, label: str, head: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started, sent = time.monotonic(), 0
    reply = asyncio.create_task(reader.readuntil(b"\r\n"))
    try:
        for i in range(0, len(head), 65536):
            writer.write(head[i : i + 65536])
            await writer.drain()
            sent += min(65536, len(head) - i)
            if reply.done():
                break
    except ConnectionError:
        pass
    try:
        status = (await asyncio.wait_for(reply, 10)).strip().decode()
    except (ConnectionError, asyncio.IncompleteReadError, TimeoutError) as exc:
        status = f"closed ({type(exc).__name__})"
    print(f"{label}: {status} after {sent} of {len(head)} bytes, {time.monotonic() - started:.2f}s")
    writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=1000)
    args = parser.parse_args()
    proc, port = await start_gateway([])
    try:
        await idle_connections(port, proc.pid, args.connections)
        await silent_connections(port, args.connections)
        await slowloris(port)
        huge = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nx-huge: " + b"a" * (16 * 1024 * 1024) + b"\r\n\r\n"
        await big_head(port, "16 MB header", huge)
        many = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"".join(b"x-%d: v\r\n" % i for i in range(100_000))
        await big_head(port, "100,000 headers", many + b"\r\n")
    finally:
        proc.terminate()
        await proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
