"""ChatStreamTranslator on recorded upstream streams (tests/fixtures/chat_streams) and on
synthetic chunks: the Responses stream it produces is valid, complete and independent of how the
bytes were split, and says what the upstream said."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from codexgate.backends.chat.backend import ChatBackend
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.http.transport import HttpRequest
from codexgate.errors import GatewayError, UpstreamStreamCut
from codexgate.translate.catalogue import catalogue_of
from codexgate.translate.chat_upstream.stream import ChatStreamTranslator, PromptProgress
from codexgate.translate.chat_upstream.tools import chat_tools
from codexgate.translate.cuts import cut_ids
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.reasoning import decode_reasoning
from codexgate.wire.responses import parse_request
from tests.support.openresponses import TERMINAL_EVENT_TYPES, as_sent, validate_stream
from tests.support.turns import chat_translator, fold, sse_of, translate_sse

Event = dict[str, Any]

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "chat_streams"
FIXTURES = sorted(p.name for p in FIXTURES_DIR.glob("*.sse"))
SPLITS = [1, 13, None]  # None: the whole body in one piece
INPUT_ESTIMATE = 250  # what the backend would pass as input_token_estimate

# Tools a Codex session advertises, enough to resolve every name the fixtures call.
CODEX_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "exec_command",
        "description": "Run a command.",
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string"}, "workdir": {"type": "string"}},
            "required": ["cmd"],
        },
    },
    {
        "type": "function",
        "name": "file_write",
        "description": "Write a file.",
        "parameters": {
            "type": "object",
            "properties": {"filePath": {"type": "string"}, "content": {"type": "string"}},
        },
    },
]

APPLY_PATCH_GRAMMAR = (Path(__file__).resolve().parents[2] / "fixtures" / "apply_patch.lark").read_text()

APPLY_PATCH_TOOL: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files.",
    "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR},
}

NAMESPACE_TOOL: dict[str, Any] = {
    "type": "namespace",
    "name": "mcp__srv",
    "description": "An MCP server.",
    "tools": [
        {
            "type": "function",
            "name": "do_it",
            "description": "Does it.",
            "parameters": {"type": "object", "properties": {"what": {"type": "string"}}},
        }
    ],
}


# -- harness


def make_translator(
    tools: list[dict[str, Any]] | None = None, *, input_estimate: int = INPUT_ESTIMATE, **options: Any
) -> ChatStreamTranslator:
    tools = CODEX_TOOLS if tools is None else tools
    return chat_translator(tools, input_token_estimate=input_estimate, **options)


def translate_bytes(
    data: bytes, split: int | None = None, translator: ChatStreamTranslator | None = None
) -> list[Event]:
    """decode -> orjson.loads -> feed, the way the backend drives the translator (see
    tests/support/turns.py translate_sse)."""
    return translate_sse(translator or make_translator(), pieces(data, split))


def translate_chunks(
    chunks: Iterable[Any], translator: ChatStreamTranslator | None = None, *, done: bool = True
) -> list[Event]:
    """Synthetic chunk objects, through the same wire path."""
    return translate_bytes(sse_of(chunks, done), None, translator)


def pieces(data: bytes, size: int | None) -> Iterator[bytes]:
    if size is None:
        yield data
        return
    for i in range(0, len(data), size):
        yield data[i : i + size]


def run_fixture(name: str, split: int | None = None) -> list[Event]:
    """The fixture's events as a client reads them (encoded parts, orjson.Fragment, decoded)."""
    events: list[Event] = as_sent(translate_bytes((FIXTURES_DIR / name).read_bytes(), split))
    return events


_CACHE: dict[str, list[Event]] = {}


def events_of(name: str) -> list[Event]:
    if name not in _CACHE:
        _CACHE[name] = run_fixture(name)
    return _CACHE[name]


def terminal(events: list[Event]) -> Event:
    assert events[-1]["type"] in TERMINAL_EVENT_TYPES
    return events[-1]


def output(events: list[Event]) -> list[dict[str, Any]]:
    return terminal(events)["response"]["output"]


def items_of(events: list[Event], kind: str) -> list[dict[str, Any]]:
    """The model's items of one kind (a failed response's cut marker is checked on its own)."""
    return [item for item in output(events) if item["type"] == kind and not cut_ids([item])]


def message_text(events: list[Event]) -> str:
    return "".join(part["text"] for item in items_of(events, "message") for part in item["content"])


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [choice],
        **extra,
    }


