"""`codex app-server` notifications -> the response (translate/codex_agent/events.py): the agent's
messages are its answer, its work is reasoning, its usage the sum of its model requests, its
failures the gateway's error codes, a client tool call a call of the response. Every stream is
checked against the Open Responses schema and invariants."""

from __future__ import annotations

from typing import Any

import pytest

from codexgate.errors import Code, GatewayError
from codexgate.translate.chat_face.chunks import chat_completion
from codexgate.translate.codex_agent.events import AgentReader, agent_error
from codexgate.translate.turn import Turn
from tests.support.openresponses import validate_stream
from tests.support.turns import make_turn

JSON = dict[str, Any]
Note = tuple[str, JSON]
TURN = "turn-1"
SCOPE = {"threadId": "thr-1", "turnId": TURN}
WEATHER = {"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}
MCP = {"type": "namespace", "name": "mcp__files", "tools": [{"type": "function", "name": "read"}]}


def delta(text: str, item: str = "msg-1", turn: str = TURN) -> Note:
    return "item/agentMessage/delta", {**SCOPE, "turnId": turn, "itemId": item, "delta": text}


def summary(text: str) -> Note:
    return "item/reasoning/summaryTextDelta", {**SCOPE, "itemId": "rs-1", "delta": text, "summaryIndex": 0}


def started(item: JSON) -> Note:
    return "item/started", {**SCOPE, "item": item}


def completed_item(item: JSON) -> Note:
    return "item/completed", {**SCOPE, "item": item}


def command_item(command: str) -> JSON:
    """A command Codex has started (item `cmd-1`)."""
    return {
        "type": "commandExecution",
        "id": "cmd-1",
        "command": command,
        "cwd": "/w",
        "status": "inProgress",
    }


def output(text: str, item: str = "cmd-1") -> Note:
    return "item/commandExecution/outputDelta", {**SCOPE, "itemId": item, "delta": text}


def usage(**last: int) -> Note:
    return "thread/tokenUsage/updated", {**SCOPE, "tokenUsage": {"last": last, "total": last}}


def turn_completed(status: str = "completed", error: Any = None, turn: str = TURN) -> Note:
    return "turn/completed", {
        "threadId": "thr-1",
        "turn": {"id": turn, "status": status, "items": [], "error": error},
    }


def agent_turn(tools: list[JSON] | None = None) -> Turn:
    """A turn with the options the Codex backend gives it (no reasoning blob, no cut marks)."""
    return make_turn(tools, reasoning_blob=None, mark_cuts=False)


def stream(notes: list[Note], tools: list[JSON] | None = None, turn_id: str | None = TURN) -> list[JSON]:
    """The validated events of one response read from these notifications, as the backend
    reads them (a raised failure ends the response `failed`)."""
    turn = agent_turn(tools)
    reader = AgentReader(turn, turn_id)
    events = turn.start()
    try:
        for method, params in notes:
            if reader.feed(method, params):
                break
    except GatewayError as exc:
        events += turn.fail(exc)
    events += turn.take()
    validate_stream(events)
    return events


def terminal(events: list[JSON]) -> JSON:
    last: JSON = events[-1]
    return last


def texts(events: list[JSON], kind: str) -> str:
    """The text of every output item of `kind` (message or reasoning), joined."""
    found = []
    for item in terminal(events)["response"]["output"]:
        if item["type"] == kind == "message":
            found += [part["text"] for part in item["content"]]
        elif item["type"] == kind == "reasoning":
            found += [part["text"] for part in item.get("summary") or item.get("content") or ()]
    return "".join(found)


# -- the answer


def test_an_agent_message_is_streamed_as_answer_text() -> None:
    events = stream([delta("Hel"), delta("lo."), turn_completed()])
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == ["Hel", "lo."]
    assert terminal(events)["type"] == "response.completed"
    assert texts(events, "message") == "Hello."


def test_two_agent_messages_in_a_row_are_one_answer_with_a_blank_line_between() -> None:
    events = stream([delta("First.", "msg-1"), delta("Second.", "msg-2"), turn_completed()])
    [message] = terminal(events)["response"]["output"]
    assert message["content"][0]["text"] == "First.\n\nSecond."


def test_the_agents_work_between_two_messages_is_reasoning_between_them() -> None:
    events = stream([delta("Looking.", "msg-1"), summary("The file is small."), delta("Done.", "msg-2"),
                     turn_completed()])  # fmt: skip
    kinds = [item["type"] for item in terminal(events)["response"]["output"]]
    assert kinds == ["message", "reasoning", "message"]
    assert texts(events, "reasoning") == "The file is small."


def test_reasoning_text_and_summary_parts_are_reasoning() -> None:
    notes: list[Note] = [
        summary("First thought."),
        ("item/reasoning/summaryPartAdded", {**SCOPE, "itemId": "rs-1", "summaryIndex": 1}),
        (
            "item/reasoning/textDelta",
            {**SCOPE, "itemId": "rs-1", "delta": "Second thought.", "contentIndex": 0},
        ),
        delta("Answer."),
        turn_completed(),
    ]
    events = stream(notes)
    assert texts(events, "reasoning") == "First thought.\n\nSecond thought."
    assert texts(events, "message") == "Answer."


# -- the agent's work, as reasoning


def test_a_command_shows_its_line_its_output_and_its_exit_code() -> None:
    command = command_item("ls -a")
    events = stream([
        started(command),
        output("a.txt\n"),
        output("b.txt\n"),
        completed_item({**command, "status": "completed", "aggregatedOutput": "a.txt\nb.txt\n", "exitCode": 0}),
        delta("Two files."),
        turn_completed(),
    ])  # fmt: skip
    work = texts(events, "reasoning")
    assert work == "\n\n$ ls -a\na.txt\nb.txt\n\n[exit code 0]\n"  # the output once, from its deltas
    assert texts(events, "message") == "Two files."


def test_a_commands_output_without_deltas_is_its_aggregated_output() -> None:
    command = command_item("false")
    events = stream([
        started(command),
        completed_item({**command, "status": "failed", "aggregatedOutput": "oops\n", "exitCode": 1}),
        turn_completed(),
    ])  # fmt: skip
    assert texts(events, "reasoning") == "\n\n$ false\noops\n\n[exit code 1]\n"


def test_a_command_that_did_not_run_says_how_it_ended() -> None:
    command = command_item("rm -rf /")
    events = stream([started(command), completed_item({**command, "status": "declined", "exitCode": None}),
                     turn_completed()])  # fmt: skip
    assert texts(events, "reasoning") == "\n\n$ rm -rf /\n\n[declined]\n"


@pytest.mark.parametrize(
    "pieces",
    [
        ["x" * 5000],  # one delta past the cap
        ["x" * 3000, "y" * 3000],  # the delta that crosses it
        ["x" * 2000, "y" * 2000, "z" * 10],  # deltas that fill it exactly, then one more
    ],
)
def test_a_commands_output_is_capped_and_says_it_was_cut(pieces: list[str]) -> None:
    command = command_item("yes")
    notes = [started(command), *(output(piece) for piece in pieces), output("more"),
             completed_item({**command, "status": "completed", "exitCode": 0}), turn_completed()]  # fmt: skip
    work = texts(events := stream(notes), "reasoning")
    shown = work.removeprefix("\n\n$ yes\n").split("\n[... output cut ...]\n")
    assert len(shown) == 2, work[-200:]  # cut once, and said so
    assert len(shown[0]) == 4000 and shown[1] == "\n[exit code 0]\n"
    assert terminal(events)["type"] == "response.completed"


def test_file_changes_searches_and_mcp_calls_are_named() -> None:
    changes = [{"path": "a.py", "kind": {"type": "add"}, "diff": "+x"},
               {"path": "b.py", "kind": {"type": "update", "move_path": None}, "diff": "-y"}]  # fmt: skip
    events = stream([
        completed_item({"type": "fileChange", "id": "fc-1", "changes": changes, "status": "completed"}),
        completed_item({"type": "webSearch", "id": "ws-1", "query": "oslo weather"}),
        completed_item({"type": "mcpToolCall", "id": "mcp-1", "server": "files", "tool": "read"}),
        turn_completed(),
    ])  # fmt: skip
    work = texts(events, "reasoning")
    assert "[add] a.py" in work and "[update] b.py" in work
    assert "[web search] oslo weather" in work and "[files] read" in work


# -- usage, other turns, the end


def test_usage_is_the_sum_of_the_turns_model_requests() -> None:
    events = stream([
        usage(inputTokens=100, cachedInputTokens=40, outputTokens=10, reasoningOutputTokens=4, totalTokens=110),
        usage(inputTokens=150, cachedInputTokens=100, outputTokens=20, reasoningOutputTokens=0, totalTokens=170),
        delta("Done."),
        turn_completed(),
    ])  # fmt: skip
    assert terminal(events)["response"]["usage"] == {
        "input_tokens": 250,
        "input_tokens_details": {"cached_tokens": 140},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 4},
        "total_tokens": 280,
    }


