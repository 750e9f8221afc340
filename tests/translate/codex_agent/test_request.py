"""The Codex backend's reading of a request (translate/codex_agent/request.py): which thread it
continues (by the chain hash of its history, whichever face the client speaks), what the items
after that thread's history ask of it, what a new thread is seeded with, and what Codex cannot
be given. Pure: the answers that get filed are made by a real turn fed by the real reader."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from codexgate.errors import Code, InvalidRequest
from codexgate.translate.chat_face.chunks import chat_completion
from codexgate.translate.chat_face.request import parse_chat_request
from codexgate.translate.codex_agent.events import AgentReader
from codexgate.translate.codex_agent.request import (
    CONTINUE_AFTER_RESULTS,
    LATE_INSTRUCTIONS,
    chain_of,
    client_tool_name,
    dynamic_name,
    dynamic_tools,
    follow_up,
    history_items,
    opening,
    output_schema,
    read_agent_ask,
    tool_result,
)
from codexgate.wire.responses import Item, ResponsesRequest, parse_request
from tests.support.openresponses import validate_stream
from tests.support.pdfs import text_pdf
from tests.support.turns import make_turn

JSON = dict[str, Any]
MODEL = "gpt-agent"  # the upstream model a route names
TURN = "turn-1"
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather.", "parameters": PARAMETERS}
WEATHER_CHAT = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The weather.", "parameters": PARAMETERS},
}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files."}
MCP = {
    "type": "namespace",
    "name": "mcp__files",
    "description": "Files.",
    "tools": [{"type": "function", "name": "read", "parameters": {"type": "object", "properties": {}}}],
}
IMAGE = "data:image/png;base64,iVBORw0KGgo="


def chat(messages: list[JSON], tools: list[JSON] | None = None, **fields: Any) -> ResponsesRequest:
    """What the chat face makes of a /v1/chat/completions body."""
    body = {"model": "codex-agent", "messages": messages, "tools": [WEATHER_CHAT] if tools is None else tools}
    return parse_chat_request({**body, **fields}).request


def responses(items: list[Any], tools: list[JSON] | None = None, **fields: Any) -> ResponsesRequest:
    """What the Responses face makes of a /v1/responses body."""
    body = {"model": "codex-agent", "input": items, "tools": [WEATHER] if tools is None else tools}
    return parse_request({**body, **fields})


# -- the agent's answer, made as the backend makes it


def delta(text: str, item: str = "msg-1") -> tuple[str, JSON]:
    return "item/agentMessage/delta", {"threadId": "thr-1", "turnId": TURN, "itemId": item, "delta": text}


def reasoning(text: str) -> tuple[str, JSON]:
    return "item/reasoning/summaryTextDelta", {
        "threadId": "thr-1",
        "turnId": TURN,
        "itemId": "rs",
        "delta": text,
    }


COMPLETED = (
    "turn/completed",
    {"threadId": "thr-1", "turn": {"id": TURN, "status": "completed", "items": []}},
)


def answer(
    req: ResponsesRequest, notes: list[tuple[str, JSON]], calls: tuple[tuple[str, str, Any], ...] = ()
) -> JSON:
    """The terminal event of the response the Codex backend streams for these notifications
    (then these client tool calls: call id, tool, arguments), validated."""
    turn = make_turn(body=_body_of(req), reasoning_blob=None, mark_cuts=False)
    reader = AgentReader(turn, TURN)
    events = turn.start()
    for method, params in notes:
        reader.feed(method, params)
    for call_id, tool, arguments in calls:
        reader.tool_call(call_id, tool, None, arguments)
    if calls:
        reader.finish("tool_calls")
    events += turn.take()
    validate_stream(events)
    terminal: JSON = events[-1]
    assert terminal["type"] == "response.completed"
    return terminal


def _body_of(req: ResponsesRequest) -> JSON:
    return {"model": req.model, "input": req.input, "tools": req.tools}


def output_of(terminal: JSON) -> list[Item]:
    items: list[Item] = terminal["response"]["output"]
    return items


def filed_key(req: ResponsesRequest, terminal: JSON) -> int:
    """The key the backend files its thread under after this answer (backends/codex/backend.py)."""
    ask = read_agent_ask(req, MODEL)
    output = [item for item in output_of(terminal) if item.get("type") != "reasoning"]
    return chain_of(ask.root, [*req.input, *output], ask.opening)[-1][1]


def found(req: ResponsesRequest, key: int, model: str = MODEL) -> int | None:
    """How many of the request's items the thread filed under `key` knows, or None when the
    request's chain does not pass through it (AgentThreads.find, longest prefix first)."""
    for known, hashed in reversed(read_agent_ask(req, model).chain):
        if hashed == key:
            return known
    return None


