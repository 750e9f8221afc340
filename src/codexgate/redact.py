"""Keep secrets out of everything the gateway writes: relayed error messages and log lines.

Two layers. `redact_patterns` removes what looks like a credential whatever its value (URL
userinfo, `Bearer`/`Basic` tokens, `api_key=...` pairs, `sk-...` keys): it needs no
configuration, so pure code such as the upstream-error classifier can apply it. A `Redactor`
also knows the exact secrets this process holds (upstream keys, URL passwords, inbound API
keys) and removes those wherever they appear, e.g. in an upstream error that echoes the
request's headers in some other shape.

No I/O here: `wire/` and `translate/` may import it.
"""

from __future__ import annotations

import base64
import logging
import re
import weakref
from collections.abc import Callable, Iterable
from urllib.parse import quote, unquote, urlsplit, urlunsplit

MASK = "[redacted]"

# Shorter values are not secrets worth the damage of masking them everywhere they occur.
_MIN_SECRET_LENGTH = 4

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # scheme://user:password@host  ->  scheme://[redacted]@host
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@"), rf"\1{MASK}@"),
    # Authorization header values, echoed in whatever shape
    # (a token has a digit, so prose such as "basic functionality" is left alone).
    (
        re.compile(
            r"(?i)\b(bearer|basic)(\s+|[\"']?\s*[:=]\s*[\"']?)(?=[A-Za-z._~+/=-]*[0-9])[\w.~+/=-]{8,}"
        ),
        rf"\1\2{MASK}",
    ),
    # api_key=..., "x-api-key": "...", apikey: ...
    (
        re.compile(r"(?i)((?:x-)?api[-_]?key[\"']?\s*[:=]\s*[\"']?)[^\s\"',;}&]{4,}"),
        rf"\1{MASK}",
    ),
    # OpenAI-style secret keys (sk-..., sk-proj-...)
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), MASK),
)


# What each pattern needs in a text folded to lower case: `@`, `bearer` or `basic`, `api`,
# `sk-`. An ASCII text with none of them is left as it is, without running the patterns: every
# access line's message and fields pass here, and the case-blind patterns cost ~27 us over
# a 200-character line, the cues ~0.7. (A text that is not ASCII always runs them: the
# patterns ignore case the Unicode way, where other letters fold to these.)
_CUES = ("@", "bearer", "basic", "api", "sk-")


def redact_patterns(text: str) -> str:
    """`text` with anything shaped like a credential masked."""
    if text.isascii():
        folded = text.lower()
        if not any(cue in folded for cue in _CUES):
            return text
    return _masked(text)


def _masked(text: str) -> str:
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def split_url_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(url without userinfo, username, password); the credentials percent-decoded, None when
    absent."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, sep, password = userinfo.partition(":")
    clean = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return clean, unquote(user), unquote(password) if sep else None


def redact_url(url: str) -> str:
    """`url` with its userinfo (if any) masked, for log lines and messages."""
    clean, user, password = split_url_credentials(url)
    if user is None and password is None:
        return url
    parts = urlsplit(clean)
    return urlunsplit((parts.scheme, f"{MASK}@{parts.netloc}", parts.path, parts.query, parts.fragment))


def basic_credentials(user: str, password: str | None) -> str:
    """The token of an `Authorization: Basic` header."""
    return base64.b64encode(f"{user}:{password or ''}".encode()).decode("ascii")


def url_secrets(url: str) -> list[str]:
    """The values a Redactor must know to mask the credentials of `url` in any form."""
    _, user, password = split_url_credentials(url)
    if user is None and password is None:
        return []
    found = [basic_credentials(user or "", password)]
    if password:
        found += [password, quote(password, safe="")]
    return found


class Redactor:
    """Masks known secret values, then credential-shaped text. Secrets are only ever added: a
    revoked key is still a secret."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: set[str] = set()
        self._exact: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        new = {s for s in secrets if s and len(s) >= _MIN_SECRET_LENGTH} - self._secrets
        if not new:
            return
        self._secrets |= new
        # Longest first, so a secret that contains another is masked whole.
        alternatives = sorted(self._secrets, key=len, reverse=True)
        self._exact = re.compile("|".join(re.escape(s) for s in alternatives))

    def redact(self, text: str) -> str:
        if self._exact is not None:
            text = self._exact.sub(MASK, text)
        return redact_patterns(text)


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in a record's message, traceback and stack."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        global _last_cleaned
        last = _last_cleaned
        if last is not None and last[0] is self._redactor and last[1]() is record:
            return True  # its logger's filter cleaned it: this is its handler's
        redact = self._redactor.redact
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler's error path
            return True
        fields = getattr(record, "fields", None)  # structured fields (an access line's), for JSON logs
        texts = [v for v in fields.values() if isinstance(v, str)] if isinstance(fields, dict) else []
        if texts and _masks_none(redact, [message, *texts]):
            clean, fields = message, None  # nothing to mask, neither the message nor a field
        else:
            clean = redact(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
            # uvicorn's coloured formatter prints `color_message` with the record's args, which
            # are gone now: without this it would print "%d" where the numbers were.
            record.__dict__.pop("color_message", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                if isinstance(value, str):
                    fields[key] = redact(value)
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        _last_cleaned = (self._redactor, weakref.ref(record))
        return True


# The record a RedactingFilter cleaned last, and with which redactor: a gateway record passes
# its logger's filter, then its handler's (install_log_redaction, server/serve.py), which then
# has nothing left to mask. One pair for all threads: when another thread's record is cleaned
# in between, the handler's filter cleans this one again, which changes nothing.
_last_cleaned: tuple[Redactor, weakref.ref[logging.LogRecord]] | None = None


def _masks_none(redact: Callable[[str], str], texts: list[str]) -> bool:
    """Whether `redact` leaves every one of `texts` as it is, found in one pass over them all
    (an access line's message and its ten or so fields: one pass instead of one each). Sound
    because no pattern is anchored to a text's edges: a secret in one text is masked in the
    joined texts too. A match only the joining makes (across the newline) just means the texts
    are masked one by one."""
    joined = "\n".join(texts)
    return redact(joined) == joined


_LOGGER_PREFIXES = ("codexgate", "uvicorn")


def install_log_redaction(redactor: Redactor) -> Callable[[], None]:
    """Attach a RedactingFilter to the gateway's and uvicorn's loggers (a filter on a parent
    logger does not see its children's records, so each existing one gets it). Returns the
    function that removes them again."""
    log_filter = RedactingFilter(redactor)
    names = [
        name
        for name in [*logging.root.manager.loggerDict, *_LOGGER_PREFIXES]
        if name.split(".", 1)[0] in _LOGGER_PREFIXES
    ]
    loggers = [logging.getLogger(name) for name in dict.fromkeys(names)]
    for logger in loggers:
        logger.addFilter(log_filter)

    def uninstall() -> None:
        for logger in loggers:
            logger.removeFilter(log_filter)

    return uninstall
