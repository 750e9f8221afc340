"""Hostile clients: whatever a client sends, the answer is a 2xx or a 4xx naming the field,
never a 500, and every 2xx stream ends with exactly one terminal event. Property-based over
request shapes with type confusions at every level, plus the cases an attack run found."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codexgate.app import build_app
from codexgate.backends.log import OnceLog, clip
from codexgate.backends.server_info import ContextWindows
from codexgate.config import load_settings
from codexgate.wire.responses import MAX_DEPTH
from codexgate.wire.sse import SSEDecoder, SSEEventTooLarge
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, text_reply, tool_calls_reply
from tests.support.sse import sse_events

UPSTREAM = "http://upstream.test/v1"
TERMINAL = ("response.completed", "response.failed", "response.incomplete")
FUZZ_EXAMPLES = 500


def _reply(body: dict[str, Any]) -> Any:
    """Call the first tool the gateway advertised (exercises the tool map), else answer."""
    tools = body.get("tools") or []
    if tools:
        return tool_calls_reply([(tools[0]["function"]["name"], '{"input": "x", "cmd": "ls"}')], text="t")
    return text_reply("answer", reasoning="thought")


@asynccontextmanager
async def gateway(**flags: Any) -> AsyncIterator[tuple[httpx.AsyncClient, FakeUpstream]]:
    fake = FakeUpstream(_reply)
    settings_ = load_settings({"discover": False, "upstream": UPSTREAM, **flags}, environ={})
    app = build_app(settings_, transport=ASGIUpstreamTransport(fake), environ={})
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as client:
        yield client, fake


def check_answer(response: httpx.Response, streamed: bool) -> None:
    """2xx or 4xx; a 4xx is an OpenAI error; a 2xx stream has exactly one terminal event, last."""
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"]
        return
    if streamed:
        events = sse_events(response.content)
        terminals = [e for e in events if e["type"] in TERMINAL]
        assert len(terminals) == 1 and events[-1] is terminals[0], [e["type"] for e in events]
    else:
        assert response.json()["status"] in ("completed", "incomplete", "failed")


# -- strategies: Responses-shaped requests, any field possibly of any JSON type ---------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
any_json = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def confused(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right shape, one time in eight any JSON value at all."""
    return st.integers(0, 7).flatmap(lambda pick: any_json if pick == 0 else strategy)


def obj(required: dict[str, Any], optional: dict[str, Any] | None = None) -> st.SearchStrategy[Any]:
    return confused(
        st.fixed_dictionaries(
            {k: confused(v) for k, v in required.items()},
            optional={k: confused(v) for k, v in (optional or {}).items()},
        )
    )


names = st.sampled_from(["exec_command", "apply_patch", "shell", "a.b", "x" * 70, ""])
texts = st.text(max_size=30)
schema = st.fixed_dictionaries(
    {"type": st.just("object")}, optional={"properties": st.dictionaries(texts, any_json)}
)
part = obj(
    {"type": st.sampled_from(["input_text", "output_text", "input_image", "summary_text", "x"])},
    {"text": texts, "image_url": texts},
)
content = st.one_of(texts, st.lists(part, max_size=3))
item = st.one_of(
    obj(
        {"role": st.sampled_from(["user", "assistant", "system", "developer", "robot"]), "content": content},
        {"type": st.just("message")},
    ),
    obj(
        {"type": st.just("function_call"), "call_id": texts, "name": names, "arguments": texts},
        {"namespace": texts},
    ),
    obj(
        {
            "type": st.sampled_from(["function_call_output", "custom_tool_call_output"]),
            "call_id": texts,
            "output": content,
        }
    ),
    obj({"type": st.just("custom_tool_call"), "call_id": texts, "name": names, "input": texts}),
    obj(
        {"type": st.just("reasoning")},
        {
            "summary": st.lists(part, max_size=2),
            "content": st.lists(part, max_size=2),
            "encrypted_content": texts,
        },
    ),
    obj({"type": st.sampled_from(["web_search_call", "compaction", "unknown"])}),
)
function_tool = obj(
    {"type": st.just("function"), "name": names},
    {
        "description": texts,
        "parameters": schema,
        "strict": st.booleans(),
        "function": obj({"name": names}, {"parameters": schema}),
    },
)
grammar = obj(
    {"type": st.sampled_from(["grammar", "text"])},
    {"syntax": st.sampled_from(["lark", "regex"]), "definition": texts},
)
custom_tool = obj({"type": st.just("custom"), "name": names}, {"description": texts, "format": grammar})
namespace_tool = obj(
    {"type": st.just("namespace"), "name": names}, {"tools": st.lists(function_tool, max_size=2)}
)
tool = st.one_of(
    function_tool, custom_tool, namespace_tool, obj({"type": st.sampled_from(["web_search", "local_shell"])})
)
text_format = obj(
    {"type": st.sampled_from(["text", "json_schema", "json_object"])},
    {"name": texts, "schema": schema, "strict": st.booleans()},
)
requests = st.fixed_dictionaries(
    {
        "model": confused(st.sampled_from(["m", "qwen3-coder"])),
        "input": confused(st.one_of(texts, st.lists(item, max_size=4))),
    },
    optional={
        "stream": confused(st.booleans()),
        "instructions": confused(texts),
        "tools": confused(st.lists(tool, max_size=3)),
        "tool_choice": confused(
            st.one_of(
                st.sampled_from(["auto", "none", "required"]),
                obj({"type": st.just("function"), "name": names}),
            )
        ),
        "parallel_tool_calls": confused(st.booleans()),
        "reasoning": obj(
            {}, {"effort": st.sampled_from(["low", "high", "zzz"]), "summary": st.sampled_from(["auto", "x"])}
        ),
        "text": obj({}, {"format": text_format, "verbosity": st.sampled_from(["low", "x"])}),
        "max_output_tokens": confused(st.integers(-5, 10**6)),
        "temperature": confused(st.floats(0, 2)),
        "top_p": confused(st.floats(0, 1)),
        "store": confused(st.booleans()),
        "metadata": confused(st.dictionaries(st.text(max_size=8), texts, max_size=3)),
        "previous_response_id": confused(texts),
        "include": any_json,
        "client_metadata": any_json,
    },
)


