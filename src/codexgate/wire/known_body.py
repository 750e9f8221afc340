"""Reading a conversation's next request body without decoding what it repeats.

Codex re-sends the whole conversation every turn: the next body is the last one's bytes up to
the end of some input item, then the new items, then the same fields after `input` (tools,
reasoning, the cache key...). Decoding the ~60 KB of a working session's history into Python
objects, then comparing it with the last request's, costs more than everything else a
request needs before it goes upstream. So the gateway keeps, for a conversation, its last
body as bytes with where each input item ends (`KnownBody`), and reads the next body
(`splice`) as: the last body's leading bytes compared (one memcmp), the new items and nothing
else decoded, the items before them the very objects checked last turn.

When only the fields before `input` changed (the model, the instructions), the known items'
bytes are found whole after the new head instead, and the head decoded; when the fields after
it changed, the input's end is found by the last suffix's first bytes, and the fields after it
decoded: only the last of them when the bytes before it are the last suffix's (Codex's
`client_metadata`, last, changes every request; the ~10 KB of tools before it do not).

The result is the same dict `orjson.loads(body)` gives (its keys may come in another order),
or None, and then the caller decodes the body whole. That holds because every piece of the
body is either compared byte for byte with the last body, at a point where the two parses are
in the same state, or decoded in that same state:
- the fields before `input` (`head`) and after it (`tail`) were decoded from exactly those
  bytes, and each decoding proves its piece's place: the head ends by opening the top-level
  `input` array (its last key is `input`, its value empty), and the tail's decoding keeps a
  marker no client can know as `input`'s only element (a later duplicate `input` key would
  replace it);
- the item offsets come from encoding the decoded items again and finding exactly those bytes
  right after the head: a body that orjson would not write back the same way (spaces, other
  escapes, other number forms) is simply never spliced;
- the new items are decoded as the continuation of an array (`[null` + them + `]`), the state
  the body is in after its last known item;
- a last field alone is decoded as an object's members (`{` + them): after the same bytes as
  the last suffix's up to a top-level comma, that decoding succeeds only when they are whole
  fields closing the body (a comma nested deeper would leave brackets over); its keys then
  win over the earlier fields', as in a decoding of the whole body, and an `input` among them
  is refused as in the tail's.
No I/O, no clock; the objects returned are shared with the last request (nothing mutates a
request's decoded input: server/faces/responses.py).

The list is `input` for a Responses body; the Messages face reads Claude Code's, which re-sends
its whole conversation alike, by its `messages` (`learn(..., key="messages")`): everything
above holds of any top-level array, named once when the body is learned.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import orjson

__all__ = ["KnownBody", "cache_key_hint", "learn", "splice"]

# Stands in for the items before the suffix when the suffix is decoded: unguessable, so a
# duplicate `input` key after the items (which would replace the array) cannot fake it.
_MARK = secrets.token_hex(16)
_CACHE_KEY = b'"prompt_cache_key":"'
# The first bytes of the last suffix (`],"tools":[...`) mark where the input ends in a body
# whose later fields changed; wherever they are found, the decodings prove the place.
_SUFFIX_START = 256
# The last field after `input` is looked for among the last few `,"` of the last 4 KB.
_LAST_FIELD_TRIES = 16
_LAST_FIELD_BYTES = 4096


@dataclass(frozen=True, slots=True)
class KnownBody:
    """A request body as bytes, and what its parts decode to."""

    prefix: bytes  # the body up to the end of its last input item
    ends: tuple[int, ...]  # where each input item ends in the body
    head: dict[str, Any]  # the fields before `input`, decoded (without `input`)
    suffix: bytes  # the body after its last input item: `]` closing `input`, the other fields
    tail: dict[str, Any]  # the fields after `input`, decoded
    items: list[Any]  # the input items as decoded and checked
    start: int  # where the first item begins in the body (after the head)
    # The suffix up to its last field (the comma before it: 0 when not found), and what the
    # fields before that decode to: a next body whose suffix differs only in its last field
    # (Codex's client_metadata) has that one decoded, not the tools before it.
    last_field: int
    before_last: dict[str, Any]
    key: str = "input"  # the top-level array the items are (a Messages body's: `messages`)


def cache_key_hint(body: bytes) -> str | None:
    """The body's `prompt_cache_key` as written plainly (no escapes), found without decoding;
    a hint only, to find the conversation: `splice`'s result is what says it."""
    at = body.rfind(_CACHE_KEY)
    if at < 0:
        return None
    start = at + len(_CACHE_KEY)
    end = body.find(b'"', start)
    if end < 0 or end - start > 512:
        return None
    raw = body[start:end]
    if b"\\" in raw:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None


