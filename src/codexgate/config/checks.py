"""What the settings share: the two errors, the bounds most numbers take, the strict base of
every table, and the checks more than one table makes (an upstream URL, a text tool call mode)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from codexgate.translate.open_models.textcalls import MODES as TEXT_TOOL_CALL_MODES


class ConfigError(Exception):
    """The settings cannot be built; the message says what to fix."""


class SettingError(ValueError):
    """A check across settings that failed at `loc` (e.g. ("models", 0) or ("base_url",),
    relative to the table that checks), so the message can name the entry and its source;
    `value`, when given, is shown after the setting's name as pydantic's own errors show it."""

    def __init__(self, loc: tuple[str | int, ...], message: str, value: Any = None) -> None:
        super().__init__(message)
        self.loc = loc
        self.value = value


# Bounds shared by many settings: a value outside them is certainly a mistake (a timeout of
# more than a day, a budget of a terabyte), not a wish.
DAY = 86_400.0
GIB = 1024**3
MAX_WINDOW = 100_000_000  # tokens; the largest context windows offered are ~10M


class Strict(BaseModel):
    """A table of settings: an unknown key is an error, and settings do not change once built."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def unknown_setting(close: str | None) -> str:
    """What is said of a key a table does not take, with the setting it is nearest to."""
    return "unknown setting" + (f"; did you mean {close!r}?" if close else "")


def check_text_tool_calls(mode: str) -> None:
    """Raises SettingError for a mode no text tool call parser has."""
    if mode not in TEXT_TOOL_CALL_MODES:
        modes = ", ".join(TEXT_TOOL_CALL_MODES)
        raise SettingError(("text_tool_calls",), f"text_tool_calls must be one of {modes}, not {mode!r}")


# Paths that end an endpoint rather than an API base: the gateway appends /chat/completions
# (and /models) to the base URL itself.
_ENDPOINT_SUFFIXES = ("/chat/completions", "/completions", "/responses", "/models", "/api/chat",
                      "/api/generate", "/embeddings")  # fmt: skip


_HOST = re.compile(r"^[A-Za-z0-9._:\-\[\]%]+$")


def check_upstream_url(url: str) -> str:
    """The base URL of a Chat Completions API, such as http://127.0.0.1:11434/v1. Raises
    ValueError with the fix when it is not one."""
    text = url.strip()
    parts = urlsplit(text)
    if "://" not in text:
        guess = f"http://{text.lstrip('/')}"
        if _HOST.match(urlsplit(guess).hostname or ""):
            if not urlsplit(guess).path.strip("/"):
                guess = guess.rstrip("/") + "/v1"
            raise ValueError(f"upstream URL {url!r} has no scheme; did you mean {guess}?")
        raise ValueError(f"upstream URL {url!r} is not a URL; give one like http://127.0.0.1:11434/v1")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"upstream URL {url!r} must use http:// or https://, not {parts.scheme}://")
    try:
        parts.port  # noqa: B018 - raises for a port that is not a number or out of range
    except ValueError as exc:
        raise ValueError(f"upstream URL {url!r} has a bad port: {exc}") from None
    if not parts.hostname or not _HOST.match(parts.hostname):
        raise ValueError(f"upstream URL {url!r} has no host, e.g. http://127.0.0.1:11434/v1")
    path = parts.path.rstrip("/")
    for suffix in _ENDPOINT_SUFFIXES:
        if path.endswith(suffix):
            base = text[: text.index(parts.netloc) + len(parts.netloc)] + path[: -len(suffix)]
            raise ValueError(
                f"upstream URL {url!r} names an endpoint; give the API base the gateway appends "
                f"{suffix} to: {base}"
            )
    if parts.query or parts.fragment:
        raise ValueError(f"upstream URL {url!r} must not carry a query or fragment")
    return text