def test_fuzzed_requests_never_get_a_5xx_and_streams_end_once() -> None:
    outcomes: dict[int, int] = {}
    with asyncio.Runner() as runner:
        context = gateway()
        client, fake = runner.run(context.__aenter__())

        @settings(
            derandomize=True,
            max_examples=FUZZ_EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            database=None,
        )
        @given(requests)
        def one(body: dict[str, Any]) -> None:
            response = runner.run(client.post("/v1/responses", json=body))
            outcomes[response.status_code] = outcomes.get(response.status_code, 0) + 1
            check_answer(response, streamed=body.get("stream") is True)

        try:
            one()
        finally:
            runner.run(context.__aexit__(None, None, None))
    print(f"fuzz outcomes by status: {dict(sorted(outcomes.items()))}")
    assert set(outcomes) & {200} and set(outcomes) & {400}  # both paths were exercised
    assert not fake.errors


# -- the attack run's findings -------------------------------------------------------------------


class Nested:
    """`depth` levels of {"x": ...}, written as JSON text: orjson writes only ~255 levels
    and the json module recurses, so deep bodies are built as text."""

    def __init__(self, depth: int) -> None:
        self.depth = depth

    def json(self) -> str:
        return '{"x":' * self.depth + '"leaf"' + "}" * self.depth


def body_text(value: Any) -> str:
    if isinstance(value, Nested):
        return value.json()
    if isinstance(value, dict):
        return "{" + ",".join(f"{orjson.dumps(k).decode()}:{body_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(body_text(v) for v in value) + "]"
    return orjson.dumps(value).decode()


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"x": value}
    return value


FUNCTION = {"type": "function", "name": "f", "parameters": {"type": "object"}}


