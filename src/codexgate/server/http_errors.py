"""The one place errors become HTTP: a GatewayError before the first byte (status, OpenAI-style
body, headers), a failed non-streamed response (502, 504 for a timeout), and the redaction of
upstream text that may echo a secret. After the first byte of a stream an error is a
`response.failed` event instead (the builder's), redacted here on its way out."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson

from codexgate.errors import GatewayError, failed_answer
from codexgate.redact import Redactor
from codexgate.server.asgi import Send
from codexgate.wire.responses_events import Event

JSON_HEADERS = [(b"content-type", b"application/json")]


async def send_json(
    send: Send, status: int, body: Any, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": JSON_HEADERS + (headers or [])})
    await send({"type": "http.response.body", "body": orjson.dumps(body)})


# How a face's clients read an error before the first byte: the HTTP status and the body.
ErrorShape = Callable[[GatewayError], tuple[int, dict[str, Any]]]


def openai_shape(error: GatewayError) -> tuple[int, dict[str, Any]]:
    """OpenAI's: {"error": {message, type, param, code}} (the Responses and Chat faces)."""
    return error.status, error.to_body()


async def send_error(
    send: Send,
    error: GatewayError,
    redactor: Redactor | None = None,
    headers: list[tuple[bytes, bytes]] | None = None,
    shape: ErrorShape = openai_shape,
) -> None:
    """The error as an HTTP response in `shape`, its message redacted (upstream text may echo
    secrets), with `headers` (a limited key's rate-limit headers) and, for a 429, 503 or 529
    that says when, Retry-After."""
    if redactor is not None:
        error.message = redactor.redact(error.message)
    status, body = shape(error)
    headers = list(headers or ())
    if status in (429, 503, 529) and error.retry_after is not None:
        headers.append((b"retry-after", str(max(1, math.ceil(error.retry_after))).encode()))
    if status in (408, 413):
        headers.append((b"connection", b"close"))  # the rest of the body is not read
    await send_json(send, status, body, headers)


def redact_failure(event: Event, redactor: Redactor) -> None:
    """Mask secrets in a `response.failed` event's message (upstream text may echo them)."""
    error = event["response"].get("error")
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        event["response"]["error"] = {**error, "message": redactor.redact(error["message"])}


def failed_response(event: Event) -> tuple[int, dict[str, Any]]:
    """A non-streamed answer that failed (see errors.failed_answer)."""
    return failed_answer(event["response"].get("error"))
