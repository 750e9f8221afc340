"""Classify an upstream error (HTTP status + body, or an error object inside a stream) into the
gateway's exception tree. Status and `code`/`type` fields decide first; where an upstream only
says it in prose, every pattern lives in the one table below, each with a test."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from codexgate.errors import (
    ContextLengthExceeded,
    Overloaded,
    QuotaExceeded,
    RateLimited,
    UpstreamAuthError,
    UpstreamBadRequest,
    UpstreamError,
    UpstreamModelNotFound,
    UpstreamServerError,
    UpstreamWrongURL,
)
from codexgate.redact import redact_patterns

# Codes or types that upstreams put in their error object.
_BY_CODE: dict[str, type[UpstreamError]] = {
    "context_length_exceeded": ContextLengthExceeded,
    "exceed_context_size_error": ContextLengthExceeded,  # llama.cpp
    "string_above_max_length": ContextLengthExceeded,
    "rate_limit_exceeded": RateLimited,
    "rate_limit_error": RateLimited,
    "insufficient_quota": QuotaExceeded,
    "server_is_overloaded": Overloaded,
    "overloaded_error": Overloaded,
    "slow_down": Overloaded,
    "model_not_found": UpstreamModelNotFound,
}

# Prose patterns, for upstreams with no usable code (vLLM, Ollama, OpenRouter, LM Studio...).
PROSE_PATTERNS: tuple[tuple[re.Pattern[str], type[UpstreamError]], ...] = (
    (re.compile(r"maximum context length", re.I), ContextLengthExceeded),  # vLLM, OpenAI-likes
    (re.compile(r"context (?:length|window|size) (?:exceeded|is exceeded)", re.I), ContextLengthExceeded),
    (
        re.compile(r"exceeds? (?:the )?(?:available )?context (?:size|length|window)", re.I),
        ContextLengthExceeded,
    ),
    (re.compile(r"prompt is too long", re.I), ContextLengthExceeded),
    (re.compile(r"too many tokens", re.I), ContextLengthExceeded),
    (re.compile(r"input (?:is )?too long", re.I), ContextLengthExceeded),
    (re.compile(r"model .*(?:not found|does not exist)|no such model", re.I), UpstreamModelNotFound),
    (re.compile(r"^model: \S+$"), UpstreamModelNotFound),  # Anthropic's not_found_error for a model
    # llama.cpp answers a tool shape its template cannot take with a 500: final, not retried.
    (re.compile(r"failed to parse tools|unsupported tool type", re.I), UpstreamBadRequest),
)

_TRY_AGAIN = re.compile(r"try again in ([0-9.]+)\s*(ms|s|seconds)", re.I)


def parse_retry_after(headers: Mapping[str, str], message: str = "") -> float | None:
    """Seconds to wait, from `Retry-After`/`retry-after-ms` or "try again in Ns" prose."""
    value = headers.get("retry-after-ms")
    if value:
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            pass  # an HTTP date: rare for APIs, fall through
    match = _TRY_AGAIN.search(message)
    if match:
        amount = float(match.group(1))
        return amount / 1000 if match.group(2).lower() == "ms" else amount
    return None


def _error_object(body: bytes | Mapping[str, Any]) -> tuple[str, str | None, str | None]:
    """(message, code, type) from an upstream error body of any common shape."""
    data: Any = body
    if isinstance(body, (bytes, bytearray)):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return body.decode("utf-8", "replace").strip()[:2000], None, None
    if isinstance(data, Mapping):
        err = data.get("error", data)
        if isinstance(err, str):
            return err, None, None
        if isinstance(err, Mapping):
            message = err.get("message") or err.get("detail") or err.get("msg") or ""
            if not isinstance(message, str):
                message = orjson.dumps(message).decode()
            code = err.get("code")
            kind = err.get("type")
            return message, str(code) if code is not None else None, str(kind) if kind is not None else None
        if isinstance(data.get("detail"), str):
            return data["detail"], None, None
    return orjson.dumps(data).decode()[:2000], None, None


def classify(
    status: int,
    body: bytes | Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
    url: str | None = None,
    upstream: str | None = None,
) -> UpstreamError:
    """An upstream failure as the exception the gateway reports. `status` 0 means an error
    object inside an otherwise successful stream; `url`, what was asked, names a wrong path;
    `upstream` names it in messages that need it. Credential-shaped text in the upstream's
    message is masked: some servers echo the request's headers."""
    headers = headers or {}
    message, code, kind = _error_object(body)
    message = redact_patterns(message)
    if status == 0 and code is not None and code.isdigit() and 400 <= int(code) < 600:
        status = int(code)  # in-stream errors often carry the HTTP status as their code
    if 300 <= status < 400:
        return _redirected(status, headers, url)
    retry_after = parse_retry_after(headers, message)
    text = message or f"upstream answered HTTP {status}"
    return _worded(_class_of(code, kind, text, status), text, status, retry_after, url, upstream)


