"""`codex app-server` notifications -> the turn (translate/turn.py), for the Codex backend. Pure.

The agent's messages are the answer. What the agent does on the way (its reasoning, the
commands it runs and their output, the files it changes, the searches and MCP calls it makes)
is shown as reasoning text, so a client that shows a model's thinking shows the agent's work.
Token usage is the sum of the model requests the turn made while this response ran. A dynamic
tool call (one of the client's own tools) is a tool call of the response, which then ends: the
client runs it and answers in its next request (backends/codex/backend.py).
"""

from __future__ import annotations

from typing import Any, cast

import orjson

from codexgate import errors
from codexgate.errors import GatewayError, UpstreamError
from codexgate.translate.turn import Turn
from codexgate.wire.app_server import (
    AGENT_MESSAGE_DELTA,
    COMMAND_OUTPUT_DELTA,
    ERROR,
    ITEM_COMPLETED,
    ITEM_STARTED,
    REASONING_SUMMARY_PART_ADDED,
    REASONING_SUMMARY_TEXT_DELTA,
    REASONING_TEXT_DELTA,
    TOKEN_USAGE_UPDATED,
    TURN_COMPLETED,
    ErrorNotificationParams,
    ItemDeltaParams,
    ItemNotificationParams,
    TokenUsageParams,
    TurnNotificationParams,
    error_info_name,
    error_info_status,
    turn_id_of,
)

__all__ = ["AgentReader", "agent_error"]

_COMMAND_OUTPUT_CHARS = 4000  # of one command's output shown as reasoning; the rest is elided
_PARAGRAPH = "\n\n"

# codexErrorInfo -> the gateway's error (its code is what Codex and the SDKs act on).
_ERRORS: dict[str, type[UpstreamError]] = {
    "contextWindowExceeded": errors.ContextLengthExceeded,
    "usageLimitExceeded": errors.QuotaExceeded,
    "rateLimitExceeded": errors.RateLimited,
    "serverOverloaded": errors.Overloaded,
    "unauthorized": errors.UpstreamAuthError,
    "badRequest": errors.UpstreamBadRequest,
    "modelNotFound": errors.UpstreamModelNotFound,
}


def agent_error(error: Any, default: str = "The Codex turn failed.") -> GatewayError:
    """A turn's or an `error` notification's `error` ({message, codexErrorInfo}) as the
    gateway's error."""
    if not isinstance(error, dict):
        return UpstreamError(default)
    message = error.get("message") if isinstance(error.get("message"), str) else default
    info = error.get("codexErrorInfo")
    status = error_info_status(info)  # its model provider's HTTP status, when that failed
    detail = f" (its model provider answered HTTP {status})" if status is not None else ""
    cls = _ERRORS.get(error_info_name(info) or "", UpstreamError)
    return cls(f"Codex: {message}{detail}")


