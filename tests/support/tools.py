"""Tools a client offers in the tests' requests, and a chat answer's call of one read the way
a client reads it."""

from __future__ import annotations

from typing import Any

from openai.types.chat import ChatCompletion, ChatCompletionMessageFunctionToolCall

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
"""A Chat Completions function tool taking a city."""

BASH: dict[str, Any] = {
    "name": "Bash",
    "description": "Run a shell command.",
    "input_schema": {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}
"""A Messages tool as Claude Code offers its Bash tool (its schema says JSON Schema 2020-12)."""


def the_tool_call(completion: ChatCompletion) -> ChatCompletionMessageFunctionToolCall:
    """The one function call a chat answer asks for (it finished for that)."""
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls or []
    assert isinstance(call, ChatCompletionMessageFunctionToolCall), call
    return call


def with_tool_result(completion: ChatCompletion, result: str) -> list[dict[str, Any]]:
    """What a client adds to its messages to answer that call: the answer and the `result`."""
    call = the_tool_call(completion)
    return [
        completion.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": result},
    ]
