"""The Anthropic Messages stream: its event, delta and content block type names, its stop
reasons and error types, as `Literal`s and constants. No I/O.

Events travel as plain dicts, as the Responses events do (wire/responses_events.py): the names
here are what the Messages face's encoder (translate/messages_face/events.py) writes and its
tests match on, so a typo is a type error rather than a silent miss. Each event goes out as
`event: <type>` + `data: <the event as JSON>`, the `type` inside equal to the event line's.
"""

from __future__ import annotations

from typing import Final, Literal, TypeAlias

__all__ = [
    "BlockType",
    "CONTENT_BLOCK_DELTA",
    "CONTENT_BLOCK_START",
    "CONTENT_BLOCK_STOP",
    "DeltaType",
    "ERROR",
    "ErrorType",
    "INPUT_JSON_DELTA",
    "MESSAGE_DELTA",
    "MESSAGE_START",
    "MESSAGE_STOP",
    "PING",
    "SIGNATURE_DELTA",
    "StopReason",
    "StreamEventType",
    "TEXT_DELTA",
    "THINKING_DELTA",
]

StreamEventType: TypeAlias = Literal[
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
]
MESSAGE_START: Final = "message_start"
CONTENT_BLOCK_START: Final = "content_block_start"
CONTENT_BLOCK_DELTA: Final = "content_block_delta"
CONTENT_BLOCK_STOP: Final = "content_block_stop"
MESSAGE_DELTA: Final = "message_delta"
MESSAGE_STOP: Final = "message_stop"
PING: Final = "ping"
ERROR: Final = "error"

# The `delta.type` of a content_block_delta.
DeltaType: TypeAlias = Literal["text_delta", "input_json_delta", "thinking_delta", "signature_delta"]
TEXT_DELTA: Final = "text_delta"
INPUT_JSON_DELTA: Final = "input_json_delta"
THINKING_DELTA: Final = "thinking_delta"
SIGNATURE_DELTA: Final = "signature_delta"

# The content blocks the gateway answers with (a client may send more kinds: wire/messages.py).
BlockType: TypeAlias = Literal["text", "tool_use", "thinking", "redacted_thinking"]

StopReason: TypeAlias = Literal[
    "end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal",
    "model_context_window_exceeded",
]  # fmt: skip

# The `error.type` of an error body or `event: error`, with the HTTP status Anthropic gives each.
ErrorType: TypeAlias = Literal[
    "invalid_request_error",  # 400
    "authentication_error",  # 401
    "billing_error",  # 402
    "permission_error",  # 403
    "not_found_error",  # 404
    "request_too_large",  # 413
    "rate_limit_error",  # 429
    "api_error",  # 500, and the gateway's other 5xx
    "timeout_error",  # 504
    "overloaded_error",  # 529
]
