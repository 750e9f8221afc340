"""Canonical events -> chat chunks and chat completions (translate/chat_face/chunks.py).

Events come from the real `ResponseBuilder`, so the encoder is held to the event grammar every
backend produces; its output is held to the official openai SDK: its types, and its own stream
reader over SSE bytes."""

from __future__ import annotations

import copy
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import openai
import orjson
import pydantic
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from codexgate.errors import GatewayError, UpstreamStreamCut, UpstreamTimeout
from codexgate.translate.builder import ResponseBuilder
from codexgate.translate.chat_face.chunks import (
    ChatChunkEncoder,
    Chunk,
    chat_completion,
    chat_completion_id,
    chat_usage,
    failure_answer,
)
from codexgate.translate.envelope import Envelope
from codexgate.wire.responses_events import TERMINAL, Event

CREATED_AT = 1_750_000_000
MODEL = "qwen3-coder"
USAGE = {
    "input_tokens": 120,
    "input_tokens_details": {"cached_tokens": 100},
    "output_tokens": 30,
    "output_tokens_details": {"reasoning_tokens": 12},
    "total_tokens": 150,
}
CHAT_USAGE = {
    "prompt_tokens": 120,
    "completion_tokens": 30,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 100},
    "completion_tokens_details": {"reasoning_tokens": 12},
}
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"

Script = Callable[[ResponseBuilder], None]


def answer(script: Script, **options: Any) -> list[Event]:
    """The events a backend makes for one answer, driven through the real builder."""
    ids = itertools.count(1)
    builder = ResponseBuilder(
        Envelope("resp_7f3a", CREATED_AT, MODEL, b"{}"),
        lambda prefix: f"{prefix}_{next(ids)}",
        now=lambda: CREATED_AT + 5,
        **options,
    )
    events = builder.start()
    script(builder)
    return events + builder.take()


def text_answer(b: ResponseBuilder) -> None:
    b.text("Hel")
    b.text("lo!")
    b.finish(USAGE)


def reasoning_then_text(b: ResponseBuilder) -> None:
    b.reasoning("The user ")
    b.reasoning("greets me.")
    b.text("Hi there.")
    b.finish(USAGE)


def two_messages(b: ResponseBuilder) -> None:
    b.reasoning("First thought.")
    b.text("One.")
    b.reasoning("Second thought.")
    b.text("Two.")
    b.finish(USAGE)


def parallel_calls(b: ResponseBuilder) -> None:
    b.text("Reading both.")
    b.function_call("read", '{"path":"a.txt"}', call_id="call_a")
    b.function_call("read", '{"path":"b.txt"}', call_id="call_b")
    b.finish(USAGE)


def custom_call(b: ResponseBuilder) -> None:
    b.reasoning("A patch will do.")
    b.custom_tool_call("apply_patch", PATCH, call_id="call_p")
    b.finish(USAGE)


def cut_at_max_tokens(b: ResponseBuilder) -> None:
    b.text("This answer is cut")
    b.finish(USAGE, "max_output_tokens")


def filtered(b: ResponseBuilder) -> None:
    b.text("Some")
    b.finish(USAGE, "content_filter")


def failed(b: ResponseBuilder) -> None:
    b.text("Partial ")
    b.fail(UpstreamStreamCut("The upstream stream ended before its finish reason."), USAGE)


def hosted_and_client_calls(b: ResponseBuilder) -> None:
    b.text("Searching.")
    b.item({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}})
    b.client_call("local_shell", '{"command":["ls"]}', call_id="call_sh")
    b.finish(USAGE)


SUCCESSES: dict[str, Script] = {
    "text": text_answer,
    "reasoning_then_text": reasoning_then_text,
    "two_messages": two_messages,
    "parallel_calls": parallel_calls,
    "custom_call": custom_call,
    "cut_at_max_tokens": cut_at_max_tokens,
    "filtered": filtered,
    "hosted_and_client_calls": hosted_and_client_calls,
}


def encode(events: list[Event], *, include_usage: bool = False) -> list[Chunk]:
    return ChatChunkEncoder(include_usage=include_usage).feed(events)


def deltas(chunks: list[Chunk]) -> list[dict[str, Any]]:
    return [chunk["choices"][0]["delta"] for chunk in chunks if chunk.get("choices")]


