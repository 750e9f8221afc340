"""The Messages face's request validation (wire/messages.py): every wrong shape is a 400 naming
the parameter as Anthropic does, what the gateway cannot carry is refused by name, unknown
fields and keys pass."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from codexgate.errors import InvalidRequest
from codexgate.wire.messages import (
    _check_message_fully,
    _common_message,
    is_billing_header,
    is_server_tool,
    validate_messages_request,
)
from codexgate.wire.responses import MAX_DEPTH


class _Missing:
    """A value that deletes the key (its repr is stable: test ids must be the same in every
    worker of a side-by-side run)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()
PNG = "iVBORw0KGgo="


def full_body() -> dict[str, Any]:
    """A request with every role, block kind and field the face reads (Claude Code's among them)."""
    return {
        "model": "qwen3-coder",
        "max_tokens": 32000,
        "stream": True,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328;"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
        ],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>hi</system-reminder>"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {
                        "type": "document",
                        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
                        "title": "report.pdf",
                    },
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "notes"},
                    },
                    {
                        "type": "document",
                        "source": {"type": "content", "content": [{"type": "text", "text": "a chunk"}]},
                        "context": "from the wiki",
                    },
                    {
                        "type": "search_result",
                        "source": "https://x",
                        "title": "X",
                        "content": [
                            {"type": "text", "text": "found"},
                        ],
                    },  # fmt: skip
                ],
            },
            {"role": "system", "content": [{"type": "text", "text": "cwd: /work"}], "clear_at": "never"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Let me look.", "signature": "cgs1:cgr2:Let me look."},
                    {"type": "redacted_thinking", "data": "EmwKAhgB"},
                    {"type": "text", "text": "Looking.", "citations": None},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt", "is_error": False},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [
                            {"type": "text", "text": "img"},
                            {
                                "type": "image",
                                "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                            },
                            {"type": "tool_reference", "tool_name": "Write"},
                        ],
                    },  # fmt: skip
                    {"type": "text", "text": "go on"},
                ],
            },
            {
                "role": "system",
                "content": [
                    {
                        "type": "tool_addition",
                        "tool": {
                            "type": "tool_definition",
                            "definition": {
                                "name": "Late",
                                "input_schema": {"type": "object"},
                            },
                        },
                    },
                    {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Write"}},
                ],
            },  # fmt: skip
        ],
        "tools": [
            {
                "name": "Bash",
                "description": "Run a command.",
                "input_schema": {
                    "$schema": "https://json-schema.org/draft/2020-12/schema",
                    "type": "object",
                    "properties": {"command": {"type": "string"}},
                    "required": ["command"],
                },
                "cache_control": {"type": "ephemeral"},
                "defer_loading": False,
            },
            {"type": "custom", "name": "Write", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 31999, "display": "omitted"},
        "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}}},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": '{"device_id":"d","account_uuid":"","session_id":"s-1"}'},
        "stop_sequences": ["\n\nHuman:"],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "service_tier": "auto",
        "some_future_field": {"anything": True},
    }


def with_change(path: str, value: Any) -> dict[str, Any]:
    """`full_body()` with the value at the dotted `path` replaced (MISSING: deleted)."""
    body = full_body()
    *parents, last = path.split(".")
    target: Any = body
    for step in parents:
        target = target[int(step)] if isinstance(target, list) else target[step]
    key: Any = int(last) if isinstance(target, list) else last
    if value is MISSING:
        del target[key]
    else:
        target[key] = value
    return body


