"""Remote compaction (Codex's v2, codex-contract.md §6), the pure part: no I/O.

Codex with a provider named "OpenAI" compacts by sending an ordinary streamed turn whose last
input item is `{"type": "compaction_trigger"}`, and expects back exactly one `compaction` output
item; it then drops the history and carries that item in every later request. OpenAI's item
holds encrypted state only its servers read. The gateway has no such state, so it asks the
upstream model for a handoff summary (an ordinary turn: `summary_request`), turns that turn's
events into the one item Codex expects (`CompactionOutput`), and puts the summary in the item's
`encrypted_content`. When the item comes back, `expand_compaction_items` turns it into a user
message the upstream model reads.

The summary travels signed, not encrypted: the conversation is the client's own, but a client
must not be able to put words into a "summary" the gateway vouches for, nor replay one sealed
for another API key. Format: `cgz1.<payload>.<mac>`, where the payload is the zlib-compressed
UTF-8 summary and the mac an HMAC-SHA256 (keyed by the store's secret) over `cgz1.<payload>`,
a NUL and the owner (the inbound key's name, "" with no keys), both base64url without padding.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import zlib
from typing import Any, Final

from codexgate.errors import InvalidRequest
from codexgate.translate.builder import IdFactory
from codexgate.translate.turn import new_id
from codexgate.wire.responses import Item, ResponsesRequest
from codexgate.wire.responses_events import COMPLETED, FAILED, INCOMPLETE, Event

__all__ = [
    "COMPACTION_FAILED",
    "SUMMARY_PROMPT",
    "CompactionOutput",
    "expand_compaction_items",
    "is_compaction_request",
    "seal",
    "summary_request",
    "unseal",
]

# The `error.code` of a compaction whose summary could not be made. Codex retries codes it does
# not know (min(stream_max_retries, 2) times for compaction): a new sample may well succeed.
COMPACTION_FAILED: Final = "compaction_failed"

TRIGGER: Final = "compaction_trigger"
COMPACTION_KINDS: Final = frozenset(("compaction", "compaction_summary"))
_PREFIX: Final = "cgz1."

SUMMARY_PROMPT: Final = """\
Stop working on the task for a moment. The conversation has grown too long to continue as it is: \
it will be replaced by a summary that you write now, and another model will pick up the task \
from that summary alone, without seeing anything above.

Write that handoff summary. Include:
- the user's goal and every requirement or constraint they stated;
- decisions taken, and the reasons for them where they matter later;
- the files read, created or changed, and what changed in each;
- the commands run and what they showed (failures and error messages included);
- what is done, what is in progress, and the next steps that remain;
- exact identifiers: paths, function and variable names, commands, URLs, versions, error text.

