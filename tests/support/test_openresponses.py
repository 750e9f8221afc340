"""The Open Responses validator accepts a correct stream and pinpoints broken ones."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.openresponses import (
    event_schema_names,
    validate_event,
    validate_response,
    validate_stream,
)

RESP_ID = "resp_test"
MSG_ID = "msg_test"


def resource(status: str = "in_progress", output: list[dict[str, Any]] | None = None) -> dict:
    """A minimal ResponseResource: every required field, with the smallest valid value."""
    done = status == "completed"
    return {
        "id": RESP_ID,
        "object": "response",
        "created_at": 1_700_000_000,
        "completed_at": 1_700_000_001 if done else None,
        "status": status,
        "incomplete_details": None,
        "model": "test-model",
        "previous_response_id": None,
        "instructions": None,
        "output": output or [],
        "error": None,
        "tools": [],
        "tool_choice": "auto",
        "truncation": "disabled",
        "parallel_tool_calls": True,
        "text": {"format": {"type": "text"}},
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "temperature": 1.0,
        "reasoning": None,
        "usage": (
            {
                "input_tokens": 5,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 2,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 7,
            }
            if done
            else None
        ),
        "max_output_tokens": None,
        "max_tool_calls": None,
        "store": False,
        "background": False,
        "service_tier": "default",
        "metadata": {},
        "safety_identifier": None,
        "prompt_cache_key": None,
    }


def message(text: str, status: str) -> dict:
    return {
        "type": "message",
        "id": MSG_ID,
        "status": status,
        "role": "assistant",
        "content": [text_part(text)],
    }


def text_part(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": []}


def minimal_stream(deltas: tuple[str, ...] = ("Hel", "lo")) -> list[dict]:
    text = "".join(deltas)
    loc = {"item_id": MSG_ID, "output_index": 0, "content_index": 0}
    added_item = {**message("", "in_progress"), "content": []}
    done_item = message(text, "completed")
    events: list[dict] = [
        {"type": "response.created", "response": resource()},
        {"type": "response.in_progress", "response": resource()},
        {"type": "response.output_item.added", "output_index": 0, "item": added_item},
        {"type": "response.content_part.added", **loc, "part": text_part("")},
        *({"type": "response.output_text.delta", **loc, "delta": d} for d in deltas),
        {"type": "response.output_text.done", **loc, "text": text},
        {"type": "response.content_part.done", **loc, "part": text_part(text)},
        {"type": "response.output_item.done", "output_index": 0, "item": done_item},
        {"type": "response.completed", "response": resource("completed", [done_item])},
    ]
    return [{**ev, "sequence_number": n} for n, ev in enumerate(events)]


def renumber(events: list[dict]) -> list[dict]:
    return [{**ev, "sequence_number": n} for n, ev in enumerate(events)]


# ---- accepts ------------------------------------------------------------------------------


def test_accepts_minimal_stream() -> None:
    events = minimal_stream()
    validate_stream(events)
    validate_response(events[-1]["response"])


def test_accepts_single_delta_stream() -> None:
    validate_stream(minimal_stream(("Hello",)))


def test_event_type_map_is_read_from_spec() -> None:
    names = event_schema_names()
    assert names["response.created"] == "ResponseCreatedStreamingEvent"
    assert names["error"] == "ErrorStreamingEvent"
    # the spec's name for raw reasoning text events (OpenAI/Codex say reasoning_text)
    assert names["response.reasoning.delta"] == "ResponseReasoningDeltaStreamingEvent"
    assert "response.reasoning_text.delta" not in names
    assert len(names) == 24


def test_accepts_allow_listed_codex_events() -> None:
    loc = {"sequence_number": 3, "item_id": "rs_1", "output_index": 0}
    validate_event({"type": "response.reasoning_text.delta", **loc, "content_index": 0, "delta": "x"})
    validate_event({"type": "response.reasoning_text.done", **loc, "content_index": 0, "text": "x"})
    validate_event({"type": "response.custom_tool_call_input.delta", **loc, "delta": "*** Begin"})
    validate_event({"type": "response.custom_tool_call_input.done", **loc, "input": "*** Begin"})
    with pytest.raises(AssertionError, match="'content_index' is a required property"):
        validate_event({"type": "response.reasoning_text.delta", **loc, "delta": "x"})


def test_accepts_custom_tool_call_stream() -> None:
    item = {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "call_1",
        "name": "apply_patch",
        "input": "",
        "status": "in_progress",
    }
    done = {**item, "input": "*** Begin Patch", "status": "completed"}
    loc = {"item_id": "ctc_1", "output_index": 0}
    events = renumber(
        [
            {"type": "response.created", "response": resource()},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.custom_tool_call_input.delta", **loc, "delta": "*** Begin"},
            {"type": "response.custom_tool_call_input.delta", **loc, "delta": " Patch"},
            {"type": "response.custom_tool_call_input.done", **loc, "input": "*** Begin Patch"},
            {"type": "response.output_item.done", "output_index": 0, "item": done},
            {"type": "response.completed", "response": resource("completed", [done])},
        ]
    )
    validate_stream(events)
    broken = copy.deepcopy(events)
    del broken[-1]["response"]["output"][0]["call_id"]
    with pytest.raises(AssertionError, match=r"\$\.response\.output\[0\]: 'call_id' is a required"):
        validate_event(broken[-1])


def test_accepts_function_call_and_reasoning_stream() -> None:
    rs_added = {"type": "reasoning", "id": "rs_1", "summary": []}
    rs_done = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "hm"}],
    }
    fc_added = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "shell",
        "arguments": "",
        "status": "in_progress",
    }
    fc_done = {**fc_added, "arguments": '{"cmd":["ls"]}', "status": "completed"}
    rs = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
    fc = {"item_id": "fc_1", "output_index": 1}
    events = renumber(
        [
            {"type": "response.created", "response": resource()},
            {"type": "response.output_item.added", "output_index": 0, "item": rs_added},
            {
                "type": "response.reasoning_summary_part.added",
                **rs,
                "part": {"type": "summary_text", "text": ""},
            },
            {"type": "response.reasoning_summary_text.delta", **rs, "delta": "hm"},
            {"type": "response.reasoning_summary_text.done", **rs, "text": "hm"},
            {
                "type": "response.reasoning_summary_part.done",
                **rs,
                "part": {"type": "summary_text", "text": "hm"},
            },
            {"type": "response.output_item.done", "output_index": 0, "item": rs_done},
            {"type": "response.output_item.added", "output_index": 1, "item": fc_added},
            {"type": "response.function_call_arguments.delta", **fc, "delta": '{"cmd":'},
            {"type": "response.function_call_arguments.delta", **fc, "delta": '["ls"]}'},
            {"type": "response.function_call_arguments.done", **fc, "arguments": '{"cmd":["ls"]}'},
            {"type": "response.output_item.done", "output_index": 1, "item": fc_done},
            {"type": "response.completed", "response": resource("completed", [rs_done, fc_done])},
        ]
    )
    validate_stream(events)


def test_many_events_are_fast_enough() -> None:
    validate_stream(minimal_stream(tuple("x" for _ in range(500))))


# ---- rejects: schema ----------------------------------------------------------------------


def test_rejects_response_without_truncation() -> None:
    bad = resource("completed", [message("hi", "completed")])
    del bad["truncation"]
    with pytest.raises(AssertionError, match=r"\$: 'truncation' is a required property"):
        validate_response(bad)


def test_error_message_names_nested_field() -> None:
    bad = resource("completed", [message("hi", "completed")])
    del bad["output"][0]["content"][0]["annotations"]
    bad["usage"]["output_tokens_details"] = {}
    with pytest.raises(AssertionError) as exc:
        validate_response(bad)
    text = str(exc.value)
    assert "$.output[0].content[0]: 'annotations' is a required property" in text
    assert "$.usage.output_tokens_details: 'reasoning_tokens' is a required property" in text
    assert "2 error(s)" in text


def test_rejects_event_without_sequence_number() -> None:
    events = minimal_stream()
    del events[4]["sequence_number"]
    with pytest.raises(AssertionError, match="'sequence_number' is a required property"):
        validate_event(events[4])
    with pytest.raises(AssertionError, match=r"(?s)event #4: .*'sequence_number' is a required"):
        validate_stream(events)


def test_rejects_unknown_event_type() -> None:
    with pytest.raises(AssertionError, match="not in the Open Responses spec"):
        validate_event({"type": "response.made_up.delta", "sequence_number": 0})


def test_rejects_invalid_response_inside_event() -> None:
    events = minimal_stream()
    events[-1]["response"]["tool_choice"] = "sometimes"
    with pytest.raises(AssertionError, match=r"\$\.response\.tool_choice: 'sometimes' is not one"):
        validate_stream(events)


# ---- rejects: stream invariants -----------------------------------------------------------


def test_rejects_stream_without_terminal_event() -> None:
    events = minimal_stream()[:-1]
    with pytest.raises(AssertionError, match="no terminal event"):
        validate_stream(events)


def test_rejects_added_item_without_done() -> None:
    events = minimal_stream()
    events = renumber([ev for ev in events if ev["type"] != "response.output_item.done"])
    with pytest.raises(AssertionError, match="never got response.output_item.done"):
        validate_stream(events)


def test_rejects_sequence_numbers_from_one() -> None:
    events = [{**ev, "sequence_number": ev["sequence_number"] + 1} for ev in minimal_stream()]
    with pytest.raises(AssertionError, match="sequence_number is 1, expected 0"):
        validate_stream(events)


def test_rejects_terminal_event_not_last() -> None:
    events = minimal_stream()
    events = renumber([events[0], events[-1], *events[1:-1]])
    with pytest.raises(AssertionError, match="terminal event is not the last event"):
        validate_stream(events)


def test_rejects_deltas_not_matching_done_text() -> None:
    events = minimal_stream()
    events[5]["delta"] = "Hul"  # first delta
    with pytest.raises(AssertionError, match="!= concatenated deltas"):
        validate_stream(events)


def test_rejects_content_part_without_done() -> None:
    events = renumber([ev for ev in minimal_stream() if ev["type"] != "response.content_part.done"])
    with pytest.raises(AssertionError, match="content part 0 of output_index 0 was never closed"):
        validate_stream(events)


def test_rejects_terminal_output_differing_from_done_items() -> None:
    events = minimal_stream()
    events[-1]["response"]["output"] = []
    with pytest.raises(AssertionError, match="response.output has 0 items, but 1 items were done"):
        validate_stream(events)


def test_rejects_done_item_with_other_id() -> None:
    events = minimal_stream()
    done = next(ev for ev in events if ev["type"] == "response.output_item.done")
    done["item"]["id"] = "msg_other"
    with pytest.raises(AssertionError, match="item.id 'msg_other' != 'msg_test'"):
        validate_stream(events)
