"""The gateway's errors in Anthropic's shape: `{"type": "error", "error": {"type", "message"}}`
with Anthropic's status for each type. Pure.

One function, `anthropic_error`, for both ends of an answer: before the first byte (an HTTP
status and body, from the exception the server caught) and after it (the `event: error` of a
stream, from a `response.failed` event's `error`). The type follows the gateway's error code
where it says more than the status (a context too long, an overloaded or starting upstream),
else the status: invalid_request_error 400, authentication_error 401, permission_error 403,
not_found_error 404, request_too_large 413, rate_limit_error 429, api_error for 500 and the
gateway's other 5xx, overloaded_error 529.

Two choices for Claude Code:
- a context too long for the model is a 400 `invalid_request_error` whose message is
  "prompt is too long: N tokens > M maximum", the words Claude Code compacts on (it reads N
  and M for how much to drop); N and M come from the upstream's message where it gives them
  (CONTEXT_NUMBERS, one table, a test per pattern), else the message says it without them;
- after the first byte, a failure the gateway counts as passing (a stream cut, an idle or
  unreachable upstream, an upstream 5xx, a model stuck in a loop: the ones Codex retries) is
  an `overloaded_error`: mid-stream, the HTTP status is 200 and the error type is all a
  client has to decide on, and Claude Code retries that type (api_error ends the turn).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from codexgate.errors import Code, GatewayError

__all__ = ["CONTEXT_NUMBERS", "Failure", "anthropic_error", "error_body", "prompt_too_long"]

# What failed: an exception, a failed response's `error` ({code, message}), or (status, code, message).
Failure = GatewayError | Mapping[str, Any] | tuple[int, str | None, str]

_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
# Codes whose status Anthropic's types follow rather than the gateway's own status.
_STATUS_OF_CODE = {
    Code.CONTEXT_LENGTH_EXCEEDED: 400,
    Code.SERVER_IS_OVERLOADED: 529,  # the gateway answers 503
    Code.EMBEDDED_MODEL_STARTING: 529,  # 503 while it builds: retried as an overloaded model
}
# The status of a failed response's code (it has no status of its own): the gateway's for each.
_FAILED_STATUS = {
    Code.INVALID_REQUEST: 400, Code.INVALID_PROMPT: 400, Code.UPSTREAM_WRONG_URL: 400,
    Code.UNSUPPORTED_FILE: 400, Code.FILE_WITHOUT_TEXT: 400, Code.FILE_TOO_LARGE: 400,
    Code.REQUEST_TOO_LARGE: 413, Code.NOT_FOUND: 404, Code.MODEL_NOT_FOUND: 404,
    Code.MODEL_NOT_ALLOWED: 403, Code.RATE_LIMIT_EXCEEDED: 429, Code.INSUFFICIENT_QUOTA: 429,
    Code.UPSTREAM_TIMEOUT: 504, Code.INTERNAL: 500,
}  # fmt: skip
# Failures after the first byte that a client should try again (see the module's docstring).
_PASSING = frozenset(
    (
        Code.UPSTREAM_UNREACHABLE, Code.UPSTREAM_TIMEOUT, Code.UPSTREAM_STREAM_CUT, Code.UPSTREAM_ERROR,
        Code.UPSTREAM_RESPONSE_TOO_LARGE, Code.MODEL_OUTPUT_LOOP, Code.SERVER_IS_OVERLOADED,
        Code.EMBEDDED_MODEL_STARTING,
    )
)  # fmt: skip

# Where an upstream's words give the prompt's size (N) and the model's window (M): each pattern
# with the group of N and the group of M.
CONTEXT_NUMBERS: tuple[tuple[re.Pattern[str], int, int], ...] = (
    # Anthropic's own wording
    (re.compile(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", re.I), 1, 2),
    # the gateway's own check of a known window (backends/chat/backend.py): "This request needs
    # at least 188 tokens, more than the model's context window of 64 tokens."
    (
        re.compile(
            r"needs at least (\d+) tokens, more than the model's context window of (\d+) tokens", re.I
        ),
        1,
        2,
    ),
    # vLLM, OpenAI: "maximum context length is 32768 tokens. However, you requested 33000 tokens
    # (32000 in the messages, ...)" (the whole request: the prompt and the output asked for),
    # "... your request has 5000 input tokens", "... your messages resulted in 8500 tokens"
    (
        re.compile(
            r"maximum context length is (\d+) tokens.*?(?:requested|resulted in|has|contains) (\d+)",
            re.I | re.S,
        ),
        2,
        1,
    ),
    # llama.cpp: "request (40000 tokens) exceeds the available context size (32768 tokens)"
    (re.compile(r"\((\d+) tokens\) exceeds the available context size \((\d+) tokens\)", re.I), 1, 2),
    # "9000 tokens > 8192 maximum" in other words around it
    (re.compile(r"(\d+)\s*tokens?\s*>\s*(\d+)", re.I), 1, 2),
)


def prompt_too_long(message: str) -> str:
    """The message Claude Code compacts on, with the prompt's size and the window where
    `message` (the upstream's words) gives them."""
    for pattern, prompt, window in CONTEXT_NUMBERS:
        match = pattern.search(message)
        if match:
            return f"prompt is too long: {match.group(prompt)} tokens > {match.group(window)} maximum"
    return f"prompt is too long: {message}" if message else "prompt is too long"


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """Anthropic's error object, as a body and as the data of `event: error`."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def anthropic_error(failure: Failure, *, in_stream: bool = False) -> tuple[int, dict[str, Any]]:
    """The HTTP status and Anthropic error body of `failure`: an exception caught before the
    first byte, a failed response's `error` object, or (status, code, message). `in_stream`:
    the error goes out as `event: error` after the first byte (see the module's docstring)."""
    code: str | None
    if isinstance(failure, GatewayError):
        status, code, message = failure.status, failure.code, failure.message
    elif isinstance(failure, tuple):
        status, code, message = failure
    else:
        given = failure.get("code")
        code = given if isinstance(given, str) else None
        message = str(failure.get("message") or "")
        status = _FAILED_STATUS.get(code or "", 502)
    status = _STATUS_OF_CODE.get(code or "", status)
    if code == Code.CONTEXT_LENGTH_EXCEEDED:
        return 400, error_body("invalid_request_error", prompt_too_long(message))
    if in_stream and code in _PASSING:
        return 529, error_body("overloaded_error", message)
    error_type = _BY_STATUS.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    return status, error_body(error_type, message)
