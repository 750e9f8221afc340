"""How long a PDF input file holds the gateway's event loop (docs/faces.md, "Files").

One gateway in process (the real app over the in-process fake chat upstream), a request with a
PDF of N pages of plain text, on two routes: a Responses request (`input_file`) and a Messages
`count_tokens` (a `document` block, whose text is read to be counted); while it is served, a
ticker task asks to wake every millisecond and records how late it woke (the event loop's lag:
what any other request waits for its turn).
Printed: the longest lag, the sum of the lags (how long the loop was held) and the request's
time, best of 5 runs, and per page. With the file read in a worker thread the loop goes on; what
lag remains is the request's own work on the loop (its 600 KB body read) and the GIL the worker
takes turns with.

    uv run --dev python bench/pdf_loop.py [PAGES ...]   # default: 1 10 100
"""

from __future__ import annotations

import asyncio
import base64
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tests' support modules

from tests.support.asgi_client import StreamingASGITransport  # noqa: E402
from tests.support.asgi_upstream import ASGIUpstreamTransport  # noqa: E402
from tests.support.fake_upstream import FakeUpstream, text_reply  # noqa: E402
from tests.support.pdfs import text_pdf  # noqa: E402

from codexgate.app import build_app  # noqa: E402
from codexgate.config import load_settings  # noqa: E402

LINE = "The quick brown fox jumps over the lazy dog, and other words of about this length."


def pdf_base64(pages: int) -> str:
    pdf = text_pdf([[f"{page}:{line} {LINE}" for line in range(45)] for page in range(pages)])
    return base64.b64encode(pdf).decode()


def responses_request(pages: int) -> tuple[str, dict[str, object]]:
    part = {"type": "input_file", "filename": "a.pdf",
            "file_data": "data:application/pdf;base64," + pdf_base64(pages)}  # fmt: skip
    content = [{"type": "input_text", "text": "Summarise."}, part]
    return "/v1/responses", {"model": "m", "input": [{"type": "message", "role": "user", "content": content}]}


def count_tokens_request(pages: int) -> tuple[str, dict[str, object]]:
    source = {"type": "base64", "media_type": "application/pdf", "data": pdf_base64(pages)}
    content = [{"type": "text", "text": "Summarise."}, {"type": "document", "source": source}]
    return "/v1/messages/count_tokens", {"model": "m", "messages": [{"role": "user", "content": content}]}


ROUTES = {"responses": responses_request, "count_tokens": count_tokens_request}


TICK = 0.001


async def held(client: httpx.AsyncClient, ask: tuple[str, dict[str, object]]) -> tuple[float, float, float]:
    """(longest lag, sum of lags, wall time), in seconds, while `ask` (a path, a body) is served."""
    path, body = ask
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(TICK)
            lags.append(max(0.0, time.perf_counter() - asked - TICK))

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    start = time.perf_counter()
    response = await client.post(path, json=body)
    wall = time.perf_counter() - start
    done.set()
    await task
    assert response.status_code == 200, response.text
    return max(lags), sum(lags), wall


async def main(page_counts: list[int]) -> None:
    fake = FakeUpstream([text_reply("ok")] * 1000)
    settings = load_settings({"discover": False, "upstream": "http://upstream.test/v1"}, environ={})
    app = build_app(settings, transport=ASGIUpstreamTransport(fake), environ={})
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=60
    ) as client:
        head = ("route", "pages", "longest lag", "per page", "loop held", "per page", "request")
        print("{:<13} {:>6} {:>12} {:>9} {:>10} {:>9} {:>8}".format(*head))
        for route, make in ROUTES.items():
            await held(client, make(1))  # imports, first-use costs
            for pages in page_counts:
                ask = make(pages)
                runs = [await held(client, ask) for _ in range(5)]
                longest, total, wall = min(runs)
                request_ms = min(r[2] for r in runs) * 1000
                print(
                    f"{route:<13} {pages:>6} {longest * 1000:>9.1f} ms {longest * 1000 / pages:>6.2f} ms"
                    f" {total * 1000:>7.1f} ms {total * 1000 / pages:>6.2f} ms {request_ms:>5.0f} ms"
                )


if __name__ == "__main__":
    asyncio.run(main([int(a) for a in sys.argv[1:]] or [1, 10, 100]))