def test_notifications_of_another_turn_are_passed_over() -> None:
    other = "turn-0"
    events = stream([
        delta("old words", turn=other),
        ("thread/tokenUsage/updated", {**SCOPE, "turnId": other, "tokenUsage": {"last": {"inputTokens": 999}}}),
        turn_completed(turn=other),  # the earlier turn's end is not this one's
        delta("new words"),
        turn_completed(),
    ])  # fmt: skip
    assert texts(events, "message") == "new words"
    assert terminal(events)["response"]["usage"]["input_tokens"] == 0


def test_a_completed_turn_completes_the_response() -> None:
    turn = agent_turn()
    reader = AgentReader(turn, TURN)
    turn.start()
    assert reader.feed(*delta("Hi.")) is False
    assert reader.feed(*turn_completed()) is True
    assert turn.done and turn.failure is None


# -- failures


@pytest.mark.parametrize(
    ("info", "code"),
    [
        ("contextWindowExceeded", Code.CONTEXT_LENGTH_EXCEEDED),
        ("usageLimitExceeded", Code.INSUFFICIENT_QUOTA),
        ("rateLimitExceeded", Code.RATE_LIMIT_EXCEEDED),
        ("serverOverloaded", Code.SERVER_IS_OVERLOADED),
        ("unauthorized", Code.UPSTREAM_AUTH),
        ("badRequest", Code.INVALID_REQUEST),
        ("modelNotFound", Code.MODEL_NOT_FOUND),
        ("internalServerError", Code.UPSTREAM_ERROR),
        ("other", Code.UPSTREAM_ERROR),
        ("bioPolicy", Code.UPSTREAM_ERROR),  # new in 0.171: read as any error it does not name
        ({"httpConnectionFailed": {"httpStatusCode": 502}}, Code.UPSTREAM_ERROR),
        (None, Code.UPSTREAM_ERROR),
    ],
)
def test_a_failed_turn_fails_the_response_with_the_code_of_its_error(info: Any, code: str) -> None:
    events = stream(
        [delta("Partial"), turn_completed("failed", {"message": "it broke", "codexErrorInfo": info})]
    )
    end = terminal(events)
    assert end["type"] == "response.failed"
    assert end["response"]["error"]["code"] == code
    assert agent_error({"message": "m", "codexErrorInfo": info}).code == code