def call_delta(
    index: int | None, *, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> dict[str, Any]:
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    call: dict[str, Any] = {"function": function}
    if index is not None:
        call["index"] = index
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    return {"tool_calls": [call]}


# -- what each recorded stream must come out as

TEXT: dict[str, str] = {
    "openai_text.sse": "Hello! How can I help you today?",
    "openai_parallel_tools.sse": "",
    "openai_length.sse": "Here is a summary of the changes:\n\n1. The parser now handles quoted strings",
    "openai_midstream_error.sse": 'The question "',
    "openai_cut_mid_event.sse": "I'll start by listing the files",
    "vllm_reasoning.sse": "\n\nThe capital of France is **Paris**.",
    "vllm_tool_calls.sse": "\n\n",
    "vllm_cut.sse": "Let me check the build first.",
    "llamacpp_reasoning.sse": "17 × 23 = **391**.",
    "llamacpp_legacy_usage.sse": "Goodbye! I hope we get to talk again soon.",
    "llamacpp_python_crlf.sse": (
        " Sure, here's a haiku:\n\nCode compiles clean,\n"
        "tests pass in quiet green rows,\nship it before lunch."
    ),
    "ollama_tool_calls.sse": "",
    "ollama_parallel_index0.sse": "",
    "deepseek_reasoner.sse": "Hello! 😊 How can I help you today?",
    "openrouter_reasoning.sse": "A haiku is a three-line Japanese poem of 5, 7 and 5 syllables.",
    "openrouter_midstream_error.sse": "Here's the plan: first",
}

REASONING: dict[str, str] = {
    "vllm_reasoning.sse": "\nOkay, the user is asking for the capital of France. That's Paris.\n",
    "vllm_tool_calls.sse": "\nI should search the source tree for TODO markers with ripgrep.\n",
    "llamacpp_reasoning.sse": "The user wants 17 times 23. 17*20 = 340, 17*3 = 51, so 391.",
    "ollama_tool_calls.sse": "User wants the files listed. Need to call exec_command.",
    "deepseek_reasoner.sse": "Okay, the user just said hello. I should greet them back warmly.",
    "openrouter_reasoning.sse": '\nOkay, the user asked, "What is a haiku?"',
}

# (call_id, name, arguments) in output order; only the calls that completed.
CALLS: dict[str, list[tuple[str, str, str]]] = {
    "openai_parallel_tools.sse": [
        ("call_8Xh2kq4uVJmYbq3Tz1cWn0aF", "exec_command", '{"cmd":"git status --short"}'),
        ("call_Qm7RZf0bN1sLw2dE9kYpX4tJ", "exec_command", '{"cmd":"git log --oneline -5"}'),
    ],
    "vllm_tool_calls.sse": [
        (
            "chatcmpl-tool-9f1c2e7a4b6d8035",
            "exec_command",
            '{"cmd": "rg -n TODO src/", "workdir": "/work/repo"}',
        ),
    ],
    "ollama_tool_calls.sse": [
        ("call_qboyy8mx", "exec_command", '{"cmd":"ls -la","workdir":"/work/repo"}'),
    ],
    "ollama_parallel_index0.sse": [
        ("call_zypd5okh", "file_write", '{"content":"print(\\"hello\\")","filePath":"hello.py"}'),
        ("call_oqp1e2a1", "file_write", '{"content":"print(\\"world\\")","filePath":"world.py"}'),
    ],
}


def usage(inp: int, out: int, total: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "input_tokens": inp,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total,
    }


USAGE: dict[str, dict[str, Any]] = {
    "openai_text.sse": usage(19, 10, 29),
    "openai_parallel_tools.sse": usage(2345, 58, 2403, cached=2048),
    "openai_length.sse": usage(412, 16, 428),
    "vllm_reasoning.sse": usage(28, 30, 58, cached=16),
    "vllm_tool_calls.sse": usage(1830, 64, 1894),
    "llamacpp_reasoning.sse": usage(36, 41, 77, cached=21),
    "llamacpp_legacy_usage.sse": usage(47, 13, 60),
    "ollama_tool_calls.sse": usage(141, 29, 170),
    "ollama_parallel_index0.sse": usage(187, 62, 249),
    "deepseek_reasoner.sse": usage(1290, 31, 1321, cached=1280, reasoning=18),
    "openrouter_reasoning.sse": usage(12, 96, 108, reasoning=71),
}

# terminal type, error code or incomplete reason
TERMINAL: dict[str, tuple[str, str | None]] = {
    **{name: ("response.completed", None) for name in FIXTURES},
    "openai_length.sse": ("response.incomplete", "max_output_tokens"),
    "openai_midstream_error.sse": ("response.failed", "upstream_error"),
    "openai_cut_mid_event.sse": ("response.failed", "upstream_stream_cut"),
    "vllm_cut.sse": ("response.failed", "upstream_stream_cut"),
    "openrouter_midstream_error.sse": ("response.failed", "upstream_error"),
}


def param(name: str, *marks: pytest.MarkDecorator) -> Any:
    return pytest.param(name, marks=marks, id=name.removesuffix(".sse"))


def params(names: Iterable[str], bugs: Mapping[str, pytest.MarkDecorator] | None = None) -> list[Any]:
    bugs = bugs or {}
    return [param(n, bugs[n]) if n in bugs else param(n) for n in names]


# -- every fixture


def test_every_fixture_has_expectations() -> None:
    assert set(TEXT) == set(FIXTURES)
    assert set(TERMINAL) == set(FIXTURES)


@pytest.mark.parametrize("name", params(FIXTURES))
def test_split_does_not_change_the_events(name: str) -> None:
    whole = run_fixture(name, None)
    for split in SPLITS:
        assert run_fixture(name, split) == whole, f"split {split}"


@pytest.mark.parametrize("name", params(FIXTURES))
def test_stream_is_valid_open_responses(name: str) -> None:
    for split in SPLITS:
        validate_stream(run_fixture(name, split))


@pytest.mark.parametrize("name", params(FIXTURES))
def test_terminal_event(name: str) -> None:
    events = events_of(name)
    kind, detail = TERMINAL[name]
    last = terminal(events)
    assert last["type"] == kind
    assert [e["type"] for e in events].count(kind) == 1
    response = last["response"]
    if kind == "response.completed":
        assert response["status"] == "completed"
        assert response["error"] is None
        assert all(item.get("status", "completed") == "completed" for item in response["output"])
    elif kind == "response.incomplete":
        assert response["incomplete_details"] == {"reason": detail}
    else:
        assert response["error"]["code"] == detail
        assert not any(e["type"] == "response.completed" for e in events)


@pytest.mark.parametrize("name", params(FIXTURES))
def test_text(name: str) -> None:
    events = events_of(name)
    assert message_text(events) == TEXT[name]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == TEXT[name]
    assert len(items_of(events, "message")) == (1 if TEXT[name] else 0)


@pytest.mark.parametrize("name", params(FIXTURES))
def test_reasoning(name: str) -> None:
    items = items_of(events_of(name), "reasoning")
    if name not in REASONING:
        assert items == []
        return
    [item] = items
    assert item["summary"] == [{"type": "summary_text", "text": REASONING[name]}]
    assert decode_reasoning(item["encrypted_content"]) == REASONING[name]
    assert output(events_of(name))[0] is item, "reasoning comes before the answer"
    deltas = [e["delta"] for e in events_of(name) if e["type"] == "response.reasoning_summary_text.delta"]
    assert "".join(deltas) == REASONING[name]


@pytest.mark.parametrize("name", params(CALLS))
def test_tool_calls(name: str) -> None:
    events = events_of(name)
    calls = items_of(events, "function_call")
    assert [(c["call_id"], c["name"], c["arguments"]) for c in calls] == CALLS[name]
    assert all(c["status"] == "completed" and "namespace" not in c for c in calls)
    by_id = {c["id"]: c for c in calls}
    assert len(by_id) == len(calls)
    for item_id, call in by_id.items():
        added = [
            e for e in events if e["type"] == "response.output_item.added" and e["item"]["id"] == item_id
        ]
        assert len(added) == 1
        assert added[0]["item"]["call_id"] == call["call_id"]
        assert added[0]["item"]["name"] == call["name"]
        deltas = "".join(
            e["delta"]
            for e in events
            if e["type"] == "response.function_call_arguments.delta" and e["item_id"] == item_id
        )
        assert deltas == call["arguments"]
        [done] = [
            e
            for e in events
            if e["type"] == "response.function_call_arguments.done" and e["item_id"] == item_id
        ]
        assert done["arguments"] == call["arguments"]
        assert orjson.loads(call["arguments"])


def test_parallel_calls_are_separate_items_in_order() -> None:
    events = events_of("openai_parallel_tools.sse")
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["call_id"]) for e in added] == [
        (0, "call_8Xh2kq4uVJmYbq3Tz1cWn0aF"),
        (1, "call_Qm7RZf0bN1sLw2dE9kYpX4tJ"),
    ]
    assert [item["type"] for item in output(events)] == ["function_call", "function_call"]


