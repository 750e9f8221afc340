"""Answers cut short by a failure, marked on the way out and left out on the way back in.

When a response fails mid-answer (a loop the guard stopped, a cut or idle stream, an error
object in the stream), the stream still closes every open item before `response.failed`, and
Codex records every `output_item.done` item into its history: the failed attempt's partial
answer then comes back on Codex's retry, and on every later turn (checked with Codex 0.169).
Sent upstream as the last message, a chat server takes it as text to continue (llama.cpp: so a
looping model loops again at once) or refuses it (llama.cpp: 400 "Cannot have 2 or more
assistant messages at the end of the list" after two failed attempts); in the middle of the
history it puts loop text and back-to-back assistant messages before the model.

Where this belongs: the chat backend's translators, at both ends. `ChatStreamTranslator.fail()`
is the one place every failure ends, so it closes the failed response with one more item, a
*cut marker*: a reasoning item with an empty summary whose `encrypted_content` (the gateway's
own channel, which Codex echoes verbatim) names the ids of the response's items. Codex echoes
item ids too, so `translate/chat_upstream/request.py` leaves the named items and the marker out of the chat
request. Decided against, after watching Codex 0.169:
- new ids for the items `fail()` closes: `output_item.done` must carry the id its `.added` had,
  and items finished before the failure (reasoning, text before a cut tool call) went out with
  their ids already;
- no `output_item.done` for a cut item: an item added and never done is a malformed stream for
  every other client, and Codex would still keep the items finished before the failure;
- `status: "incomplete"` (Codex echoes it): a `finish_reason: length` answer has it too, and that
  one is a real answer the user may ask to continue.
An empty reasoning item is also the least visible item to Codex (OpenAI's hidden reasoning has
the same shape; `codex exec` shows nothing for it). A message the gateway did not mark, such as
a client's prefill, passes through unchanged; so does history from a client that drops item
ids or `encrypted_content`, as before this marker existed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from typing import Any

import orjson

_PREFIX = "cgcut1:"


def cut_marker(marker_id: str, cut_ids: Iterable[str]) -> dict[str, Any]:
    """The finished marker item: names `cut_ids` and itself."""
    ids = [*cut_ids, marker_id]
    blob = _PREFIX + base64.b64encode(orjson.dumps({"cut": ids})).decode("ascii")
    return {"type": "reasoning", "id": marker_id, "summary": [], "encrypted_content": blob}


def cut_ids(items: Iterable[Any]) -> set[str]:
    """The ids named by every cut marker among `items` (a request's input)."""
    found: set[str] = set()
    for item in items:
        if not isinstance(item, dict) or item.get("type") != "reasoning":
            continue
        blob = item.get("encrypted_content")
        if not isinstance(blob, str) or not blob.startswith(_PREFIX):
            continue
        try:
            data = orjson.loads(base64.b64decode(blob[len(_PREFIX) :], validate=True))
        except (binascii.Error, orjson.JSONDecodeError, ValueError):
            continue
        ids = data.get("cut") if isinstance(data, dict) else None
        if isinstance(ids, list):
            found.update(i for i in ids if isinstance(i, str))
    return found


def is_cut(item: dict[str, Any], ids: set[str]) -> bool:
    """Whether `item` is one of the named parts of a failed answer (never a user's message)."""
    if not ids or item.get("id") not in ids:
        return False
    kind = item.get("type")
    return kind == "reasoning" or (kind == "message" and item.get("role") == "assistant")
