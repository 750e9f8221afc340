"""The Codex backend: the Codex agent itself as the model, driven through `codex app-server`.

One supervised app-server process (backends/codex/app_server.py) serves every conversation, each as
an ephemeral thread (backends/codex/threads.py). A request continues the thread whose history
it extends (translate/codex_agent/request.py): a user message starts a Codex turn, tool results answer
the calls the turn waits on; anything else starts a new thread, seeded with the history the
client sent. The turn's notifications become the response (translate/codex_agent/events.py): the
agent's messages are the answer, its work is reasoning text, its usage the response's.

The client's own tools are offered to Codex as dynamic tools. When the model behind Codex calls
one, the response ends with that call and the Codex turn waits; the client's next request
carries the result and the same Codex turn goes on in that request's response. A result that
does not come within `tool_result_timeout` fails the call (the model is told) and interrupts
the turn; a late result is then refused. Codex's approval requests are answered by the
configured policy, and every other server request is answered too: none is left hanging.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from codexgate.backends.base import UNKNOWN, Inbound, turn_options
from codexgate.backends.codex.app_server import (
    AppServer,
    AppServerError,
    AppServerLimits,
    ServerRequestRefused,
)
from codexgate.backends.codex.threads import AgentThread, AgentThreads, Gone, ToolCallAsked
from codexgate.backends.model_list import CachedListing, ModelList
from codexgate.errors import GatewayError, UpstreamConnectError
from codexgate.translate.codex_agent.events import AgentReader
from codexgate.translate.codex_agent.request import (
    AgentAsk,
    chain_of,
    client_tool_name,
    dynamic_tools,
    follow_up,
    opening,
    output_schema,
    read_agent_ask,
    tool_result,
)
from codexgate.translate.dialect import ThinkMode
from codexgate.translate.files import FileTexts, with_files
from codexgate.translate.turn import Turn
from codexgate.wire.app_server import (
    COMMAND_APPROVAL,
    FILE_CHANGE_APPROVAL,
    MCP_ELICITATION,
    MODEL_LIST,
    THREAD_INJECT_ITEMS,
    TOOL_CALL,
    TURN_COMPLETED,
    TURN_START,
    ApprovalPolicy,
    DynamicToolCallResult,
    ModelListResult,
    SandboxMode,
    ServerRequest,
    ThreadInjectItemsParams,
    ThreadStartParams,
    TurnStartParams,
    TurnStartResult,
    UserInput,
    text_output,
)
from codexgate.wire.responses import Item, ResponsesRequest
from codexgate.wire.responses_events import Event

__all__ = ["CodexBackend", "CodexCall", "CodexTarget"]

log = logging.getLogger("codexgate.backend")

_LEGACY_APPROVALS = frozenset(("execCommandApproval", "applyPatchApproval"))
_NOT_RUN = "The client did not run this tool call; it went on with the conversation."
_HEALTH_CACHE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class CodexTarget:
    """A `kind = "codex"` upstream as its backend needs it; built from config."""

    name: str
    codex_bin: str = "codex"
    codex_home: str | None = None  # None: the user's own (CODEX_HOME or ~/.codex)
    workdir: str = "."
    sandbox: SandboxMode = "read-only"
    approval: ApprovalPolicy = "never"
    approval_answer: str = "decline"
    tool_result_timeout: float = 300.0
    max_threads: int = 64
    models: tuple[str, ...] = ()
    idle_timeout: float = 300.0
    max_request_seconds: float = 3600.0
    max_output_bytes: int = 8 * 1024 * 1024
    loop_guard: bool = True
    think_tags: ThinkMode = "off"
    text_tool_calls: str = "off"
    extra_args: tuple[str, ...] = ()  # more `codex app-server` arguments (`-c key=value`)


async def _nothing() -> None:
    """The step of a plan made before its files were read (it is made again once they are)."""


class CodexCall:
    """One request to the Codex agent, from `open()` to the last event."""

    def __init__(self, backend: CodexBackend, req: ResponsesRequest, model: str, inbound: Inbound) -> None:
        self._backend = backend
        self._req = req
        self._model = model
        self._inbound = inbound
        # The request's files, read off the event loop at open() (those of its instructions
        # noted here already): the translation asks it for their text.
        self._files = FileTexts()
        self._ask: AgentAsk = read_agent_ask(req, model, self._files)  # refuses what Codex cannot be given
        self._thread: AgentThread | None = None
        self._turn: Turn | None = None
        self._reader: AgentReader | None = None
        self._filed = False  # the thread is filed for the conversation's next request

    async def open(self) -> None:
        """Start or continue the Codex turn. Raises GatewayError before anything is streamed:
        the app-server cannot start, a file cannot be read, a tool result came too late, Codex
        refused the turn."""
        backend, files = self._backend, self._files
        threads = await backend.ready()
        req, model = self._req, self._model
        if files.unread:  # files among the leading instructions: they make the thread's root
            self._ask = await with_files(files, lambda: read_agent_ask(req, model, files))
        # Decided with every file read (in a worker thread), and taken at once: from finding
        # the thread to taking it nothing waits.
        step = await with_files(files, lambda: self._plan(threads))
        self._files = FileTexts()  # their text is in the step now: not held for the whole answer
        await step()  # an AppServerError raised here is a GatewayError (502) naming what it said

    def _plan(self, threads: AgentThreads) -> Callable[[], Awaitable[None]]:
        """What the request does, decided without waiting: continue the thread it finds, with
        answers for its waiting calls and maybe input, or start a new one. Raises
        InvalidRequest for a file that cannot be read, a tool result that came too late."""
        ask, items, caller, files = self._ask, self._req.input, self._inbound.caller, self._files
        found = threads.find(caller, ask.chain)
        if found is not None:
            thread, known = found
            asked = follow_up(items[known:], thread.pending, known, files)
            if files.unread:  # what the new items ask depends on their files' text: read them first
                return _nothing
            if asked is not None:
                # Read first: a file that cannot be read is a 400 that leaves the thread as it was.
                answers = {
                    call_id: tool_result(item, asked.where.get(call_id, "output"), files)
                    for call_id, item in asked.results.items()
                }
                return functools.partial(self._continue, thread, answers, asked.turn)
        threads.refuse_expired(caller, items)
        history, turn_input = opening(ask, items, files)
        return functools.partial(self._start, threads, history, turn_input)

    async def _start(self, threads: AgentThreads, history: list[Item], turn_input: list[UserInput]) -> None:
        """A new thread for the whole request: started, seeded with its history, turn begun."""
        backend, req, ask = self._backend, self._req, self._ask
        target = backend.target
        params: ThreadStartParams = {
            "model": self._model,
            "cwd": target.workdir,
            "approvalPolicy": target.approval,
            "sandbox": target.sandbox,
            "ephemeral": True,
            "dynamicTools": list(dynamic_tools(ask, req)),
        }
        if ask.instructions:
            params["developerInstructions"] = ask.instructions
        thread = await threads.start(self._inbound.caller, ask.root, params)
        thread.busy = True
        try:
            if history:
                inject: ThreadInjectItemsParams = {"threadId": thread.id, "items": history}
                await backend.app_server.request(THREAD_INJECT_ITEMS, inject, generation=thread.generation)
            await self._begin_turn(thread, turn_input)
        except BaseException:
            threads.drop(thread)
            raise
        self._ready(thread)

    async def _continue(
        self, thread: AgentThread, answers: Mapping[str, DynamicToolCallResult], turn_input: list[UserInput]
    ) -> None:
        """The request continues `thread`: answers to its waiting calls, then maybe input."""
        thread.busy = True
        try:
            for call_id, answer in answers.items():
                thread.answer(call_id, answer)
            if turn_input:
                await self._begin_turn(thread, turn_input)  # steered into a waiting turn
                # The client went on without running these: the turn must not wait for them.
                for call_id in list(thread.pending):
                    thread.answer(call_id, text_output(_NOT_RUN, success=False))
        except BaseException:
            # The results went to the turn, which would run on with nobody to read it (and the
            # client's retry can no longer continue it): it is given up.
            self._backend.threads.drop(thread, interrupt=True)
            raise
        self._ready(thread)

    async def _begin_turn(self, thread: AgentThread, turn_input: list[UserInput]) -> None:
        params: TurnStartParams = {"threadId": thread.id, "input": turn_input}
        effort = (self._req.reasoning or {}).get("effort")
        if isinstance(effort, str) and effort:
            params["effort"] = effort
        schema = output_schema(self._req)
        if schema is not None:
            params["outputSchema"] = schema
        started = await self._backend.app_server.request(TURN_START, params, generation=thread.generation)
        thread.turn_id = cast(TurnStartResult, started).get("turn", {}).get("id") or thread.turn_id

    def _ready(self, thread: AgentThread) -> None:
        self._thread = thread
        target = self._backend.target
        # The agent's own sampling decides; max_output_tokens is held to roughly, from the
        # characters produced (4 a token), as the gateway's output cap.
        cap = target.max_output_bytes
        if self._req.max_output_tokens is not None:
            cap = min(cap, self._req.max_output_tokens * 4)
        size, stop = self._inbound.body_size, self._req.stop
        options = turn_options(target.name, target, input_bytes=size, max_output_chars=cap, stop=stop)
        self._turn = Turn(self._req, self._ask.catalogue, options, counts=self._backend.counts)
        self._reader = AgentReader(self._turn, thread.turn_id)

    def events(self) -> AsyncGenerator[list[Event], None]:
        assert self._turn is not None, "open() first"
        return self._turn.run(self._read(), self._end)

    async def _read(self) -> AsyncGenerator[None, None]:
        """Feed the response from the thread's inbox until the Codex turn completes or waits on
        the client's tools (then `_file`); `_end` settles the thread however it ended."""
        thread, reader, turn = self._thread, self._reader, self._turn
        assert thread is not None and reader is not None and turn is not None
        target = self._backend.target
        deadline = asyncio.get_running_loop().time() + target.max_request_seconds
        while True:
            event = await thread.inbox.get(target.idle_timeout, deadline)
            if isinstance(event, Gone):
                raise event.error
            if isinstance(event, ToolCallAsked):
                for call in [event, *thread.inbox.take_tool_calls()]:  # parallel calls: one response
                    reader.tool_call(
                        call.call_id, client_tool_name(call.tool), call.namespace, call.arguments
                    )
                reader.finish("tool_calls")
                self._file()
                yield None
                return
            if event.method == TURN_COMPLETED:
                thread.turn_id = None  # ended, however: nothing to interrupt
            if reader.feed(event.method, event.params):
                self._file()
                yield None
                return
            yield None

    def _file(self) -> None:
        """The Codex turn completed, or waits on the client's tools, and the response ended
        with it: file the thread for the conversation's next request now, before the terminal
        event goes out, since the client may send that request as soon as it reads it."""
        thread, turn = self._thread, self._turn
        assert thread is not None and turn is not None
        if not (turn.done and turn.failure is None):
            return
        output = [item for item in turn.output if item.get("type") != "reasoning"]
        chain = chain_of(self._ask.root, [*self._req.input, *output], self._ask.opening)
        thread.busy = False
        self._backend.threads.file(thread, self._inbound.caller, chain[-1][1])
        self._filed = True

    async def _end(self) -> None:
        """The response ended. A thread filed (`_file`) is the next request's already; one
        that ended any other way (the client left, even before anything was read; a failure; a
        cap) is given up, its Codex turn interrupted."""
        thread = self._thread
        assert thread is not None
        if self._filed:
            return
        # The Codex turn would run on with nobody to read it, and the thread's history is no
        # longer the client's.
        thread.busy = False
        self._backend.threads.drop(thread, interrupt=True)


