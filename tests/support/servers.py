"""Serve an ASGI app with uvicorn on loopback, for end-to-end tests and benchmarks.

    with run_asgi_server(FakeUpstream([...])) as base_url:   # "http://127.0.0.1:PORT"
        ...

The socket is bound before uvicorn starts (port 0: the OS picks a free one), so the URL is
known without races and no port is guessed. The server runs on uvloop + httptools, as in
production, in a daemon thread with its own event loop; the context manager returns only once
uvicorn is accepting, and on exit waits (bounded) for it to stop. `arun_asgi_server` is the
same for async code, without blocking the caller's loop, or with `same_loop=True` inside the
caller's loop (so the app can share asyncio objects with the test).

Logging: `log_config=None` keeps uvicorn from reconfiguring logging process-wide; its
loggers propagate to the root logger, which pytest captures.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Literal

import uvicorn

from ._exchange import ASGIApp

Lifespan = Literal["auto", "on", "off"]


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _server(
    app: ASGIApp,
    sock: socket.socket,
    *,
    same_loop: bool,
    lifespan: Lifespan,
    shutdown_timeout: int,
    log_level: str,
) -> uvicorn.Server:
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        # Inside the caller's loop the loop is whatever it is; only httptools can be chosen.
        loop="none" if same_loop else "uvloop",
        http="httptools",
        ws="websockets-sansio",  # as `serve` runs it; the legacy backends import deprecated modules
        lifespan=lifespan,
        log_level=log_level,
        log_config=None,
        access_log=False,
        timeout_graceful_shutdown=shutdown_timeout,
    )
    return uvicorn.Server(config)


@contextmanager
def run_asgi_server(
    app: ASGIApp,
    host: str = "127.0.0.1",
    *,
    port: int = 0,
    startup_timeout: float = 10.0,
    shutdown_timeout: int = 2,
    lifespan: Lifespan = "auto",
    log_level: str = "warning",
) -> Iterator[str]:
    """Serve `app` with uvicorn in a background thread; yield its base URL.

    Blocking: from a coroutine use `arun_asgi_server`, or the caller's loop stalls meanwhile.

    Raises RuntimeError when uvicorn does not come up within `startup_timeout` (e.g. the app's
    lifespan startup failed). On exit, requests still running get `shutdown_timeout` seconds
    before uvicorn cancels them.
    """
    sock = _bind(host, port)
    server = _server(
        app,
        sock,
        same_loop=False,
        lifespan=lifespan,
        shutdown_timeout=shutdown_timeout,
        log_level=log_level,
    )
    failure: list[BaseException] = []

    def serve() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as exc:  # SystemExit on startup failure included
            failure.append(exc)

    thread = threading.Thread(target=serve, name=f"uvicorn-{_url(sock)}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive():
                cause = failure[0] if failure else None
                raise RuntimeError(f"uvicorn exited during startup (see the log): {cause!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start within {startup_timeout}s")
            time.sleep(0.002)
        yield _url(sock)
    finally:
        server.should_exit = True
        thread.join(shutdown_timeout + 5.0)
        if thread.is_alive():
            server.force_exit = True
            thread.join(5.0)
        sock.close()
    # Reached only when the body and startup went fine: now report a bad shutdown.
    if thread.is_alive():
        raise RuntimeError("uvicorn did not stop")
    if failure:
        raise RuntimeError("uvicorn crashed") from failure[0]


@asynccontextmanager
async def arun_asgi_server(
    app: ASGIApp,
    host: str = "127.0.0.1",
    *,
    port: int = 0,
    same_loop: bool = False,
    startup_timeout: float = 10.0,
    shutdown_timeout: int = 2,
    lifespan: Lifespan = "auto",
    log_level: str = "warning",
) -> AsyncIterator[str]:
    """`run_asgi_server` for async code.

    Default: the same threaded server, started and stopped off the caller's loop (so clients
    on that loop can finish their requests while uvicorn drains). `same_loop=True`: uvicorn
    runs as a task in the caller's loop, on that loop's implementation.
    """
    if not same_loop:
        manager = run_asgi_server(
            app,
            host,
            port=port,
            startup_timeout=startup_timeout,
            shutdown_timeout=shutdown_timeout,
            lifespan=lifespan,
            log_level=log_level,
        )
        url = await asyncio.to_thread(manager.__enter__)
        try:
            yield url
        finally:
            await asyncio.to_thread(manager.__exit__, None, None, None)
        return

    sock = _bind(host, port)
    server = _server(
        app,
        sock,
        same_loop=True,
        lifespan=lifespan,
        shutdown_timeout=shutdown_timeout,
        log_level=log_level,
    )

    async def serve() -> None:
        try:
            await server.serve(sockets=[sock])
        except SystemExit as exc:  # uvicorn's way to report a failed startup
            raise RuntimeError("uvicorn exited during startup (see the log)") from exc

    task = asyncio.create_task(serve(), name=f"uvicorn-{_url(sock)}")
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if task.done():
                task.result()  # raises what went wrong
                raise RuntimeError("uvicorn exited during startup (see the log)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn did not start within {startup_timeout}s")
            await asyncio.sleep(0.002)
        yield _url(sock)
    finally:
        server.should_exit = True
        done, _ = await asyncio.wait({task}, timeout=shutdown_timeout + 5.0)
        if not done:
            server.force_exit = True
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=5.0)
        sock.close()
        error = None if not done or task.cancelled() else task.exception()  # always retrieve
    if not done:
        raise RuntimeError("uvicorn did not stop")
    if error is not None:
        raise RuntimeError("uvicorn crashed") from error
