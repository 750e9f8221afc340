"""From an HTTP upstream's settings to its target, which the chat, responses and anthropic
kinds share: where it is, with which key and headers, within which budgets."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from codexgate.backends.http.stream import UpstreamTarget
from codexgate.config import (
    ChatUpstream,
    HttpUpstream,
    Settings,
)
from codexgate.redact import basic_credentials, split_url_credentials

__all__ = ["upstream_target"]

log = logging.getLogger("codexgate")


def upstream_target(upstream: HttpUpstream, settings: Settings, environ: Mapping[str, str]) -> UpstreamTarget:
    """Where and how to reach the upstream: its key (from the variable it names) and headers,
    and its budgets, each the upstream's own or else the global one."""
    headers = {**upstream.kind_headers(), **upstream.headers}
    if upstream.api_key_env:
        key = environ.get(upstream.api_key_env)
        if key:
            for name, value in upstream.key_headers(key).items():
                headers.setdefault(name, value)
        else:
            log.warning(
                "upstream %s: environment variable %s is not set; sending no key",
                upstream.name,
                upstream.api_key_env,
            )
    # Credentials in the URL become a Basic header: a URL is printed in logs and error
    # messages, and aiohttp refuses a URL with credentials next to an Authorization header.
    base_url, user, password = split_url_credentials(upstream.base_url)
    if user is not None or password is not None:
        if any(name.lower() == "authorization" for name in headers):
            log.warning("upstream %s: the credentials in its URL are not sent, its API key is", upstream.name)
        else:
            headers["authorization"] = f"Basic {basic_credentials(user or '', password)}"
    # Only the chat backend learns its models' windows, and only a chat upstream says whether to.
    learn_context_window = upstream.learn_context_window if isinstance(upstream, ChatUpstream) else True
    return UpstreamTarget(
        name=upstream.name,
        base_url=base_url.rstrip("/"),
        headers=headers,
        dialect=upstream.dialect(),
        connect_timeout=upstream.connect_timeout or settings.connect_timeout,
        idle_timeout=upstream.idle_timeout or settings.idle_timeout,
        max_retries=upstream.max_retries if upstream.max_retries is not None else settings.max_retries,
        retry_backoff=settings.retry_backoff,
        max_retry_wait=settings.max_retry_wait,
        models=tuple(upstream.models),
        learn_context_window=learn_context_window,
        max_output_bytes=upstream.max_output_bytes or settings.max_output_bytes,
        max_request_seconds=upstream.max_request_seconds or settings.max_request_seconds,
        first_byte_timeout=upstream.first_byte_timeout,
    )
