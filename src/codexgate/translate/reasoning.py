"""The gateway's own `encrypted_content` for reasoning items.

Codex sends reasoning items back verbatim on later turns, `encrypted_content` included, so the
gateway keeps there what it needs to replay the reasoning upstream (thinking models such as
DeepSeek reject a tool turn whose reasoning is missing). It is not encrypted: the client already
saw the text as the summary. The blob is a prefix, which tells our items from a real OpenAI
blob, then the text as it is: reading it back is a slice (every request of a conversation
first seen reads its whole history's).
"""

from __future__ import annotations

import base64
import binascii

import orjson

_PREFIX = "cgr2:"
# Written before 2026-11-27: the base64 of {"text": ...}. Still read, for conversations that
# span the upgrade.
_PREFIX_V1 = "cgr1:"


def encode_reasoning(text: str) -> str:
    return _PREFIX + text


def decode_reasoning(encrypted_content: object) -> str | None:
    """The reasoning text, or None when the blob is not ours or is damaged."""
    if not isinstance(encrypted_content, str):
        return None
    if encrypted_content.startswith(_PREFIX):
        return encrypted_content[len(_PREFIX) :]
    if not encrypted_content.startswith(_PREFIX_V1):
        return None
    try:
        data = orjson.loads(base64.b64decode(encrypted_content[len(_PREFIX_V1) :], validate=True))
    except (binascii.Error, orjson.JSONDecodeError, ValueError):
        return None
    text = data.get("text") if isinstance(data, dict) else None
    return text if isinstance(text, str) else None
