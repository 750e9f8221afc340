"""The stateful Responses surface as request services around a backend call, so every backend
(chat, Responses, Codex) gets it without knowing: `previous_response_id` and `item_reference`
expanded into the history the backend needs, our compaction items expanded into their summary,
a `compaction_trigger` answered with exactly one compaction item, and the finished response
kept in the store (before its terminal event goes out, so what a client saw acknowledged is
stored).

A WebSocket connection (server/websocket.py) also remembers its last response in the
connection (`Recent`), so Codex's incremental turns work with `store:false` and without a
round trip to the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import secrets
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from codexgate.backends.base import Call, Inbound, conversation_of
from codexgate.errors import GatewayError, InvalidRequest
from codexgate.store.base import Item, Store, StoredResponse, StoreError
from codexgate.translate.compaction import (
    COMPACTION_KINDS,
    CompactionOutput,
    expand_compaction_items,
    is_compaction_request,
    summary_request,
)
from codexgate.translate.turn import new_id
from codexgate.wire.responses import ResponsesRequest, item_kinds
from codexgate.wire.responses_events import COMPLETED, FAILED, INCOMPLETE, Event

log = logging.getLogger("codexgate.state")

PREVIOUS_NOT_FOUND = "previous_response_not_found"
ITEM_NOT_FOUND = "item_not_found"
ITEM_REFERENCE = "item_reference"
STORE_FAILED = "store_failed"
STORE_UNAVAILABLE = "store_unavailable"

# Item types whose id prefix the gateway assigns to stored input items without one.
_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


@dataclass(slots=True)
class Remembered:
    """A finished response as a continuation needs it: its whole context (the expanded input it
    answered) and its output."""

    id: str
    context: list[Item]
    output: list[Item]


class Recent:
    """What a WebSocket connection remembers: its last finished response, so that the next
    request may send `previous_response_id` and only the new items, with or without a store.
    One response only: Codex always continues the last one, and a connection must not grow."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: Remembered | None = None

    def find(self, response_id: str) -> Remembered | None:
        last = self.last
        return last if last is not None and last.id == response_id else None

    def forget(self, response_id: str) -> None:
        if self.last is not None and self.last.id == response_id:
            self.last = None

    def items(self) -> dict[str, Item]:
        if self.last is None:
            return {}
        found: dict[str, Item] = {}
        for item in (*self.last.context, *self.last.output):
            item_id = item.get("id")
            if isinstance(item_id, str):
                found[item_id] = item
        return found


@dataclass(slots=True)
class StoreWrites:
    """Responses written to the store since start: how many, how many failed, and the seconds
    spent (for /metrics, which reads them without a round trip to the store)."""

    ok: int = 0
    failed: int = 0
    seconds: float = 0.0


@dataclass(slots=True)
class Prepared:
    """A request as the backend gets it, and what the services need after the call."""

    req: ResponsesRequest  # expanded: history, references and summaries resolved
    inbound: Inbound
    owner: str
    own_input: list[Item]  # the request's own items, references resolved (what is stored)
    compaction: bool  # the last input item was a compaction trigger