def fold(chunks: list[Chunk]) -> dict[str, Any]:
    """What a chat client makes of the chunks: the message, finish reason and usage."""
    content = reasoning = refusal = ""
    calls: dict[int, dict[str, Any]] = {}
    finish_reason = usage = None
    for chunk in chunks:
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices", ()):
            delta = choice["delta"]
            content += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or ""
            refusal += delta.get("refusal") or ""
            for call in delta.get("tool_calls", ()):
                into = calls.setdefault(call["index"], {})
                for key in ("id", "type"):
                    if key in call:
                        into[key] = call[key]
                for kind, field in (("function", "arguments"), ("custom", "input")):
                    if kind in call:
                        named = into.setdefault(kind, {"name": "", field: ""})
                        named["name"] += call[kind].get("name", "")
                        named[field] += call[kind].get(field, "")
            finish_reason = choice["finish_reason"] or finish_reason
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content if content or not calls else None,
        "refusal": refusal or None,
    }
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [calls[index] for index in sorted(calls)]
    return {"message": message, "finish_reason": finish_reason, "usage": usage}


def sdk_accepts_chunk(chunk: Chunk) -> None:
    """`ChatCompletionChunk.model_validate`, strict. One known gap is allowed: openai-python's
    chunk type knows only function tool-call deltas (openai/openai-python#2530), while a custom
    call streams with `type: "custom"` as OpenAI sends it; the rest of such a chunk must pass."""
    try:
        ChatCompletionChunk.model_validate(chunk)
    except pydantic.ValidationError as exc:
        if any(error["loc"][-1] != "type" or error["input"] != "custom" for error in exc.errors()):
            raise
        relaxed = copy.deepcopy(chunk)
        for call in relaxed["choices"][0]["delta"]["tool_calls"]:
            if call.get("type") == "custom":
                del call["type"]
        ChatCompletionChunk.model_validate(relaxed)


# -- chunk sequences


def test_text_streams_as_content_after_a_role_chunk_and_ends_with_stop() -> None:
    chunks = encode(answer(text_answer))
    assert deltas(chunks) == [
        {"role": "assistant", "content": ""},
        {"content": "Hel"},
        {"content": "lo!"},
        {},
    ]
    assert [chunk["choices"][0]["finish_reason"] for chunk in chunks] == [None, None, None, "stop"]
    for chunk in chunks:
        assert chunk["id"] == "chatcmpl-7f3a"
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["created"] == CREATED_AT and chunk["model"] == MODEL
        assert chunk["system_fingerprint"] is None and "usage" not in chunk
        assert chunk["choices"][0]["index"] == 0 and chunk["choices"][0]["logprobs"] is None


def test_reasoning_streams_as_reasoning_content_before_the_text() -> None:
    assert deltas(encode(answer(reasoning_then_text)))[1:] == [
        {"reasoning_content": "The user "},
        {"reasoning_content": "greets me."},
        {"content": "Hi there."},
        {},
    ]


def test_two_messages_and_two_reasoning_items_are_joined_by_a_blank_line() -> None:
    folded = fold(encode(answer(two_messages)))["message"]
    assert folded["content"] == "One.\n\nTwo."
    assert folded["reasoning_content"] == "First thought.\n\nSecond thought."


def test_summary_parts_and_raw_reasoning_text_all_reach_reasoning_content() -> None:
    # The builder makes one summary part per reasoning item; a Responses upstream may send
    # several, and raw `reasoning_text` (open-weight models): those few events are written here.
    item = {
        "type": "reasoning",
        "id": "rs_up",
        "summary": [{"type": "summary_text", "text": "Plan."}, {"type": "summary_text", "text": "Check."}],
        "content": [{"type": "reasoning_text", "text": "raw thoughts"}],
    }

    def upstream_reasoning(b: ResponseBuilder) -> None:
        b.item(item)  # in the terminal output too, so the non-streamed answer holds it
        b.text("Done.")
        b.finish(USAGE)

    events = answer(upstream_reasoning)
    added = next(i for i, e in enumerate(events) if e["type"] == "response.output_item.added")
    streamed = [
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_up",
            "summary_index": 0,
            "delta": "Pl",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_up",
            "summary_index": 0,
            "delta": "an.",
        },
        {
            "type": "response.reasoning_summary_text.delta",
            "item_id": "rs_up",
            "summary_index": 1,
            "delta": "Check.",
        },
        {
            "type": "response.reasoning_text.delta",
            "item_id": "rs_up",
            "content_index": 0,
            "delta": "raw thoughts",
        },
    ]
    events[added + 1 : added + 1] = streamed
    chunks = encode(events)
    assert [delta.get("reasoning_content") for delta in deltas(chunks)][1:5] == [
        "Pl",
        "an.",
        "\n\nCheck.",
        "\n\nraw thoughts",
    ]
    assert fold(chunks)["message"]["reasoning_content"] == "Plan.\n\nCheck.\n\nraw thoughts"
    assert fold(chunks) | {"usage": None} == fold_of_completion(events)