def test_a_failed_turn_without_an_error_takes_the_last_final_error_notification() -> None:
    retried = {"message": "retrying", "codexErrorInfo": "serverOverloaded"}
    final = {"message": "too long", "codexErrorInfo": "contextWindowExceeded"}
    events = stream([
        ("error", {**SCOPE, "willRetry": True, "error": retried}),  # Codex retries this one itself
        ("error", {**SCOPE, "willRetry": False, "error": final}),
        turn_completed("failed"),
    ])  # fmt: skip
    assert terminal(events)["response"]["error"]["code"] == Code.CONTEXT_LENGTH_EXCEEDED


def test_an_error_codex_retries_does_not_end_the_response() -> None:
    retried = {"message": "retrying", "codexErrorInfo": "serverOverloaded"}
    events = stream(
        [("error", {**SCOPE, "willRetry": True, "error": retried}), delta("Fine."), turn_completed()]
    )
    assert terminal(events)["type"] == "response.completed"


def test_an_interrupted_turn_fails_the_response() -> None:
    events = stream([delta("Half an ans"), turn_completed("interrupted")])
    end = terminal(events)
    assert end["type"] == "response.failed"
    assert end["response"]["error"]["code"] == Code.UPSTREAM_ERROR


# -- the client's own tools


def test_a_dynamic_tool_call_is_a_function_call_of_the_response() -> None:
    turn = agent_turn([WEATHER, MCP])
    reader = AgentReader(turn, TURN)
    events = turn.start()
    reader.feed(*delta("Checking."))
    reader.feed(*usage(inputTokens=30, outputTokens=5, totalTokens=35))
    reader.tool_call("call_1", "get_weather", None, {"city": "Oslo"})
    reader.tool_call("call_2", "mcp__files__read", None, '{"path":"a"}')  # the flat name it was offered by
    reader.finish("tool_calls")
    events += turn.take()
    validate_stream(events)
    end = terminal(events)
    assert end["type"] == "response.completed"
    calls = [item for item in end["response"]["output"] if item["type"] == "function_call"]
    assert [(c["call_id"], c["name"], c.get("namespace"), c["arguments"]) for c in calls] == [
        ("call_1", "get_weather", None, '{"city":"Oslo"}'),
        ("call_2", "read", "mcp__files", '{"path":"a"}'),
    ]
    assert end["response"]["usage"]["total_tokens"] == 35
    status, body = chat_completion(end)
    assert status == 200 and body["choices"][0]["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in body["choices"][0]["message"]["tool_calls"]] == [
        "get_weather",
        "read",
    ]