@pytest.mark.parametrize("name", params(FIXTURES))
def test_no_tool_calls_where_there_are_none(name: str) -> None:
    if name in CALLS or name == "vllm_cut.sse":
        return
    assert items_of(events_of(name), "function_call") == []


@pytest.mark.parametrize("name", params(USAGE))
def test_usage_mapping(name: str) -> None:
    assert terminal(events_of(name))["response"]["usage"] == USAGE[name]


def test_vllm_continuous_usage_counts_without_cache() -> None:
    # The part of vllm_reasoning.sse's usage that survives today: tokens are right, cache is lost.
    got = terminal(events_of("vllm_reasoning.sse"))["response"]["usage"]
    assert (got["input_tokens"], got["output_tokens"], got["total_tokens"]) == (28, 30, 58)


@pytest.mark.parametrize(
    "name",
    params(
        ["llamacpp_python_crlf.sse", "openai_cut_mid_event.sse", "openai_midstream_error.sse", "vllm_cut.sse"]
    ),
)
def test_no_upstream_usage_gives_nonzero_estimates(name: str) -> None:
    events = events_of(name)
    got = terminal(events)["response"]["usage"]
    produced = sum(
        len(e["delta"])
        for e in events
        if e["type"]
        in (
            "response.output_text.delta",
            "response.function_call_arguments.delta",
            "response.reasoning_summary_text.delta",
        )
    )
    assert got["input_tokens"] == INPUT_ESTIMATE
    # Everything the model generated counts, delivered or not (a cut call's arguments are not).
    assert got["output_tokens"] >= (produced + 3) // 4 > 0
    assert got["total_tokens"] == got["input_tokens"] + got["output_tokens"]
    assert got["input_tokens_details"] == {"cached_tokens": 0}
    assert got["output_tokens_details"] == {"reasoning_tokens": 0}