def chat_message(terminal: JSON) -> JSON:
    """The assistant message a chat client gets, and sends back, for this answer."""
    status, body = chat_completion(terminal)
    assert status == 200
    message: JSON = body["choices"][0]["message"]
    return {k: v for k, v in message.items() if v is not None}


TWO_MESSAGES = [delta("First part.\n"), reasoning("checking"), delta("Second part.  ", "msg-2"), COMPLETED]


# -- which thread a request continues


def test_a_chat_conversation_finds_the_thread_its_answer_was_filed_under() -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    first = chat(messages)
    terminal = answer(first, TWO_MESSAGES)
    said = chat_message(terminal)
    assert said["content"] == "First part.\n\n\nSecond part.  "  # two messages joined by a blank line
    said["content"] = said["content"].strip()  # a client that trims the answer
    nxt = chat([*messages, said, {"role": "user", "content": "more"}])
    known = found(nxt, filed_key(first, terminal))
    assert known is not None and nxt.input[known:] == [user("more")]  # all but the new question is known
    asked = follow_up(nxt.input[known:], ())
    assert asked is not None and asked.turn == [{"type": "text", "text": "more", "text_elements": []}]


def test_a_responses_conversation_finds_the_same_thread_with_or_without_its_reasoning() -> None:
    first = responses([{"role": "user", "content": "hi"}], instructions="Be brief.")
    terminal = answer(first, TWO_MESSAGES)
    output = output_of(terminal)
    assert [item["type"] for item in output] == ["message", "reasoning", "message"]
    key = filed_key(first, terminal)
    asked = {"role": "user", "content": "more"}
    with_reasoning = responses([*first.input, *output, asked], instructions="Be brief.")
    without = responses(
        [*first.input, *(i for i in output if i["type"] != "reasoning"), asked], instructions="Be brief."
    )
    assert found(with_reasoning, key) == 4
    assert found(without, key) == 3


def test_one_conversation_finds_its_thread_whichever_face_continues_it() -> None:
    """The same answer files the same key from either face, and the next request of either
    face finds it: a client may switch faces mid-conversation."""
    by_chat = chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    by_responses = responses([{"role": "user", "content": "hi"}], instructions="Be brief.")
    from_chat, from_responses = answer(by_chat, TWO_MESSAGES), answer(by_responses, TWO_MESSAGES)
    key = filed_key(by_chat, from_chat)
    assert filed_key(by_responses, from_responses) == key
    asked = {"role": "user", "content": "more"}
    next_chat = chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                      chat_message(from_responses), asked])  # fmt: skip
    next_responses = responses([*by_chat.input[1:], *output_of(from_chat), asked], instructions="Be brief.")
    assert found(next_chat, key) == len(next_chat.input) - 1
    assert found(next_responses, key) == len(next_responses.input) - 1