def learn(
    body: bytes, items: list[Any], tools: list[Any] | None = None, *, key: str = "input"
) -> KnownBody | None:
    """The KnownBody of a body whose decoded (and checked) `key` array (its input) is `items`;
    None when the body is not written the way orjson writes those items back (then it is not
    spliced). `tools`: the checked tools, to stand for the body's own when equal (then a later
    request compares its tools by identity)."""
    if not items:
        return None
    encoded = [orjson.dumps(item) for item in items]
    opening = _opening(key)
    written = opening + b",".join(encoded) + b"]"
    at = body.find(written)
    if at < 0:  # the first place: a wrong one fails the head's or the tail's check
        return None
    start = at + len(opening)
    ends = _ends(encoded, start - 1)
    head = _head(body[:start], key)
    last = ends[-1]
    suffix = body[last:]
    read = _tail(suffix, tools, key)
    if head is None or read is None:
        return None
    tail, last_field, before_last = read
    return KnownBody(body[:last], ends, head, suffix, tail, items, start, last_field, before_last, key)


def splice(body: bytes, known: KnownBody) -> tuple[dict[str, Any], int, KnownBody | None] | None:
    """`body` decoded, with the input items it shares with `known`'s body being `known`'s own
    objects; how many those are; and `body`'s KnownBody (None: its new items are not written
    as orjson writes them, so it is not known). None when `body` does not continue `known`'s
    body: then decode it whole."""
    after = _after_input(body, known)
    if after is None:
        return None
    room, suffix, tail, last_field, before_last = after
    count = _shared_items(body, known, room)
    if count == 0:  # perhaps another head (model, instructions) before the same items
        moved = _moved(body, known, room)
        if moved is None:
            return None
        known, count = moved, len(moved.ends)
    last = known.ends[count - 1]
    middle = body[last:room]
    try:
        continued = orjson.loads(b"[null" + middle + b"]") if middle else [None]
    except orjson.JSONDecodeError:
        return None
    if type(continued) is not list or continued[0] is not None:
        return None
    new = continued[1:]
    items = known.items[:count] + new  # a list of this request's own
    data = dict(known.head)
    data[known.key] = items
    data.update(tail)
    new_ends = _new_ends(middle, new, last)
    if new_ends is None:
        return data, count, None
    whole = count == len(known.ends) and not new
    prefix = known.prefix if whole else body[:room]
    ends = known.ends[:count] + new_ends
    following = KnownBody(
        prefix, ends, known.head, suffix, tail, items, known.start, last_field, before_last, known.key
    )
    return data, count, following


def _moved(body: bytes, known: KnownBody, room: int) -> KnownBody | None:
    """`known` as it stands in `body` when only the fields before `input` changed (another
    model, other instructions): all its items' bytes, found after a head that opens the
    top-level `input` (see `_head`); None when they are not there."""
    written = known.prefix[known.start :]
    at = body.find(written)
    if at < 0 or at + len(written) > room:
        return None
    head = _head(body[:at], known.key)
    if head is None:
        return None
    shift = at - known.start
    ends = tuple(end + shift for end in known.ends)
    return KnownBody(
        body[: at + len(written)], ends, head, known.suffix, known.tail, known.items, at,
        known.last_field, known.before_last, known.key,
    )  # fmt: skip


def _after_input(
    body: bytes, known: KnownBody
) -> tuple[int, bytes, dict[str, Any], int, dict[str, Any]] | None:
    """Where `body`'s input ends (its bytes before the suffix), its suffix, the fields after
    the input, and the suffix's last field as `_tail` gives them: `known`'s when the body
    ends the same; else found by the last suffix's first bytes (Codex's client_metadata,
    after the tools, changes every request) and decoded (only the last field, when the
    suffix is the last one's up to it); None when neither."""
    suffix = known.suffix
    if body.endswith(suffix):
        return len(body) - len(suffix), suffix, known.tail, known.last_field, known.before_last
    room = body.rfind(suffix[:_SUFFIX_START])
    if room < 0:
        return None
    last_field = known.last_field
    if last_field and body[room + last_field : room + last_field + 2] == b',"':
        # The same bytes as the last suffix's up to its last field, read from the same place
        # (after the input), end at the same top-level comma: what follows decodes as an
        # object only when it is whole fields closing the body (a comma nested deeper would
        # leave closing brackets over). Its keys then win over the earlier ones, as in a
        # decoding of the whole body.
        if body[room : room + last_field] == suffix[:last_field]:
            last = _fields(body[room + last_field + 1 :])
            if last is not None and known.key not in last:
                return room, body[room:], {**known.before_last, **last}, last_field, known.before_last
    suffix = body[room:]
    read = _tail(suffix, known.tail.get("tools"), known.key)
    if read is None:
        return None
    tail, last_field, before_last = read
    return room, suffix, tail, last_field, before_last