@pytest.mark.parametrize("name", params(["openai_cut_mid_event.sse", "vllm_cut.sse"]))
def test_cut_stream_fails_and_never_completes(name: str) -> None:
    for split in SPLITS:
        events = run_fixture(name, split)
        assert not any(e["type"] in ("response.completed", "response.incomplete") for e in events)
        last = terminal(events)
        assert last["type"] == "response.failed"
        assert last["response"]["status"] == "failed"
        assert last["response"]["error"]["code"] == "upstream_stream_cut"
        assert all(item.get("status") in ("completed", "incomplete", None) for item in output(events))


def test_half_streamed_call_in_a_cut_stream_never_reaches_the_client() -> None:
    # Codex runs a call as soon as it sees it done: a call cut mid-arguments ('{"cmd": "make -j')
    # must not become an item at all.
    events = events_of("vllm_cut.sse")
    assert items_of(events, "function_call") == []
    assert not [e for e in events if e["type"].startswith("response.function_call_arguments")]
    assert terminal(events)["type"] == "response.failed"


def test_finish_reason_length_is_incomplete_max_output_tokens() -> None:
    events = events_of("openai_length.sse")
    last = terminal(events)
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [item["status"] for item in output(events)] == ["incomplete"]
    assert not any(e["type"] == "response.completed" for e in events)


def test_error_object_mid_stream_fails_with_mapped_code() -> None:
    events = events_of("openai_midstream_error.sse")
    error = terminal(events)["response"]["error"]
    assert error["code"] == "upstream_error"
    assert "The server had an error while processing your request" in error["message"]
    assert [item["status"] for item in items_of(events, "message")] == ["incomplete"]


def test_openrouter_error_chunk_with_choices_fails() -> None:
    events = events_of("openrouter_midstream_error.sse")
    last = terminal(events)
    assert last["type"] == "response.failed"
    assert last["response"]["error"]["code"] == "upstream_error"
    assert "Provider disconnected" in last["response"]["error"]["message"]


# -- a failed response names what it cut short (translate/cuts.py)


@pytest.mark.parametrize("name", params(FIXTURES))
def test_only_a_failed_response_ends_with_a_cut_marker_naming_its_items(name: str) -> None:
    items = output(events_of(name))
    if TERMINAL[name][0] != "response.failed":
        assert cut_ids(items) == set()
        return
    *said, marker = items
    assert said, "each recorded failure cut some text short"
    assert marker["type"] == "reasoning" and marker["summary"] == []
    assert cut_ids([marker]) == {item["id"] for item in items}


def guarded_translator() -> ChatStreamTranslator:
    return chat_translator([], loop_guard=True)


