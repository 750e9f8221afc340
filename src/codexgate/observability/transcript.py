"""The transcript file format (version 1) of the recorder (observability/recorder.py), shared with
`codexgate replay` (commands/replay/command.py): how an upstream, a request sent upstream and its answer, and
bytes are kept, and the redaction every string of a file goes through.

Bytes are kept as text (UTF-8) or base64, with the sizes of the chunks they arrived in, so a
replay feeds the gateway the same bytes in the same pieces; a body redaction changed loses its
chunk sizes (they would no longer add up).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from codexgate.backends.scope import Captured
from codexgate.config import HttpUpstream, Settings, UpstreamConfig
from codexgate.redact import MASK, split_url_credentials

__all__ = ["CREDENTIAL_HEADER", "FORMAT_VERSION", "captured_exchange", "clean_headers", "decode_body",
           "describe_upstream", "encode_body", "guess_base_url", "scrub"]  # fmt: skip

FORMAT_VERSION = 1
# Header names whose values are credentials: left out of the file, and their configured values
# masked wherever they appear.
CREDENTIAL_HEADER = re.compile(r"(?i)auth|key|token|secret|cookie|session|password|credential")
_ENDPOINTS = ("/chat/completions", "/responses")  # what a backend appends to its base URL
# Settings of the whole gateway that shape a turn, kept so that a replay builds the same one.
TURN_SETTINGS = ("idle_timeout", "connect_timeout", "max_retries", "retry_backoff", "max_retry_wait",
                 "max_output_bytes", "max_request_seconds")  # fmt: skip


def describe_upstream(upstream: UpstreamConfig, settings: Settings) -> dict[str, Any]:
    """An upstream as a recording keeps it: what was configured (no credentials: URL userinfo
    removed, credential header values masked), the model routes to it, and the gateway's
    settings that shape a turn."""
    config = upstream.model_dump(mode="json", exclude_unset=True)
    if isinstance(upstream, HttpUpstream):
        config["base_url"] = split_url_credentials(upstream.base_url)[0].rstrip("/")
    if isinstance(upstream, HttpUpstream) and upstream.headers:
        config["headers"] = {
            name: MASK if CREDENTIAL_HEADER.search(name) else value
            for name, value in upstream.headers.items()
        }
    only = len(settings.all_upstreams()) == 1
    models = [
        model.model_dump(mode="json", exclude_unset=True)
        for model in settings.models
        if model.upstream == upstream.name or (model.upstream is None and only)
    ]
    return {
        "name": upstream.name,
        "kind": upstream.kind,
        "config": config,
        "models": models,
        "settings": {name: getattr(settings, name) for name in TURN_SETTINGS},
    }


def encode_body(data: bytes, redact: Callable[[str], str], splits: list[int] | None = None) -> dict[str, Any]:
    """Bytes as a file keeps them: `text` when UTF-8, else `base64`, redacted either way (as
    Latin-1 text, which maps every byte, for the latter); `splits`: the sizes of the chunks
    they arrived in, kept when redaction left the bytes as they were."""
    try:
        text = data.decode("utf-8")
        clean = redact(text)
        body: dict[str, Any] = {"text": clean}
        changed = clean != text
    except UnicodeDecodeError:
        latin = data.decode("latin-1")
        clean = redact(latin)
        body = {"base64": base64.b64encode(clean.encode("latin-1", "replace")).decode("ascii")}
        changed = clean != latin
    if splits is not None and not changed and len(splits) > 1:
        body["splits"] = splits
    return body


def decode_body(body: Mapping[str, Any] | None) -> list[bytes]:
    """The chunks of a body kept by `encode_body` (one chunk when the splits are not known or no
    longer add up, e.g. after the text was edited)."""
    if not body:
        return []
    if isinstance(body.get("json"), (dict, list)):
        return [orjson.dumps(body["json"])]
    if "base64" in body:
        data = base64.b64decode(body["base64"])
    else:
        data = str(body.get("text", "")).encode("utf-8")
    splits = body.get("splits")
    if (
        not isinstance(splits, list)
        or sum(splits) != len(data)
        or not all(isinstance(n, int) for n in splits)
    ):
        return [data] if data else []
    chunks, at = [], 0
    for size in splits:
        chunks.append(data[at : at + size])
        at += size
    return chunks


def captured_exchange(
    captured: Captured, chunks: list[bytes], base_url: str, redact: Callable[[str], str]
) -> dict[str, Any]:
    url = captured.url
    path = url[len(base_url) :] if base_url and url.startswith(base_url) else url
    sent: dict[str, Any] | None = None
    if captured.body is not None:
        try:
            sent = {"json": orjson.loads(captured.body)}  # readable; re-encodes to the same bytes
        except orjson.JSONDecodeError:
            sent = encode_body(captured.body, redact)
    return {
        "method": captured.method,
        "url": url,
        "path": path,
        "headers": clean_headers(captured.headers),
        "body": sent,
        "status": captured.status,
        "response_headers": clean_headers(captured.response_headers),
        "response_body": encode_body(b"".join(chunks), redact, [len(c) for c in chunks]),
        "end": captured.end,
        "error": captured.error,
        "error_kind": captured.error_kind,
        "truncated": captured.truncated,
    }


def clean_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in headers.items() if not CREDENTIAL_HEADER.search(name)}


def scrub(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` with every string (keys too) redacted. Recursive: request nesting is bounded
    (wire/responses.py MAX_DEPTH) and the rest is the gateway's own shapes."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {(redact(k) if isinstance(k, str) else k): scrub(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, redact) for v in value]
    return value


def guess_base_url(urls: list[str]) -> str | None:
    """The base URL behind the first of `urls` that ends with an endpoint a backend appends."""
    for url in urls:
        for endpoint in _ENDPOINTS:
            if url.endswith(endpoint):
                return url[: -len(endpoint)]
    return None
