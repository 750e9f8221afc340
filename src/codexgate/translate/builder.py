"""The Responses item lifecycle, owned in one place. Pure and synchronous.

`ResponseBuilder` turns semantic calls (`text`, `reasoning`, `function_call`,
`custom_tool_call`, `finish`, `fail`) into Responses streaming events: it hands out item ids
(from an injected factory), output indices and sequence numbers, opens and closes items with
their added/delta/done events in the order the OpenAI API uses, and ends every response with
exactly one of `response.completed`, `response.incomplete` or `response.failed`, every open item
closed first. Every backend drives one (through translate/turn.py), so the event grammar Codex
holds a server to is written once (pydantic-ai's `ModelResponsePartsManager` has the same role).

What differs between backends are options, not code: the chat backend keeps the reasoning text
in the item's `encrypted_content` (`reasoning_blob`, replayed upstream on the next turn) and
names a failed response's items in a cut marker (`mark_cuts`, translate/cuts.py); a backend
whose upstream has its own reasoning blob closes the item with that (`close_reasoning`).

Events are buffered: a call appends to the builder, `take()` hands the batch over. The chat
translator calls the builder several times per upstream chunk, and one list per chunk is
cheaper than one per call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from codexgate.errors import GatewayError
from codexgate.translate.client_calls import client_call_item
from codexgate.translate.cuts import cut_marker
from codexgate.translate.envelope import Envelope
from codexgate.wire.responses_events import Event, StopSequenceEnd

IdFactory = Callable[[str], str]
ReasoningBlob = Callable[[str], str]  # reasoning text -> the item's encrypted_content


class _Text:
    """Text that arrives in many small deltas, joined once at the end. Deltas are folded into
    blocks as they come: a list of millions of tiny strings costs ~60 bytes a delta on top of
    the text, the blocks next to nothing, and each character is copied only twice."""

    __slots__ = ("_blocks", "_pending")
    _BLOCK = 4096  # deltas per block

    def __init__(self) -> None:
        self._blocks: list[str] = []
        self._pending: list[str] = []

    def append(self, text: str) -> None:
        pending = self._pending
        pending.append(text)
        if len(pending) >= self._BLOCK:
            self._blocks.append("".join(pending))
            pending.clear()

    def extend(self, texts: list[str]) -> None:
        """`append` for each of `texts`."""
        pending = self._pending
        pending += texts
        if len(pending) >= self._BLOCK:
            self._blocks.append("".join(pending))
            pending.clear()

    def text(self) -> str:
        """The whole text, as one string (later events share this object, not copies)."""
        self._blocks.append("".join(self._pending))
        self._pending.clear()
        whole = "".join(self._blocks)
        self._blocks = [whole]
        return whole


@dataclass(slots=True)
class _OpenText:
    """An open message or reasoning item: its place, its id and the text so far."""

    index: int
    item_id: str
    parts: _Text = field(default_factory=_Text)


class ResponseBuilder:
    def __init__(
        self,
        envelope: Envelope,
        new_id: IdFactory,
        now: Callable[[], int] = lambda: 0,
        *,
        reasoning_blob: ReasoningBlob | None = None,
        mark_cuts: bool = False,
    ) -> None:
        """`new_id(prefix)` makes item ids; `now()` is the completion time (seconds).
        `reasoning_blob` makes a reasoning item's `encrypted_content` from its text (none
        without it); `mark_cuts` ends a failed response with a cut marker naming its items."""
        self._env = envelope
        self._new_id = new_id
        self._now = now
        self._reasoning_blob = reasoning_blob
        self._mark_cuts = mark_cuts
        self._events: list[Event] = []  # made since the last take()
        self._seq = 0  # the next event's sequence_number
        self._output: list[dict[str, Any]] = []  # finished items, by output_index
        self._next_index = 0
        self._message: _OpenText | None = None
        self._reasoning: _OpenText | None = None
        self.done = False  # a terminal event was produced

    @property
    def output(self) -> list[dict[str, Any]]:
        """The items finished so far, in output order."""
        return [item for item in self._output if item]

    def take(self) -> list[Event]:
        """The events made since the last call."""
        events = self._events
        self._events = []
        return events

    # -- the stream

    def start(self) -> list[Event]:
        """`response.created` and `response.in_progress`, returned at once."""
        resource = self._env.resource("in_progress", [])
        self._event("response.created", response=resource)
        self._event("response.in_progress", response=resource)
        return self.take()

    def text(self, delta: str) -> None:
        """Answer text: opens a message (closing any reasoning) when none is open."""
        m = self._message
        if m is None:
            self._close_reasoning()
            item_id = self._new_id("msg")
            item = {
                "type": "message",
                "id": item_id,
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            self._message = m = self._open_text(item, "response.content_part.added", "content_index", part)
        m.parts.append(delta)
        # The event of every answer delta: one dict literal, in `_event`'s key order, rather
        # than `_event`'s keyword dict plus update (about half this method's cost).
        seq = self._seq
        self._seq = seq + 1
        self._events.append({
            "type": "response.output_text.delta", "sequence_number": seq,
            "item_id": m.item_id, "output_index": m.index, "content_index": 0, "delta": delta, "logprobs": [],
        })  # fmt: skip

    def texts(self, deltas: list[str], count: int) -> None:
        """`text` for each of `deltas[:count]`: one call for a run of answer deltas."""
        if not count:
            return
        start = 0
        m = self._message
        if m is None:
            self.text(deltas[0])
            m = self._message
            assert m is not None
            start = 1
        run = deltas[start:count]
        m.parts.extend(run)
        item_id, index, seq = m.item_id, m.index, self._seq
        self._events += [
            {
                "type": "response.output_text.delta", "sequence_number": number,
                "item_id": item_id, "output_index": index, "content_index": 0, "delta": delta, "logprobs": [],
            }
            for number, delta in enumerate(run, seq)
        ]  # fmt: skip
        self._seq = seq + len(run)

    def reasoning(self, delta: str) -> None:
        """Reasoning text: opens a reasoning item (closing any message) when none is open."""
        r = self._reasoning
        if r is None:
            self._close_message()
            item_id = self._new_id("rs")
            item = {"type": "reasoning", "id": item_id, "summary": [], "status": "in_progress"}
            part = {"type": "summary_text", "text": ""}
            self._reasoning = r = self._open_text(
                item, "response.reasoning_summary_part.added", "summary_index", part
            )
        r.parts.append(delta)
        seq = self._seq  # as in text(): one dict literal per delta
        self._seq = seq + 1
        self._events.append({
            "type": "response.reasoning_summary_text.delta", "sequence_number": seq,
            "item_id": r.item_id, "output_index": r.index, "summary_index": 0, "delta": delta,
        })  # fmt: skip

    def _open_text(
        self, item: dict[str, Any], part_added: str, part_index: str, part: dict[str, Any]
    ) -> _OpenText:
        """`item` (a message or reasoning) opened, with its first part: `part_added` is that
        part's event, `part_index` the name of its index there."""
        index = self._take_index()
        item_id = item["id"]
        self._event("response.output_item.added", output_index=index, item=item)
        seq = self._seq  # a dict literal, as for a delta: its index has no fixed name
        self._seq = seq + 1
        self._events.append({
            "type": part_added, "sequence_number": seq, "item_id": item_id, "output_index": index,
            part_index: 0, "part": part,
        })  # fmt: skip
        return _OpenText(index, item_id)

    def close_text(self) -> None:
        """Close the open reasoning and message items (a tool call follows them)."""
        self._close_reasoning()
        self._close_message()

    def close_reasoning(self, encrypted_content: str | None) -> None:
        """Close the open reasoning item with the upstream's own `encrypted_content` instead of
        one made by `reasoning_blob` (a Responses upstream's opaque chain of thought). With no
        reasoning item open, a blob still makes one, with an empty summary: OpenAI's reasoning
        often has no summary at all, and the blob must reach the client to come back."""
        if self._reasoning is None and encrypted_content is not None:
            self.close_text()
            index = self._take_index()
            item_id = self._new_id("rs")
            added = {"type": "reasoning", "id": item_id, "summary": [], "status": "in_progress"}
            self._event("response.output_item.added", output_index=index, item=added)
            item = {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": encrypted_content}
            self._done_item(index, item)
            return
        self._close_reasoning(encrypted_content, override=True)

    def item(self, item: dict[str, Any]) -> None:
        """An item passed through as it is (one the gateway has no parts for: a hosted tool's
        call, a compaction): added and done, in its place among the others."""
        self.close_text()
        index = self._take_index()
        self._event("response.output_item.added", output_index=index, item=item)
        self._done_item(index, item)

    def function_call(
        self, name: str, arguments: str, *, call_id: str | None = None, namespace: str | None = None
    ) -> None:
        """A whole function call: added, its arguments, done. Calls go out whole because a
        client runs a call as soon as it sees it done."""
        self._whole_call(
            "function_call", "fc", "response.function_call_arguments", "arguments", name, arguments,
            call_id, namespace, done_extra={"name": name},
        )  # fmt: skip

    def custom_tool_call(
        self, name: str, input: str, *, call_id: str | None = None, namespace: str | None = None
    ) -> None:
        """A whole custom (freeform) tool call: added, its input, done."""
        self._whole_call(
            "custom_tool_call", "ctc", "response.custom_tool_call_input", "input", name, input,
            call_id, namespace,
        )  # fmt: skip

    def _whole_call(
        self,
        kind: str,
        id_prefix: str,
        event_prefix: str,
        field: str,
        name: str,
        value: str,
        call_id: str | None,
        namespace: str | None,
        done_extra: dict[str, Any] | None = None,
    ) -> None:
        self.close_text()
        index = self._take_index()
        item: dict[str, Any] = {
            "type": kind,
            "id": self._new_id(id_prefix),
            "status": "in_progress",
            "call_id": call_id or self._new_id("call"),
            "name": name,
            field: "",
        }
        if namespace:
            item["namespace"] = namespace
        self._event("response.output_item.added", output_index=index, item=item)
        item_id = item["id"]
        self._event(f"{event_prefix}.delta", item_id=item_id, output_index=index, delta=value)
        self._event(
            f"{event_prefix}.done",
            item_id=item_id,
            output_index=index,
            **{field: value},
            **(done_extra or {}),
        )
        self._done_item(index, {**item, "status": "completed", field: value})

    def client_call(self, kind: str, arguments: str, *, call_id: str | None = None) -> None:
        """A whole call of a client-executed tool that is not a function on the Responses side
        (`tool_search_call`, `local_shell_call`): added, done."""
        self.close_text()
        index = self._take_index()
        item_id, call_id = self._new_id("fc"), call_id or self._new_id("call")
        self._event(
            "response.output_item.added",
            output_index=index,
            item=client_call_item(kind, item_id, call_id, "", "in_progress"),
        )
        self._done_item(index, client_call_item(kind, item_id, call_id, arguments, "completed"))

    # -- the end

    def finish(
        self, usage: dict[str, Any], incomplete_reason: str | None = None, *, stop_sequence: str | None = None
    ) -> None:
        """Close what is open and end `response.completed`, or `response.incomplete` with
        `incomplete_reason` (its message is then `incomplete` too). `stop_sequence`: the one
        that ended the answer, carried by the terminal event where no Responses or Chat client
        sees it (wire/responses_events.py `StopSequenceEnd`). `done` is set only once every
        event is built: if anything here raises, `fail()` still ends the stream."""
        if self.done:
            return
        self._close_reasoning()
        self._close_message("incomplete" if incomplete_reason else "completed")
        output = self._finished_output()
        self.done = True
        if incomplete_reason:
            resource = self._env.resource(
                "incomplete", output, usage=usage, incomplete_reason=incomplete_reason
            )
            self._event("response.incomplete", response=resource)
        else:
            resource = self._env.resource("completed", output, usage=usage, completed_at=self._now())
            self._event("response.completed", response=resource)
            if stop_sequence is not None:
                self._events[-1] = StopSequenceEnd(self._events[-1], stop_sequence)

    def fail(self, error: GatewayError, usage: dict[str, Any]) -> None:
        """Close every open item as `incomplete`, mark what was said as cut (see
        translate/cuts.py) and end with `response.failed`."""
        if self.done:
            return
        try:
            self._close_reasoning()
            self._close_message("incomplete")
        except Exception:
            # Closing must never cost the terminal event: keep what closed, drop the rest.
            self._message = self._reasoning = None
        output = self._finished_output()
        if self._mark_cuts:
            self._mark_cut(output)
        self.done = True
        resource = self._env.resource("failed", output, usage=usage, error=error.to_response_error())
        self._event("response.failed", response=resource)

    # -- items

    def _take_index(self) -> int:
        index = self._next_index
        self._next_index += 1
        self._output.append({})  # placeholder keeps output_index order when items interleave
        return index

    def _close_message(self, status: str = "completed") -> None:
        m = self._message
        if m is None:
            return
        self._message = None
        text = m.parts.text()
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        self._close_part(m, "content_index", "response.output_text.done", "response.content_part.done", part)
        item = {"type": "message", "id": m.item_id, "status": status, "role": "assistant", "content": [part]}
        self._done_item(m.index, item)

    def _close_reasoning(self, encrypted_content: str | None = None, *, override: bool = False) -> None:
        r = self._reasoning
        if r is None:
            return
        self._reasoning = None
        text = r.parts.text()
        part = {"type": "summary_text", "text": text}
        self._close_part(
            r,
            "summary_index",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            part,
        )
        item: dict[str, Any] = {"type": "reasoning", "id": r.item_id, "summary": [part]}
        if not override and self._reasoning_blob is not None:
            encrypted_content = self._reasoning_blob(text)
        if encrypted_content is not None:
            item["encrypted_content"] = encrypted_content
        self._done_item(r.index, item)

    def _close_part(
        self, t: _OpenText, part_index: str, text_done: str, part_done: str, part: dict[str, Any]
    ) -> None:
        """The events that end the one part of an open message or reasoning item: `text_done`
        with its text (and, for a message's, its empty `logprobs`), then `part_done` with the
        `part` itself. `part_index`: the name of the part's index in them. Dict literals, as in
        `_open_text`."""
        seq = self._seq
        self._seq = seq + 2
        item_id, index = t.item_id, t.index
        done = {
            "type": text_done, "sequence_number": seq, "item_id": item_id, "output_index": index,
            part_index: 0, "text": part["text"],
        }  # fmt: skip
        if "logprobs" in part:
            done["logprobs"] = []
        self._events.append(done)
        self._events.append({
            "type": part_done, "sequence_number": seq + 1, "item_id": item_id, "output_index": index,
            part_index: 0, "part": part,
        })  # fmt: skip

    def _done_item(self, index: int, item: dict[str, Any]) -> None:
        self._output[index] = item
        self._event("response.output_item.done", output_index=index, item=item)

    def _finished_output(self) -> list[dict[str, Any]]:
        """The finished items; placeholders of items never finished are left out."""
        self._output = [item for item in self._output if item]
        return self._output

    def _mark_cut(self, output: list[dict[str, Any]]) -> None:
        """After a failure: one more item naming this response's items, so that a client
        sending them back as history (Codex's retry) gets them left out upstream."""
        if not output:
            return
        index = self._next_index
        self._next_index += 1
        marker = cut_marker(self._new_id("rs"), [item["id"] for item in output])
        added = {"type": "reasoning", "id": marker["id"], "summary": [], "status": "in_progress"}
        self._event("response.output_item.added", output_index=index, item=added)
        output.append(marker)
        self._event("response.output_item.done", output_index=index, item=marker)

    def _event(self, kind: str, **fields: Any) -> None:
        event = {"type": kind, "sequence_number": self._seq}
        self._seq += 1
        event.update(fields)
        self._events.append(event)