def test_a_tool_call_answer_is_found_by_the_request_carrying_its_result() -> None:
    messages: list[JSON] = [{"role": "user", "content": "weather in Oslo?"}]
    first = chat(messages)
    terminal = answer(first, [delta("Let me look.")], calls=(("call_7", "get_weather", {"city": "Oslo"}),))
    said = chat_message(terminal)
    assert said["tool_calls"][0]["id"] == "call_7"
    nxt = chat([*messages, said, {"role": "tool", "tool_call_id": "call_7", "content": "sunny"}])
    known = found(nxt, filed_key(first, terminal))
    assert known == 3  # the question, the words before the call, the call
    asked = follow_up(nxt.input[3:], ["call_7"])
    assert asked is not None and list(asked.results) == ["call_7"] and asked.turn == []
    # the Responses face, with the call items as the response gave them
    again = responses([*first.input, *output_of(terminal), {"type": "function_call_output", "call_id": "call_7",
                                                            "output": "sunny"}])  # fmt: skip
    assert found(again, filed_key(first, terminal)) == 3


FIRST = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("changed", "model"),
    [
        ({"input": [{"role": "user", "content": "hello"}]}, MODEL),  # an earlier message changed
        ({"tools": [WEATHER, PATCH]}, MODEL),  # another tool list
        ({"tools": [{**WEATHER, "description": "Weather."}]}, MODEL),  # a tool changed
        ({"instructions": "Be verbose."}, MODEL),  # other instructions
        ({"tool_choice": "none"}, MODEL),  # no tools offered any more
        ({}, "gpt-other"),  # another model
    ],
)
def test_a_different_conversation_finds_no_thread(changed: JSON, model: str) -> None:
    first = responses(FIRST, instructions="Be brief.")
    terminal = answer(first, [delta("Hello."), COMPLETED])
    fields: JSON = {"instructions": "Be brief.", **changed}
    earlier = fields.pop("input", FIRST)
    nxt = responses([*earlier, *output_of(terminal), {"role": "user", "content": "more"}], **fields)
    assert found(nxt, filed_key(first, terminal), model) is None


def test_whitespace_at_the_ends_of_an_answer_is_not_part_of_its_key() -> None:
    first = responses(FIRST)
    terminal = answer(first, [delta("\n  Hello.\n\n"), COMPLETED])
    trimmed = {"role": "assistant", "content": [{"type": "output_text", "text": "Hello."}]}
    inner = {"role": "assistant", "content": [{"type": "output_text", "text": "Hel lo."}]}
    assert found(responses([*FIRST, trimmed]), filed_key(first, terminal)) == 2  # all of it
    assert found(responses([*FIRST, inner]), filed_key(first, terminal)) is None


def test_the_chain_starts_after_the_leading_instructions() -> None:
    req = chat([{"role": "system", "content": "A."}, {"role": "developer", "content": "B."},
                {"role": "user", "content": "hi"}])  # fmt: skip
    ask = read_agent_ask(req, MODEL)
    assert ask.instructions == "A.\n\nB." and ask.opening == 2
    assert [known for known, _ in ask.chain] == [2, 3]


# -- what the items after a thread's history ask of it


def output(call_id: str, text: str = "ok") -> JSON:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def user(text: str) -> JSON:
    return {"type": "message", "role": "user", "content": text}


def test_follow_up_answers_the_calls_a_turn_waits_on() -> None:
    asked = follow_up([output("c1"), {"type": "reasoning", "summary": []}, output("c2")], ["c1", "c2", "c3"])
    assert asked is not None
    assert list(asked.results) == ["c1", "c2"] and asked.turn == []


def test_follow_up_results_then_a_user_message_also_start_a_turn() -> None:
    image = {"type": "input_image", "image_url": IMAGE}
    late = {"type": "message", "role": "developer", "content": "Use metric units."}
    msg = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}, image]}
    asked = follow_up([output("c1"), late, msg], ["c1"])
    assert asked is not None and list(asked.results) == ["c1"]
    assert asked.turn == [
        {"type": "text", "text": LATE_INSTRUCTIONS + "Use metric units.", "text_elements": []},
        {"type": "text", "text": "and now?", "text_elements": []},
        {"type": "image", "url": IMAGE},
    ]


