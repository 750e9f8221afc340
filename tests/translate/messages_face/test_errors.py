"""The gateway's errors in Anthropic's shape (translate/messages_face/errors.py): each class of
the exception tree, each failed response's code, and each pattern of the prompt-too-long table."""

from __future__ import annotations

import re

import pytest

from codexgate.errors import (
    Code,
    ContextLengthExceeded,
    GatewayError,
    InvalidRequest,
    KeyBudgetSpent,
    KeyLimitReached,
    ModelNotAllowed,
    ModelNotFound,
    ModelOutputLoop,
    NotFound,
    NoUpstream,
    Overloaded,
    QuotaExceeded,
    RateLimited,
    RequestTooLarge,
    UpstreamAuthError,
    UpstreamBadRequest,
    UpstreamConnectError,
    UpstreamModelNotFound,
    UpstreamServerError,
    UpstreamStreamCut,
    UpstreamTimeout,
    UpstreamWrongURL,
)
from codexgate.translate.messages_face.errors import CONTEXT_NUMBERS, anthropic_error, prompt_too_long

# How Claude Code reads the message (its parsePromptTooLongTokenCounts).
CLAUDE_CODE_PTL = re.compile(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", re.I)


@pytest.mark.parametrize(
    ("error", "status", "error_type"),
    [
        (InvalidRequest("messages.0.role: bad", param="messages.0.role"), 400, "invalid_request_error"),
        (InvalidRequest("Invalid API key.", status=401, code="invalid_api_key"), 401, "authentication_error"),
        (InvalidRequest("Host not allowed.", status=403, code="forbidden"), 403, "permission_error"),
        (ModelNotAllowed("The key may not use this model."), 403, "permission_error"),
        (NotFound("No such route."), 404, "not_found_error"),
        (ModelNotFound("No route serves 'x'."), 404, "not_found_error"),
        (UpstreamModelNotFound("Upstream error: model not found"), 404, "not_found_error"),
        (RequestTooLarge("The body is larger than 32 MB."), 413, "request_too_large"),
        (RateLimited("Upstream error: slow down.", retry_after=2), 429, "rate_limit_error"),
        (KeyLimitReached("The key is past its requests_per_minute.", retry_after=5), 429, "rate_limit_error"),
        (KeyBudgetSpent("The key spent its tokens_per_day."), 429, "rate_limit_error"),
        (QuotaExceeded("Upstream error: quota."), 429, "rate_limit_error"),
        (Overloaded("Upstream error: overloaded."), 529, "overloaded_error"),
        (GatewayError("Starting.", status=503, code=Code.EMBEDDED_MODEL_STARTING), 529, "overloaded_error"),
        (GatewayError("internal gateway error: KeyError"), 500, "api_error"),
        (UpstreamServerError("Upstream error: boom"), 502, "api_error"),
        (UpstreamConnectError("refused"), 502, "api_error"),
        (UpstreamStreamCut("cut"), 502, "api_error"),
        (ModelOutputLoop("loop"), 502, "api_error"),
        (UpstreamAuthError("The upstream refused the gateway's credentials."), 502, "api_error"),
        (UpstreamTimeout("Upstream timed out."), 504, "api_error"),
        (NoUpstream("No upstream is configured."), 503, "api_error"),
        (UpstreamBadRequest("Upstream error: bad tools"), 400, "invalid_request_error"),
        (UpstreamWrongURL("The upstream answered 404..."), 400, "invalid_request_error"),
    ],
)
def test_each_error_before_the_first_byte_has_anthropics_status_and_type(
    error: GatewayError, status: int, error_type: str
) -> None:
    got_status, body = anthropic_error(error)
    assert (got_status, body) == (
        status,
        {"type": "error", "error": {"type": error_type, "message": error.message}},
    )


def test_the_gateways_own_401_is_an_authentication_error_not_the_upstreams() -> None:
    """The upstream refusing the gateway's key is a 5xx: a 401 would tell Claude Code its own
    key failed, and it would ask its user to log in again."""
    assert anthropic_error(UpstreamAuthError("refused"))[1]["error"]["type"] == "api_error"


@pytest.mark.parametrize(
    ("code", "in_stream", "error_type"),
    [
        (Code.UPSTREAM_STREAM_CUT, True, "overloaded_error"),
        (Code.UPSTREAM_TIMEOUT, True, "overloaded_error"),
        (Code.UPSTREAM_UNREACHABLE, True, "overloaded_error"),
        (Code.UPSTREAM_ERROR, True, "overloaded_error"),
        (Code.MODEL_OUTPUT_LOOP, True, "overloaded_error"),
        (Code.SERVER_IS_OVERLOADED, True, "overloaded_error"),
        (Code.UPSTREAM_STREAM_CUT, False, "api_error"),
        (Code.UPSTREAM_TIMEOUT, False, "api_error"),
        (Code.RATE_LIMIT_EXCEEDED, True, "rate_limit_error"),
        (Code.INVALID_REQUEST, True, "invalid_request_error"),
        (Code.MODEL_NOT_FOUND, True, "not_found_error"),
        (Code.INTERNAL, True, "api_error"),
        ("store_failed", True, "api_error"),
        (None, True, "api_error"),
    ],
)
def test_a_failed_responses_error_has_the_type_its_code_says(
    code: str | None, in_stream: bool, error_type: str
) -> None:
    _, body = anthropic_error({"code": code, "message": "m"}, in_stream=in_stream)
    assert body == {"type": "error", "error": {"type": error_type, "message": "m"}}


def test_a_failed_response_without_a_status_gets_the_gateways_status_for_its_code() -> None:
    assert anthropic_error({"code": Code.UPSTREAM_TIMEOUT, "message": "t"})[0] == 504
    assert anthropic_error({"code": Code.UPSTREAM_STREAM_CUT, "message": "c"})[0] == 502
    assert anthropic_error({"code": Code.RATE_LIMIT_EXCEEDED, "message": "r"})[0] == 429
    assert anthropic_error({})[0] == 502


def test_a_status_code_and_message_are_an_error_too() -> None:
    assert anthropic_error((413, Code.REQUEST_TOO_LARGE, "too big")) == (
        413, {"type": "error", "error": {"type": "request_too_large", "message": "too big"}},
    )  # fmt: skip
    assert anthropic_error((418, None, "teapot"))[1]["error"]["type"] == "invalid_request_error"


# Each pattern of CONTEXT_NUMBERS, with what an upstream says and what Claude Code reads.
CONTEXT_MESSAGES = [
    ("prompt is too long: 210000 tokens > 200000 maximum", 210000, 200000),
    ("This request needs at least 188 tokens, more than the model's context window of 64 tokens. Compact "
     "or shorten the conversation.", 188, 64),
    ("Upstream error: This model's maximum context length is 32768 tokens. However, you requested 33000 "
     "tokens (32000 in the messages, 1000 in the completion). Please reduce the length.", 33000, 32768),
    ("Upstream error: This model's maximum context length is 4096 tokens. However, your request has 5000 "
     "input tokens. Please reduce the length of the input messages.", 5000, 4096),
    ("This model's maximum context length is 8192 tokens. However, your messages resulted in 8500 tokens.",
     8500, 8192),
    ("Upstream error: request (40000 tokens) exceeds the available context size (32768 tokens), try "
     "increasing it", 40000, 32768),
    ("input of 9000 tokens > 8192 allowed", 9000, 8192),
]  # fmt: skip


@pytest.mark.parametrize(("upstream", "prompt", "window"), CONTEXT_MESSAGES)
def test_a_context_too_long_is_the_400_claude_code_compacts_on(
    upstream: str, prompt: int, window: int
) -> None:
    status, body = anthropic_error(ContextLengthExceeded(upstream))
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == f"prompt is too long: {prompt} tokens > {window} maximum"
    match = CLAUDE_CODE_PTL.search(body["error"]["message"])
    assert match is not None and (int(match.group(1)), int(match.group(2))) == (prompt, window)
    # and the same after the first byte, from the failed response's code
    in_stream = anthropic_error({"code": Code.CONTEXT_LENGTH_EXCEEDED, "message": upstream}, in_stream=True)
    assert in_stream == (status, body)


def test_every_pattern_of_the_table_is_tested() -> None:
    used = {
        next(index for index, (pattern, _, _) in enumerate(CONTEXT_NUMBERS) if pattern.search(message))
        for message, _, _ in CONTEXT_MESSAGES
    }
    assert used == set(range(len(CONTEXT_NUMBERS)))


def test_a_context_too_long_without_numbers_still_says_prompt_is_too_long() -> None:
    message = prompt_too_long("Upstream error: the input exceeds the context window")
    assert message == "prompt is too long: Upstream error: the input exceeds the context window"
    assert prompt_too_long("") == "prompt is too long"