def _redirected(status: int, headers: Mapping[str, str], url: str | None) -> UpstreamWrongURL:
    """A redirect is not followed (a POST's body would not be sent again as it was): the
    upstream URL is to be set to where it points, which the message says."""
    location = next((value for name, value in headers.items() if name.lower() == "location"), None)
    where = f" at {url}" if url else ""
    to = f" to {location[:300]}" if location else ""
    return UpstreamWrongURL(
        f"The upstream answered HTTP {status}{where}, a redirect{to}. codexgate does not follow "
        "redirects: set the upstream URL to the address it points to (the API base the gateway "
        "appends /chat/completions, /responses or /messages to)."
    )


def _class_of(code: str | None, kind: str | None, text: str, status: int) -> type[UpstreamError]:
    """The upstream's `code` or `type` decides first, then its prose, then the status."""
    for key in (code, kind):
        if key and key in _BY_CODE:
            return _BY_CODE[key]
    for pattern, cls in PROSE_PATTERNS:
        if pattern.search(text):
            return cls
    if status == 429:
        return RateLimited
    if status in (401, 403):
        return UpstreamAuthError
    if status == 404:
        # No word of a model in it: the path itself is unknown, so the base URL is wrong.
        return UpstreamWrongURL
    if status == 503:
        return Overloaded
    if status >= 500 or status == 0:
        return UpstreamServerError
    if status == 413:
        return ContextLengthExceeded
    return UpstreamBadRequest


def _worded(
    cls: type[UpstreamError],
    text: str,
    status: int,
    retry_after: float | None,
    url: str | None,
    upstream: str | None,
) -> UpstreamError:
    """The exception of `cls` for the upstream's `text`, worded so that the user (or Codex)
    knows what to do about it."""
    if cls is UpstreamWrongURL:
        where = f" at {url}" if url else ""
        return UpstreamWrongURL(
            f"The upstream answered 404 Not Found{where}, with no sign of an unknown model: the "
            "upstream URL is probably wrong. It must be the API base the gateway appends "
            "/chat/completions (/responses, /messages) to, such as http://127.0.0.1:11434/v1. "
            f"Upstream said: {text[:300]}"
        )
    if cls is UpstreamAuthError:
        name = f"upstream {upstream!r}" if upstream else "the upstream"
        return UpstreamAuthError(
            f"{name[0].upper()}{name[1:]} refused the gateway's credentials (HTTP {status or 'error'}): "
            f"{text}. Check the key codexgate sends it (api_key_env / --upstream-api-key-env).",
            retry_after=retry_after,
        )
    detail = f"Upstream error: {text}"
    if cls is RateLimited:
        wait = retry_after if retry_after is not None else 1.0
        if not _TRY_AGAIN.search(detail):
            # Codex reads the delay from this phrase (contract §2.3).
            detail = f"{detail} Please try again in {wait:g}s."
        return RateLimited(detail, retry_after=wait)
    return cls(detail, retry_after=retry_after)