@pytest.mark.parametrize(
    "items",
    [
        [],  # nothing new
        [{"type": "reasoning", "summary": []}],  # nothing a client keeps
        [output("c9")],  # a result for a call the thread does not wait on
        [user("hi"), output("c1")],  # a result after the user spoke
        [{"type": "message", "role": "assistant", "content": "I said this."}],  # words put in its mouth
        [{"type": "function_call", "call_id": "c5", "name": "get_weather", "arguments": "{}"}],
        [output("c1"), {"type": "function_call", "call_id": "c5", "name": "get_weather", "arguments": "{}"}],
    ],
)
def test_follow_up_is_none_for_anything_else(items: list[JSON]) -> None:
    assert follow_up(items, ["c1"]) is None


# -- a new thread: its history and its first turn


def test_opening_injects_the_history_as_items_codex_reads() -> None:
    items: list[JSON] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "read it"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Reading."}]},
        {"type": "function_call", "call_id": "c1", "namespace": "mcp__files", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_text", "text": "line 1\n"}, {"type": "input_text", "text": "line 2"}]},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done!"},
        {"role": "user", "content": "look at this"},
        {"role": "user", "content": [{"type": "input_text", "text": "and this"},
                                     {"type": "input_image", "image_url": IMAGE}]},
    ]  # fmt: skip
    req = responses(items, tools=[MCP, PATCH])
    ask = read_agent_ask(req, MODEL)
    history, turn = opening(ask, req.input)
    assert history == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read it"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Reading."}]},
        {"type": "function_call", "call_id": "c1", "name": "mcp__files__read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "line 1\nline 2"},
        {"type": "function_call", "call_id": "c2", "name": "client_apply_patch",
         "arguments": '{"input":"*** Begin Patch"}'},
        {"type": "function_call_output", "call_id": "c2", "output": "Done!"},
    ]  # fmt: skip
    assert turn == [
        {"type": "text", "text": "look at this", "text_elements": []},
        {"type": "text", "text": "and this", "text_elements": []},
        {"type": "image", "url": IMAGE},
    ]
    # the names the calls are replayed under are those the tools are offered by
    assert {tool["name"] for tool in dynamic_tools(ask, req)} == {"mcp__files__read", "client_apply_patch"}


