"""`POST /v1/messages/count_tokens`: the input tokens of a Messages request, estimated. Pure.

No backend of the gateway counts tokens without running the model, so the count is the
gateway's own estimate, the rule it uses for usage when an upstream reports none
(translate/envelope.py `estimated_usage`, measured by bench/usage_estimate.py): the bytes of
the request as a model is given it, divided by 4. What is counted is the canonical request the
face made (translate/messages_face/request.py), so what no model reads is not counted (Claude
Code's billing line, server tools, signatures of the gateway's own thinking blocks):

- instructions, input items and tools as JSON (their structure stands for the chat template's
  tokens around each message, as the chat request's JSON does in the usage estimate);
- a file (a PDF) as the text the input_file reader makes of it (translate/files.py), which is
  what a chat model reads; a file that reader refuses counts its data's bytes instead (it
  could still be read by an upstream that takes files itself);
- an image as IMAGE_TOKENS: Anthropic's count for an image at the largest size it is read
  (about 1.15 megapixels, width x height / 750), so a count is rarely low.

Claude Code asks for counts when its user looks at the context (`/context`) and falls back to
its own estimate when the call fails; the count sizes no request.
"""

from __future__ import annotations

from typing import Any

import orjson

from codexgate.errors import InvalidRequest
from codexgate.translate.files import file_text
from codexgate.translate.messages_face.request import MessagesAsk

__all__ = ["BYTES_PER_TOKEN", "IMAGE_TOKENS", "count_tokens", "estimate_input_tokens"]

BYTES_PER_TOKEN = 4
IMAGE_TOKENS = 1600


def count_tokens(ask: MessagesAsk) -> dict[str, int]:
    """The body of a count_tokens answer: `{"input_tokens": N}`."""
    return {"input_tokens": estimate_input_tokens(ask)}


def estimate_input_tokens(ask: MessagesAsk) -> int:
    """The estimated input tokens of the request `ask` holds."""
    req = ask.request
    images = 0
    items: list[Any] = []
    for index, item in enumerate(req.input):
        counted, found = _countable(item, f"input[{index}]")
        items.append(counted)
        images += found
    size = len(orjson.dumps({"instructions": req.instructions, "input": items, "tools": req.tools}))
    return -(-size // BYTES_PER_TOKEN) + images * IMAGE_TOKENS


def _countable(item: dict[str, Any], param: str) -> tuple[dict[str, Any], int]:
    """`item` as it is counted (its images left out, its files as their text) and how many
    images it holds. The item itself is not changed."""
    field = "content" if item.get("type") == "message" else "output"
    parts = item.get(field)
    if not isinstance(parts, list) or not any(part.get("type") in _HEAVY for part in parts):
        return item, 0
    images = 0
    counted: list[dict[str, Any]] = []
    for number, part in enumerate(parts):
        kind = part.get("type")
        if kind == "input_image":
            images += 1
        elif kind == "input_file":
            counted.append({"type": "input_text", "text": _file_text(part, f"{param}.{field}[{number}]")})
        else:
            counted.append(part)
    return {**item, field: counted}, images


_HEAVY = frozenset(("input_image", "input_file"))


def _file_text(part: dict[str, Any], param: str) -> str:
    try:
        return file_text(part, param)
    except InvalidRequest:  # a scan, an encrypted PDF: counted by its size
        return str(part.get("file_data") or "")
