"""The embedded backend (`kind = "embedded"`): a small model the gateway runs itself, so that it
answers with nothing else installed. A supervised llama.cpp `llama-server` child
(supervisor.py, its runtime fetched once per user by runtime.py) serving SmolLM2-135M
or a GGUF of one's own, reached as an ordinary Chat Completions upstream: every request goes
through a `ChatBackend` pointed at the child, so the loop guard, think tags, text tool calls and
the context-window check apply as to any chat upstream.

While the runtime is downloaded (seconds, once per user) or the child (re)starts, a request
waits for it, up to START_WAIT_SECONDS; past that it is refused with 503
`embedded_model_starting` saying how far it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncGenerator
from dataclasses import replace

from codexgate.backends.base import UNKNOWN, Call, Event, Inbound
from codexgate.backends.chat.backend import ChatBackend
from codexgate.backends.embedded.supervisor import EmbeddedModelStarting, LlamaSupervisor
from codexgate.backends.http.stream import UpstreamTarget
from codexgate.backends.http.transport import Transport
from codexgate.backends.log import OnceLog
from codexgate.backends.model_list import ModelList
from codexgate.translate.chat_upstream.request import Checkpoint
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.history_memo import Memo
from codexgate.wire.responses import ResponsesRequest

__all__ = ["EmbeddedBackend", "EmbeddedCall", "EmbeddedModelStarting"]

# How long a request waits for the runtime's download (~10 s on a usual link) and the child's
# start (about a second); then it is refused with 503 rather than held.
START_WAIT_SECONDS = 60.0


class _Windows:
    """The window the child runs with, for /healthz (it is configured, not learned)."""

    def __init__(self, model: str, tokens: int) -> None:
        self._known = {model: tokens}

    def known(self) -> dict[str, int]:
        return dict(self._known)


class EmbeddedCall:
    """One request to the embedded model: wait for the child, then an ordinary chat call for
    the model the child serves, whatever name the client asked for (`model: "qwen3-coder"` is
    still SmolLM2): the chat body names it, and its family's sampling is the one applied
    (translate/open_models/sampling.py). The answer keeps the client's name."""

    def __init__(self, backend: EmbeddedBackend, req: ResponsesRequest, inbound: Inbound) -> None:
        self._backend, self._req, self._inbound = backend, req, inbound
        self._chat: Call | None = None

    async def open(self) -> None:
        """Raises EmbeddedModelStarting (503) past the wait for the model's download or start, NoUpstream
        when it cannot run, and what a chat call raises."""
        supervisor = self._backend.supervisor
        base_url = await supervisor.wait_serving(START_WAIT_SECONDS)
        self._chat = self._backend.chat_for(base_url).call(self._req, supervisor.options.alias, self._inbound)
        await self._chat.open()

    def events(self) -> AsyncGenerator[list[Event], None]:
        assert self._chat is not None, "open() first"
        return self._chat.events()


class EmbeddedBackend:  # a backends.base.Backend
    """The embedded model as one route sees it. Routes share the supervisor, `counts` and the
    conversation memory; each has its own dialect (the route's settings layered on)."""

    def __init__(
        self,
        template: UpstreamTarget,
        transport: Transport,
        supervisor: LlamaSupervisor,
        once: OnceLog | None = None,
        counts: Counter[str] | None = None,
        history: Memo[Checkpoint] | None = None,
        *,
        owner: bool = True,
    ) -> None:
        """`template`: the chat target without its address (the child's port is chosen when it
        starts). Only the `owner` (the upstream's own backend, not a route's) stops the child."""
        self.target = template
        self.transport = transport
        self.supervisor = supervisor
        self.once = once or OnceLog()
        self.counts: Counter[str] = Counter() if counts is None else counts
        self.history = history
        self._owner = owner
        self._chat: ChatBackend | None = None
        window = template.dialect.context_window or supervisor.options.context_window
        self.windows = _Windows(supervisor.options.alias, window)

    def for_route(self, dialect: ChatDialect) -> EmbeddedBackend:
        """A route's view: the same child with the route's dialect (and the child's window
        when the route sets none)."""
        if dialect.context_window is None:
            dialect = replace(dialect, context_window=self.target.dialect.context_window)
        return EmbeddedBackend(
            replace(self.target, dialect=dialect), self.transport, self.supervisor, self.once,
            self.counts, self.history, owner=False,
        )  # fmt: skip

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def base_url(self) -> str:
        supervisor = self.supervisor
        return supervisor.base_url if supervisor.serving else f"embedded llama-server ({supervisor.state})"

    def start(self) -> None:
        """Begin fetching and running the model (in the event loop; returns at once)."""
        self.supervisor.start()

    def chat_for(self, base_url: str) -> ChatBackend:
        """The chat backend for the child at `base_url` (a restart may move it to a new port)."""
        chat = self._chat
        if chat is None or chat.target.base_url != base_url:
            target = replace(self.target, base_url=base_url.rstrip("/"))
            chat = ChatBackend(target, self.transport, self.once, self.counts, None, self.history)
            self._chat = chat
        return chat

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> EmbeddedCall:
        """`upstream_model` (the route's model, or the client's name) is not what runs: the
        child serves one model, its alias (EmbeddedCall)."""
        return EmbeddedCall(self, req, inbound)

    async def model_ids(self) -> list[str]:
        return [self.supervisor.options.alias]

    async def reachability(self) -> ModelList:
        """The child's `/models` while it serves; else what it is doing, as the problem."""
        self.supervisor.start()
        if self.supervisor.serving:
            return await self.chat_for(self.supervisor.base_url).reachability()
        return ModelList(self.base_url, 0, detail=self.supervisor.describe())

    def health(self) -> dict[str, object]:
        """The embedded model's state for /healthz."""
        supervisor = self.supervisor
        return {
            "state": supervisor.state,
            "model": supervisor.options.alias,
            "context_window": self.windows.known()[supervisor.options.alias],
            "pid": supervisor.pid,
            "restarts": supervisor.restarts,
            "message": supervisor.describe(),
        }

    async def aclose(self) -> None:
        if self._owner:
            await self.supervisor.aclose()
