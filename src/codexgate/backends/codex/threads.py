"""The Codex backend's threads: which conversation each holds, what it waits on, and their
bounds.

A thread is filed under the chain hash of the history a client will send next
(translate/codex_agent/request.py), scoped to the caller's key: another key never continues it. A
thread is taken by one response at a time (`busy`); its notifications, and the client tool
calls its turn asks for, wait in its inbox for the response that reads them. At most
`max_threads` threads are kept; the least recently used idle one goes first (unsubscribed:
Codex then unloads it). Threads do not outlive the app-server process that made them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from codexgate.backends.codex.app_server import AppServer, AppServerError, ThreadSubscription
from codexgate.errors import GatewayError, InvalidRequest, UpstreamError, UpstreamTimeout
from codexgate.wire.app_server import (
    THREAD_START,
    THREAD_UNSUBSCRIBE,
    TURN_INTERRUPT,
    DynamicToolCallParams,
    DynamicToolCallResult,
    Notification,
    ThreadStartParams,
    ThreadStartResult,
    TurnInterruptParams,
    text_output,
)
from codexgate.wire.responses import Item

__all__ = ["AgentThread", "AgentThreads", "Gone", "Inbox", "ToolCallAsked"]

log = logging.getLogger("codexgate.backend")

_INBOX_EVENTS = 20_000  # notifications waiting for a reader; past it the thread is given up
_EXPIRED_REMEMBERED = 1024  # tool calls whose result came too late, to refuse it clearly
_OUTPUT_KINDS = frozenset(("function_call_output", "custom_tool_call_output"))


@dataclass(frozen=True, slots=True)
class ToolCallAsked:
    """The model behind Codex called one of the client's tools; Codex waits for the result."""

    call_id: str
    tool: str
    namespace: str | None
    arguments: Any


@dataclass(frozen=True, slots=True)
class Gone:
    """The thread cannot go on (its app-server died, its inbox overflowed)."""

    error: GatewayError


InboxEvent = Notification | ToolCallAsked | Gone


class Inbox:
    """A thread's events in order, for whichever response reads them next; bounded."""

    def __init__(self, capacity: int = _INBOX_EVENTS) -> None:
        self._events: deque[InboxEvent] = deque()
        self._ready = asyncio.Event()
        self._capacity = capacity
        self._broken: Gone | None = None

    def put(self, event: InboxEvent) -> None:
        if self._broken is not None:
            return
        if len(self._events) >= self._capacity:
            # Nobody has read this thread for a long while: it is given up, and says so.
            self._broken = Gone(
                UpstreamError(f"Codex sent more than {self._capacity} events no response read.")
            )
            self._events.clear()
        else:
            self._events.append(event)
        self._ready.set()

    async def get(self, idle: float, deadline: float) -> InboxEvent:
        """The next event. Raises UpstreamTimeout after `idle` seconds with none, or at the
        loop time `deadline` (the response's whole budget)."""
        loop = asyncio.get_running_loop()
        while not self._events:
            if self._broken is not None:
                return self._broken
            self._ready.clear()
            remaining = deadline - loop.time()
            try:
                async with asyncio.timeout(min(idle, remaining)):
                    await self._ready.wait()
            except TimeoutError:
                if loop.time() >= deadline:
                    raise UpstreamTimeout(
                        "The Codex turn took longer than its total budget (max_request_seconds)."
                    ) from None
                raise UpstreamTimeout(f"Codex sent nothing for {idle:g} seconds (idle timeout).") from None
        return self._events.popleft()

    def take_tool_calls(self) -> list[ToolCallAsked]:
        """The tool calls waiting at the head of the inbox (a turn's parallel calls)."""
        taken: list[ToolCallAsked] = []
        while self._events and isinstance(self._events[0], ToolCallAsked):
            call = self._events.popleft()
            assert isinstance(call, ToolCallAsked)
            taken.append(call)
        return taken


@dataclass(eq=False)
class AgentThread:
    """One Codex thread and the conversation it holds."""

    id: str
    generation: int  # of the app-server process that made it
    caller: str | None
    root: int
    subscription: ThreadSubscription
    inbox: Inbox = field(default_factory=Inbox)
    busy: bool = False  # a response is reading it
    turn_id: str | None = None  # the Codex turn running or waiting, if any
    pending: dict[str, asyncio.Future[DynamicToolCallResult]] = field(default_factory=dict)
    filed: tuple[str | None, int] | None = None
    pump: asyncio.Task[None] | None = None

    def answer(self, call_id: str, result: DynamicToolCallResult) -> None:
        """The client's result for a call the turn waits on."""
        future = self.pending.pop(call_id, None)
        if future is not None and not future.done():
            future.set_result(result)