class AgentReader:
    """Feeds one response's turn from the notifications of one Codex turn. `feed` returns True
    once the Codex turn completed (the turn is then finished, or its failure raised)."""

    def __init__(self, turn: Turn, turn_id: str | None) -> None:
        self.turn = turn
        self.turn_id = turn_id  # notifications of other (earlier) turns are passed over
        self._usage: dict[str, int] = {}
        self._message_item: str | None = None  # the agent message whose text is going out
        self._shown: dict[str, int] = {}  # command item -> output characters shown
        self._error: Any = None  # the last `error` notification that ended the turn

    def feed(self, method: str, params: dict[str, Any]) -> bool:
        """Raises GatewayError for a turn that failed or was interrupted."""
        turn_id = turn_id_of(params)
        if self.turn_id is not None and turn_id is not None and turn_id != self.turn_id:
            return False
        # Read leniently: each shape is the catalogue's (wire/app_server.py), but a field a
        # release drops must not cost the answer.
        if method == AGENT_MESSAGE_DELTA:
            delta = cast(ItemDeltaParams, params)
            self._agent_text(delta.get("itemId"), delta.get("delta"))
        elif method in (REASONING_SUMMARY_TEXT_DELTA, REASONING_TEXT_DELTA):
            self._reasoning(cast(ItemDeltaParams, params).get("delta"))
        elif method == REASONING_SUMMARY_PART_ADDED:
            self._reasoning(_PARAGRAPH)
        elif method == COMMAND_OUTPUT_DELTA:
            delta = cast(ItemDeltaParams, params)
            self._command_output(delta.get("itemId"), delta.get("delta"))
        elif method == ITEM_STARTED:
            self._item_started(cast(ItemNotificationParams, params).get("item") or {})
        elif method == ITEM_COMPLETED:
            self._item_completed(cast(ItemNotificationParams, params).get("item") or {})
        elif method == TOKEN_USAGE_UPDATED:
            self._count_usage(dict(cast(TokenUsageParams, params).get("tokenUsage") or {}))
        elif method == ERROR:
            error = cast(ErrorNotificationParams, params)
            if not error.get("willRetry"):  # with willRetry, Codex tries again by itself
                self._error = error.get("error")
        elif method == TURN_COMPLETED:
            self._completed(dict(cast(TurnNotificationParams, params).get("turn") or {}))
            return True
        return False

    def tool_call(self, call_id: str, tool: str, namespace: str | None, arguments: Any) -> None:
        """The client's tool was called: a call of this response (it ends with `finish`)."""
        self.turn.open_call(call_id, tool, call_id, namespace=namespace)
        text = arguments if isinstance(arguments, str) else orjson.dumps(arguments or {}).decode()
        self.turn.call_arguments(call_id, text)

    def finish(self, reason: str) -> None:
        """End the response (`tool_calls` while the Codex turn waits on the client)."""
        self.turn.usage(self.usage())
        self.turn.finish(reason)

    def usage(self) -> dict[str, Any]:
        """What the model requests of this response cost, Responses-shaped."""
        u = self._usage
        return {
            "input_tokens": u.get("inputTokens", 0),
            "input_tokens_details": {"cached_tokens": u.get("cachedInputTokens", 0)},
            "output_tokens": u.get("outputTokens", 0),
            "output_tokens_details": {"reasoning_tokens": u.get("reasoningOutputTokens", 0)},
            "total_tokens": u.get("totalTokens", 0),
        }

    # -- the agent's work

    def _agent_text(self, item_id: Any, delta: Any) -> None:
        if not isinstance(delta, str) or not delta:
            return
        if item_id != self._message_item:
            if self._message_item is not None:
                self.turn.text(_PARAGRAPH)  # a second message right after the first
            self._message_item = item_id
        self.turn.text(delta)

    def _reasoning(self, text: Any) -> None:
        if isinstance(text, str) and text:
            self._message_item = None
            self.turn.reasoning(text)

    def _item_started(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "commandExecution":
            self._reasoning(f"{_PARAGRAPH}$ {item.get('command', '')}\n")
            self._shown[str(item.get("id"))] = 0

    def _command_output(self, item_id: Any, delta: Any) -> None:
        if not isinstance(delta, str) or not delta:
            return
        shown = self._shown.get(str(item_id), 0)
        self._shown[str(item_id)] = shown + len(delta)  # what came, shown or not
        room = _COMMAND_OUTPUT_CHARS - shown
        if room < 0:
            return  # cut already, and said so
        # Output that filled the cap exactly is cut by the next delta: say so then.
        self._reasoning(delta[:room] + ("\n[... output cut ...]\n" if len(delta) > room else ""))

    def _item_completed(self, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if kind == "commandExecution":
            item_id = str(item.get("id"))
            output = item.get("aggregatedOutput")
            if self._shown.get(item_id) == 0 and isinstance(output, str) and output:
                self._command_output(item_id, output)  # Codex sent no deltas for it
            code = item.get("exitCode")  # none for a command that did not run (declined)
            ended = f"exit code {code}" if isinstance(code, int) else str(item.get("status") or "not run")
            self._reasoning(f"\n[{ended}]\n")
        elif kind == "fileChange":
            for change in item.get("changes") or ():
                if isinstance(change, dict):
                    what = (change.get("kind") or {}).get("type", "change")
                    self._reasoning(f"{_PARAGRAPH}[{what}] {change.get('path', '')}\n")
        elif kind == "webSearch":
            self._reasoning(f"{_PARAGRAPH}[web search] {item.get('query', '')}\n")
        elif kind == "mcpToolCall":
            self._reasoning(f"{_PARAGRAPH}[{item.get('server', 'mcp')}] {item.get('tool', '')}\n")
        elif kind == "contextCompaction":
            self._reasoning(f"{_PARAGRAPH}[the conversation was compacted]\n")

    def _count_usage(self, usage: dict[str, Any]) -> None:
        last = usage.get("last")
        if isinstance(last, dict):
            for name, value in last.items():
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    self._usage[name] = self._usage.get(name, 0) + value

    def _completed(self, turn: dict[str, Any]) -> None:
        status = turn.get("status")
        if status == "completed":
            self.finish("stop")
            return
        if status == "interrupted":
            raise UpstreamError("The Codex turn was interrupted.")
        raise agent_error(turn.get("error") or self._error)
