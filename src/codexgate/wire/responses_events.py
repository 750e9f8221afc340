"""The Responses streaming events the gateway produces: their `type` names, as `Literal`s.

Events travel as plain dicts (a typed model per event costs more per event than the rest of the
hot loop together, see bench/); the names here are what code on either side of a boundary
(backends, faces, delivery) matches on, so a typo is a type error rather than a silent miss.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

Event: TypeAlias = dict[str, Any]  # {"type": EventType, "sequence_number": int, ...}

TerminalType: TypeAlias = Literal["response.completed", "response.failed", "response.incomplete"]

EventType: TypeAlias = (
    Literal[
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
    ]
    | TerminalType
)

COMPLETED: Final = "response.completed"
FAILED: Final = "response.failed"
INCOMPLETE: Final = "response.incomplete"
TERMINAL: Final[frozenset[str]] = frozenset((COMPLETED, FAILED, INCOMPLETE))


class StopSequenceEnd(dict[str, Any]):
    """The terminal event of an answer a stop sequence ended (`response.completed`), with the
    sequence met in `stop_sequence`: the Messages face answers `stop_reason: "stop_sequence"`
    with it. To every encoder it is the plain event it holds (orjson writes a dict subclass as
    the dict), so the Responses and Chat faces never send the sequence, and a terminal event
    with no sequence to tell stays a plain dict: what every other answer costs is unchanged."""

    __slots__ = ("stop_sequence",)

    def __init__(self, event: Event, stop_sequence: str) -> None:
        super().__init__(event)
        self.stop_sequence = stop_sequence


def stop_sequence_of(event: Event) -> str | None:
    """The stop sequence that ended the answer of this terminal event, when one did and the
    backend knew which (the gateway's own stop sequences, translate/stops.py, or one the
    upstream reported: `Turn.finish(reason, stop_sequence=...)`)."""
    return getattr(event, "stop_sequence", None)
