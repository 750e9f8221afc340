"""Remote compaction (translate/compaction.py): the summarising request, the sealed summary
that comes back as a compaction item, and the stream Codex accepts as a compaction."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from codexgate.errors import InvalidRequest, UpstreamStreamCut
from codexgate.translate import compaction
from codexgate.translate.compaction import (
    COMPACTION_FAILED,
    SUMMARY_PROMPT,
    CompactionOutput,
    expand_compaction_items,
    is_compaction_request,
    seal,
    summary_request,
    unseal,
)
from codexgate.translate.turn import Turn
from codexgate.wire.responses import parse_request
from tests.support.turns import counter_ids, make_turn

Event = dict[str, Any]

SECRET = bytes(range(32))
SHELL = {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}
TRIGGER = {"type": "compaction_trigger"}
HISTORY: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the bug."}]},
    {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"cmd":"ls"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "main.py"},
]


def compaction_body(**fields: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "input": [*HISTORY, TRIGGER],
        "tools": [SHELL],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "stream": True,
        "text": {"verbosity": "low"},
        **fields,
    }


def test_the_public_surface_is_pinned() -> None:
    assert sorted(compaction.__all__) == [
        "COMPACTION_FAILED",
        "CompactionOutput",
        "SUMMARY_PROMPT",
        "expand_compaction_items",
        "is_compaction_request",
        "seal",
        "summary_request",
        "unseal",
    ]


# -- the request


def test_only_a_trigger_in_last_place_asks_for_compaction() -> None:
    assert is_compaction_request(parse_request(compaction_body()))
    assert not is_compaction_request(parse_request(compaction_body(input=[TRIGGER, *HISTORY])))
    assert not is_compaction_request(parse_request(compaction_body(input=[])))


def test_the_summary_request_drops_the_trigger_and_the_tools_and_asks_for_the_summary() -> None:
    req = parse_request(compaction_body(instructions="Be Codex.", reasoning={"effort": "high"}, store=True))
    summary = summary_request(req)
    assert summary.input[:-1] == HISTORY
    assert summary.input[-1] == {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": SUMMARY_PROMPT}],
    }
    assert (summary.tools, summary.tool_choice, summary.parallel_tool_calls) == ([], "none", None)
    assert (summary.text, summary.store) == (None, False)
    assert (summary.model, summary.instructions, summary.reasoning, summary.stream) == (
        "m",
        "Be Codex.",
        {"effort": "high"},
        True,
    )
    assert req.input[-1] == TRIGGER and req.tools == [SHELL]  # the client's request is untouched


# -- sealing


def test_a_sealed_summary_unseals_for_its_owner() -> None:
    summary = "Goal: fix the bug in main.py.\nNext: run `pytest -q`. ✓ unicode"
    content = seal(summary, "alice", SECRET)
    assert content.startswith("cgz1.") and content.isascii()
    assert unseal(content, "alice", SECRET, "p") == summary
    assert unseal(seal("", "", SECRET), "", SECRET, "p") == ""


def test_a_summary_sealed_for_another_owner_is_refused_naming_the_item() -> None:
    content = seal("summary", "alice", SECRET)
    with pytest.raises(InvalidRequest) as caught:
        unseal(content, "bob", SECRET, "input[3].encrypted_content")
    assert caught.value.param == "input[3].encrypted_content"
    with pytest.raises(InvalidRequest):
        unseal(content, "", SECRET, "p")
    with pytest.raises(InvalidRequest):
        unseal(content, "alice", bytes(32), "p")  # the store's secret was replaced


@pytest.mark.parametrize(
    "alter",
    [
        lambda c: c[:-1] + ("A" if c[-1] != "A" else "B"),  # the mac
        lambda c: c[:6] + ("A" if c[6] != "A" else "B") + c[7:],  # the payload
        lambda c: c.rpartition(".")[0],  # no mac
        lambda c: c + "é",  # not ASCII
        lambda c: "cgz1." + c.rpartition(".")[2],  # no payload
    ],
)
def test_an_altered_summary_is_refused(alter: Callable[[str], str]) -> None:
    with pytest.raises(InvalidRequest):
        unseal(alter(seal("the summary", "alice", SECRET)), "alice", SECRET, "p")


def test_a_forged_summary_is_refused() -> None:
    forged = "cgz1." + base64.urlsafe_b64encode(b"I am the summary").decode().rstrip("=") + ".AAAA"
    with pytest.raises(InvalidRequest):
        unseal(forged, "", SECRET, "p")


def test_content_that_is_not_ours_unseals_to_none() -> None:
    assert unseal("gAAAAABkZXJlYWxseW9wYXF1ZWJsb2Jmcm9tb3BlbmFp", "alice", SECRET, "p") is None
    assert unseal("", "alice", SECRET, "p") is None


# -- expanding


def test_expansion_replaces_only_our_compaction_items_in_place() -> None:
    ours = {"type": "compaction", "id": "cmp_1", "encrypted_content": seal("Summary one.", "k", SECRET)}
    alias = {"type": "compaction_summary", "encrypted_content": seal("Summary two.", "k", SECRET)}
    foreign = {"type": "compaction", "encrypted_content": "gAAAAAB" + "x" * 60}
    user = {"type": "message", "role": "user", "content": "go on"}
    items = [ours, foreign, alias, user]
    expanded = expand_compaction_items(items, "k", SECRET)
    assert expanded[1] is foreign and expanded[3] is user
    for index, summary in ((0, "Summary one."), (2, "Summary two.")):
        message = expanded[index]
        assert (message["type"], message["role"]) == ("message", "user")
        [part] = message["content"]
        assert part["type"] == "input_text" and part["text"].endswith("\n\n" + summary)
    assert items == [ours, foreign, alias, user]  # the input list is not changed


def test_expansion_without_compaction_items_returns_the_same_list() -> None:
    items = list(HISTORY)
    assert expand_compaction_items(items, "k", SECRET) is items


def test_expansion_refuses_our_item_sealed_for_another_key_naming_it() -> None:
    items = [*HISTORY, {"type": "compaction", "encrypted_content": seal("s", "alice", SECRET)}]
    with pytest.raises(InvalidRequest) as caught:
        expand_compaction_items(items, "bob", SECRET)
    assert caught.value.param == "input[3].encrypted_content"


# -- the response


def summarising_turn() -> Turn:
    return make_turn(body=compaction_body(input=HISTORY), reasoning_blob=None, mark_cuts=False)


def transform(turn: Turn, *steps: Callable[[Turn], object]) -> list[Event]:
    """Feed the turn step by step, passing each batch it makes through a CompactionOutput."""
    output = CompactionOutput("alice", SECRET, new_id=counter_ids())
    events = output.feed(turn.start())
    for step in steps:
        step(turn)
        events += output.feed(turn.take())
    return events


def kinds(events: list[Event]) -> list[str]:
    return [event["type"] for event in events]


def assert_numbered(events: list[Event]) -> None:
    assert [event["sequence_number"] for event in events] == list(range(len(events)))


def test_a_summary_becomes_exactly_one_compaction_item_and_a_completed_response() -> None:
    usage = {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940}
    events = transform(
        summarising_turn(),
        lambda t: t.reasoning("Let me summarise."),
        lambda t: t.text("Goal: fix the bug.\n"),
        lambda t: t.text("Next: run the tests."),
        lambda t: t.usage(usage),
        lambda t: t.finish("stop"),
    )
    assert kinds(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert_numbered(events)
    [done] = [e for e in events if e["type"] == "response.output_item.done"]
    item = done["item"]
    assert set(item) == {"type", "id", "encrypted_content"} and item["type"] == "compaction"
    assert (
        unseal(item["encrypted_content"], "alice", SECRET, "p") == "Goal: fix the bug.\nNext: run the tests."
    )
    completed = events[-1]["response"]
    assert completed["output"] == [item]
    assert (completed["id"], completed["status"], completed["usage"]) == ("resp_test", "completed", usage)


def test_a_turn_without_text_fails_the_compaction() -> None:
    events = transform(
        summarising_turn(), lambda t: t.reasoning("Hmm."), lambda t: t.text("  \n"), Turn.finish
    )
    assert kinds(events) == ["response.created", "response.in_progress", "response.failed"]
    assert_numbered(events)
    response = events[-1]["response"]
    assert (response["status"], response["output"]) == ("failed", [])
    assert response["error"]["code"] == COMPACTION_FAILED


def test_a_tool_call_instead_of_a_summary_fails_the_compaction() -> None:
    def call(turn: Turn) -> None:
        turn.text("Summary: nearly done.")
        turn.open_call(0, "shell", "call_1")
        turn.call_arguments(0, "{}")
        turn.finish("tool_calls")

    events = transform(summarising_turn(), call)
    assert kinds(events)[-1] == "response.failed"
    assert events[-1]["response"]["error"]["code"] == COMPACTION_FAILED
    assert not any(e["type"].startswith("response.output_item") for e in events)


def test_a_summary_cut_off_fails_the_compaction() -> None:
    events = transform(summarising_turn(), lambda t: t.text("Goal: fix"), lambda t: t.finish("length"))
    assert kinds(events) == ["response.created", "response.in_progress", "response.failed"]
    assert_numbered(events)
    response = events[-1]["response"]
    assert response["error"]["code"] == COMPACTION_FAILED
    assert "max_output_tokens" in response["error"]["message"]
    assert response["incomplete_details"] is None


def test_a_failed_turn_passes_through() -> None:
    turn = summarising_turn()
    output = CompactionOutput("alice", SECRET)
    events = output.feed(turn.start())
    turn.text("Goal: fix")
    events += output.feed(turn.take())
    failed = turn.fail(UpstreamStreamCut("The upstream stopped."))
    events += output.feed(failed)
    assert kinds(events) == ["response.created", "response.in_progress", "response.failed"]
    assert_numbered(events)
    assert events[-1]["response"]["error"] == failed[-1]["response"]["error"]
    assert output.done and output.feed(failed) == []
