"""A long prefill's progress in the log (backends/chat/backend.py PrefillLog), from the
`prompt_progress` chunks a chat upstream sends while it reads the prompt (llama.cpp with
`return_progress`), through the real app over the fake chat upstream. The chunks carry the
server's own clock (`time_ms`), so no test waits for time to pass."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import httpx
import orjson
import pytest

from codexgate.app import build_app
from codexgate.backends.chat.backend import PrefillLog
from codexgate.config import load_settings
from codexgate.translate.chat_upstream.stream import PromptProgress
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, raw_reply


def progress(processed: int, total: int, ms: int, cache: int = 0) -> dict[str, Any]:
    """A chunk as llama.cpp's server sends it while it reads the prompt."""
    delta = {"role": "assistant", "content": None}
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            "prompt_progress": {"total": total, "cache": cache, "processed": processed, "time_ms": ms}}  # fmt: skip


def answered(chunks: Iterable[dict[str, Any]]) -> list[bytes]:
    """The progress chunks, then an answer: its text, its end, [DONE]."""
    tail = [
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Done."}}]},
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    return [b"data: " + orjson.dumps(c) + b"\n\n" for c in [*chunks, *tail]] + [b"data: [DONE]\n\n"]


async def served(chunks: list[dict[str, Any]], caplog: pytest.LogCaptureFixture) -> list[str]:
    """The answer's text must be whole; returns the lines logged about the prefill."""
    caplog.set_level(logging.INFO, logger="codexgate.backend")
    fake = FakeUpstream([raw_reply(answered(chunks))])
    settings = load_settings({"discover": False, "upstream": "http://upstream.test/v1"}, environ={})
    app = build_app(settings, transport=ASGIUpstreamTransport(fake), environ={})
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        response = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert response.status_code == 200, response.text
    assert response.json()["output"][0]["content"][0]["text"] == "Done."
    return [m for m in caplog.messages if ": prompt " in m]


async def test_a_long_prefill_logs_its_progress_every_few_seconds_and_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chunks = [progress(0, 2560, 0), progress(512, 2560, 2000), progress(1024, 2560, 4000),
              progress(1536, 2560, 6500), progress(2048, 2560, 9100), progress(2560, 2560, 11000)]  # fmt: skip
    assert await served(chunks, caplog) == [
        "upstream default: prompt 1,024/2,560 tokens processed (40%), 4 s, 256 tokens/s, about 6 s to go",
        # 6.5 s: too soon after the last line
        "upstream default: prompt 2,048/2,560 tokens processed (80%), 9 s, 225 tokens/s, about 2 s to go",
        "upstream default: prompt 2,560/2,560 tokens processed (100%) in 11 s (233 tokens/s); the answer starts",
    ]


async def test_a_prefill_under_three_seconds_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    chunks = [progress(0, 2560, 0), progress(2048, 2560, 2000), progress(2560, 2560, 2900)]
    assert await served(chunks, caplog) == []


async def test_the_tokens_found_in_the_servers_cache_are_said_and_not_counted_in_the_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    chunks = [progress(4000, 5000, 0, cache=4000), progress(5000, 5000, 4000, cache=4000)]
    assert await served(chunks, caplog) == [
        "upstream default: prompt 5,000/5,000 tokens processed (100%, 4,000 from the cache) in 4 s "
        "(250 tokens/s); the answer starts"
    ]


def test_without_the_servers_clock_the_gateways_is_read(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="codexgate.backend")
    now = [100.0]
    prefill = PrefillLog("local", start=100.0, clock=lambda: now[0])
    for processed, at in ((512, 101.0), (1024, 104.0), (1536, 106.0), (2048, 109.5)):
        now[0] = at
        prefill.seen(PromptProgress(processed, 2048))
    assert caplog.messages == [
        "upstream local: prompt 1,024/2,048 tokens processed (50%), 4 s, 256 tokens/s, about 4 s to go",
        "upstream local: prompt 2,048/2,048 tokens processed (100%) in 10 s (216 tokens/s); the answer starts",
    ]