class ResponseState:
    """The request services. `store` None: nothing is kept (previous ids are not found).

    `start()` opens the store and reads its secret (the key that seals compaction items,
    shared by every process using the store); without a store, the secret is this process's
    own, so its compaction items do not survive a restart."""

    def __init__(self, store: Store | None, prune_every: float = 600.0) -> None:
        self.store = store
        self.secret = secrets.token_bytes(32)
        self.writes = StoreWrites()
        self._prune_every = prune_every
        self._pruner: asyncio.Task[None] | None = None
        self._started = store is None
        self._starting = asyncio.Lock()

    async def start(self, prune_every: bool = True) -> None:
        """Open the store (at the app's startup), prune it, and, with `prune_every`, prune it
        again every so often while the app runs. Raises StoreError when the store cannot be
        used (the gateway does not start)."""
        async with self._starting:
            if self._started or self.store is None:
                return
            await self.store.open()
            self.secret = await self.store.secret()
            await self.store.prune()
            if prune_every:
                self._pruner = asyncio.create_task(self._prune_forever())
            self._started = True

    async def ready(self) -> None:
        """Start on first use when the app was run without its lifespan (an embedding server
        or a test client that skips it). Raises GatewayError (503) when the store is down."""
        if self._started:
            return
        try:
            await self.start(prune_every=False)  # no lifespan: no task may outlive a request
        except StoreError as exc:
            raise GatewayError(str(exc), code=STORE_UNAVAILABLE, status=503) from None

    async def stop(self) -> None:
        if self._pruner is not None:
            self._pruner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pruner
        if self.store is not None:
            await self.store.close()

    async def _prune_forever(self) -> None:
        while True:
            await asyncio.sleep(self._prune_every)
            try:
                removed = await self.store.prune() if self.store is not None else 0
                if removed:
                    log.info("store: %d responses past their retention removed", removed)
            except Exception as exc:  # a store briefly down: try again next time
                log.warning("store: pruning failed: %s", exc)

    async def prepare(
        self, req: ResponsesRequest, inbound: Inbound, recent: Recent | None = None
    ) -> Prepared:
        """Expand the request. Raises InvalidRequest (previous_response_not_found,
        item_not_found, a forged compaction item) before anything is sent upstream."""
        if not self._started:
            await self.ready()
        owner = inbound.caller or ""
        # One look at the item types decides what needs expanding: a Codex request re-sends
        # its whole history every turn, and nearly always nothing in it does. (The face may
        # know them already, perhaps with more: more only costs a look for what is not there.)
        kinds = inbound.input_kinds if inbound.input_kinds is not None else item_kinds(req.input)
        referencing = ITEM_REFERENCE in kinds
        own_input = await self._resolve_references(req.input, owner, recent) if referencing else req.input
        history: list[Item] = []
        if req.previous_response_id is not None:
            history, root = await self._history(req.previous_response_id, owner, recent)
            _check_outputs_answer_calls(history, own_input)
            if inbound.conversation is None and root is not None:  # the chain is the conversation
                inbound = dataclasses.replace(inbound, conversation=conversation_of(owner, f"chain:{root}"))
        expanded = history + own_input if history else own_input
        if history or referencing or not kinds.isdisjoint(COMPACTION_KINDS):
            expanded = expand_compaction_items(expanded, owner, self.secret)
        compaction = is_compaction_request(req)
        if expanded is not req.input:
            req = dataclasses.replace(req, input=expanded)
            # What the face compared with the conversation's last request no longer describes
            # this input; a backend that remembers the conversation compares it itself.
            inbound = dataclasses.replace(inbound, known_prefix=None, input_kinds=None)
        if compaction:
            req = summary_request(req)
        return Prepared(req, inbound, owner, own_input, compaction)

    async def _history(
        self, previous_id: str, owner: str, recent: Recent | None
    ) -> tuple[list[Item], str | None]:
        """The history `previous_id` continues, and the id of its chain's first response (None:
        not known, remembered by a WebSocket connection, which is its own conversation)."""
        remembered = recent.find(previous_id) if recent is not None else None
        if remembered is not None:
            return remembered.context + remembered.output, None
        chain = await self.store.chain(previous_id, owner) if self.store is not None else []
        if not chain:
            raise _previous_not_found(previous_id)
        if chain[0].previous_response_id is not None:
            missing = chain[0].previous_response_id
            raise InvalidRequest(
                f"Previous response with id '{previous_id}' continues '{missing}', which is no longer "
                "stored (deleted or expired): send the whole history in 'input'.",
                code=PREVIOUS_NOT_FOUND,
                param="previous_response_id",
            )
        history: list[Item] = []
        for record in chain:
            history += record.input
            history += record.output
        return history, chain[0].id

    async def _resolve_references(self, items: list[Item], owner: str, recent: Recent | None) -> list[Item]:
        wanted = [i for i, item in enumerate(items) if item.get("type") == ITEM_REFERENCE]
        ids = [items[i]["id"] for i in wanted]
        found = recent.items() if recent is not None else {}
        missing = [item_id for item_id in ids if item_id not in found]
        if missing and self.store is not None:
            found.update(await self.store.items(missing, owner))
        resolved = list(items)
        for index in wanted:
            item_id = items[index]["id"]
            item = found.get(item_id)
            if item is None:
                raise InvalidRequest(
                    f"Item with id '{item_id}' not found: it was not stored (store:false), was deleted or "
                    "expired, or belongs to another API key.",
                    code=ITEM_NOT_FOUND,
                    param=f"input[{index}]",
                )
            resolved[index] = item
        return resolved

    def wrap(self, call: Call, prepared: Prepared, recent: Recent | None = None) -> Call:
        """The backend's call with the services around its events."""
        keep = self.store is not None and prepared.req.store is not False
        if not keep and recent is None and not prepared.compaction:
            return call
        return _StatefulCall(self, call, prepared, recent, keep)