Be complete but concise; prefer precise facts to narration. Reply with the summary text only: \
no preamble, no closing remarks, and do not call any tool."""

# What the model reading a compacted history is told before the summary.
_SUMMARY_INTRO: Final = (
    "The earlier part of this conversation was condensed to make room. What follows is the "
    "handoff summary written at that point for whoever continues the task; treat it as the "
    "record of everything that happened before this message.\n\n"
)


# -- the request


def is_compaction_request(req: ResponsesRequest) -> bool:
    """The request asks for remote compaction: its last input item is the trigger."""
    if not req.input:
        return False
    last = req.input[-1]
    return isinstance(last, dict) and last.get("type") == TRIGGER


def summary_request(req: ResponsesRequest) -> ResponsesRequest:
    """The summarising turn for a compaction request: the history without the trigger, then
    the summary prompt as a user message.

    No tools and `tool_choice: none`: the answer must be text. `tools=[]` alone would not do,
    since `additional_tools` items in the history also declare tools (and the Codex backend
    offers the client's tools unless the choice is `none`); every translator sends
    `tool_choice` only along with tools, so `none` costs nothing elsewhere. No structured
    output, not stored. Earlier compaction items in the history are left for the ordinary
    input path to expand (`expand_compaction_items`)."""
    prompt: Item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": SUMMARY_PROMPT}],
    }
    history = req.input[:-1] if is_compaction_request(req) else list(req.input)
    return dataclasses.replace(
        req,
        input=[*history, prompt],
        tools=[],
        tool_choice="none",
        parallel_tool_calls=None,
        text=None,
        store=False,
    )


# -- sealing


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _mac(signed: str, owner: str, secret: bytes) -> str:
    message = signed.encode("ascii") + b"\x00" + owner.encode("utf-8", "surrogatepass")
    return _b64(hmac.new(secret, message, hashlib.sha256).digest())


def seal(summary: str, owner: str, secret: bytes) -> str:
    """The `encrypted_content` carrying `summary`, valid only for `owner` under `secret`."""
    signed = _PREFIX + _b64(zlib.compress(summary.encode("utf-8"), 9))
    return f"{signed}.{_mac(signed, owner, secret)}"


def unseal(content: str, owner: str, secret: bytes, param: str) -> str | None:
    """The summary sealed in `content`, or None when `content` is not one of ours (another
    server's blob, which later code refuses or passes on). Raises InvalidRequest naming
    `param` when it has our prefix but does not verify for `owner`: sealed for another API
    key, altered, or sealed under a secret the gateway no longer has."""
    if not content.startswith(_PREFIX):
        return None
    signed, dot, mac = content.rpartition(".")
    if dot and len(signed) > len(_PREFIX) and content.isascii():
        expected = _mac(signed, owner, secret)
        if hmac.compare_digest(expected.encode("ascii"), mac.encode("ascii")):
            payload = signed[len(_PREFIX) :]
            try:
                raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
                return zlib.decompress(raw).decode("utf-8")
            except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
                pass  # signed by us yet unreadable: reported below like any bad handle
    raise InvalidRequest(
        f"'{param}' is a compaction summary this gateway cannot vouch for: it was made for another "
        "API key, or altered, or sealed before the gateway's store (and its secret) was replaced. "
        "Start a new conversation.",
        param=param,
    )


def expand_compaction_items(items: list[Item], owner: str, secret: bytes) -> list[Item]:
    """`items` with each compaction item sealed by this gateway replaced by a user message
    holding its summary, in its place. Items that are not ours stay as they are
    (translate/chat_upstream/items.py decides about them). Returns `items` itself when it holds
    no compaction item, which is nearly always: only the item types are looked at then. Raises
    InvalidRequest (naming `input[i].encrypted_content`) for one with our prefix that does not
    verify for `owner`."""
    if not any(item.get("type") in COMPACTION_KINDS for item in items):
        return items
    expanded: list[Item] = []
    for index, item in enumerate(items):
        content = item.get("encrypted_content")
        if item.get("type") in COMPACTION_KINDS and isinstance(content, str):
            summary = unseal(content, owner, secret, f"input[{index}].encrypted_content")
            if summary is not None:
                text = _SUMMARY_INTRO + summary
                item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        expanded.append(item)
    return expanded


# -- the response


class CompactionOutput:
    """Turns the canonical event batches of the summarising turn into what Codex expects of a
    compaction: `response.created`, `response.in_progress`, one `compaction` item (added and
    done) and `response.completed` whose output is that item alone. Everything the model
    streamed is swallowed: Codex must see no other output item.

    A turn that ends without a summary (no text, a tool call instead, or cut off) ends
    `response.failed` with `COMPACTION_FAILED`, since a compaction item without a summary would
    silently lose the conversation; a failed turn passes through. Sequence numbers are
    renumbered from 0 so the stream stays contiguous."""

    def __init__(self, owner: str, secret: bytes, *, new_id: IdFactory = new_id) -> None:
        self._owner = owner
        self._secret = secret
        self._new_id = new_id
        self._texts: list[str] = []
        self._stray: str | None = None  # the type of an output item that is not an answer
        self._seq = 0
        self.done = False

    def feed(self, batch: list[Event]) -> list[Event]:
        """The events to send for one batch of the summarising turn; nothing after the end."""
        out: list[Event] = []
        for event in batch:
            if self.done:
                break
            kind = event.get("type")
            if kind in ("response.created", "response.in_progress", FAILED):
                self.done = kind == FAILED
                out.append(self._numbered(event))
            elif kind == "response.output_item.done":
                self._collect(event.get("item"))
            elif kind == COMPLETED:
                out.extend(self._complete(event))
            elif kind == INCOMPLETE:
                response = event.get("response") or {}
                details = response.get("incomplete_details") or {}
                reason = details.get("reason") or "unknown"
                out.append(self._failed(response, f"the summary was cut off ({reason})"))
            # every other event belongs to output Codex must not see
        return out

    def _collect(self, item: Any) -> None:
        if not isinstance(item, dict):
            return
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text":
                    text = part.get("text")
                    if isinstance(text, str):
                        self._texts.append(text)
        elif kind != "reasoning" and self._stray is None:
            self._stray = str(kind)

    def _complete(self, event: Event) -> list[Event]:
        response: dict[str, Any] = event.get("response") or {}
        summary = "".join(self._texts).strip()
        if self._stray is not None:
            return [self._failed(response, f"the model produced a '{self._stray}' item instead of a summary")]
        if not summary:
            return [self._failed(response, "the model wrote no summary")]
        item = {
            "type": "compaction",
            "id": self._new_id("cmp"),
            "encrypted_content": seal(summary, self._owner, self._secret),
        }
        self.done = True
        return [
            self._event("response.output_item.added", output_index=0, item=item),
            self._event("response.output_item.done", output_index=0, item=item),
            self._event(COMPLETED, response={**response, "output": [item]}),
        ]

    def _failed(self, response: dict[str, Any], message: str) -> Event:
        """`response.failed` in place of the turn's terminal event, its usage kept."""
        self.done = True
        failed = {
            **response,
            "status": "failed",
            "completed_at": None,
            "incomplete_details": None,
            "output": [],
            "error": {"code": COMPACTION_FAILED, "message": f"Compaction failed: {message}."},
        }
        return self._event(FAILED, response=failed)

    def _numbered(self, event: Event) -> Event:
        return {**event, "sequence_number": self._next_seq()}

    def _event(self, kind: str, **fields: Any) -> Event:
        return {"type": kind, "sequence_number": self._next_seq(), **fields}

    def _next_seq(self) -> int:
        seq = self._seq
        self._seq += 1
        return seq