@pytest.mark.parametrize(
    "extra,param",
    [
        ({"input": [{"role": {}}]}, "input[0].role"),
        ({"reasoning": {"effort": []}}, "reasoning.effort"),
        ({"tools": [{"type": "function", "function": "x"}]}, "tools[0].function"),
        ({"tools": [{"type": "custom", "name": "c", "description": 5}]}, "tools[0].description"),
        ({"tools": [{"type": "custom", "name": "c", "format": "x"}]}, "tools[0].format"),
        ({"tools": [{"type": "namespace", "name": "n", "tools": 5}]}, "tools[0].tools"),
        ({"input": [{"type": "reasoning", "summary": 5}]}, "input[0].summary"),
        ({"text": {"format": {"type": "json_schema", "schema": 5}}}, "text.format.schema"),
        ({"metadata": {"k": {"nested": 1}}}, "metadata.k"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
        ({"model": "m\n"}, "model"),
        ({"tools": [{**FUNCTION, "parameters": Nested(MAX_DEPTH)}]}, "tools"),
        ({"text": {"format": {"type": "json_schema", "name": "o", "schema": Nested(300)}}}, "text"),
        ({"metadata": Nested(600)}, "metadata"),
        ({"client_metadata": Nested(1000)}, "client_metadata"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_type_confusions_and_deep_nesting_are_400s_naming_the_field(
    extra: dict[str, Any], param: str, stream: bool
) -> None:
    async with gateway() as (client, fake):
        response = await client.post(
            "/v1/responses",
            content=body_text({"model": "m", "input": "hi", "stream": stream, **extra}),
            headers={"content-type": "application/json"},
        )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param
    assert fake.requests == []  # refused before the upstream was called (and billed)


async def test_nesting_within_the_limit_is_served() -> None:
    deep_schema = {"type": "object", "properties": {"a": nested(MAX_DEPTH - 6)}}
    async with gateway() as (client, _):
        response = await client.post(
            "/v1/responses",
            json={"model": "m", "input": "hi", "tools": [{**FUNCTION, "parameters": deep_schema}]},
        )
    assert response.status_code == 200 and response.json()["status"] == "completed"


async def test_an_unexpected_error_is_a_500_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise KeyError("bug")

    monkeypatch.setattr("codexgate.backends.chat.backend.to_chat_request", broken)
    async with gateway() as (client, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"


# -- bounded memory and logs ---------------------------------------------------------------------


def test_sse_decoder_buffers_a_long_line_linearly_and_caps_it() -> None:
    decoder = SSEDecoder(max_event_bytes=64 * 1024 * 1024)
    piece = b"a" * 65536
    started = time.perf_counter()
    decoder.feed(b"data: ")
    for _ in range(512):  # 32 MB in 64 KB pieces: quadratic buffering took seconds here
        decoder.feed(piece)
    [event] = decoder.feed(b"\n\n")
    assert len(event) == 512 * 65536 and time.perf_counter() - started < 2.0
    small = SSEDecoder(max_event_bytes=1000)
    small.feed(b"data: " + b"b" * 900)
    with pytest.raises(SSEEventTooLarge):
        small.feed(b"b" * 200)
    with pytest.raises(SSEEventTooLarge):  # in one chunk, too
        SSEDecoder(max_event_bytes=1000).feed(b"data: " + b"c" * 2000 + b"\n\n")
    multi = SSEDecoder(max_event_bytes=1000)
    with pytest.raises(SSEEventTooLarge):  # many data lines of one event add up
        multi.feed(b"data: " + b"d" * 600 + b"\ndata: " + b"d" * 600 + b"\n")


def test_once_log_is_bounded_and_client_strings_are_clipped(caplog: pytest.LogCaptureFixture) -> None:
    once = OnceLog(max_entries=10)
    with caplog.at_level(logging.WARNING, logger="codexgate.backend"):
        for i in range(100):
            once.warning(f"tool kind {clip(str(i) + 't' * 65536)} left out")
        once.warning(f"tool kind {clip('99' + 't' * 65536)} left out")  # remembered: not again
    assert len(once._seen) == 10
    assert len(caplog.records) == 100
    assert max(len(r.getMessage()) for r in caplog.records) < 200
    assert clip("a\x1b[31mb\n") == "'a\\x1b[31mb\\n'"


async def test_many_dropped_tool_kinds_log_a_few_clipped_lines(caplog: pytest.LogCaptureFixture) -> None:
    tools = [{"type": "k" * 1000 + str(i)} for i in range(50)]
    async with gateway() as (client, _):
        with caplog.at_level(logging.WARNING, logger="codexgate.backend"):
            response = await client.post("/v1/responses", json={"model": "m", "input": "hi", "tools": tools})
    assert response.status_code == 200
    dropped = [r.getMessage() for r in caplog.records if "cannot run" in r.getMessage()]
    assert 0 < len(dropped) <= 8 and all(len(m) < 200 for m in dropped)


async def test_context_windows_are_probed_only_for_listed_models_and_bounded() -> None:
    props = {"/props": {"default_generation_settings": {"n_ctx": 4096}}}
    fake = FakeUpstream(models=["real-model"], endpoints=props)
    windows = ContextWindows(ASGIUpstreamTransport(fake), "http://upstream.test/v1", {}, 2, "u")
    assert await windows.get("real-model") == 4096
    probes, listings = len(fake.endpoint_requests), fake.model_list_requests
    for i in range(20):
        assert await windows.get(f"invented-{i}") is None
    assert await windows.get("..") is None and await windows.get("a\nb") is None
    assert len(fake.endpoint_requests) == probes  # no probe for names the upstream does not list
    assert fake.model_list_requests == listings  # the list is read once a minute, not per name
    windows.MAX_MODELS = 3  # type: ignore[misc]
    fake.models.extend(f"listed-{i}" for i in range(6))
    windows._listed_until = 0.0  # let the list be read again
    for i in range(6):
        await windows.get(f"listed-{i}")
    assert len(windows._cache) == 3 and list(windows._cache) == ["listed-3", "listed-4", "listed-5"]


async def test_dot_model_names_never_reach_a_probe_url() -> None:
    fake = FakeUpstream([text_reply("ok")], models=[".."], endpoints={})
    windows = ContextWindows(
        ASGIUpstreamTransport(fake), "http://upstream.test/v1", {}, 2, "u", configured=[".", ".."]
    )
    assert await windows.get("..") is None and await windows.get(".") is None
    assert fake.endpoint_requests == [] and fake.model_list_requests == 0
