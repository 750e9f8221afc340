"""One exception tree for the whole gateway.

Every error carries what both boundaries need: an HTTP status and OpenAI-style body for errors
raised before a stream starts, and an `error.code` Codex acts on (codex-contract.md §2.3-2.4) for
`response.failed` after it started.
"""

from __future__ import annotations

from typing import Any, ClassVar


class Code:
    """Error codes as Codex and OpenAI clients read them."""

    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"  # Codex: final, triggers its message
    RATE_LIMIT_EXCEEDED = "rate_limit_exceeded"  # Codex: retried, honours "try again in Ns"
    SERVER_IS_OVERLOADED = "server_is_overloaded"  # Codex: final
    INSUFFICIENT_QUOTA = "insufficient_quota"  # Codex: final
    INVALID_PROMPT = "invalid_prompt"  # Codex: final
    INVALID_REQUEST = "invalid_request_error"
    MODEL_NOT_FOUND = "model_not_found"
    MODEL_NOT_ALLOWED = "model_not_allowed"  # the caller's API key may not use that model
    UPSTREAM_AUTH = "upstream_authentication_failed"
    UPSTREAM_WRONG_URL = "upstream_wrong_url"  # Codex: final (a 400), shows the message at once
    UPSTREAM_UNREACHABLE = "upstream_unreachable"  # retried by Codex
    UPSTREAM_TIMEOUT = "upstream_timeout"  # retried by Codex
    UPSTREAM_STREAM_CUT = "upstream_stream_cut"  # retried by Codex
    UPSTREAM_ERROR = "upstream_error"  # retried by Codex
    UPSTREAM_RESPONSE_TOO_LARGE = "upstream_response_too_large"  # retried by Codex
    MODEL_OUTPUT_LOOP = "model_output_loop"  # retried by Codex: a new sample often escapes
    NO_UPSTREAM = "no_upstream_configured"
    EMBEDDED_MODEL_STARTING = "embedded_model_starting"  # 503 while the embedded model builds
    REQUEST_TOO_LARGE = "request_too_large"
    UNSUPPORTED_FILE = "unsupported_file"  # an input_file the gateway cannot turn into text
    FILE_WITHOUT_TEXT = "file_without_text"  # a PDF with no text layer (a scan)
    FILE_TOO_LARGE = "file_too_large"  # past the bytes, pages or characters a file may have
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    INTERNAL = "internal_error"


class GatewayError(Exception):
    """The root of the tree. A subclass states its HTTP status, OpenAI error type and default
    code in its class line (`class X(GatewayError, status=404, code=Code.NOT_FOUND)`); what it
    leaves out it inherits."""

    status: ClassVar[int] = 500
    error_type: ClassVar[str] = "server_error"
    default_code: ClassVar[str] = Code.INTERNAL

    def __init_subclass__(
        cls, *, status: int | None = None, error_type: str | None = None, code: str | None = None
    ) -> None:
        super().__init_subclass__()
        if status is not None:
            cls.status = status
        if error_type is not None:
            cls.error_type = error_type
        if code is not None:
            cls.default_code = code

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.param = param
        self.retry_after = retry_after
        if status is not None:
            self.status = status  # type: ignore[misc]

    def to_body(self) -> dict[str, Any]:
        """The OpenAI error object: {"error": {message, type, param, code}}."""
        return {
            "error": {
                "message": self.message,
                "type": self.error_type,
                "param": self.param,
                "code": self.code,
            }
        }

    def to_response_error(self) -> dict[str, Any]:
        """The `error` object of a failed response resource."""
        return {"code": self.code, "message": self.message}


_CLIENT_SIDE = "invalid_request_error"  # the error type of what the client must change


class InvalidRequest(GatewayError, status=400, error_type=_CLIENT_SIDE, code=Code.INVALID_REQUEST):
    """The client's request is wrong; names the parameter."""


class RequestTooLarge(InvalidRequest, status=413, code=Code.REQUEST_TOO_LARGE):
    """The request body is larger than the gateway takes."""


class NotFound(InvalidRequest, status=404, code=Code.NOT_FOUND):
    """No such route, or no such stored response."""


class ModelNotFound(InvalidRequest, status=404, code=Code.MODEL_NOT_FOUND):
    """No route serves the model the client named."""


class NoUpstream(GatewayError, status=503, code=Code.NO_UPSTREAM):
    """No upstream is configured or discovered for this request."""


