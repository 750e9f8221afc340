"""Reading a Claude Code session's next request by what is new (server/faces/messages_reader.py):
whatever is remembered, the request read is the one the body alone gives."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from codexgate.errors import InvalidRequest
from codexgate.server.faces.messages import MessagesFace
from codexgate.server.faces.responses import RequestReader
from codexgate.translate.history_memo import Memo

JSON = dict[str, Any]
SESSION = "0b9e-session"
HEADERS = {"anthropic-version": "2023-06-01", "X-Claude-Code-Session-Id": SESSION}


def turn_body(turns: int, *, session_in_body: bool = False) -> JSON:
    """Claude Code's request after `turns` tool calls: the cache mark on the newest block."""
    messages: list[JSON] = [{"role": "user", "content": [{"type": "text", "text": "fix the test"}]}]
    for n in range(turns):
        messages.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Looking at step {n}."},
            {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": f"ls {n}"}},
        ]})  # fmt: skip
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": "out é\n" * 40},
        ]})  # fmt: skip
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    body: JSON = {
        "model": "qwen3-coder",
        "messages": messages,
        "system": [
            {"type": "text", "text": "You are Claude Code." * 20, "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [{"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object"}}],
        "max_tokens": 32000,
        "stream": True,
    }
    if session_in_body:
        body["metadata"] = {"user_id": orjson.dumps({"device_id": "d", "session_id": SESSION}).decode()}
    return body


def remembering() -> MessagesFace:
    return MessagesFace(Memo(1 << 24))


def read(face: MessagesFace, body: JSON | bytes, caller: str | None = None, headers: Any = HEADERS) -> Any:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return face.read_messages(raw, caller, headers)


@pytest.mark.parametrize("session_in_body", [False, True])
def test_a_sessions_turns_read_with_a_memory_are_what_they_are_alone(session_in_body: bool) -> None:
    face = remembering()
    headers = {"anthropic-version": "2023-06-01"} if session_in_body else HEADERS
    for turns in (0, 1, 2, 3, 5, 2, 6):  # on, once back to an earlier turn, on again
        body = turn_body(turns, session_in_body=session_in_body)
        ask, messages_ask = read(face, body, headers=headers)
        alone, alone_messages = read(MessagesFace(), copy.deepcopy(body), headers=headers)
        assert ask.req == alone.req and messages_ask == alone_messages
        assert ask.inbound.conversation == alone.inbound.conversation == f"\x00{SESSION}"


def test_from_the_third_request_the_known_items_are_the_last_ones_own() -> None:
    face = remembering()
    first, _ = read(face, turn_body(1))
    assert first.inbound.known_prefix is None  # a session is remembered from its second request
    second, second_messages = read(face, turn_body(2))
    assert second.inbound.known_prefix is None
    third, third_messages = read(face, turn_body(3))
    # named by its header, the body was read by its bytes: its first messages not decoded again
    sent, sent_before = (
        third_messages.request.native.body["messages"],
        second_messages.request.native.body["messages"],
    )
    assert sent[0] is sent_before[0] and sent[-1] is not sent_before[-1]
    earlier, shared = third.inbound.known_prefix
    assert earlier is second.req.input
    # the second request's last message lost its cache mark: its tool result is read again
    assert shared == len(second.req.input) - 1
    assert all(a is b for a, b in zip(third.req.input[:shared], earlier, strict=False))
    assert third.inbound.input_kinds >= {"message", "function_call", "function_call_output"}


def test_one_callers_session_is_not_another_callers() -> None:
    face = remembering()
    for turns in (1, 2):
        read(face, turn_body(turns), caller="alice")
    bob, _ = read(face, turn_body(3), caller="bob")
    assert bob.inbound.known_prefix is None and bob.inbound.conversation == f"bob\x00{SESSION}"
    alice, _ = read(face, turn_body(3), caller="alice")
    assert alice.inbound.known_prefix is not None


def test_a_sub_agents_requests_leave_the_main_conversations_memory_alone() -> None:
    """Claude Code's Agent tool: the sub-agent's requests (its own prompt, `X-Claude-Code-Agent-Id`)
    come between two of the main conversation's, which is still read by what is new."""
    face = remembering()
    for turns in (1, 2):
        read(face, turn_body(turns))
    sub_headers = {**HEADERS, "X-Claude-Code-Agent-Id": "a530c6b25ac91d3b2"}
    for turns in (0, 1, 2):
        sub, _ = read(face, {**turn_body(turns), "system": "You are a sub-agent."}, headers=sub_headers)
        assert sub.inbound.conversation == f"\x00{SESSION}/agent/a530c6b25ac91d3b2"
    main, _ = read(face, turn_body(3))
    assert main.inbound.conversation == f"\x00{SESSION}" and main.inbound.known_prefix is not None


def test_what_changed_is_checked_again() -> None:
    face = remembering()
    for turns in (1, 2):
        read(face, turn_body(turns))
    bad_tools = turn_body(3)
    bad_tools["tools"][0]["input_schema"] = "an object"
    with pytest.raises(InvalidRequest) as caught:
        read(face, bad_tools)
    assert caught.value.param == "tools.0.input_schema"
    bad_message = turn_body(3)
    bad_message["messages"][-1]["content"][0]["tool_use_id"] = 5
    with pytest.raises(InvalidRequest) as caught:
        read(face, bad_message)
    assert caught.value.param == f"messages.{len(bad_message['messages']) - 1}.content.0.tool_use_id"
    changed_early = turn_body(3)
    changed_early["messages"][1]["content"][1]["name"] = ""
    with pytest.raises(InvalidRequest) as caught:
        read(face, changed_early)
    assert caught.value.param == "messages.1.content.1.name"


def test_a_body_too_small_for_the_memory_is_not_remembered() -> None:
    face = MessagesFace(Memo(1 << 24, min_weight=1 << 20))
    for turns in (1, 2, 3):
        got, _ = read(face, turn_body(turns))
    assert got.inbound.known_prefix is None


def test_the_responses_face_and_this_one_share_a_memory_without_meeting() -> None:
    memo: Memo[Any] = Memo(1 << 24)
    face, reader = MessagesFace(memo), RequestReader(memo)
    codex = {"model": "m", "input": [{"type": "message", "role": "user", "content": "hi " * 500}],
             "prompt_cache_key": SESSION}  # fmt: skip
    for turns in (1, 2, 3):
        read(face, turn_body(turns))
        req, inbound = reader.read(orjson.dumps(codex), None)
        assert req.input == codex["input"] and inbound.conversation == f"\x00{SESSION}"
    got, _ = read(face, turn_body(4))
    assert got.inbound.known_prefix is not None