class AgentThreads:
    def __init__(self, app_server: AppServer, max_threads: int, tool_result_timeout: float) -> None:
        self._app_server = app_server
        self._max = max_threads
        self._timeout = tool_result_timeout
        self._by_id: OrderedDict[str, AgentThread] = OrderedDict()  # least recently used first
        self._filed: dict[tuple[str | None, int], AgentThread] = {}
        self._expired: OrderedDict[tuple[str | None, str], None] = OrderedDict()
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._by_id)

    def find(self, caller: str | None, chain: list[tuple[int, int]]) -> tuple[AgentThread, int] | None:
        """The thread filed under the longest prefix of `chain` (and how many items it knows),
        if it is free to take."""
        for known, key in reversed(chain):
            thread = self._filed.get((caller, key))
            if thread is not None:
                if thread.busy or thread.generation != self._app_server.generation:
                    return None
                self._by_id.move_to_end(thread.id)
                return thread, known
        return None

    async def start(self, caller: str | None, root: int, params: ThreadStartParams) -> AgentThread:
        """A new thread (`thread/start` with `params`), subscribed before any turn starts.
        Raises AppServerError."""
        self._make_room()
        generation = self._app_server.generation
        result = await self._app_server.request(THREAD_START, params, generation=generation)
        thread_id = cast(ThreadStartResult, result).get("thread", {}).get("id")
        if not isinstance(thread_id, str):
            raise UpstreamError("codex app-server answered thread/start without a thread id.")
        subscription = self._app_server.subscribe(thread_id, generation=generation)
        thread = AgentThread(thread_id, generation, caller, root, subscription)
        thread.pump = asyncio.ensure_future(self._pump(thread))
        self._by_id[thread_id] = thread
        return thread

    def file(self, thread: AgentThread, caller: str | None, key: int) -> None:
        """After a response: the next request of the conversation continues `thread`."""
        if thread.filed is not None and self._filed.get(thread.filed) is thread:
            del self._filed[thread.filed]
        thread.filed = (caller, key)
        self._filed[thread.filed] = thread

    def drop(self, thread: AgentThread, *, interrupt: bool = False) -> None:
        """Give a thread up: unfiled, its waiting calls failed, its turn interrupted when asked
        (one that runs on with nobody to read it), unsubscribed (Codex then unloads it)."""
        if self._by_id.pop(thread.id, None) is None:
            return
        if thread.filed is not None and self._filed.get(thread.filed) is thread:
            del self._filed[thread.filed]
        for future in thread.pending.values():
            if not future.done():
                future.set_result(text_output("The conversation of this call ended.", success=False))
        thread.pending.clear()
        thread.subscription.close()
        if thread.pump is not None:
            thread.pump.cancel()
        if thread.generation == self._app_server.generation and self._app_server.running:
            self._spawn(self._retire(thread, thread.turn_id if interrupt else None))

    def refuse_expired(self, caller: str | None, items: Iterable[Item]) -> None:
        """Raises InvalidRequest when the request carries a result for a call that waited its
        whole `tool_result_timeout` and was failed: the Codex turn did not wait for it."""
        for item in items:
            if item.get("type") in _OUTPUT_KINDS and (caller, item.get("call_id")) in self._expired:
                raise InvalidRequest(
                    f"The result of tool call {item.get('call_id')!r} came too late: the Codex turn waited "
                    f"{self._timeout:g} seconds (tool_result_timeout), then went on without it. Send the "
                    "conversation without that call, or ask again.",
                    param="input",
                )

    def forget_older_than(self, generation: int) -> None:
        """Threads of an app-server process that is gone (their ids mean nothing now)."""
        for thread in [t for t in self._by_id.values() if t.generation < generation]:
            self.drop(thread)

    async def tool_call(self, request: dict[str, Any]) -> DynamicToolCallResult:
        """Answer Codex's `item/tool/call`: the call goes to the thread's inbox (the response
        reading it ends with the call) and the result is the client's next request's, or a
        failure after `tool_result_timeout`."""
        params = cast(DynamicToolCallParams, request)  # read leniently: a release may drop a field
        thread = self._by_id.get(str(params.get("threadId")))
        call_id = params.get("callId")
        if thread is None or not isinstance(call_id, str):
            return text_output("No client is waiting for this tool call.", success=False)
        future: asyncio.Future[DynamicToolCallResult] = asyncio.get_running_loop().create_future()
        thread.pending[call_id] = future
        namespace = params.get("namespace")
        thread.inbox.put(
            ToolCallAsked(
                call_id,
                str(params.get("tool")),
                namespace if isinstance(namespace, str) else None,
                params.get("arguments"),
            )
        )
        try:
            async with asyncio.timeout(self._timeout):
                return await future
        except TimeoutError:
            thread.pending.pop(call_id, None)
            self._expire(thread.caller, call_id)
            log.info(
                "codex: tool call %s got no result in %g s; its turn is interrupted", call_id, self._timeout
            )
            if not thread.busy:
                self.drop(thread, interrupt=True)
            return text_output(
                f"The client did not return this tool's result within {self._timeout:g} seconds.",
                success=False,
            )

    async def aclose(self) -> None:
        for thread in list(self._by_id.values()):
            self.drop(thread)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- inside

    async def _pump(self, thread: AgentThread) -> None:
        try:
            async for note in thread.subscription:
                thread.inbox.put(note)
        except AppServerError as exc:
            thread.inbox.put(Gone(exc))

    def _make_room(self) -> None:
        while len(self._by_id) >= self._max:
            idle = next((t for t in self._by_id.values() if not t.busy and not t.pending), None)
            if idle is None:
                return  # every thread is in use: the bound gives way to the requests at hand
            self.drop(idle)

    def _expire(self, caller: str | None, call_id: str) -> None:
        self._expired[(caller, call_id)] = None
        while len(self._expired) > _EXPIRED_REMEMBERED:
            self._expired.popitem(last=False)

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retire(self, thread: AgentThread, turn_id: str | None) -> None:
        """Interrupt the thread's turn (when asked), then unsubscribe from the thread."""
        server, generation = self._app_server, thread.generation
        try:
            if turn_id is not None:
                interrupt: TurnInterruptParams = {"threadId": thread.id, "turnId": turn_id}
                await server.request(TURN_INTERRUPT, interrupt, generation=generation, timeout=10)
            await server.request(
                THREAD_UNSUBSCRIBE, {"threadId": thread.id}, generation=generation, timeout=10
            )
        except AppServerError as exc:
            log.debug("codex: thread %s not retired: %s", thread.id, exc.message)