def test_a_stopped_loop_names_the_answer_and_the_reasoning_before_it() -> None:
    loop = "I'm sure you'll find them all to your liking.\n\n"
    chunks = [chunk({"reasoning_content": "I will greet them."}), chunk({"content": "Sure.\n\n"})]
    chunks += [chunk({"content": loop}) for _ in range(200)]
    events = translate_chunks(chunks, guarded_translator())
    validate_stream(events)
    assert terminal(events)["response"]["error"]["code"] == "model_output_loop"
    reasoning, message, marker = output(events)
    assert reasoning["type"] == "reasoning" and message["status"] == "incomplete"
    assert cut_ids([marker]) == {reasoning["id"], message["id"], marker["id"]}


def test_text_finished_before_a_cut_tool_call_is_named_too() -> None:
    # The text was done (a call started) before the stream broke: Codex recorded it already.
    call = call_delta(0, id="call_a", name="exec_command", arguments='{"cmd": "ls')
    events = translate_chunks([chunk({"content": "Let me look."}), chunk(call)], done=False)
    validate_stream(events)
    assert terminal(events)["response"]["error"]["code"] == "upstream_stream_cut"
    message, marker = output(events)
    assert message["status"] == "completed" and items_of(events, "function_call") == []
    assert cut_ids([marker]) == {message["id"], marker["id"]}


def test_a_failure_before_any_output_adds_no_marker() -> None:
    turn = make_translator().turn
    events = turn.start() + turn.fail(UpstreamStreamCut("cut before the first token"))
    validate_stream(events)
    assert output(events) == []


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (
            {
                "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
            "context_length_exceeded",
        ),
        (
            {"message": "Rate limit reached. Please try again in 2s.", "type": "rate_limit_error"},
            "rate_limit_exceeded",
        ),
        ({"message": "overloaded", "type": "overloaded_error"}, "server_is_overloaded"),
        ({"message": "The server had an error", "type": "server_error"}, "upstream_error"),
    ],
)
def test_error_object_codes(error: dict[str, Any], code: str) -> None:
    events = translate_chunks([chunk({"role": "assistant", "content": "Hi"}), {"error": error}], done=False)
    validate_stream(events)
    assert terminal(events)["response"]["error"]["code"] == code


# -- synthetic


def test_namespaced_tool_comes_back_with_its_namespace() -> None:
    tools = [*CODEX_TOOLS, NAMESPACE_TOOL]
    flat = [t["function"]["name"] for t in chat_tools(catalogue_of(tools))][-1]
    assert flat == "mcp__srv__do_it"
    events = translate_chunks(
        [
            chunk({"role": "assistant", "content": None}),
            chunk(call_delta(0, id="call_ns", name=flat, arguments="")),
            chunk(call_delta(0, arguments='{"what":')),
            chunk(call_delta(0, arguments='"it"}')),
            chunk({}, "tool_calls"),
        ],
        make_translator(tools),
    )
    validate_stream(events)
    [call] = items_of(events, "function_call")
    assert call == {
        "type": "function_call",
        "id": call["id"],
        "status": "completed",
        "call_id": "call_ns",
        "name": "do_it",
        "arguments": '{"what":"it"}',
        "namespace": "mcp__srv",
    }
    [added] = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert (added["name"], added["namespace"]) == ("do_it", "mcp__srv")
    [done] = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert done["name"] == "do_it"


PATCH = '*** Begin Patch\n*** Add File: hello.txt\n+Hello, "world"!\n*** End Patch\n'