def refused(body: dict[str, Any], **kwargs: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        validate_messages_request(body, **kwargs)
    assert caught.value.status == 400
    return caught.value


def test_a_request_with_every_field_and_block_passes_and_is_left_unchanged() -> None:
    body = full_body()
    validate_messages_request(body)
    assert body == full_body()


def test_claude_codes_minimal_count_tokens_body_passes_without_max_tokens() -> None:
    validate_messages_request(
        {"model": "m", "messages": [{"role": "user", "content": "foo"}]}, count_tokens=True
    )


def test_a_messages_request_without_max_tokens_is_refused_naming_it() -> None:
    error = refused(with_change("max_tokens", MISSING))
    assert (error.param, error.message) == ("max_tokens", "max_tokens: Field required")


# (path, value, the parameter named, words of the message)
WRONG = [
    ("model", MISSING, "model", "Field required"),
    ("model", "", "model", "at least 1 character"),
    ("model", 3, "model", "a valid string"),
    ("messages", MISSING, "messages", "Field required"),
    ("messages", [], "messages", "at least 1 item"),
    ("messages", {}, "messages", "a valid list"),
    ("messages.0", "hi", "messages.0", "a valid dictionary"),
    ("messages.0.role", "tool", "messages.0.role", "'user', 'assistant' or 'system'"),
    ("messages.0.role", MISSING, "messages.0.role", "Field required"),
    ("messages.0.content", MISSING, "messages.0.content", "Field required"),
    ("messages.0.content", 5, "messages.0.content", "a valid string or a list"),
    ("messages.0.content.0.text", MISSING, "messages.0.content.0.text", "Field required"),
    ("messages.0.content.0.type", MISSING, "messages.0.content.0.type", "Field required"),
    ("messages.0.content.0.type", "tool_use", "messages.0.content.0.type", "not accepted in user content"),
    ("messages.0.content.1.source.media_type", "image/bmp", "messages.0.content.1.source.media_type",
     "'image/jpeg', 'image/png', 'image/gif' or 'image/webp'"),
    ("messages.0.content.1.source.data", MISSING, "messages.0.content.1.source.data", "Field required"),
    ("messages.0.content.1.source.type", "file", "messages.0.content.1.source.type", "no files API"),
    ("messages.0.content.2.source.url", 7, "messages.0.content.2.source.url", "a valid string"),
    ("messages.0.content.3.source.media_type", "text/html", "messages.0.content.3.source.media_type",
     "'application/pdf'"),
    ("messages.0.content.3.source", {"type": "url", "url": "https://x/a.pdf"}, "messages.0.content.3.source.type",
     "fetches nothing"),
    ("messages.0.content.3.source", {"type": "file", "file_id": "f"}, "messages.0.content.3.source.type",
     "no files API"),
    ("messages.0.content.3.title", 1, "messages.0.content.3.title", "a valid string"),
    ("messages.0.content.5.source.content.0", {"type": "tool_use"}, "messages.0.content.5.source.content.0.type",
     "not accepted in"),
    ("messages.0.content.6.content", "found", "messages.0.content.6.content", "a valid list"),
    ("messages.2.content.0.signature", MISSING, "messages.2.content.0.signature", "Field required"),
    ("messages.2.content.0.thinking", None, "messages.2.content.0.thinking", "Field required"),
    ("messages.2.content.1.data", 1, "messages.2.content.1.data", "a valid string"),
    ("messages.2.content.3.input", "ls", "messages.2.content.3.input", "a valid dictionary"),
    ("messages.2.content.3.name", "", "messages.2.content.3.name", "at least 1 character"),
    ("messages.2.content.3.id", MISSING, "messages.2.content.3.id", "Field required"),
    ("messages.2.content.0.type", "image", "messages.2.content.0.type", "not accepted in assistant content"),
    ("messages.3.content.0.tool_use_id", MISSING, "messages.3.content.0.tool_use_id", "Field required"),
    ("messages.3.content.0.is_error", "yes", "messages.3.content.0.is_error", "a valid boolean"),
    ("messages.3.content.1.content.2.tool_name", 3, "messages.3.content.1.content.2.tool_name", "a valid string"),
    ("messages.3.content.1.content.0", {"type": "thinking"}, "messages.3.content.1.content.0.type", "not accepted in"),
    ("messages.4.content.0.tool.definition.input_schema", MISSING,
     "messages.4.content.0.tool.definition.input_schema", "Field required"),
    ("messages.4.content.1.tool.name", MISSING, "messages.4.content.1.tool.name", "Field required"),
    ("messages.1.content.0", {"type": "image"}, "messages.1.content.0.type", "not accepted in system content"),
    ("system", 3, "system", "a valid string or a list"),
    ("system.1.type", "image", "system.1.type", "Input should be 'text'"),
    ("system.1.text", MISSING, "system.1.text", "Field required"),
    ("max_tokens", 0, "max_tokens", "greater than or equal to 1"),
    ("max_tokens", 1.5, "max_tokens", "a valid integer"),
    ("max_tokens", True, "max_tokens", "a valid integer"),
    ("temperature", 1.5, "temperature", "between 0 and 1"),
    ("temperature", "hot", "temperature", "a valid number"),
    ("top_p", -0.1, "top_p", "between 0 and 1"),
    ("top_k", -1, "top_k", "greater than or equal to 0"),
    ("top_k", 1.5, "top_k", "a valid integer"),
    ("stream", "yes", "stream", "a valid boolean"),
    ("stop_sequences", "STOP", "stop_sequences", "a valid list"),
    ("stop_sequences.0", "", "stop_sequences.0", "at least 1 character"),
    ("stop_sequences.0", 1, "stop_sequences.0", "a valid string"),
    ("metadata", "user", "metadata", "a valid dictionary"),
    ("metadata.user_id", 5, "metadata.user_id", "a valid string"),
    ("tools", {}, "tools", "a valid list"),
    ("tools.0.name", MISSING, "tools.0.name", "Field required"),
    ("tools.0.name", "", "tools.0.name", "at least 1 character"),
    ("tools.0.input_schema", MISSING, "tools.0.input_schema", "Field required"),
    ("tools.0.input_schema", "object", "tools.0.input_schema", "a valid dictionary"),
    ("tools.0.description", 1, "tools.0.description", "a valid string"),
    ("tools.2.type", 5, "tools.2.type", "a valid string"),
    ("tool_choice", "auto", "tool_choice", "a valid dictionary"),
    ("tool_choice.type", "required", "tool_choice.type", "'auto', 'any', 'tool' or 'none'"),
    ("tool_choice", {"type": "tool"}, "tool_choice.name", "Field required"),
    ("tool_choice.disable_parallel_tool_use", "no", "tool_choice.disable_parallel_tool_use", "a valid boolean"),
    ("thinking.type", "on", "thinking.type", "'enabled', 'adaptive', 'disabled' or 'between_tools'"),
    ("thinking.budget_tokens", MISSING, "thinking.budget_tokens", "Field required"),
    ("thinking.budget_tokens", 0, "thinking.budget_tokens", "greater than or equal to 1"),
    ("thinking.display", 1, "thinking.display", "a valid string"),
    ("output_config.effort", "extreme", "output_config.effort", "'low', 'medium', 'high', 'xhigh' or 'max'"),
    ("output_config.format.type", "json_object", "output_config.format.type", "'json_schema'"),
    ("output_config.format.schema", MISSING, "output_config.format.schema", "Field required"),
    ("context_management", [], "context_management", "a valid dictionary"),
    ("mcp_servers", [{"type": "url", "url": "https://mcp"}], "mcp_servers", "not supported"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("path", "value", "param", "words"), WRONG, ids=[f"{w[0]}={w[1]!r}"[:60] for w in WRONG]
)
def test_a_wrong_field_is_a_400_naming_it_as_anthropic_does(
    path: str, value: Any, param: str, words: str
) -> None:
    error = refused(with_change(path, value))
    assert error.param == param
    assert error.message.startswith(f"{param}: ")
    assert words in error.message


@pytest.mark.parametrize(
    "kind", ["server_tool_use", "web_search_tool_result", "code_execution_tool_result", "container_upload"]
)
def test_blocks_of_server_tools_in_the_history_are_refused_saying_why(kind: str) -> None:
    error = refused(with_change("messages.2.content.2", {"type": kind, "id": "srvtoolu_1"}))
    assert error.param == "messages.2.content.2.type"
    assert "the gateway runs none" in error.message


def test_unknown_fields_and_keys_pass() -> None:
    body = full_body()
    body["messages"][0]["content"][0]["citations"] = [{"x": 1}]
    body["messages"][0]["future"] = 1
    body["tools"][0]["input_examples"] = [{"command": "ls"}]
    body["thinking"]["future"] = "x"
    body["container"] = "c-1"
    validate_messages_request(body)


def test_display_and_effort_values_claude_code_sends_pass() -> None:
    for display in ("summarized", "omitted", "updates"):
        validate_messages_request(with_change("thinking", {"type": "adaptive", "display": display}))
    for effort in ("low", "medium", "high", "xhigh", "max"):
        validate_messages_request(with_change("output_config", {"effort": effort}))
    validate_messages_request(with_change("thinking", {"type": "disabled"}))


def test_an_empty_signature_is_kept_as_clients_send_what_they_were_given() -> None:
    validate_messages_request(with_change("messages.2.content.0.signature", ""))


def test_a_server_tool_is_checked_by_its_type_only() -> None:
    validate_messages_request(
        with_change("tools.2", {"type": "code_execution_20250825", "name": "code_execution"})
    )
    assert is_server_tool({"type": "web_fetch_20250910"}) and is_server_tool({"type": "bash_20250124"})
    assert not is_server_tool({"name": "Bash"}) and not is_server_tool({"type": "custom"})


def test_too_deep_a_body_is_refused_before_it_could_fail_on_the_way_out() -> None:
    body = full_body()
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(MAX_DEPTH):
        schema = {"type": "object", "properties": {"x": schema}}
    body["tools"][0]["input_schema"] = schema
    assert refused(body).param == "tools"


def test_the_billing_line_is_recognised_by_its_prefix() -> None:
    assert is_billing_header({"type": "text", "text": "x-anthropic-billing-header: cc_version=1;"})
    assert not is_billing_header({"type": "text", "text": "You are Claude Code."})


def test_validation_never_raises_anything_but_invalid_request_for_mangled_shapes() -> None:
    """Every value of every key replaced by each JSON shape: a 400 or a pass, never a crash."""
    shapes: list[Any] = [None, 0, 1.5, True, "", "x", [], [1], {}, {"type": "x"}]

    def paths(value: Any, prefix: str) -> list[str]:
        found = [prefix] if prefix else []
        items = (
            value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        )
        for key, child in items:
            found += paths(child, f"{prefix}.{key}" if prefix else str(key))
        return found

    for path in paths(full_body(), ""):
        for shape in shapes:
            try:
                validate_messages_request(with_change(path, copy.deepcopy(shape)))
            except InvalidRequest:
                pass


def test_the_messages_known_from_a_checked_request_are_not_checked_again_but_the_new_ones_are() -> None:
    body = full_body()
    count = len(body["messages"])
    body["messages"][0]["content"][0]["text"] = 7  # wrong, but taken as checked before
    validate_messages_request(body, known=1)
    body["messages"].append({"role": "user", "content": [{"type": "text"}]})
    with pytest.raises(InvalidRequest) as caught:
        validate_messages_request(body, known=count)
    assert caught.value.param == f"messages.{count}.content.0.text"


def test_the_depth_of_the_known_messages_and_of_a_same_field_is_not_walked_again() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(MAX_DEPTH):
        deep = {"type": "object", "properties": {"x": deep}}
    body = full_body()
    body["tools"][0]["input_schema"] = deep
    validate_messages_request(body, same=("tools",))
    assert refused(body).param == "tools"
    body = full_body()
    call = {"type": "tool_use", "id": "t", "name": "Bash", "input": deep}
    body["messages"].insert(0, {"role": "assistant", "content": [call]})
    validate_messages_request(body, known=1)
    assert refused(body).param == "messages"


def test_only_the_system_and_the_tools_may_be_taken_as_checked() -> None:
    body = full_body()
    body["tools"] = "not a list"
    with pytest.raises(InvalidRequest) as caught:
        validate_messages_request(body, same=("tools",))  # its type is always checked
    assert caught.value.param == "tools"
    body = full_body()
    body["system"] = [{"type": "image"}]
    validate_messages_request(body, same=("system",))
    body["max_tokens"] = 0
    with pytest.raises(InvalidRequest) as caught:
        validate_messages_request(body, same=("system", "max_tokens"))
    assert caught.value.param == "max_tokens"


_SHAPES: list[Any] = [MISSING, None, True, False, 0, 1, 1.5, "", "x", [], [{"type": "text", "text": "x"}], {}, {"a": 1},
                      "text", "tool_use", "tool_result"]  # fmt: skip
_GOOD_BLOCKS = [
    {"type": "text", "text": "x"},
    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "out", "is_error": False},
    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
]


def test_a_message_the_quick_check_passes_passes_the_full_checks() -> None:
    """Every role, every block kind with one field changed to every shape (or left out), alone
    and after a good block: what the quick check lets through, the full checks pass."""
    passed = 0
    for role in ("user", "assistant", "system", "tool", None, 1):
        for good in _GOOD_BLOCKS:
            for name in {*good, "is_error", "content", "id", "name", "input"}:
                for shape in _SHAPES:
                    block = {key: value for key, value in good.items() if key != name}
                    if shape is not MISSING:
                        block[name] = shape
                    for content in ([block], [{"type": "text", "text": "x"}, block], shape):
                        message = {"role": role, "content": content}
                        if _common_message(message):
                            passed += 1
                            _check_message_fully(message, "messages.0")
    assert passed > 100  # the quick check is not a check that passes nothing