class CodexBackend:  # a backends.base.Backend
    """The Codex agent as one upstream; its routes share it (the model is the route's)."""

    def __init__(self, target: CodexTarget, environ: Mapping[str, str] | None = None) -> None:
        self.target = target
        env = dict(os.environ if environ is None else environ)
        if target.codex_home:
            env["CODEX_HOME"] = os.path.expanduser(target.codex_home)
        # A server request answered by the gateway may wait for a client's tool result: the
        # client's bound on that wait must come first.
        limits = AppServerLimits(server_request_timeout=target.tool_result_timeout + 30)
        self.app_server = AppServer(
            [target.codex_bin, "app-server", *target.extra_args],
            env=env,
            cwd=target.workdir,
            client_name="codexgate",
            on_server_request=self._on_server_request,
            limits=limits,
        )
        self.threads = AgentThreads(self.app_server, target.max_threads, target.tool_result_timeout)
        self.counts: Counter[str] = Counter()
        self.windows = None
        self._listing = CachedListing(_HEALTH_CACHE_SECONDS)

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def base_url(self) -> str:
        return f"codex app-server ({self.target.codex_bin})"

    def call(self, req: ResponsesRequest, upstream_model: str, inbound: Inbound = UNKNOWN) -> CodexCall:
        """Raises InvalidRequest for what Codex cannot be given, naming the field."""
        return CodexCall(self, req, upstream_model, inbound)

    async def ready(self) -> AgentThreads:
        """The threads, with the app-server running. Raises UpstreamConnectError when it
        cannot start."""
        try:
            generation = await self.app_server.start()
        except AppServerError as exc:
            raise UpstreamConnectError(f"codex app-server could not start: {exc.message}") from None
        self.threads.forget_older_than(generation)
        return self.threads

    async def model_ids(self) -> list[str]:
        if self.target.models:
            return list(self.target.models)
        listing = await self.reachability()
        return listing.models

    async def reachability(self) -> ModelList:
        """Whether the app-server starts and lists models (cached briefly: monitors poll)."""
        return await self._listing.get(self._list_models)

    async def _list_models(self) -> ModelList:
        try:
            await self.ready()
            listed = cast(ModelListResult, await self.app_server.request(MODEL_LIST, {}, timeout=10))
        except GatewayError as exc:
            return ModelList(self.base_url, 0, detail=exc.message)
        models = [m.get("id") for m in listed.get("data") or () if isinstance(m, dict)]
        return ModelList(self.base_url, 200, [m for m in models if isinstance(m, str)])

    async def aclose(self) -> None:
        await self.threads.aclose()
        await self.app_server.close()

    # -- what Codex asks the gateway

    async def _on_server_request(self, request: ServerRequest) -> Any:
        method, params = request.method, request.params
        if method == TOOL_CALL:
            return await self.threads.tool_call(params)
        accept = self.target.approval_answer == "accept"
        if method in (COMMAND_APPROVAL, FILE_CHANGE_APPROVAL):
            return {"decision": "accept" if accept else "decline"}
        if method in _LEGACY_APPROVALS:
            return {"decision": "approved" if accept else "denied"}
        if method == MCP_ELICITATION:
            return {"action": "decline"}
        # Questions for a person (request_user_input, permissions) and first-party requests
        # (sign-in refresh, attestation): there is nobody to ask.
        raise ServerRequestRefused(f"codexgate answers no {method}: there is no person to ask")
