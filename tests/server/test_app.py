"""The real ASGI app in-process, over a scripted fake upstream (no network)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from codexgate.app import build_app
from codexgate.backends.http.transport import HttpRequest
from codexgate.config import load_settings
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import (
    FakeUpstream,
    cut_reply,
    error_reply,
    openai_error,
    raw_reply,
    stall_reply,
    text_reply,
    tool_calls_reply,
)
from tests.support.openresponses import validate_response
from tests.support.sse import leave_at_the_first_delta, stream_events

UPSTREAM = "http://upstream.test/v1"


@asynccontextmanager
async def gateway(
    script: Any = (), *, fake: FakeUpstream | None = None, config: Path | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, FakeUpstream, ASGIUpstreamTransport]]:
    """The app in-process over a fake upstream at UPSTREAM, or over the upstreams and routes
    of a TOML `config` file; `settings` as flags would give them."""
    fake = fake or FakeUpstream(script)
    transport = ASGIUpstreamTransport(fake)
    flags = {"discover": False, "retry_backoff": 0.01, **settings}
    if config is None:
        flags["upstream"] = UPSTREAM
    app = build_app(load_settings(flags, config, environ={}), transport=transport, environ={})
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as client:
        yield client, fake, transport


def terminal(events: list[dict[str, Any]]) -> dict[str, Any]:
    return events[-1]


async def test_streamed_text_answer_is_a_valid_responses_stream() -> None:
    async with gateway([text_reply("Hello from the model", reasoning="thinking hard")]) as (client, fake, _):
        events = await stream_events(client, {"model": "qwen", "input": "hi"})
    last = terminal(events)
    assert last["type"] == "response.completed"
    output = last["response"]["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert output[0]["summary"][0]["text"] == "thinking hard"
    assert output[1]["content"][0]["text"] == "Hello from the model"
    usage = last["response"]["usage"]
    assert (
        usage["input_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    )
    assert fake.requests[0].body["model"] == "qwen"  # single upstream, no routes: name unchanged


async def test_non_streaming_answer_is_one_response_object() -> None:
    async with gateway([text_reply("folded")]) as (client, _, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
    assert response.status_code == 200
    body = response.json()
    validate_response(body)
    assert body["status"] == "completed" and body["output"][0]["content"][0]["text"] == "folded"


async def test_tool_calls_stream_as_separate_function_call_items() -> None:
    reply = tool_calls_reply([("exec_command", '{"cmd":"ls -la"}'), ("exec_command", '{"cmd":"pwd"}')])
    tools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
    async with gateway([reply]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "go", "tools": tools})
    calls = terminal(events)["response"]["output"]
    assert [(c["type"], c["name"], c["arguments"]) for c in calls] == [
        ("function_call", "exec_command", '{"cmd":"ls -la"}'),
        ("function_call", "exec_command", '{"cmd":"pwd"}'),
    ]
    assert calls[0]["call_id"] != calls[1]["call_id"]


def _openai_client(client: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url="http://gw/v1", api_key="unused", http_client=client, max_retries=0)


async def test_openai_sdk_consumes_the_stream_with_create_and_stream() -> None:
    replies = [text_reply("one two three"), text_reply("four five")]
    async with gateway(replies) as (client, _, _):
        sdk = _openai_client(client)
        stream = await sdk.responses.create(model="m", input="hi", stream=True)
        kinds = [event.type async for event in stream]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        async with sdk.responses.stream(model="m", input="again") as managed:
            async for _ in managed:
                pass
            final = await managed.get_final_response()
        assert final.output_text == "four five"
        assert final.usage is not None and final.usage.total_tokens > 0


async def test_openai_sdk_non_streaming_and_error_types() -> None:
    replies = [
        text_reply("plain"),
        error_reply(400, openai_error("This model's maximum context length is 8192 tokens.")),
    ]
    async with gateway(replies) as (client, _, _):
        sdk = _openai_client(client)
        response = await sdk.responses.create(model="m", input="hi")
        assert response.output_text == "plain"
        with pytest.raises(openai.BadRequestError) as info:
            await sdk.responses.create(model="m", input="hi", stream=True)
    assert info.value.code == "context_length_exceeded"


@pytest.mark.parametrize(
    "reply,status,code",
    [
        (
            error_reply(
                400,
                openai_error(
                    "This model's maximum context length is 4096 tokens. However, you requested 9000"
                ),
            ),
            400,
            "context_length_exceeded",
        ),
        (
            error_reply(
                400,
                {
                    "error": {
                        "code": 400,
                        "message": "the request exceeds the available context size, try increasing it",
                        "type": "exceed_context_size_error",
                        "n_prompt_tokens": 9000,
                        "n_ctx": 4096,
                    }
                },
            ),
            400,
            "context_length_exceeded",
        ),
        (
            error_reply(401, openai_error("bad key", error_type="authentication_error")),
            502,  # the upstream refused the gateway's key; a 401 would be Codex's own login
            "upstream_authentication_failed",
        ),
        (error_reply(404, openai_error("The model `nope` does not exist")), 404, "model_not_found"),
        (error_reply(404, {"detail": "Not Found"}), 400, "upstream_wrong_url"),
        (error_reply(422, {"detail": "unprocessable"}), 400, "invalid_request_error"),
    ],
)
async def test_upstream_errors_before_the_stream_map_to_codes_codex_understands(
    reply: Any, status: int, code: str
) -> None:
    async with gateway([reply]) as (client, fake, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert len(fake.requests) == 1  # final errors are not retried


async def test_rate_limit_passes_retry_after_and_the_phrase_codex_reads() -> None:
    reply = error_reply(429, openai_error("Slow down", error_type="rate_limit_error"), {"retry-after": "7"})
    async with gateway([reply]) as (client, fake, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and "try again in 7s" in error["message"]
    assert len(fake.requests) == 1  # Codex retries 429 itself


async def test_5xx_before_the_first_byte_is_retried_then_succeeds() -> None:
    replies = [
        error_reply(502, b"bad gateway"),
        error_reply(503, openai_error("Loading model")),
        text_reply("ok"),
    ]
    async with gateway(replies, max_retries=2) as (client, fake, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    assert terminal(events)["type"] == "response.completed"
    assert len(fake.requests) == 3


async def test_overload_that_persists_is_server_is_overloaded() -> None:
    replies = [error_reply(503, openai_error("busy"))] * 3
    async with gateway(replies, max_retries=2) as (client, fake, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert response.status_code == 503 and response.json()["error"]["code"] == "server_is_overloaded"
    assert len(fake.requests) == 3


async def test_retry_after_is_honoured_on_retries() -> None:
    replies = [error_reply(500, openai_error("oops"), {"retry-after": "0.2"}), text_reply("ok")]
    async with gateway(replies, max_retries=1) as (client, _, _):
        loop = asyncio.get_running_loop()
        start = loop.time()
        events = await stream_events(client, {"model": "m", "input": "x"})
        waited = loop.time() - start
    assert terminal(events)["type"] == "response.completed"
    assert waited >= 0.2


async def test_unreachable_upstream_is_retried_then_reported() -> None:
    async with gateway(max_retries=2) as (client, _, transport):
        transport.fail_connect = True
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_unreachable"
    assert "cannot reach upstream" in response.json()["error"]["message"]


async def test_a_cut_stream_is_a_failure_never_a_completion() -> None:
    async with gateway([cut_reply("partial answer that never")]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    last = terminal(events)
    assert last["type"] == "response.failed"
    assert last["response"]["error"]["code"] == "upstream_stream_cut"
    assert all(e["type"] != "response.completed" for e in events)


async def test_a_cut_non_streaming_answer_is_an_http_error() -> None:
    async with gateway([cut_reply("partial")]) as (client, _, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "x"})
    assert response.status_code == 502 and response.json()["error"]["code"] == "upstream_stream_cut"


async def test_an_upstream_that_goes_silent_fails_after_the_idle_timeout() -> None:
    async with gateway([stall_reply("slow answer", stall_seconds=5)], idle_timeout=0.2) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    last = terminal(events)
    assert last["type"] == "response.failed" and last["response"]["error"]["code"] == "upstream_timeout"


async def test_an_error_object_inside_the_stream_fails_the_response_with_its_code() -> None:
    chunk = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}],
    }
    error = {"error": {"message": "Rate limit exceeded, try again in 2s", "code": 429}}
    reply = raw_reply([b"data: " + orjson.dumps(chunk) + b"\n\n", b"data: " + orjson.dumps(error) + b"\n\n"])
    async with gateway([reply]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    last = terminal(events)
    assert last["type"] == "response.failed"
    assert last["response"]["error"]["code"] == "rate_limit_exceeded"
    assert last["response"]["output"][0]["content"][0]["text"] == "hi"  # what streamed is kept, closed


async def test_finish_reason_length_is_incomplete() -> None:
    async with gateway([text_reply("truncat", finish_reason="length")]) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "x"})
    last = terminal(events)
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


async def test_a_client_that_disconnects_cancels_the_upstream_request() -> None:
    slow = text_reply("word " * 200, chunk_chars=5, delay_between_chunks=0.02)
    async with gateway([slow]) as (client, fake, _):
        await leave_at_the_first_delta(client, {"model": "m", "input": "x"})
        await fake.wait_for_disconnects(1, timeout=5)
    assert fake.disconnects == 1


async def test_a_client_that_leaves_while_the_upstream_is_silent_cancels_the_upstream_request() -> None:
    # Nothing is sent to the client while the upstream says nothing: only the watcher of the
    # client's side (server/delivery.until_disconnect) can hear it leave.
    silent = stall_reply("word " * 20, stall_seconds=30)
    async with gateway([silent]) as (client, fake, _):
        await leave_at_the_first_delta(client, {"model": "m", "input": "x"})
        await fake.wait_for_disconnects(1, timeout=5)
        test_client = client._transport
    assert fake.disconnects == 1
    # The gateway ended the answer itself: the test client did not have to cancel it.
    assert isinstance(test_client, StreamingASGITransport) and test_client.forced_cancellations == 0


@pytest.mark.parametrize(
    "content,status,param",
    [
        (b"{not json", 400, None),
        (b'{"input": "x"}', 400, "model"),
        (b'{"model": "m", "input": "x", "tools": "all"}', 400, "tools"),
    ],
)
async def test_bad_client_input_is_a_400_naming_the_parameter(
    content: bytes, status: int, param: str | None
) -> None:
    async with gateway() as (client, fake, _):
        response = await client.post(
            "/v1/responses", content=content, headers={"content-type": "application/json"}
        )
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert fake.requests == []


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/chat/completions"])
async def test_a_body_that_is_not_json_is_said_plainly_on_every_face(path: str) -> None:
    async with gateway() as (client, _, _):
        response = await client.post(path, content=b"nope", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "The request body is not JSON: it starts with 'nope', where a JSON object starts with {."
    )


async def test_a_body_over_the_limit_is_a_413() -> None:
    async with gateway(max_body_bytes=1024) as (client, _, _):
        response = await client.post("/v1/responses", json={"model": "m", "input": "x" * 2000})
    assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("encoding", ["zstd", "gzip", "ZSTD"])
async def test_a_compressed_request_body_is_refused_with_a_415_naming_the_encoding(encoding: str) -> None:
    # Codex compresses its bodies (zstd) only for its own OpenAI provider with ChatGPT sign-in;
    # anything else sending one is told why, not "not valid JSON".
    async with gateway([text_reply("read")]) as (client, fake, _):
        response = await client.post(
            "/v1/responses",
            content=b"\x28\xb5\x2f\xfd compressed bytes",
            headers={"content-type": "application/json", "content-encoding": encoding},
        )
        plain = await client.post(
            "/v1/responses",
            json={"model": "m", "input": "x"},
            headers={"content-encoding": "identity"},
        )
    assert response.status_code == 415, response.text
    error = response.json()["error"]
    assert error["code"] == "unsupported_content_encoding"
    assert f"Content-Encoding: {encoding}" in error["message"] and "uncompressed JSON" in error["message"]
    assert plain.status_code == 200 and plain.json()["output"][-1]["content"][0]["text"] == "read"
    assert len(fake.requests) == 1  # only the plain one went upstream


async def test_unknown_routes_and_methods() -> None:
    async with gateway() as (client, _, _):
        assert (await client.get("/v1/nothing")).status_code == 404
        assert (await client.get("/v1/responses")).status_code == 405


async def test_models_lists_routes_and_aliases_and_routes_rename_the_model(tmp_path: Any) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(
        '[[upstreams]]\nname = "local"\nbase_url = "http://upstream.test/v1"\n'
        '[[models]]\nname = "coder"\nupstream = "local"\nmodel = "qwen3-coder:30b"\naliases = ["qc"]\n'
        "extra_body = { temperature = 0.3 }\n"
    )
    settings = load_settings({"discover": False}, config, environ={})
    fake = FakeUpstream([text_reply("hi")])
    app = build_app(settings, transport=ASGIUpstreamTransport(fake), environ={})
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        models = (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["coder", "qc"]
        await stream_events(client, {"model": "qc", "input": "x"})
        missing = await client.post("/v1/responses", json={"model": "gpt-9", "input": "x"})
    assert fake.requests[0].body["model"] == "qwen3-coder:30b"
    assert fake.requests[0].body["temperature"] == 0.3
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_models_of_a_pass_through_upstream_come_from_the_upstream() -> None:
    async with gateway(fake=FakeUpstream([], models=["llama3", "qwen"])) as (client, _, _):
        models = (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["llama3", "qwen"]


async def test_models_when_no_upstream_answers_is_a_503_saying_why_for_each() -> None:
    """docs/faces.md: an empty list would say there are no models; nobody could be asked."""
    async with gateway(fake=FakeUpstream([], models=["llama3"])) as (client, _, transport):
        transport.fail_connect = True
        response = await client.get("/v1/models")
    error = response.json()["error"]
    assert response.status_code == 503 and error["code"] == "upstream_unreachable"
    assert "upstream 'default': unreachable: nothing answers at http://upstream.test/v1" in error["message"]


async def test_routed_models_are_listed_even_when_their_upstream_is_down(tmp_path: Any) -> None:
    config = tmp_path / "gw.toml"
    config.write_text(
        '[[upstreams]]\nname = "local"\nbase_url = "http://upstream.test/v1"\n[[models]]\nname = "coder"\n'
    )
    async with gateway(config=config) as (client, _, transport):
        transport.fail_connect = True
        models = (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["coder"]


async def test_an_upstream_that_answers_with_no_models_is_an_empty_list() -> None:
    async with gateway(fake=FakeUpstream([], models=[])) as (client, _, _):
        response = await client.get("/v1/models")
    assert response.status_code == 200 and response.json()["data"] == []


async def test_without_an_upstream_requests_get_a_clear_error() -> None:
    app = build_app(
        load_settings({"discover": False}, environ={}), transport=ASGIUpstreamTransport(None), environ={}
    )
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
        models = await client.get("/v1/models")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "no_upstream_configured" and "--upstream" in error["message"]
    assert models.status_code == 503 and models.json()["error"]["code"] == "no_upstream_configured"


async def test_discovery_finds_a_local_server_when_none_is_configured() -> None:
    fake = FakeUpstream([text_reply("found you")])

    class OnlyOllama(ASGIUpstreamTransport):
        async def open(self, request: HttpRequest) -> Any:
            if not request.url.startswith("http://127.0.0.1:11434/"):
                return await ASGIUpstreamTransport(None).open(request)
            return await super().open(request)

    app = build_app(load_settings({}, environ={}), transport=OnlyOllama(fake), environ={})
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        events = await stream_events(client, {"model": "llama3", "input": "x"})
    assert terminal(events)["response"]["output"][0]["content"][0]["text"] == "found you"


def _script_by_turn(turns: list[Callable[[dict[str, Any]], Any]]) -> Callable[[dict[str, Any]], Any]:
    count = iter(turns)
    return lambda body: next(count)(body)


async def test_concurrent_streams_are_independent() -> None:
    fake = FakeUpstream(
        lambda body: text_reply(body["messages"][-1]["content"] * 3, delay_between_chunks=0.001)
    )
    async with gateway(fake=fake) as (client, _, _):
        results = await asyncio.gather(
            *(stream_events(client, {"model": "m", "input": f"<{i}>"}) for i in range(20))
        )
    texts = [terminal(events)["response"]["output"][0]["content"][0]["text"] for events in results]
    assert texts == [f"<{i}>" * 3 for i in range(20)]


async def test_an_upstream_that_never_answers_fails_after_the_idle_timeout() -> None:
    async def silent(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(30)  # accepts the request, never sends headers

    transport = ASGIUpstreamTransport(silent)
    settings = load_settings(
        {
            "upstream": UPSTREAM,
            "discover": False,
            "idle_timeout": 0.2,
            "connect_timeout": 0.1,
            "max_retries": 0,
        },
        environ={},
    )
    app = build_app(settings, transport=transport, environ={})
    async with httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://gw") as client:
        async with asyncio.timeout(10):
            response = await client.post("/v1/responses", json={"model": "m", "input": "x", "stream": True})
    assert response.status_code == 504 and response.json()["error"]["code"] == "upstream_timeout"


async def test_hosted_tools_left_out_are_named_in_the_response_metadata() -> None:
    async with gateway([text_reply("ok")]) as (client, fake, _):
        response = await client.post(
            "/v1/responses", json={"model": "m", "input": "x", "tools": [{"type": "web_search"}]}
        )
    assert response.json()["metadata"] == {"codexgate_unavailable_tools": "web_search"}
    assert "tools" not in fake.requests[0].body
