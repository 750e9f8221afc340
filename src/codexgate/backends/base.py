"""What a backend is, as the server and the router see it: the one seam between a face and
whatever produces the canonical event stream (a Chat Completions upstream, a Responses
upstream, `codex app-server`).

`server/` and `routing/router.py` are written against these protocols only, never against a concrete
backend, so a new kind of upstream needs a module in `backends/` and a line in `app.py`'s
table, not a change to the server. A backend's `Call.events()` is its turn's run loop
(translate/turn.py), which makes the one terminal event a guarantee.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Protocol

from codexgate.backends import scope
from codexgate.backends.model_list import ModelList
from codexgate.translate.builder import ReasoningBlob
from codexgate.translate.dialect import ThinkMode
from codexgate.translate.turn import TurnOptions
from codexgate.wire.responses import Item, ResponsesRequest
from codexgate.wire.responses_events import Event

__all__ = [
    "UNKNOWN", "Backend", "Call", "ContextWindowsView", "Event", "Inbound", "ModelList", "StageSettings",
    "conversation_of", "turn_options",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Inbound:
    """What the face knows of a request besides its content: who sent it and which of the
    client's conversations it continues. Backends that remember conversations between turns
    (the chat backend's translated history, Codex's threads) key them by `conversation`."""

    caller: str | None = None  # the inbound API key's name; None: no key (loopback)
    # The client's conversation (its prompt_cache_key), scoped to the caller so that one
    # caller's requests never share memory with another's; None: not known.
    conversation: str | None = None
    body_size: int = 0  # bytes of the request body as the client sent it
    # The first n input items are equal to those of the conversation's previous request (this
    # list): compared once by the face, so a backend need not compare them again.
    known_prefix: tuple[list[Item], int] | None = None
    # Every `type` among the input items, perhaps more (None: not known): a conversation's
    # next request adds its new items' to the last one's instead of reading every item again.
    input_kinds: frozenset[Any] | None = None
    # At most this many retries of the upstream request (None: the upstream's own setting): a
    # pool's member is asked with 0 while another member could answer (routing/pool.py).
    max_retries: int | None = None


UNKNOWN = Inbound()  # a request nothing is known of


def conversation_of(caller: str | None, key: str) -> str:
    """`Inbound.conversation` for the client's `key` of a conversation (its prompt_cache_key;
    "chain:<id>" and "ws:<id>" for those the gateway names), scoped to the `caller`."""
    return f"{caller or ''}\x00{key}"


class Call(Protocol):
    """One request to a backend, from `open()` to the last event."""

    async def open(self) -> None:
        """Send the request. Raises GatewayError (already classified) for anything that fails
        before the first byte of the answer: the server still answers with an HTTP status."""
        ...

    def events(self) -> AsyncGenerator[list[Event], None]:
        """Batches of canonical Responses events, first `response.created`. Always ends with
        exactly one terminal event (`response.completed`, `.incomplete` or `.failed`), whatever
        the upstream does; errors after `open()` become `response.failed`, never exceptions.
        Closing the generator (client gone) cancels the upstream request."""
        ...


class ContextWindowsView(Protocol):
    def known(self) -> dict[str, int]:
        """Context windows learned so far, by upstream model id."""
        ...


class Backend(Protocol):
    """An upstream as one model route sees it."""

    @property
    def name(self) -> str:
        """The upstream's configured name."""
        ...

    @property
    def base_url(self) -> str:
        """Where the upstream is (may hold credentials: redact before showing)."""
        ...

    @property
    def counts(self) -> Counter[str]:
        """What the gateway repaired or recognised on this upstream, by kind (for /healthz)."""
        ...

    @property
    def windows(self) -> ContextWindowsView | None:
        """The context windows learned from the upstream; None when not learned."""
        ...

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> Call:
        """Prepare one request (nothing is sent before `open()`). Raises InvalidRequest for what
        this backend cannot carry, naming the field."""
        ...

    async def model_ids(self) -> list[str]:
        """The upstream's own model ids (for an unrouted /v1/models); [] when it cannot tell."""
        ...

    async def reachability(self) -> ModelList:
        """Whether the upstream answers and serves models; cached briefly (monitors poll)."""
        ...

    async def aclose(self) -> None:
        """Release what the backend holds (a Codex backend stops its app-server)."""
        ...


class StageSettings(Protocol):
    """The stages an upstream's settings switch on (a dialect, a Codex target)."""

    @property
    def think_tags(self) -> ThinkMode: ...

    @property
    def text_tool_calls(self) -> str: ...

    @property
    def loop_guard(self) -> bool: ...


def turn_options(
    name: str,
    stages: StageSettings,
    *,
    input_bytes: int,
    max_output_chars: int | None,
    stop: list[str] | None = None,
    reasoning_blob: ReasoningBlob | None = None,
    mark_cuts: bool = False,
) -> TurnOptions:
    """How every backend sets up its turn: the stages `stages` asks for, an estimate of the
    input's tokens (4 bytes a token), the output cap, the stop sequences the gateway applies
    (None: the upstream applies the request's own), the dialect's policies, and the request's
    interrupt (backends/scope.py), by which a stopping server ends the stream."""
    return TurnOptions(
        think_tags=stages.think_tags,
        text_tool_calls=stages.text_tool_calls,
        loop_guard=stages.loop_guard,
        stop=stop,
        input_token_estimate=input_bytes // 4,
        max_output_chars=max_output_chars,
        reasoning_blob=reasoning_blob,
        mark_cuts=mark_cuts,
        label=f"upstream {name}",
        interrupt=scope.current().interrupt,
    )
