"""Inbound API keys: where they come from, and checking a presented key in constant time.

Keys are named (so a log line or a revocation can say whose) and come from the environment:
`[[api_keys]] name = "alice"  key_env = "ALICE_KEY"` in the config file, and
`CODEXGATE_API_KEYS="alice=KEY,bob=KEY"` (a bare `KEY` gets a numbered name).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence

from codexgate.config import API_KEYS_ENV, ApiKeyConfig, ConfigError

MIN_KEY_LENGTH = 8

_NAME = re.compile(r"[A-Za-z0-9_.@-]{1,64}")


def resolve_api_keys(
    configs: Sequence[ApiKeyConfig], environ: Mapping[str, str], *, missing: list[str] | None = None
) -> dict[str, str]:
    """name -> secret, from the configured variables and CODEXGATE_API_KEYS.

    A configured key whose variable is unset raises ConfigError, unless `missing` is given:
    then its name is appended there and the key is left out (a reload revokes it rather than
    keeping the old set). Raises ConfigError for a key shorter than MIN_KEY_LENGTH or a name
    used twice."""
    keys: dict[str, str] = {}

    def add(name: str, secret: str, origin: str) -> None:
        if len(secret) < MIN_KEY_LENGTH:
            raise ConfigError(f"API key {name!r} ({origin}) is shorter than {MIN_KEY_LENGTH} characters")
        if name in keys:
            raise ConfigError(f"API key name {name!r} is used twice")
        keys[name] = secret

    for config in configs:
        secret = environ.get(config.key_env, "")
        if not secret:
            if missing is None:
                raise ConfigError(
                    f"API key {config.name!r}: environment variable {config.key_env} is not set"
                )
            missing.append(config.name)
            continue
        add(config.name, secret, config.key_env)

    entries = [e.strip() for e in environ.get(API_KEYS_ENV, "").split(",") if e.strip()]
    for number, entry in enumerate(entries, 1):
        name, sep, secret = entry.partition("=")
        if not (sep and _NAME.fullmatch(name) and len(secret) >= MIN_KEY_LENGTH):
            name, secret = f"{API_KEYS_ENV}#{number}", entry  # a bare key (base64 may end in "=")
        add(name, secret, API_KEYS_ENV)
    return keys


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The key a request carries: `Authorization: Bearer <key>` or `x-api-key: <key>`."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif name == b"x-api-key" and value.strip():
            return value.decode("latin-1").strip()
    return None


class KeyRing:
    """The accepted keys, kept as SHA-256 digests and compared with `hmac.compare_digest` against
    every entry, so neither the comparison nor the number of keys checked depends on which
    bytes of a guess were right."""

    def __init__(self, keys: Mapping[str, str] | None = None) -> None:
        self._entries: tuple[tuple[str, bytes], ...] = ()
        self.replace(keys or {})

    def replace(self, keys: Mapping[str, str]) -> None:
        self._entries = tuple((name, _digest(secret)) for name, secret in keys.items())

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._entries]

    def __bool__(self) -> bool:
        return bool(self._entries)

    def match(self, presented: str) -> str | None:
        """The name of the key `presented` is, or None."""
        digest = _digest(presented)
        found: str | None = None
        for name, expected in self._entries:
            if hmac.compare_digest(digest, expected) and found is None:
                found = name
        return found


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogateescape")).digest()