class UpstreamError(GatewayError, status=502, code=Code.UPSTREAM_ERROR):
    """Anything that went wrong on the upstream side. A subclass also says whether the gateway
    may retry it before answering (`retryable=True` in its class line)."""

    retryable: ClassVar[bool] = False  # may the gateway retry before answering?
    # What failed, in words that follow the upstream's name ("refused the connection: nothing is
    # listening on 127.0.0.1:8000"), set by the transport, which knows what failed but not
    # which upstream it was; the backend that knows names it. None: the message says it all.
    reason: str | None = None

    def __init_subclass__(cls, *, retryable: bool | None = None, **kinds: Any) -> None:
        super().__init_subclass__(**kinds)
        if retryable is not None:
            cls.retryable = retryable


class UpstreamConnectError(UpstreamError, code=Code.UPSTREAM_UNREACHABLE, retryable=True):
    """The upstream could not be reached (or the Codex agent could not start)."""


class UpstreamTimeout(UpstreamError, status=504, code=Code.UPSTREAM_TIMEOUT, retryable=True):
    """The upstream did not answer in time, or went silent while streaming."""


class UpstreamStreamCut(UpstreamError, code=Code.UPSTREAM_STREAM_CUT):
    """The upstream stream ended without a finish reason and without [DONE]."""


class UpstreamResponseTooLarge(UpstreamError, code=Code.UPSTREAM_RESPONSE_TOO_LARGE):
    """The upstream sent a line, event or body larger than the gateway holds."""


class UpstreamServerError(UpstreamError, retryable=True):
    """A 5xx the gateway may retry."""


class ContextLengthExceeded(
    UpstreamError, status=400, error_type=_CLIENT_SIDE, code=Code.CONTEXT_LENGTH_EXCEEDED
):
    """The input is longer than the upstream model's context."""


# "rate_limit_error": what openai-python and OpenAI's API use
class RateLimited(UpstreamError, status=429, error_type="rate_limit_error", code=Code.RATE_LIMIT_EXCEEDED):
    """The upstream asks to slow down (its "try again in Ns" is kept in `retry_after`)."""


class Overloaded(UpstreamError, status=503, code=Code.SERVER_IS_OVERLOADED):
    """The upstream says it is overloaded."""


class QuotaExceeded(UpstreamError, status=429, error_type="insufficient_quota", code=Code.INSUFFICIENT_QUOTA):
    """The upstream account is out of quota."""


class UpstreamAuthError(UpstreamError, status=502, code=Code.UPSTREAM_AUTH):
    """The upstream refused the gateway's own key. Not a 401: Codex reads that as its login to
    the gateway failing."""


class UpstreamBadRequest(UpstreamError, status=400, error_type=_CLIENT_SIDE, code=Code.INVALID_REQUEST):
    """The upstream refused the translated request (4xx other than the ones above)."""


class UpstreamModelNotFound(UpstreamError, status=404, error_type=_CLIENT_SIDE, code=Code.MODEL_NOT_FOUND):
    """The upstream does not know the model it was asked for."""


class UpstreamWrongURL(UpstreamError, status=400, error_type=_CLIENT_SIDE, code=Code.UPSTREAM_WRONG_URL):
    """The upstream answered 404 for its own API path: the configured base URL is wrong.

    A 400, not a 5xx: Codex neither retries a 400 nor replaces its message, so the user reads
    at once what to fix; a 5xx would be retried 30 times and end as "high demand"."""


class ModelOutputLoop(UpstreamError, code=Code.MODEL_OUTPUT_LOOP):
    """The gateway stopped a generation stuck repeating one piece of text."""


class KeyLimitReached(GatewayError, status=429, error_type="rate_limit_error", code=Code.RATE_LIMIT_EXCEEDED):
    """The caller's API key is past its requests_per_minute, tokens_per_minute or max_concurrent
    (server/keys/admission.py); `retry_after` says when to try again. Codex retries it."""


class KeyBudgetSpent(GatewayError, status=429, error_type="insufficient_quota", code=Code.INSUFFICIENT_QUOTA):
    """The caller's API key spent its tokens_per_day; it renews at 00:00 UTC."""


class ModelNotAllowed(GatewayError, status=403, error_type="permission_error", code=Code.MODEL_NOT_ALLOWED):
    """The caller's API key may not use the model it named (its `models`)."""


def failed_answer(error: dict[str, Any] | None) -> tuple[int, dict[str, Any]]:
    """A response that failed after the upstream accepted it (the `error` of its
    `response.failed`), answered as one body instead of a stream: 504 when the upstream timed
    out, else 502, with the OpenAI error body and the failure's code and message."""
    error = error or {}
    status = 504 if error.get("code") == Code.UPSTREAM_TIMEOUT else 502
    body = {"error": {"message": error.get("message", ""), "type": "server_error", "param": None,
                      "code": error.get("code")}}  # fmt: skip
    return status, body