def _shared_items(body: bytes, known: KnownBody, room: int) -> int:
    """How many of `known`'s items `body` starts with, byte for byte (the head included): all
    of them in one comparison (the common case: the conversation went on), else all but the
    last or the last two, else the most, found by halving (a client sent an earlier turn again)."""
    prefix, ends = known.prefix, known.ends
    if len(prefix) <= room and body.startswith(prefix):
        return len(ends)
    low, high = 0, len(ends)  # the body starts with the first `low` items, not the first `high`
    # A client that rewrites its last item or two each turn (Claude Code moves its cache mark
    # to the newest messages): all but those are tried first, then the rest halved.
    for count in (high - 1, high - 2):
        if count <= low:
            break
        end = ends[count - 1]
        if end <= room and body.startswith(prefix[:end]):
            low = count
            break
        high = count
    while high - low > 1:
        mid = (low + high) // 2
        end = ends[mid - 1]
        if end <= room and body.startswith(prefix[:end]):
            low = mid
        else:
            high = mid
    return low


def _new_ends(middle: bytes, new: list[Any], last: int) -> tuple[int, ...] | None:
    """Where the new items end, when `middle` is exactly `,` + each item as orjson writes it;
    None when it is not."""
    if not new:
        return ()
    encoded = [orjson.dumps(item) for item in new]
    if middle != b"," + b",".join(encoded):
        return None
    return _ends(encoded, last)


def _ends(encoded: list[bytes], last: int) -> tuple[int, ...]:
    """Where each of `encoded` ends when they follow `last`, each after a comma."""
    ends = []
    for one in encoded:
        last += 1 + len(one)
        ends.append(last)
    return tuple(ends)


def _opening(key: str) -> bytes:
    """The bytes that open the top-level `key` array in a body orjson writes."""
    return orjson.dumps(key) + b":["


def _head(opening: bytes, key: str) -> dict[str, Any] | None:
    """The fields before `key` (the input), from the body up to its opening bracket; None
    unless that bracket opens the top-level `key` (its last key)."""
    try:
        head = orjson.loads(opening + b"]}")
    except orjson.JSONDecodeError:
        return None
    if type(head) is not dict or not head or next(reversed(head)) != key or head[key] != []:
        return None
    del head[key]
    return head


def _tail(
    suffix: bytes, tools: list[Any] | None, key: str
) -> tuple[dict[str, Any], int, dict[str, Any]] | None:
    """The fields after `input`, from the body after its last item, with where its last field
    starts (its comma; 0 when there is no second field or it cannot be told) and the fields
    before it; None unless the suffix closes the top-level `input` and no later key replaces
    it. `tools`, the checked tools, stand for the suffix's own when equal (then a later
    request compares its tools by identity)."""
    last: dict[str, Any] | None = None
    at = len(suffix)
    # From the right, the first comma after which whole fields close the body is the last
    # field's (see _after_input). Looked for only near the end: a last field that is large,
    # or full of nested keys, is not worth it (each try decodes what follows).
    for _ in range(_LAST_FIELD_TRIES):
        at = suffix.rfind(b',"', max(0, len(suffix) - _LAST_FIELD_BYTES), at)
        if at <= 0:
            break
        last = _fields(suffix[at + 1 :])
        if last is not None:
            break
    before = _marked(suffix[:at] + b"}", key) if last is not None and key not in last else None
    if before is None or last is None:
        whole = _marked(suffix, key)
        if whole is None:
            return None
        before, last, at = whole, {}, 0
    for fields in (before, last):
        if tools is not None and "tools" in fields and fields["tools"] == tools:
            fields["tools"] = tools
    return ({**before, **last} if last else before), at, before


def _marked(suffix: bytes, key: str) -> dict[str, Any] | None:
    """The fields `suffix` holds after a marked `key` array; None unless it closes the
    top-level `key` and no later key replaces it."""
    try:
        fields = orjson.loads(b"{" + _opening(key) + orjson.dumps(_MARK) + suffix)
    except orjson.JSONDecodeError:
        return None
    if type(fields) is not dict or fields.get(key) != [_MARK]:
        return None
    del fields[key]
    return fields


def _fields(members: bytes) -> dict[str, Any] | None:
    """`members` (`"key":value,...}`) as an object; None unless they are exactly that."""
    try:
        fields = orjson.loads(b"{" + members)
    except orjson.JSONDecodeError:
        return None
    return fields if type(fields) is dict else None