_OUTPUT_KINDS = frozenset(("function_call_output", "custom_tool_call_output", "local_shell_call_output"))
_CALL_KINDS = frozenset(("function_call", "custom_tool_call", "local_shell_call"))


def _check_outputs_answer_calls(history: list[Item], own_input: list[Item]) -> None:
    """A continuation's tool outputs must answer calls of the chain it continues (as the
    Responses API requires). Without `previous_response_id` the gateway is lenient, since the
    client owns the history; here the gateway rebuilt it, and an output answering nothing
    means the client continued the wrong response."""
    outputs = [(i, item) for i, item in enumerate(own_input) if item.get("type") in _OUTPUT_KINDS]
    if not outputs:
        return
    calls = {item.get("call_id") for item in (*history, *own_input) if item.get("type") in _CALL_KINDS}
    for index, item in outputs:
        if item.get("call_id") not in calls:
            raise InvalidRequest(
                f"No tool call found for the output with call_id '{item.get('call_id')}' in the "
                "response this request continues.",
                param=f"input[{index}].call_id",
            )


def _previous_not_found(previous_id: str) -> InvalidRequest:
    return InvalidRequest(
        f"Previous response with id '{previous_id}' not found: it was not stored (store:false), was "
        "deleted or expired, or belongs to another API key.",
        code=PREVIOUS_NOT_FOUND,
        param="previous_response_id",
    )


class _StatefulCall:
    def __init__(
        self, state: ResponseState, call: Call, prepared: Prepared, recent: Recent | None, keep: bool
    ) -> None:
        self._state = state
        self._call = call
        self._prepared = prepared
        self._recent = recent
        self._keep = keep

    async def open(self) -> None:
        await self._call.open()

    async def events(self) -> AsyncGenerator[list[Event], None]:
        prepared = self._prepared
        compaction = CompactionOutput(prepared.owner, self._state.secret) if prepared.compaction else None
        inner = self._call.events()
        try:
            async for batch in inner:
                if compaction is not None:
                    batch = compaction.feed(batch)
                    if not batch:
                        continue
                last = batch[-1]
                if last["type"] in (COMPLETED, INCOMPLETE):
                    last = await self._finished(last)
                    batch[-1] = last
                elif last["type"] == FAILED and self._recent is not None:
                    # A failed continuation evicts what it continued: the client then sends
                    # the whole history again (contract §5).
                    previous = prepared.req.previous_response_id
                    if previous is not None:
                        self._recent.forget(previous)
                yield batch
        finally:
            await inner.aclose()

    async def _finished(self, terminal: Event) -> Event:
        prepared = self._prepared
        response = terminal["response"]
        output: list[Item] = response.get("output") or []
        if self._recent is not None:
            self._recent.last = Remembered(response["id"], prepared.req.input, output)
        if not self._keep:
            return terminal
        assert self._state.store is not None
        record = StoredResponse(
            id=response["id"],
            owner=prepared.owner,
            created_at=float(response.get("created_at") or time.time()),
            previous_response_id=prepared.req.previous_response_id,
            input=[listed_item(item) for item in prepared.own_input],  # the client's dicts unchanged
            output=output,
            response=response,
        )
        writes = self._state.writes
        started = time.perf_counter()
        try:
            await self._state.store.put(record)
            writes.ok += 1
        except Exception as exc:  # the store is down: the client asked for a stored response
            writes.failed += 1
            log.error("could not store response %s: %s", record.id, exc)
            error = GatewayError(
                f"The response was produced but could not be stored ({exc}); it cannot be continued "
                "by previous_response_id. Retry, or send store:false.",
                code=STORE_FAILED,
            )
            failed = dict(response, status="failed", error=error.to_response_error())
            return {**terminal, "type": FAILED, "response": failed}
        finally:
            writes.seconds += time.perf_counter() - started
        return terminal


def listed_item(item: Item) -> Item:
    """An input item as the Responses API lists it (`GET .../input_items`, the compacted
    output of `/responses/compact`): with an id (which `item_reference` may name), a message
    with its type, status and text as content parts."""
    if "role" in item and item.get("type", "message") == "message":
        content = item.get("content")
        if isinstance(content, str):
            part = "output_text" if item["role"] == "assistant" else "input_text"
            content = [{"type": part, "text": content}]
        item = {"type": "message", "status": "completed", **item, "content": content}
    if not isinstance(item.get("id"), str):
        kind = item.get("type") or "message"
        item = {"id": new_id(_ID_PREFIXES.get(kind, "item")), **item}
    return item
