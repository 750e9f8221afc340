"""The gateway's own `encrypted_content` for reasoning items.

Codex sends reasoning items back verbatim on later turns, `encrypted_content` included, so the
gateway keeps there what it needs to replay the reasoning upstream. It is not encrypted: the
client already saw the text as the summary. Two kinds of blob, each behind a prefix that tells
it from a real OpenAI blob:

- `cgr2:` + the text: reasoning a Chat Completions upstream gave (`reasoning_content`, `<think>`
  text). Thinking models such as DeepSeek reject a tool turn whose reasoning is missing. Reading
  it back is a slice (every request of a conversation first seen reads its whole history's).
- `cgt1:` + a JSON list: an Anthropic Messages thinking block, kept whole, since Anthropic
  refuses a tool turn whose earlier thinking does not come back with its signature, byte for
  byte: `["thinking", text, signature]` or `["redacted_thinking", data]`.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

_PREFIX = "cgr2:"
# Written before 2026-11-27: the base64 of {"text": ...}. Still read, for conversations that
# span the upgrade.
_PREFIX_V1 = "cgr1:"
_THINKING_PREFIX = "cgt1:"

__all__ = ["decode_reasoning", "decode_thinking", "encode_reasoning", "encode_thinking"]


def encode_reasoning(text: str) -> str:
    return _PREFIX + text


def encode_thinking(block: dict[str, Any]) -> str:
    """The blob of an Anthropic `thinking` block (its `thinking` and `signature`) or
    `redacted_thinking` block (its `data`)."""
    if block.get("type") == "redacted_thinking":
        kept: list[Any] = ["redacted_thinking", str(block.get("data") or "")]
    else:
        kept = ["thinking", str(block.get("thinking") or ""), str(block.get("signature") or "")]
    return _THINKING_PREFIX + orjson.dumps(kept).decode()


def decode_thinking(encrypted_content: object) -> dict[str, Any] | None:
    """The Anthropic block `encode_thinking` kept, or None when the blob is not one."""
    if not isinstance(encrypted_content, str) or not encrypted_content.startswith(_THINKING_PREFIX):
        return None
    try:
        kept = orjson.loads(encrypted_content[len(_THINKING_PREFIX) :])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(kept, list) or not kept or not all(isinstance(part, str) for part in kept):
        return None
    if kept[0] == "thinking" and len(kept) == 3:
        return {"type": "thinking", "thinking": kept[1], "signature": kept[2]}
    if kept[0] == "redacted_thinking" and len(kept) == 2:
        return {"type": "redacted_thinking", "data": kept[1]}
    return None


def decode_reasoning(encrypted_content: object) -> str | None:
    """The reasoning text (a thinking block's text; none of a redacted one's), or None when the
    blob is not ours or is damaged."""
    if not isinstance(encrypted_content, str):
        return None
    if encrypted_content.startswith(_PREFIX):
        return encrypted_content[len(_PREFIX) :]
    if encrypted_content.startswith(_THINKING_PREFIX):
        block = decode_thinking(encrypted_content)
        return block.get("thinking") if block is not None else None
    if not encrypted_content.startswith(_PREFIX_V1):
        return None
    try:
        data = orjson.loads(base64.b64decode(encrypted_content[len(_PREFIX_V1) :], validate=True))
    except (binascii.Error, orjson.JSONDecodeError, ValueError):
        return None
    text = data.get("text") if isinstance(data, dict) else None
    return text if isinstance(text, str) else None