def test_opening_after_tool_results_asks_the_model_to_go_on() -> None:
    items: list[JSON] = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        output("c1", "sunny"),
    ]
    req = responses(items)
    history, turn = opening(read_agent_ask(req, MODEL), req.input)
    assert history[-1] == {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    assert len(history) == 3
    assert turn == [{"type": "text", "text": CONTINUE_AFTER_RESULTS, "text_elements": []}]


def test_every_output_replayed_answers_a_call_replayed_before_it() -> None:
    """A model provider refuses an output whose call it never saw: a local shell call the
    gateway gave the client (a `local_shell_call` item) is replayed with its output."""
    shell = {"type": "local_shell_call", "id": "ls_1", "call_id": "c1", "status": "completed",
             "action": {"type": "exec", "command": ["ls"], "env": {}}}  # fmt: skip
    history = history_items([shell, {"type": "local_shell_call_output", "call_id": "c1", "output": "a.txt"}])
    assert history == [
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "client_local_shell",  # Codex has a local_shell of its own
            "arguments": '{"command":["ls"],"env":{}}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
    ]
    calls = {i["call_id"] for i in history if i["type"] == "function_call"}
    assert all(i["call_id"] in calls for i in history if i["type"] == "function_call_output")


def test_history_items_drop_what_another_server_produced() -> None:
    items = [
        {"type": "reasoning", "summary": []},
        {"type": "web_search_call", "id": "ws", "status": "completed"},
    ]
    assert history_items(items) == []


def test_dynamic_tools_offer_the_clients_tools_under_flat_names() -> None:
    req = responses(FIRST, tools=[WEATHER, MCP, PATCH])
    tools = dynamic_tools(read_agent_ask(req, MODEL), req)
    by_name = {tool["name"]: tool for tool in tools}
    # A client tool named like one of Codex's own would be hidden by it: it gets a prefix.
    assert set(by_name) == {"get_weather", "mcp__files__read", "client_apply_patch"}
    assert by_name["get_weather"] == {"type": "function", "name": "get_weather", "description": "The weather.",
                                      "inputSchema": PARAMETERS}  # fmt: skip
    assert by_name["client_apply_patch"]["inputSchema"]["required"] == ["input"]  # a custom tool's raw input
    none = responses(FIRST, tools=[WEATHER], tool_choice="none")
    assert dynamic_tools(read_agent_ask(none, MODEL), none) == []


def test_a_prefixed_tool_is_resolved_back_to_the_clients_own_name() -> None:
    assert [dynamic_name(n) for n in ("apply_patch", "exec_command", "get_weather")] == [
        "client_apply_patch",
        "client_exec_command",
        "get_weather",
    ]
    for name in ("apply_patch", "exec_command", "get_weather", "client_report", "client_"):
        assert client_tool_name(dynamic_name(name)) == name


def test_a_tool_search_result_answers_its_call_with_the_tools_found() -> None:
    found = [{"type": "function", "name": "deploy"}]
    result = {"type": "tool_search_output", "call_id": "c9", "status": "completed", "tools": found}
    assert follow_up([result], ["c9"]) is not None
    assert tool_result(result) == {"contentItems": [{"type": "inputText", "text": '[{"type":"function","name":"deploy"}]'}],
                                   "success": True}  # fmt: skip


# -- what Codex cannot honour


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", 0.2), ("top_p", 0.9), ("seed", 7), ("frequency_penalty", 0.5), ("presence_penalty", 0.1),
     ("logit_bias", {"50256": -100})],
)  # fmt: skip
def test_sampling_codex_chooses_itself_is_refused_naming_the_field(field: str, value: Any) -> None:
    req = chat([{"role": "user", "content": "hi"}], **{field: value})
    with pytest.raises(InvalidRequest) as caught:
        read_agent_ask(req, MODEL)
    assert (caught.value.param, caught.value.code, caught.value.status) == (field, Code.INVALID_REQUEST, 400)


@pytest.mark.parametrize(
    "choice",
    [
        "required",
        {"type": "function", "name": "get_weather"},
        {"type": "custom", "name": "apply_patch"},
        {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]},
    ],
)
def test_a_tool_choice_that_forces_a_call_is_refused(choice: Any) -> None:
    req = responses(FIRST, tools=[WEATHER, PATCH], tool_choice=choice)
    with pytest.raises(InvalidRequest) as caught:
        read_agent_ask(req, MODEL)
    assert caught.value.param == "tool_choice"


@pytest.mark.parametrize(
    "choice",
    [
        "auto",
        "none",
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]},
    ],
)
def test_a_tool_choice_that_leaves_the_agent_free_is_accepted(choice: Any) -> None:
    read_agent_ask(responses(FIRST, tool_choice=choice), MODEL)


# -- tool results and output schemas


def test_a_string_result_is_one_text() -> None:
    assert tool_result(output("c1", "sunny")) == {"contentItems": [{"type": "inputText", "text": "sunny"}],
                                                  "success": True}  # fmt: skip


def test_a_result_of_parts_keeps_its_texts_and_images() -> None:
    parts = [{"type": "input_text", "text": "a chart:"}, {"type": "input_image", "image_url": IMAGE},
             {"type": "input_text", "text": "(rendered)"}]  # fmt: skip
    assert tool_result({"type": "function_call_output", "call_id": "c1", "output": parts}) == {
        "contentItems": [
            {"type": "inputText", "text": "a chart:"},
            {"type": "inputImage", "imageUrl": IMAGE},
            {"type": "inputText", "text": "(rendered)"},
        ],
        "success": True,
    }


