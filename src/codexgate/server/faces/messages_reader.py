"""Reading Messages request bodies, remembering each Claude Code session's last request.

Claude Code sends the whole conversation every turn (~50-100 KB of system prompt, tools and
history, a few hundred bytes new), as Codex does. The Messages face's reader does for it what
the Responses face's does for Codex (server/faces/responses.py `RequestReader`): given a memory
(translate/history_memo.py: the Responses face's, one budget for both), it remembers each
session's last request, scoped to the caller's key, and reads the next one as
- its bytes: the messages the last body had, byte for byte, are not decoded again
  (wire/known_body.py, over the `messages` array), when the session is named by Claude Code's
  `X-Claude-Code-Session-Id` header (without it, by `metadata.user_id`, the body is decoded);
- its checks: the leading messages equal to the remembered ones (one comparison, C code: the
  very objects when spliced), and a `system` and `tools` equal to theirs, are not checked again;
- its translation: those messages' canonical items are the remembered request's own, and the
  backend is told so (`Inbound.known_prefix`), so the chat backend resumes its translation of
  the history without comparing it.
Nothing is trusted that the new body does not repeat exactly; the result is the same as reading
the body alone. A session is remembered from its second request (Memo.returning), and only
when its body is at least `history_cache_min_kb` (Memo.admits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from codexgate.backends.base import Inbound, conversation_of
from codexgate.translate.history_memo import Memo
from codexgate.translate.messages_face.request import (
    SESSION_HEADER,
    MessagesAsk,
    parse_messages_request,
    reused_messages,
    session_id,
)
from codexgate.wire.checks import decode_json_object
from codexgate.wire.known_body import KnownBody, learn, splice
from codexgate.wire.responses import item_kinds

__all__ = ["MessagesReader"]

_MESSAGES = "messages"
_SAME_FIELDS = ("system", "tools")  # checked again only when they changed


@dataclass(frozen=True, slots=True)
class _Remembered:
    """A session's last request: its body as checked, what it was read into, the `type` of
    every canonical input item (Inbound.input_kinds), and its bytes where they were learned
    (None: a body orjson would write otherwise, never spliced)."""

    data: dict[str, Any]
    ask: MessagesAsk
    kinds: frozenset[Any]
    body: KnownBody | None


class MessagesReader:
    """Reads a Messages body into what the face needs; `memo`: where sessions are remembered
    (None: nothing is, every body is read whole), under keys of this reader's own."""

    def __init__(self, memo: Memo[Any] | None = None) -> None:
        self._memo = memo

    def read(
        self, body: bytes, caller: str | None, headers: Mapping[str, str] | None = None
    ) -> tuple[MessagesAsk, Inbound]:
        """The request read and what is known of it. `headers`: the request's, names in any
        case. Raises InvalidRequest naming the Messages parameter."""
        named = {name.lower(): value for name, value in (headers or {}).items()}
        earlier = self._find(caller, named.get(SESSION_HEADER))
        spliced = splice(body, earlier.body) if earlier is not None and earlier.body is not None else None
        if spliced is not None:
            data, start, known_body = spliced  # the first `start` messages: the very objects
        else:
            data, start, known_body = decode_json_object(body, "The request body"), 0, None
            if earlier is None and SESSION_HEADER not in named:
                earlier = self._find(caller, _user_session(data, named))
        known = 0
        same: tuple[str, ...] = ()
        messages = data.get(_MESSAGES)
        if earlier is not None and type(messages) is list:
            known = _common_prefix(messages, earlier.data[_MESSAGES], start)
            same = tuple(name for name in _SAME_FIELDS if _same(data.get(name), earlier.data.get(name)))
        ask = parse_messages_request(
            data, named, earlier=earlier.ask if earlier is not None else None, known=known, same=same
        )
        # Claude Code's session, scoped to the caller (as the other faces scope theirs): a pool
        # keeps a conversation on one member, backends that remember conversations key them by it.
        key = ask.conversation_key
        conversation = conversation_of(caller, key) if key else None
        if conversation is None or self._memo is None or not isinstance(ask.request.input, list):
            return ask, Inbound(caller, conversation, len(body))
        prefix, kinds = self._remember(conversation, body, data, ask, earlier, known, known_body)
        return ask, Inbound(caller, conversation, len(body), prefix, kinds)

    def _find(self, caller: str | None, session: str | None) -> _Remembered | None:
        if self._memo is None or not session:
            return None
        earlier = self._memo.get((_MESSAGES, conversation_of(caller, session)))
        return earlier if isinstance(earlier, _Remembered) else None

    def _remember(
        self,
        conversation: str,
        body: bytes,
        data: dict[str, Any],
        ask: MessagesAsk,
        earlier: _Remembered | None,
        known: int,
        known_body: KnownBody | None,
    ) -> tuple[tuple[list[Any], int] | None, frozenset[Any]]:
        """Remembers the request (from a session's second on) and says what the backend may
        take as known: the leading items that are the earlier request's own, and the items'
        types."""
        memo = self._memo
        assert memo is not None
        items = ask.request.input
        assert isinstance(items, list)
        reused = reused_messages(earlier.ask if earlier is not None else None, known)
        shared = earlier.ask.ends[reused - 1] if reused and earlier is not None else 0
        if shared and earlier is not None:
            kinds = item_kinds(items[shared:]) | earlier.kinds
        else:
            kinds = item_kinds(items)
        key, size = (_MESSAGES, conversation), len(body)
        if memo.admits(size) and (earlier is not None or memo.returning(key)):
            if known_body is None:
                known_body = learn(body, data[_MESSAGES], data.get("tools"), key=_MESSAGES)
            memo.put(key, _Remembered(data, ask, kinds, known_body), size)
        elif earlier is not None:
            memo.drop(key)
        prefix = (earlier.ask.request.input, shared) if shared and earlier is not None else None
        return prefix, kinds


def _user_session(data: dict[str, Any], headers: Mapping[str, str]) -> str | None:
    """The session a body names in `metadata.user_id` (read leniently: the body is not
    checked yet, and a wrong one is refused by its checks)."""
    metadata = data.get("metadata")
    user = metadata.get("user_id") if type(metadata) is dict else None
    return session_id(user, headers) if type(user) is str else None


def _same(value: Any, earlier: Any) -> bool:
    """Whether a field holds what the earlier request's did (its very object, when spliced)."""
    return value is not None and (value is earlier or value == earlier)


def _common_prefix(messages: list[Any], earlier: list[Any], start: int = 0) -> int:
    """How many leading messages equal the earlier request's (the first `start` are known to:
    spliced, they are its very objects): usually all of them but the last one or two, which
    carry Claude Code's cache mark."""
    n = min(len(messages), len(earlier))
    for index in range(start, n):
        if messages[index] is not earlier[index] and messages[index] != earlier[index]:
            return index
    return n
