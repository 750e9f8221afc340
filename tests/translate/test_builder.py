"""ResponseBuilder: the Responses item lifecycle, driven directly (every backend drives it)."""

from __future__ import annotations

import itertools
from typing import Any

from codexgate.errors import UpstreamStreamCut
from codexgate.translate.builder import ResponseBuilder
from codexgate.translate.cuts import cut_ids
from codexgate.translate.envelope import Envelope

USAGE = {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3}


def make_builder(**options: Any) -> ResponseBuilder:
    ids = itertools.count(1)
    return ResponseBuilder(
        Envelope("resp_1", 0, "m", b"{}"), lambda prefix: f"{prefix}_{next(ids)}", now=lambda: 7, **options
    )


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def test_reasoning_then_text_then_a_call_close_in_order_with_increasing_numbers() -> None:
    b = make_builder()
    events = b.start()
    b.reasoning("think")
    b.text("hel")
    b.text("lo")
    b.function_call("shell", '{"cmd":"ls"}', namespace="tools")
    b.finish(USAGE)
    events += b.take()
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    done = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [(i["type"], i.get("status")) for i in done] == [
        ("reasoning", None),
        ("message", "completed"),
        ("function_call", "completed"),
    ]
    assert done[1]["content"][0]["text"] == "hello"
    assert done[2]["namespace"] == "tools" and done[2]["arguments"] == '{"cmd":"ls"}'
    final = events[-1]
    assert final["type"] == "response.completed" and final["response"]["completed_at"] == 7
    assert [i["id"] for i in final["response"]["output"]] == [i["id"] for i in done]
    assert [e["output_index"] for e in events if e["type"] == "response.output_item.added"] == [0, 1, 2]


def test_a_custom_tool_call_carries_its_namespace_when_given() -> None:
    b = make_builder()
    b.start()
    b.custom_tool_call("apply_patch", "*** Begin Patch", call_id="call_x", namespace="ns")
    b.custom_tool_call("apply_patch", "x")
    b.finish(USAGE)
    events = b.take()
    assert types(events)[:4] == [
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
    ]
    first, second = (e["item"] for e in events if e["type"] == "response.output_item.done")
    assert first["namespace"] == "ns" and first["call_id"] == "call_x" and first["input"] == "*** Begin Patch"
    assert "namespace" not in second and second["call_id"].startswith("call_")


def test_incomplete_marks_the_open_message_incomplete() -> None:
    b = make_builder()
    b.start()
    b.text("partial")
    b.finish(USAGE, "max_output_tokens")
    events = b.take()
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert events[-1]["response"]["output"][0]["status"] == "incomplete"


def test_a_failure_closes_open_items_and_names_them_in_a_cut_marker() -> None:
    b = make_builder(mark_cuts=True)
    b.start()
    b.reasoning("r")
    b.text("half an answ")
    b.fail(UpstreamStreamCut("cut"), USAGE)
    events = b.take()
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == UpstreamStreamCut("x").to_response_error()["code"]
    output = events[-1]["response"]["output"]
    assert output[1]["status"] == "incomplete"
    assert cut_ids(output) == {item["id"] for item in output}
    assert b.done


def test_nothing_follows_the_terminal_event() -> None:
    b = make_builder()
    b.start()
    b.finish(USAGE)
    b.take()
    b.finish(USAGE)
    b.fail(UpstreamStreamCut("late"), USAGE)
    assert b.take() == []


def test_a_failure_before_any_output_has_no_cut_marker() -> None:
    b = make_builder()
    b.start()
    b.fail(UpstreamStreamCut("cut"), USAGE)
    events = b.take()
    assert types(events) == ["response.failed"] and events[-1]["response"]["output"] == []


def test_without_the_cut_policy_a_failure_only_closes_the_open_items() -> None:
    b = make_builder()
    b.start()
    b.text("half an answ")
    b.fail(UpstreamStreamCut("cut"), USAGE)
    output = b.take()[-1]["response"]["output"]
    assert [(i["type"], i["status"]) for i in output] == [("message", "incomplete")]
    assert cut_ids(output) == set()


def test_reasoning_carries_the_blob_of_the_policy_or_of_the_upstream() -> None:
    b = make_builder(reasoning_blob=lambda text: f"blob:{text}")
    b.start()
    b.reasoning("mine")
    b.text("a")
    b.reasoning("theirs")
    b.close_reasoning("upstream-opaque")
    b.reasoning("none given")
    b.close_reasoning(None)
    b.finish(USAGE)
    reasoning = [i for i in b.take()[-1]["response"]["output"] if i["type"] == "reasoning"]
    assert [i.get("encrypted_content") for i in reasoning] == ["blob:mine", "upstream-opaque", None]
    plain = make_builder()
    plain.start()
    plain.reasoning("r")
    plain.finish(USAGE)
    assert "encrypted_content" not in plain.take()[-1]["response"]["output"][0]


def test_an_item_passed_through_takes_its_place_among_the_others() -> None:
    b = make_builder()
    events = b.start()
    b.text("searching")
    search = {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"query": "q"}}
    b.item(search)
    b.text("found")
    b.finish(USAGE)
    events += b.take()
    done = [
        (e["output_index"], e["item"]["type"]) for e in events if e["type"] == "response.output_item.done"
    ]
    assert done == [(0, "message"), (1, "web_search_call"), (2, "message")]
    assert events[-1]["response"]["output"][1] is search