def test_custom_tool_comes_back_as_custom_tool_call() -> None:
    tools = [*CODEX_TOOLS, APPLY_PATCH_TOOL]
    arguments = orjson.dumps({"input": PATCH}).decode()
    split = [arguments[:5], arguments[5:17], arguments[17:40], arguments[40:]]
    events = translate_chunks(
        [
            chunk({"role": "assistant", "content": "Creating the file."}),
            chunk(call_delta(0, id="call_patch", name="apply_patch", arguments="")),
            *[chunk(call_delta(0, arguments=piece)) for piece in split],
            chunk({}, "tool_calls"),
        ],
        make_translator(tools),
    )
    validate_stream(events)
    types = [e["type"] for e in events]
    assert "response.function_call_arguments.delta" not in types
    assert "response.function_call_arguments.done" not in types
    [call] = items_of(events, "custom_tool_call")
    assert call == {
        "type": "custom_tool_call",
        "id": call["id"],
        "status": "completed",
        "call_id": "call_patch",
        "name": "apply_patch",
        "input": PATCH,
    }
    assert items_of(events, "function_call") == []
    deltas = [e for e in events if e["type"] == "response.custom_tool_call_input.delta"]
    assert "".join(e["delta"] for e in deltas) == PATCH
    assert all(e["item_id"] == call["id"] for e in deltas)
    [done] = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    assert (done["input"], done["item_id"]) == (PATCH, call["id"])
    [added] = [
        e["item"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "custom_tool_call"
    ]
    assert (added["name"], added["call_id"], added["input"]) == ("apply_patch", "call_patch", "")
    assert types.index("response.custom_tool_call_input.done") < len(types) - 1


def test_custom_tool_grammar_reaches_the_upstream_tool() -> None:
    catalogue = catalogue_of([APPLY_PATCH_TOOL])
    [tool] = chat_tools(catalogue)
    assert tool["function"]["name"] == "apply_patch"
    assert tool["function"]["parameters"]["required"] == ["input"]
    assert "*** Begin Patch" in tool["function"]["description"]
    assert catalogue.resolve("apply_patch").kind == "custom"


def test_tool_call_without_id_gets_a_minted_call_id() -> None:
    events = translate_chunks(
        [
            chunk({"role": "assistant"}),
            chunk(call_delta(0, name="exec_command", arguments='{"cmd":"ls"}')),
            chunk(call_delta(1, name="exec_command", arguments='{"cmd":"pwd"}')),
            chunk({}, "tool_calls"),
        ]
    )
    validate_stream(events)
    calls = items_of(events, "function_call")
    assert [c["arguments"] for c in calls] == ['{"cmd":"ls"}', '{"cmd":"pwd"}']
    ids = [c["call_id"] for c in calls]
    assert all(isinstance(i, str) and i.startswith("call_") for i in ids)
    assert len(set(ids)) == 2
    added = {
        e["item"]["id"]: e["item"]["call_id"] for e in events if e["type"] == "response.output_item.added"
    }
    assert [added[c["id"]] for c in calls] == ids


def test_late_id_is_used_when_the_first_delta_had_none() -> None:
    events = translate_chunks(
        [
            chunk(call_delta(0, name="exec_command")),
            chunk(call_delta(0, id="call_late", arguments='{"cmd":"ls"}')),
            chunk({}, "tool_calls"),
        ]
    )
    [call] = items_of(events, "function_call")
    assert call["call_id"] == "call_late"


def no_argument_call() -> list[Event]:
    # A tool without parameters: some servers send no arguments fragment at all.
    return translate_chunks(
        [chunk(call_delta(0, id="call_x", name="exec_command", arguments="")), chunk({}, "tool_calls")]
    )


def test_call_with_no_arguments_still_happens() -> None:
    [call] = items_of(no_argument_call(), "function_call")
    assert (call["call_id"], call["name"], call["arguments"]) == ("call_x", "exec_command", "{}")


def test_call_with_no_arguments_is_a_valid_stream() -> None:
    validate_stream(no_argument_call())


def test_done_without_finish_reason_completes() -> None:
    events = translate_chunks([chunk({"content": "partial but finished"})])
    validate_stream(events)
    assert terminal(events)["type"] == "response.completed"
    assert message_text(events) == "partial but finished"


def test_eof_without_done_after_finish_reason_completes() -> None:
    events = translate_chunks([chunk({"content": "ok"}), chunk({}, "stop")], done=False)
    assert terminal(events)["type"] == "response.completed"


def test_empty_stream_is_cut() -> None:
    events = translate_bytes(b"")
    validate_stream(events)
    assert terminal(events)["response"]["error"]["code"] == "upstream_stream_cut"


def test_nothing_after_the_terminal_event() -> None:
    translator = make_translator()
    finished = chunk(
        {"content": "a"}, "stop", usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    )
    events = translate_chunks([finished], translator)
    turn = translator.turn
    assert translator.done
    translator.feed(chunk({"content": "late"}))
    translator.finish()
    translator.end_of_stream_marker()
    assert turn.take() == []
    assert turn.fail(GatewayError("late")) == []
    validate_stream(events)


def test_no_usage_synthetic_estimate() -> None:
    events = translate_chunks(
        [chunk({"content": "hello world"}), chunk({}, "stop")], make_translator(input_estimate=100)
    )
    assert terminal(events)["response"]["usage"] == usage(100, 4, 104)  # 11 characters / 3


def test_usage_without_total_is_summed() -> None:
    events = translate_chunks(
        [
            chunk({"content": "x"}, "stop"),
            {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}},
        ]
    )
    assert terminal(events)["response"]["usage"] == usage(7, 2, 9)


def test_null_usage_details_are_tolerated() -> None:
    events = translate_chunks(
        [
            chunk({"content": "x"}, "stop"),
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 12,
                    "completion_tokens": 1280,
                    "total_tokens": 1292,
                    "prompt_tokens_details": None,
                    "completion_tokens_details": None,
                },
            },
        ]
    )
    assert terminal(events)["response"]["usage"] == usage(12, 1280, 1292)