def test_a_chat_tool_message_of_text_parts_is_its_texts() -> None:
    req = chat([{"role": "user", "content": "hi"},
                {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                      "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sun"}]}])  # fmt: skip
    assert tool_result(req.input[-1])["contentItems"] == [{"type": "inputText", "text": "sun"}]


SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def test_output_schema_of_each_text_format() -> None:
    as_schema = {"format": {"type": "json_schema", "name": "n", "schema": SCHEMA}}
    assert output_schema(responses(FIRST, text=as_schema)) == SCHEMA
    assert output_schema(responses(FIRST, text={"format": {"type": "json_object"}})) == {"type": "object"}
    assert output_schema(responses(FIRST, text={"format": {"type": "text"}})) is None
    assert output_schema(responses(FIRST)) is None
    by_chat = chat(
        FIRST, response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}
    )
    assert output_schema(by_chat) == SCHEMA


# -- files and content parts: Codex takes text and images, so a file is its text


def file_part(text: str, filename: str = "notes.txt") -> JSON:
    encoded = base64.b64encode(text.encode()).decode()
    return {"type": "input_file", "filename": filename, "file_data": f"data:text/plain;base64,{encoded}"}


def test_files_reach_codex_as_text_in_the_turn_the_history_and_tool_results() -> None:
    pdf = "data:application/pdf;base64," + base64.b64encode(text_pdf([["Signed in 1648."]])).decode()
    items: list[JSON] = [
        {"role": "user", "content": [{"type": "input_text", "text": "keep"}, file_part("old notes")]},
        {"role": "assistant", "content": "Kept."},
        {"role": "user", "content": [{"type": "input_text", "text": "when?"},
                                     {"type": "input_file", "filename": "h.pdf", "file_data": pdf}]},
    ]  # fmt: skip
    req = responses(items)
    history, turn = opening(read_agent_ask(req, MODEL), req.input)
    assert history[0]["content"] == [
        {"type": "input_text", "text": "keep"},
        {"type": "input_text", "text": "--- file: notes.txt ---\nold notes\n--- end of notes.txt ---"},
    ]
    assert turn == [
        {
            "type": "text",
            "text": "when?\n--- file: h.pdf (PDF, 1 page) ---\n[page 1]\nSigned in 1648.\n--- end of h.pdf ---",
            "text_elements": [],
        }
    ]
    result = {"type": "function_call_output", "call_id": "c1", "output": [file_part("a,b", "t.csv")]}
    assert tool_result(result, "input[4].output")["contentItems"] == [
        {"type": "inputText", "text": "--- file: t.csv ---\na,b\n--- end of t.csv ---"}
    ]


def test_a_file_that_cannot_be_read_is_refused_naming_its_place_in_the_request() -> None:
    items: list[JSON] = [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1",
         "output": [{"type": "input_file", "filename": "a.zip", "file_data": "data:application/zip;base64,UEsDBA=="}]},
    ]  # fmt: skip
    asked = follow_up(items[2:], ["c1"], 2)
    assert asked is not None
    with pytest.raises(InvalidRequest) as info:
        tool_result(asked.results["c1"], asked.where["c1"])
    assert info.value.param == "input[2].output[0]" and info.value.code == Code.UNSUPPORTED_FILE


@pytest.mark.parametrize(
    "item,param",
    [
        ({"role": "user", "content": [{"type": "input_txt", "text": "typo"}]}, "input[1].content[0].type"),
        ({"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}, "input[1].content[0]"),
        (
            {"role": "assistant", "content": [{"type": "input_image", "image_url": IMAGE}]},
            "input[1].content[0]",
        ),
        (
            {"type": "function_call_output", "call_id": "c", "output": [{"text": "no type"}]},
            "input[1].output[0].type",
        ),
    ],
)
def test_a_part_codex_would_not_get_is_refused_before_anything_is_sent(item: JSON, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        read_agent_ask(responses([{"role": "user", "content": "hi"}, item]), MODEL)
    assert info.value.param == param
