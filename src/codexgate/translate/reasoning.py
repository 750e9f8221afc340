"""The gateway's own `encrypted_content` for reasoning items.

Codex sends reasoning items back verbatim on later turns, `encrypted_content` included, so the
gateway keeps there what it needs to replay the reasoning upstream (thinking models such as
DeepSeek reject a tool turn whose reasoning is missing). It is not encrypted: the client already
saw the text as the summary; the prefix only tells our items from a real OpenAI blob.
"""

from __future__ import annotations

import base64
import binascii

import orjson

_PREFIX = "cgr1:"


def encode_reasoning(text: str) -> str:
    return _PREFIX + base64.b64encode(orjson.dumps({"text": text})).decode("ascii")


def decode_reasoning(encrypted_content: object) -> str | None:
    """The reasoning text, or None when the blob is not ours or is damaged."""
    if not isinstance(encrypted_content, str) or not encrypted_content.startswith(_PREFIX):
        return None
    try:
        data = orjson.loads(base64.b64decode(encrypted_content[len(_PREFIX) :], validate=True))
    except (binascii.Error, orjson.JSONDecodeError, ValueError):
        return None
    text = data.get("text") if isinstance(data, dict) else None
    return text if isinstance(text, str) else None