def test_prompt_cache_hit_tokens_count_as_cached() -> None:
    events = translate_chunks(
        [
            chunk({"content": "x"}, "stop"),
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 7461,
                    "completion_tokens": 5,
                    "prompt_tokens_details": None,
                    "prompt_cache_hit_tokens": 7400,
                    "prompt_cache_miss_tokens": 61,
                },
            },
        ]
    )
    assert terminal(events)["response"]["usage"]["input_tokens_details"] == {"cached_tokens": 7400}


# -- fold(): a non-streamed body gives what the equivalent stream gives


def streamed_equivalent() -> list[dict[str, Any]]:
    return [
        chunk({"role": "assistant", "content": None, "reasoning_content": "Think "}),
        chunk({"reasoning_content": "first."}),
        chunk({"content": "Running "}),
        chunk({"content": "it."}),
        chunk(call_delta(0, id="call_a", name="exec_command", arguments='{"cmd":')),
        chunk(call_delta(0, arguments='"ls"}')),
        chunk(call_delta(1, id="call_b", name="apply_patch", arguments='{"input":"*** Begin Patch\\n')),
        chunk(call_delta(1, arguments='*** End Patch\\n"}')),
        chunk({}, "tool_calls"),
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 100,
                "completion_tokens": 20,
                "total_tokens": 120,
                "prompt_tokens_details": {"cached_tokens": 64},
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
        },
    ]


FOLDED_BODY: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "Running it.",
                "reasoning_content": "Think first.",
                "tool_calls": [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "exec_command", "arguments": '{"cmd":"ls"}'},
                    },
                    {
                        "id": "call_b",
                        "type": "function",
                        "function": {
                            "name": "apply_patch",
                            "arguments": '{"input":"*** Begin Patch\\n*** End Patch\\n"}',
                        },
                    },
                ],
            },
        }
    ],
    "usage": {
        "prompt_tokens": 100,
        "completion_tokens": 20,
        "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 64},
        "completion_tokens_details": {"reasoning_tokens": 5},
    },
}


def test_fold_matches_the_stream() -> None:
    tools = [*CODEX_TOOLS, APPLY_PATCH_TOOL]
    streamed = translate_chunks(streamed_equivalent(), make_translator(tools))
    folded = fold(make_translator(tools), FOLDED_BODY)
    validate_stream(streamed)
    validate_stream(folded)
    assert terminal(folded)["type"] == terminal(streamed)["type"] == "response.completed"
    assert as_sent(terminal(folded)["response"]) == as_sent(terminal(streamed)["response"])
    kinds = [i["type"] for i in output(folded)]
    assert kinds == ["reasoning", "message", "function_call", "custom_tool_call"]
    assert terminal(folded)["response"]["usage"] == usage(100, 20, 120, cached=64, reasoning=5)


@pytest.mark.parametrize(
    "name", params(["openai_text.sse", "deepseek_reasoner.sse", "ollama_tool_calls.sse", "openai_length.sse"])
)
def test_fold_of_a_recorded_stream_matches(name: str) -> None:
    """Rebuild the non-streamed body a server would have sent and fold it."""
    streamed = events_of(name)
    message: dict[str, Any] = {"role": "assistant", "content": TEXT[name] or None}
    if name in REASONING:
        message["reasoning_content"] = REASONING[name]
    if name in CALLS:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in CALLS[name]
        ]
    finish = {"openai_length.sse": "length", "ollama_tool_calls.sse": "tool_calls"}.get(name, "stop")
    body = {
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _chat_usage(USAGE[name]),
    }
    folded = fold(make_translator(), body)
    validate_stream(folded)
    assert as_sent(terminal(folded)["response"]) == terminal(streamed)["response"]


def _chat_usage(u: dict[str, Any]) -> dict[str, Any]:
    return {
        "prompt_tokens": u["input_tokens"],
        "completion_tokens": u["output_tokens"],
        "total_tokens": u["total_tokens"],
        "prompt_tokens_details": {"cached_tokens": u["input_tokens_details"]["cached_tokens"]},
        "completion_tokens_details": {"reasoning_tokens": u["output_tokens_details"]["reasoning_tokens"]},
    }


