"""Thinking blocks <-> reasoning items: the one rule both directions of the Messages face use,
and the `anthropic` backend with them. Pure.

A Messages client sends back every thinking block it was given, `signature` byte for byte, as a
Responses client sends `encrypted_content`. So the signature is where the gateway keeps what a
reasoning item needs to return to the upstream it came from:

- going out, a reasoning item whose `encrypted_content` is an Anthropic block the gateway kept
  whole (`cgt1:`, translate/reasoning.py) becomes that block exactly, its text and signature as
  the upstream gave them, or its `redacted_thinking` data; any other reasoning item becomes a
  thinking block with the summary text and `signature = "cgs1:" + (encrypted_content or "")`.
  With `thinking.display: "omitted"` the text is left out, but the signature still carries the
  blob (a chat upstream's `cgr2:` + text), so the reasoning still returns upstream;
- coming back, a thinking block whose signature starts with `cgs1:` is the gateway's: a
  reasoning item with the block's text as its summary and the rest of the signature as its
  `encrypted_content`; any other signature is an upstream's own (Anthropic's), and the block is
  kept whole in a `cgt1:` blob, as is a `redacted_thinking` block.
"""

from __future__ import annotations

from typing import Any

from codexgate.translate.reasoning import decode_thinking, encode_thinking

__all__ = ["SIGNATURE_PREFIX", "reasoning_item", "reasoning_text", "thinking_block"]

SIGNATURE_PREFIX = "cgs1:"


def reasoning_item(block: dict[str, Any]) -> dict[str, Any]:
    """The reasoning item of a `thinking` or `redacted_thinking` block a client sent back
    (checked by wire/messages.py)."""
    if block["type"] == "redacted_thinking":
        return {"type": "reasoning", "summary": [], "encrypted_content": encode_thinking(block)}
    text, signature = block["thinking"], block["signature"]
    summary = [{"type": "summary_text", "text": text}] if text else []
    if signature.startswith(SIGNATURE_PREFIX):
        item: dict[str, Any] = {"type": "reasoning", "summary": summary}
        blob = signature[len(SIGNATURE_PREFIX) :]
        if blob:
            item["encrypted_content"] = blob
        return item
    return {"type": "reasoning", "summary": summary, "encrypted_content": encode_thinking(block)}


def reasoning_text(item: dict[str, Any]) -> str:
    """A reasoning item's text as a thinking block shows it: its summary parts (else its raw
    reasoning parts), joined by blank lines."""
    for name in ("summary", "content"):
        texts = [
            part["text"]
            for part in item.get(name) or ()
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        if texts:
            return "\n\n".join(texts)
    return ""


def thinking_block(item: dict[str, Any], *, shown: bool = True) -> dict[str, Any] | None:
    """The block a finished reasoning item goes out as (`shown`: False for `display:
    "omitted"`, the text left out); None for an item that carries nothing (no text, no blob).
    A block kept whole is the block when the item shows no other text than its own (an
    upstream that streamed its thinking and then its block); an item whose text is another
    goes out with that text, its blob in the signature, so that the block agrees with what was
    streamed and the blob still comes back."""
    blob = item.get("encrypted_content")
    text = reasoning_text(item)
    kept = decode_thinking(blob)
    if kept is not None and (not text or kept.get("thinking") == text):
        return kept
    if not text and not isinstance(blob, str):
        return None
    blob_text = blob if isinstance(blob, str) else ""
    return {"type": "thinking", "thinking": text if shown else "", "signature": SIGNATURE_PREFIX + blob_text}
