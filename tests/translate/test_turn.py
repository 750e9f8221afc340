"""The backend-neutral turn: what a backend feeds it becomes a valid Responses stream, and its run
loop ends every stream with exactly one terminal event, whatever the backend's source does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from codexgate.errors import GatewayError, ModelOutputLoop, UpstreamStreamCut
from codexgate.translate.chat_face.chunks import ChatChunkEncoder
from codexgate.translate.cuts import cut_ids
from codexgate.translate.stops import StopScanner
from codexgate.translate.turn import Turn
from codexgate.wire.responses_events import stop_sequence_of
from codexgate.wire.sse import encode_events
from tests.support.openresponses import validate_stream
from tests.support.turns import make_turn

Event = dict[str, Any]

SHELL = {
    "type": "function",
    "name": "shell",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
}
PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" /(.|\\n)*/'},
}
MCP = {"type": "namespace", "name": "mcp__srv", "tools": [{"type": "function", "name": "do_it"}]}


def neutral_turn(tools: list[dict[str, Any]] | None = None, **options: Any) -> Turn:
    """A turn without the chat policies: what a Responses or Codex backend gets by default."""
    return make_turn(tools, reasoning_blob=None, mark_cuts=False, **options)


def finish(turn: Turn, reason: str = "stop") -> list[Event]:
    turn.finish(reason)
    return turn.take()


def output(events: list[Event]) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = events[-1]["response"]["output"]
    return result


# -- feeding


def test_calls_opened_with_a_namespace_resolve_by_the_clients_names() -> None:
    turn = neutral_turn([SHELL, PATCH, MCP])
    events = turn.start()
    turn.text("Working.")
    turn.open_call("a", "do_it", "call_a", namespace="mcp__srv")
    turn.call_arguments("a", '{"x": 1}')
    turn.open_call("b", "apply_patch", "call_b", raw_input=True)
    turn.call_arguments("b", "*** Begin Patch\n")
    turn.open_call("c", "shell", "call_c")
    turn.call_arguments("c", '{"cmd": "ls",}')  # repaired: a trailing comma
    events += finish(turn, "tool_calls")
    validate_stream(events)
    message, mcp, patch, shell = output(events)
    assert (mcp["type"], mcp["namespace"], mcp["name"], mcp["arguments"]) == (
        "function_call",
        "mcp__srv",
        "do_it",
        '{"x": 1}',
    )
    assert (patch["type"], patch["input"]) == ("custom_tool_call", "*** Begin Patch\n")
    assert shell["arguments"] == '{"cmd":"ls"}'


def test_calls_are_held_until_the_model_finished_and_dropped_when_it_did_not() -> None:
    turn = neutral_turn([SHELL])
    turn.start()
    turn.open_call(0, "shell", "call_1")
    turn.call_arguments(0, '{"cmd": "rm -rf /tm')
    assert not any(e["type"] == "response.output_item.added" for e in turn.take())
    turn.finish("length")
    events = turn.take()
    assert events[-1]["type"] == "response.incomplete" and output(events) == []


def test_an_item_passed_through_keeps_its_place_and_reasoning_keeps_the_upstreams_blob() -> None:
    turn = neutral_turn()
    events = turn.start()
    turn.reasoning("Let me search.")
    turn.close_reasoning("opaque-upstream-blob")
    turn.item({"type": "compaction", "id": "cmp_1", "encrypted_content": "summary-handle"})
    turn.text("Found it.")
    events += finish(turn)
    validate_stream(events)
    reasoning, compaction, message = output(events)
    assert reasoning["encrypted_content"] == "opaque-upstream-blob"
    assert compaction["id"] == "cmp_1" and message["content"][0]["text"] == "Found it."


def test_without_the_chat_policies_reasoning_has_no_blob_and_failures_no_marker() -> None:
    turn = neutral_turn()
    turn.start()
    turn.reasoning("hmm")
    turn.text("half")
    failed = turn.fail(UpstreamStreamCut("cut"))
    assert [i["type"] for i in output(failed)] == ["reasoning", "message"]
    assert "encrypted_content" not in output(failed)[0] and cut_ids(output(failed)) == set()
    chat = make_turn()
    chat.start()
    chat.text("half")
    assert cut_ids(output(chat.fail(UpstreamStreamCut("cut"))))


def test_the_response_id_is_minted_by_the_turn() -> None:
    minted = make_turn(response_id=None)  # type: ignore[arg-type]
    assert minted.response_id.startswith("resp_")
    assert minted.start()[0]["response"]["id"] == minted.response_id


# -- stop sequences the gateway applies


@pytest.mark.parametrize("split", [1, 2, 3, 7, 100])
def test_the_answer_ends_before_the_first_stop_sequence_however_the_deltas_are_cut(split: int) -> None:
    text = "alpha beta END gamma STOP delta"
    turn = neutral_turn(stop=["STOP", "END"])
    events = turn.start()
    for i in range(0, len(text), split):
        turn.text(text[i : i + split])
    events += turn.take()
    assert turn.done  # the stop ends the response at once
    validate_stream(events)
    assert events[-1]["type"] == "response.completed"
    assert output(events)[0]["content"][0]["text"] == "alpha beta "


def test_text_that_only_looked_like_a_stop_sequence_is_released() -> None:
    turn = neutral_turn(stop=["</answer>"])
    events = turn.start()
    for piece in ["a </ans", "wer is here, ", "</", "b"]:
        turn.text(piece)
    events += finish(turn)
    assert output(events)[0]["content"][0]["text"] == "a </answer is here, </b"


@pytest.mark.parametrize("split", [1, 2, 5, 100])
def test_the_terminal_event_names_the_stop_sequence_met_where_no_responses_client_sees_it(split: int) -> None:
    text = "alpha STOP beta END"
    turn = neutral_turn(stop=["END", "STOP"])
    events = turn.start()
    for i in range(0, len(text), split):
        turn.text(text[i : i + split])
    *rest, terminal = turn.take()
    events += rest
    assert stop_sequence_of(terminal) == "STOP"  # the first met, not the first listed
    assert encode_events([terminal]) == encode_events([dict(terminal)])  # the plain event, byte for byte
    assert b"STOP" not in encode_events([terminal])
    assert "STOP" not in str(ChatChunkEncoder(include_usage=True).feed(events + [terminal]))
    validate_stream(events + [terminal])


def test_a_stop_sequence_the_upstream_reports_reaches_the_terminal_event() -> None:
    turn = neutral_turn()
    turn.start()
    turn.text("done")
    turn.finish("stop", stop_sequence="\n\nHuman:")
    assert stop_sequence_of(turn.take()[-1]) == "\n\nHuman:"


def test_an_answer_no_stop_sequence_ended_has_a_plain_terminal_event() -> None:
    for reason in ("stop", "length"):
        turn = neutral_turn(stop=["END"])
        turn.start()
        turn.text("no sequence here")
        turn.finish(reason, stop_sequence="END" if reason == "length" else None)
        terminal = turn.take()[-1]
        assert type(terminal) is dict and stop_sequence_of(terminal) is None


def test_the_scanner_says_which_sequence_it_met() -> None:
    scanner = StopScanner(["END", "ST"])
    assert scanner.feed("a S") == "a " and scanner.matched is None
    assert scanner.feed("TOP END") == ""
    assert scanner.stopped and scanner.matched == "ST"
    tie = StopScanner(["AB", "A"])
    tie.feed("xAB")
    assert tie.matched == "AB"  # met at the same place: the first listed


def test_the_scanner_holds_back_only_a_possible_start() -> None:
    scanner = StopScanner(["abc"])
    assert scanner.passes("xyz") and not scanner.passes("xa")
    assert scanner.feed("xxab") == "xx"
    assert scanner.feed("d") == "abd"
    assert scanner.feed("zab") == "z" and scanner.finish() == "ab"


# -- the run loop


async def source_of(turn: Turn, steps: list[Any]) -> AsyncIterator[None]:
    """Feeds the turn step by step: a string is text, an exception is raised, "FINISH" ends."""
    for step in steps:
        if isinstance(step, BaseException):
            raise step
        if step == "FINISH":
            turn.finish("stop")
        else:
            turn.text(step)
        yield None


async def run_all(turn: Turn, source: AsyncIterator[Any]) -> list[Event]:
    events: list[Event] = []
    async for batch in turn.run(source):
        events.extend(batch)
    return events


@pytest.mark.parametrize(
    ("steps", "outcome", "code"),
    [
        (["hi", "FINISH"], "response.completed", None),
        (["hi"], "response.failed", "upstream_stream_cut"),  # the source ended early
        ([], "response.failed", "upstream_stream_cut"),
        (["hi", GatewayError("boom", code="upstream_error")], "response.failed", "upstream_error"),
        (["hi", RuntimeError("a bug")], "response.failed", "internal_error"),
    ],
)
async def test_every_run_ends_with_exactly_one_terminal_event(
    steps: list[Any], outcome: str, code: str | None
) -> None:
    turn = neutral_turn()
    events = await run_all(turn, source_of(turn, steps))
    validate_stream(events)
    terminals = [e for e in events if e["type"].startswith("response.") and "response" in e]
    assert [e["type"] for e in terminals][-1] == outcome
    assert (
        sum(e["type"] in ("response.completed", "response.failed", "response.incomplete") for e in events)
        == 1
    )
    assert (events[-1]["response"]["error"] or {}).get("code") == code
    if steps and steps[0] == "hi":
        assert "hi" in str(output(events))  # what was fed before a failure went out first


async def test_a_loop_guard_failure_stops_the_source_and_fails_the_response() -> None:
    turn = neutral_turn(loop_guard=True)
    closed = asyncio.Event()

    async def endless() -> AsyncIterator[None]:
        try:
            while True:
                turn.text("again and again. ")
                yield None
        finally:
            closed.set()

    events = await run_all(turn, endless())
    assert events[-1]["response"]["error"]["code"] == ModelOutputLoop("x").code
    assert closed.is_set()


async def test_the_output_cap_ends_the_response_incomplete_and_closes_the_source() -> None:
    turn = neutral_turn(max_output_chars=100)
    closed = asyncio.Event()

    async def chatty() -> AsyncIterator[None]:
        try:
            for _ in range(1000):
                turn.text("0123456789")
                yield None
        finally:
            closed.set()

    events = await run_all(turn, chatty())
    assert events[-1]["type"] == "response.incomplete" and closed.is_set()


async def test_a_finished_source_is_drained_after_the_terminal_batch() -> None:
    turn = neutral_turn()
    drained: list[str] = []

    async def with_tail() -> AsyncIterator[None]:
        turn.text("done")
        turn.finish("stop")
        yield None
        drained.append("read the rest")  # e.g. [DONE] after the terminal chunk

    run = turn.run(with_tail())
    batches = [batch async for batch in run]
    assert batches[-1][-1]["type"] == "response.completed" and drained == ["read the rest"]


async def test_closing_the_run_closes_the_source() -> None:
    turn = neutral_turn()
    closed = asyncio.Event()

    async def slow() -> AsyncIterator[None]:
        try:
            turn.text("a")
            yield None
            await asyncio.Event().wait()  # never
            yield None
        finally:
            closed.set()

    run = turn.run(slow())
    await anext(run)  # response.created
    await anext(run)  # "a"
    await run.aclose()
    assert closed.is_set()