def test_the_servers_prompt_progress_is_kept_and_changes_no_event() -> None:
    """llama.cpp's `prompt_progress` chunks (an empty delta) while it reads the prompt."""
    reading = {"role": "assistant", "content": None}
    translator = make_translator()
    events = translate_chunks(
        [chunk(reading, prompt_progress={"total": 1024, "cache": 256, "processed": 256, "time_ms": 0}),
         chunk(reading, prompt_progress={"total": 1024, "cache": 256, "processed": 768, "time_ms": 2500}),
         chunk({"content": "hi"}), chunk(finish="stop")],
        translator,
    )  # fmt: skip
    assert translator.take_prompt_progress() == [
        PromptProgress(256, 1024, 256, 0.0),
        PromptProgress(768, 1024, 256, 2.5),
    ]
    assert translator.take_prompt_progress() == []
    plain = translate_chunks([chunk({"content": "hi"}), chunk(finish="stop")])
    assert message_text(events) == message_text(plain) == "hi"
    assert [e["type"] for e in events] == [e["type"] for e in plain]
    for bad in ({"total": 0, "processed": 0}, {"total": 9, "processed": "1"}, "half", None):
        unread = make_translator()
        translate_chunks([chunk(reading, prompt_progress=bad)], unread)
        assert unread.take_prompt_progress() == []


# -- the same fixtures through the real backend loop (ChatCall._translate)


class _Response:
    status = 200
    headers: Mapping[str, str] = {}

    def __init__(self, data: bytes, size: int | None) -> None:
        self._data = data
        self._size = size

    async def iter_chunks(self) -> Any:
        for piece in pieces(self._data, self._size):
            yield piece

    async def read(self) -> bytes:
        return self._data

    async def rest(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        return None


class _Transport:
    def __init__(self, data: bytes, size: int | None) -> None:
        self._response = _Response(data, size)

    async def open(self, request: HttpRequest) -> _Response:
        return self._response

    async def aclose(self) -> None:
        return None


async def backend_events(data: bytes, size: int | None) -> list[Event]:
    target = UpstreamTarget(
        name="test",
        base_url="http://upstream.invalid/v1",
        headers={},
        # the bare loop, as events_of() runs the bare translator
        dialect=ChatDialect(text_tool_calls="off", think_tags="off"),
    )
    backend = ChatBackend(target, _Transport(data, size))  # type: ignore[arg-type]
    call = backend.call(parse_request({"model": "test-model", "input": "hi", "tools": CODEX_TOOLS}), "m")
    await call.open()
    events: list[Event] = []
    async for batch in call.events():
        events.extend(batch)
    return events


def digest(events: list[Event]) -> tuple[Any, ...]:
    last = terminal(events)
    error = last["response"]["error"]
    items = [
        (
            i["type"],
            i.get("status"),
            i.get("call_id"),
            i.get("arguments"),
            [p.get("text") for p in i.get("content") or i.get("summary") or []],
        )
        for i in output(events)
    ]
    return last["type"], error and error["code"], items


def backend_params() -> list[Any]:
    out = []
    for name in FIXTURES:
        for size in (1, 97, None):
            label = f"{name.removesuffix('.sse')}-{size or 'whole'}"
            out.append(pytest.param(name, size, id=label))
    return out


@pytest.mark.parametrize(("name", "size"), backend_params())
async def test_backend_loop_agrees_with_the_translator(name: str, size: int | None) -> None:
    data = (FIXTURES_DIR / name).read_bytes()
    events = await backend_events(data, size)
    validate_stream(events)
    assert digest(events) == digest(events_of(name))


async def test_backend_error_in_the_same_read_as_content() -> None:
    # OpenAI's recorded mid-stream error, arriving in one read together with the text before it.
    events = await backend_events((FIXTURES_DIR / "openai_midstream_error.sse").read_bytes(), None)
    validate_stream(events)
    assert digest(events) == digest(events_of("openai_midstream_error.sse"))


async def test_backend_cut_after_an_unterminated_last_event() -> None:
    # The connection drops right after a complete data line, before its blank line: the event
    # only comes out of SSEDecoder.finish(), then translator.finish() raises the cut.
    body = b"data: " + orjson.dumps(chunk({"role": "assistant", "content": ""})) + b"\n\n"
    body += b"data: " + orjson.dumps(chunk({"content": "half an answer"})) + b"\n"
    events = await backend_events(body, None)
    validate_stream(events)
    assert terminal(events)["response"]["error"]["code"] == "upstream_stream_cut"
    assert message_text(events) == "half an answer"


def test_translator_cut_after_an_unterminated_last_event() -> None:
    body = b"data: " + orjson.dumps(chunk({"role": "assistant", "content": ""})) + b"\n\n"
    body += b"data: " + orjson.dumps(chunk({"content": "half an answer"})) + b"\n"
    events = translate_bytes(body)
    validate_stream(events)
    assert terminal(events)["response"]["error"]["code"] == "upstream_stream_cut"
    assert message_text(events) == "half an answer"