def test_two_parallel_calls_are_numbered_from_zero_and_finish_with_tool_calls() -> None:
    chunks = encode(answer(parallel_calls))
    calls = [delta["tool_calls"] for delta in deltas(chunks) if "tool_calls" in delta]
    assert calls == [
        [{"index": 0, "id": "call_a", "type": "function", "function": {"name": "read", "arguments": ""}}],
        [{"index": 0, "function": {"arguments": '{"path":"a.txt"}'}}],
        [{"index": 1, "id": "call_b", "type": "function", "function": {"name": "read", "arguments": ""}}],
        [{"index": 1, "function": {"arguments": '{"path":"b.txt"}'}}],
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert fold(chunks)["message"]["content"] == "Reading both."


def test_a_custom_call_streams_as_a_custom_tool_call() -> None:
    chunks = encode(answer(custom_call))
    calls = [delta["tool_calls"] for delta in deltas(chunks) if "tool_calls" in delta]
    assert calls == [
        [{"index": 0, "id": "call_p", "type": "custom", "custom": {"name": "apply_patch", "input": ""}}],
        [{"index": 0, "custom": {"input": PATCH}}],
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize(("script", "reason"), [(cut_at_max_tokens, "length"), (filtered, "content_filter")])
def test_an_incomplete_answer_finishes_with_length_or_content_filter(script: Script, reason: str) -> None:
    encoder = ChatChunkEncoder()
    chunks = encoder.feed(answer(script))
    assert chunks[-1]["choices"][0]["finish_reason"] == reason
    assert encoder.finished and encoder.done_marker_follows


def test_a_failure_ends_the_stream_with_an_error_payload_and_no_done_marker() -> None:
    encoder = ChatChunkEncoder(include_usage=True)
    chunks = encoder.feed(answer(failed))
    assert deltas(chunks)[1:] == [{"content": "Partial "}]
    assert chunks[-1] == {
        "error": {
            "message": "The upstream stream ended before its finish reason.",
            "type": "server_error",
            "code": "upstream_stream_cut",
            "param": None,
        }
    }
    assert encoder.finished and not encoder.done_marker_follows


def test_the_cut_marker_of_a_failed_answer_makes_no_chunk() -> None:
    marked = answer(failed, mark_cuts=True)
    assert [event["item"]["type"] for event in marked if event["type"] == "response.output_item.done"] == [
        "message",
        "reasoning",  # the marker (translate/cuts.py): the chat client never sends it back
    ]
    assert encode(marked) == encode(answer(failed))


def test_usage_comes_last_in_a_chunk_without_choices_when_asked() -> None:
    encoder = ChatChunkEncoder(include_usage=True)
    chunks = encoder.feed(answer(text_answer))
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == CHAT_USAGE
    assert chunks[-1]["id"] == chunks[0]["id"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(chunk["usage"] is None for chunk in chunks[:-1])  # as OpenAI sends them
    assert encoder.done_marker_follows


def test_items_with_no_chat_form_make_no_chunks() -> None:
    chunks = encode(answer(hosted_and_client_calls))
    assert deltas(chunks)[1:] == [{"content": "Searching."}, {}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_items_that_came_whole_go_out_whole() -> None:
    def passed_through(b: ResponseBuilder) -> None:
        b.text("Before.")
        b.item(
            {"type": "function_call", "id": "fc_x", "call_id": "call_x", "name": "read", "arguments": "{}"}
        )
        b.item(
            {
                "type": "message",
                "id": "msg_x",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "After."}],
            }
        )
        b.item({"type": "reasoning", "id": "rs_x", "summary": [{"type": "summary_text", "text": "Why."}]})
        b.finish(USAGE)

    events = answer(passed_through)
    folded = fold(encode(events))
    assert folded["message"]["content"] == "Before.\n\nAfter."
    assert folded["message"]["reasoning_content"] == "Why."
    assert folded["message"]["tool_calls"] == [
        {"id": "call_x", "type": "function", "function": {"name": "read", "arguments": "{}"}}
    ]
    assert folded == fold_of_completion(events)


def test_batches_of_any_size_give_the_same_chunks() -> None:
    events = answer(parallel_calls)
    whole = encode(events, include_usage=True)
    encoder = ChatChunkEncoder(include_usage=True)
    one_by_one = [chunk for event in events for chunk in encoder.feed([event])]
    assert one_by_one == whole


def test_nothing_follows_the_terminal_event() -> None:
    encoder = ChatChunkEncoder()
    encoder.feed(answer(text_answer))
    assert encoder.feed(answer(text_answer)) == []


def test_an_empty_delta_makes_no_chunk() -> None:
    def empty_deltas(b: ResponseBuilder) -> None:
        b.text("")
        b.text("x")
        b.finish(USAGE)

    assert deltas(encode(answer(empty_deltas)))[1:] == [{"content": "x"}, {}]


def test_a_chat_completion_id_is_derived_from_the_response_id() -> None:
    assert chat_completion_id("resp_abc123") == "chatcmpl-abc123"
    assert chat_completion_id("other") == "chatcmpl-other"


# -- the non-streamed answer


def fold_of_completion(events: list[Event]) -> dict[str, Any]:
    status, body = chat_completion(events[-1])
    assert status == 200
    choice = body["choices"][0]
    return {"message": choice["message"], "finish_reason": choice["finish_reason"], "usage": None}


@pytest.mark.parametrize("name", sorted(SUCCESSES))
def test_streamed_and_non_streamed_answers_say_the_same(name: str) -> None:
    events = answer(SUCCESSES[name])
    streamed = fold(encode(events, include_usage=True))
    status, body = chat_completion(events[-1])
    assert status == 200
    choice = body["choices"][0]
    assert streamed == {
        "message": choice["message"],
        "finish_reason": choice["finish_reason"],
        "usage": body["usage"],
    }


def test_a_completion_holds_reasoning_calls_and_null_content_when_only_calls() -> None:
    status, body = chat_completion(answer(custom_call)[-1])
    assert status == 200
    assert body["id"] == "chatcmpl-7f3a" and body["object"] == "chat.completion"
    assert body["created"] == CREATED_AT and body["model"] == MODEL and body["system_fingerprint"] is None
    assert body["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "refusal": None,
                "reasoning_content": "A patch will do.",
                "tool_calls": [
                    {"id": "call_p", "type": "custom", "custom": {"name": "apply_patch", "input": PATCH}}
                ],
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ]
    assert body["usage"] == CHAT_USAGE


def test_a_plain_completion_has_no_reasoning_or_tool_calls_keys() -> None:
    _, body = chat_completion(answer(text_answer)[-1])
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello!", "refusal": None}
    assert body["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (UpstreamStreamCut("cut"), 502),
        (UpstreamTimeout("The upstream did not answer in 300 s."), 504),
        (GatewayError("boom"), 502),
    ],
)
def test_a_failed_answer_is_a_502_or_a_504_for_a_timeout(error: GatewayError, status: int) -> None:
    events = answer(lambda b: b.fail(error, USAGE))
    assert chat_completion(events[-1]) == failure_answer(events[-1])
    got_status, body = failure_answer(events[-1])
    assert got_status == status
    assert body == {
        "error": {"message": error.message, "type": "server_error", "param": None, "code": error.code}
    }


def test_only_a_terminal_event_is_an_answer() -> None:
    with pytest.raises(ValueError):
        chat_completion(answer(text_answer)[0])


def test_usage_is_read_leniently() -> None:
    zero = {
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "total_tokens": 0,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert chat_usage(None) == zero
    assert chat_usage({"input_tokens": "seven", "output_tokens": True, "input_tokens_details": None}) == zero
    assert chat_usage({"input_tokens": "7"})["prompt_tokens"] == 7  # digits, as upstreams may send
    assert chat_usage({"input_tokens": 3, "output_tokens": 4})["total_tokens"] == 7


# -- the official SDK


@pytest.mark.parametrize("name", sorted(SUCCESSES))
def test_the_sdk_types_accept_every_chunk_and_completion(name: str) -> None:
    events = answer(SUCCESSES[name])
    for chunk in encode(events, include_usage=True):
        sdk_accepts_chunk(chunk)
    ChatCompletion.model_validate(chat_completion(events[-1])[1])


def test_the_chunk_check_is_not_blind() -> None:
    bad = encode(answer(text_answer))[1]
    bad["choices"][0]["finish_reason"] = "done"
    with pytest.raises(pydantic.ValidationError):
        sdk_accepts_chunk(bad)


def sse(chunks: list[Chunk], *, done: bool) -> bytes:
    body = b"".join(b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks)
    return body + (b"data: [DONE]\n\n" if done else b"")


@asynccontextmanager
async def sdk_reading(status: int, body: bytes, content_type: str) -> AsyncIterator[openai.AsyncOpenAI]:
    """An SDK client whose every request is answered with `body` (no network)."""

    def respond(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers={"content-type": content_type}, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(respond)) as http:
        # openai>=3 is typed for httpx2 clients but accepts (legacy) httpx ones at run time.
        yield openai.AsyncOpenAI(base_url="http://gw/v1", api_key="x", http_client=http, max_retries=0)  # type: ignore[arg-type]


async def stream_through_sdk(
    events: list[Event],
) -> tuple[str, str, dict[int, dict[str, Any]], list[str], Any]:
    encoder = ChatChunkEncoder(include_usage=True)
    chunks = encoder.feed(events)
    async with sdk_reading(200, sse(chunks, done=encoder.done_marker_follows), "text/event-stream") as client:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text = reasoning = ""
        calls: dict[int, dict[str, Any]] = {}
        finish_reasons: list[str] = []
        usage = None
        async for chunk in stream:
            assert isinstance(chunk, ChatCompletionChunk)
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                reasoning += getattr(choice.delta, "reasoning_content", None) or ""
                for call in choice.delta.tool_calls or ():
                    into = calls.setdefault(call.index, {"args": ""})
                    if call.id:
                        into["id"], into["type"] = call.id, call.type
                    if call.function is not None:
                        into["name"] = into.get("name", "") + (call.function.name or "")
                        into["args"] += call.function.arguments or ""
                    custom = getattr(call, "custom", None)  # not in the SDK's types: an extra field
                    if custom is not None:
                        into["name"] = into.get("name", "") + custom.get("name", "")
                        into["args"] += custom.get("input", "")
                if choice.finish_reason:
                    finish_reasons.append(choice.finish_reason)
    return text, reasoning, calls, finish_reasons, usage


async def test_the_sdk_stream_reader_yields_reasoning_text_and_usage() -> None:
    text, reasoning, calls, finish_reasons, usage = await stream_through_sdk(answer(reasoning_then_text))
    assert (text, reasoning, calls, finish_reasons) == ("Hi there.", "The user greets me.", {}, ["stop"])
    assert usage is not None and usage.model_dump(exclude_none=True) == CHAT_USAGE


async def test_the_sdk_stream_reader_yields_parallel_and_custom_tool_calls() -> None:
    def calls_of_both_kinds(b: ResponseBuilder) -> None:
        b.function_call("read", '{"path":"a.txt"}', call_id="call_a")
        b.function_call("read", '{"path":"b.txt"}', call_id="call_b")
        b.custom_tool_call("apply_patch", PATCH, call_id="call_p")
        b.finish(USAGE)

    text, _, calls, finish_reasons, _ = await stream_through_sdk(answer(calls_of_both_kinds))
    assert text == "" and finish_reasons == ["tool_calls"]
    assert calls == {
        0: {"id": "call_a", "type": "function", "name": "read", "args": '{"path":"a.txt"}'},
        1: {"id": "call_b", "type": "function", "name": "read", "args": '{"path":"b.txt"}'},
        2: {"id": "call_p", "type": "custom", "name": "apply_patch", "args": PATCH},
    }


async def test_the_sdk_stream_reader_raises_api_error_on_the_failure_payload() -> None:
    encoder = ChatChunkEncoder()
    chunks = encoder.feed(answer(failed))
    received = ""
    async with sdk_reading(200, sse(chunks, done=encoder.done_marker_follows), "text/event-stream") as client:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(openai.APIError) as caught:
            async for chunk in stream:
                received += chunk.choices[0].delta.content or ""
    assert received == "Partial "
    assert caught.value.code == "upstream_stream_cut"
    assert caught.value.message == "The upstream stream ended before its finish reason."


async def test_the_sdk_reads_a_completion_and_a_failed_answer() -> None:
    status, body = chat_completion(answer(parallel_calls)[-1])
    async with sdk_reading(status, orjson.dumps(body), "application/json") as client:
        completion = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
    message = completion.choices[0].message
    assert message.content == "Reading both." and completion.choices[0].finish_reason == "tool_calls"
    assert [
        (call.id, call.function.name) for call in message.tool_calls or () if call.type == "function"
    ] == [
        ("call_a", "read"),
        ("call_b", "read"),
    ]
    assert completion.usage is not None and completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 100

    status, body = failure_answer(answer(lambda b: b.fail(UpstreamTimeout("slow"), USAGE))[-1])
    async with sdk_reading(status, orjson.dumps(body), "application/json") as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 504 and caught.value.code == "upstream_timeout"


def test_every_answer_ends_in_exactly_one_terminal_event() -> None:
    # The encoder's "finished" rests on the builder's promise; pin it for the scripts above.
    for script in [*SUCCESSES.values(), failed]:
        events = answer(script)
        assert [event["type"] in TERMINAL for event in events].count(True) == 1
        assert events[-1]["type"] in TERMINAL
