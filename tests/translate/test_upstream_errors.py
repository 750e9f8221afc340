"""Upstream failures -> the gateway's errors (and so the codes Codex acts on)."""

from __future__ import annotations

import pytest

from codexgate.errors import (
    ContextLengthExceeded,
    Overloaded,
    QuotaExceeded,
    RateLimited,
    UpstreamAuthError,
    UpstreamBadRequest,
    UpstreamModelNotFound,
    UpstreamServerError,
    UpstreamWrongURL,
)
from codexgate.translate.upstream_errors import PROSE_PATTERNS, classify, parse_retry_after


def err(message: str, code: object = None, kind: object = None) -> dict[str, object]:
    return {"error": {"message": message, "code": code, "type": kind}}


@pytest.mark.parametrize(
    "status,body,cls,code",
    [
        (400, err("x", code="context_length_exceeded"), ContextLengthExceeded, "context_length_exceeded"),
        (400, err("x", kind="exceed_context_size_error"), ContextLengthExceeded, "context_length_exceeded"),
        (429, err("x", code="insufficient_quota"), QuotaExceeded, "insufficient_quota"),
        (429, err("slow"), RateLimited, "rate_limit_exceeded"),
        (503, err("busy"), Overloaded, "server_is_overloaded"),
        (529, err("x", kind="overloaded_error"), Overloaded, "server_is_overloaded"),
        (401, err("no"), UpstreamAuthError, "upstream_authentication_failed"),
        (403, b"forbidden", UpstreamAuthError, "upstream_authentication_failed"),
        (404, err("nope"), UpstreamWrongURL, "upstream_wrong_url"),
        (404, {"detail": "Not Found"}, UpstreamWrongURL, "upstream_wrong_url"),
        (404, b"404 page not found", UpstreamWrongURL, "upstream_wrong_url"),
        (404, err("no such thing", code="model_not_found"), UpstreamModelNotFound, "model_not_found"),
        (
            404,
            err("The model `x` does not exist.", kind="NotFoundError"),
            UpstreamModelNotFound,
            "model_not_found",
        ),
        (
            404,
            {"type": "error", "error": {"type": "not_found_error", "message": "model: claude-x"}},
            UpstreamModelNotFound,
            "model_not_found",
        ),
        (
            400,
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 210000 tokens > 200000 maximum",
                },
            },
            ContextLengthExceeded,
            "context_length_exceeded",
        ),
        (
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            Overloaded,
            "server_is_overloaded",
        ),
        (
            429,
            {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}},
            RateLimited,
            "rate_limit_exceeded",
        ),
        (
            401,
            {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}},
            UpstreamAuthError,
            "upstream_authentication_failed",
        ),
        (500, b"<html>oops</html>", UpstreamServerError, "upstream_error"),
        (413, b"too big", ContextLengthExceeded, "context_length_exceeded"),
        (422, {"detail": [{"msg": "field required"}]}, UpstreamBadRequest, "invalid_request_error"),
    ],
)
def test_status_code_and_type_decide_first(status: int, body: object, cls: type, code: str) -> None:
    error = classify(status, body)  # type: ignore[arg-type]
    assert type(error) is cls and error.code == code


# One example per prose pattern, as real servers word it.
PROSE_EXAMPLES = {
    "maximum context length": "This model's maximum context length is 32768 tokens. However, you requested 40000",
    "context (?:length|window|size) (?:exceeded|is exceeded)": "Error: context length exceeded",
    "exceeds? (?:the )?(?:available )?context (?:size|length|window)": "the request exceeds the available context size",
    "prompt is too long": "prompt is too long: 210000 tokens > 200000 maximum",
    "too many tokens": "Input has too many tokens",
    "input (?:is )?too long": "Input is too long for requested model.",
    "model .*(?:not found|does not exist)|no such model": 'model "llama9" not found, try pulling it first',
    r"^model: \S+$": "model: claude-sonnet-9",  # Anthropic's 404 not_found_error
    "failed to parse tools|unsupported tool type": 'Failed to parse tools: Unsupported tool type: {"type":"custom"}',
}


def test_every_prose_pattern_has_an_example() -> None:
    assert {p.pattern for p, _ in PROSE_PATTERNS} == set(PROSE_EXAMPLES)


@pytest.mark.parametrize("pattern,cls", PROSE_PATTERNS, ids=[p.pattern for p, _ in PROSE_PATTERNS])
def test_prose_patterns(pattern: object, cls: type) -> None:
    message = PROSE_EXAMPLES[pattern.pattern]  # type: ignore[attr-defined]
    assert type(classify(400, err(message))) is cls
    assert type(classify(500, {"error": message})) is cls


def test_rate_limit_message_tells_codex_when_to_retry() -> None:
    error = classify(429, err("Too many requests"), {"retry-after": "3"})
    assert error.retry_after == 3.0 and "try again in 3s" in error.message
    prose = classify(429, err("Rate limit reached. Please try again in 250ms."))
    assert prose.retry_after == 0.25 and prose.message.count("try again in") == 1


@pytest.mark.parametrize(
    "headers,message,expected",
    [
        ({"retry-after-ms": "1500"}, "", 1.5),
        ({"retry-after": "2"}, "", 2.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, "", None),
        ({}, "try again in 4 seconds", 4.0),
        ({}, "no hint", None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], message: str, expected: float | None) -> None:
    assert parse_retry_after(headers, message) == expected


def test_error_inside_a_stream_uses_its_numeric_code_as_status() -> None:
    assert type(classify(0, {"error": {"message": "x", "code": 429}})) is RateLimited
    assert type(classify(0, {"error": {"message": "boom"}})) is UpstreamServerError


@pytest.mark.parametrize("status", [301, 307, 308])
def test_a_redirect_says_where_to_point_the_upstream(status: int) -> None:
    # Not followed (a POST's body is not sent again as it was): the user sets the URL.
    error = classify(
        status, b"<html>moved</html>", {"Location": "https://models.example/v1/chat/completions"},
        "http://models.example/v1/chat/completions",
    )  # fmt: skip
    assert isinstance(error, UpstreamWrongURL) and error.status == 400
    assert f"HTTP {status} at http://models.example/v1/chat/completions" in error.message
    assert "a redirect to https://models.example/v1/chat/completions" in error.message
