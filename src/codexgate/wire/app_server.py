"""The `codex app-server` protocol as codexgate speaks it: a typed catalogue and line framing.

`codex app-server` (Codex CLI 0.169, stdio) speaks newline-delimited JSON-RPC 2.0 **without the
`"jsonrpc"` field**: one JSON object per line, in both directions. Four kinds of message:

    -> {"id": 1, "method": "thread/start", "params": {...}}        a request (ids chosen by the sender)
    <- {"id": 1, "result": {...}}  |  {"id": 1, "error": {"code", "message", "data"?}}
    <- {"method": "turn/started", "params": {...}, "emittedAtMs": 1795601929774}    a notification
    <- {"id": 0, "method": "item/tool/call", "params": {...}}       a server request: the server
       numbers these from 0, independently of the client's ids, and waits for an answer forever

This module only names the methods and shapes the gateway sends or reads, and frames or parses
one line; it does no I/O (the supervised client is `codexgate.backends.codex.app_server`). Everything
here was checked on the 0.169.0 binary (see codex-contract.md §8 and §13), and again on 0.171.0,
which only adds to it (docs/codex-versions.md). Requests are typed strictly (they are ours); what
the server sends is read leniently: a notification or server request of a kind this catalogue
does not name is still a valid message, passed on as data, and fields it does not name (0.171's
`environmentId` on `mcpToolCall` items, say) are left alone.

Facts the shapes below rely on:
- `thread/started` carries the thread id inside `params.thread.id`; every other thread-scoped
  notification carries `params.threadId` (`thread_id_of` reads both). `turn/started` and
  `turn/completed` carry the turn id in `params.turn.id`, item notifications in `params.turnId`.
- `turn/started` arrives *before* the answer to `turn/start`: subscribe to a thread first.
- `turn/start` on a thread whose turn is still running does not start a turn: the input is
  steered into the running turn and its id is answered. One turn at a time per thread.
- Unknown methods and invalid params are refused with -32600 (not -32601); a request before
  `initialize` gets -32600 "Not initialized"; a line that is not JSON is ignored silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NotRequired, Required, TypeAlias, TypedDict

import orjson

__all__ = [
    "AGENT_MESSAGE_DELTA",
    "ApprovalPolicy",
    "SandboxMode",
    "COMMAND_APPROVAL",
    "COMMAND_OUTPUT_DELTA",
    "CONFIG_WARNING",
    "DEFAULT_OPT_OUT_NOTIFICATIONS",
    "ERROR",
    "FILE_CHANGE_APPROVAL",
    "FILE_CHANGE_OUTPUT_DELTA",
    "INITIALIZE",
    "INITIALIZED",
    "ITEM_COMPLETED",
    "ITEM_STARTED",
    "MCP_ELICITATION",
    "MODEL_LIST",
    "PERMISSIONS_APPROVAL",
    "REASONING_SUMMARY_PART_ADDED",
    "REASONING_SUMMARY_TEXT_DELTA",
    "REASONING_TEXT_DELTA",
    "SERVER_REQUEST_METHODS",
    "SERVER_REQUEST_RESOLVED",
    "THREAD_CLOSED",
    "THREAD_INJECT_ITEMS",
    "THREAD_LOADED_LIST",
    "THREAD_START",
    "THREAD_STARTED",
    "THREAD_STATUS_CHANGED",
    "THREAD_UNSUBSCRIBE",
    "TOKEN_USAGE_UPDATED",
    "TOOL_CALL",
    "TURN_COMPLETED",
    "TURN_INTERRUPT",
    "TURN_START",
    "TURN_STARTED",
    "TURN_STEER",
    "USER_INPUT_REQUEST",
    "WARNING",
    "ClientInfo",
    "DynamicFunctionTool",
    "DynamicNamespaceTool",
    "DynamicTool",
    "DynamicToolCallParams",
    "DynamicToolCallResult",
    "DynamicToolOutput",
    "ErrorCode",
    "ErrorNotificationParams",
    "ErrorResponse",
    "ImageInput",
    "InitializeCapabilities",
    "InitializeParams",
    "InitializeResult",
    "ItemNotificationParams",
    "ItemDeltaParams",
    "JSONObject",
    "LocalImageInput",
    "Message",
    "ModelEntry",
    "ModelListResult",
    "Notification",
    "ProtocolError",
    "RequestId",
    "Response",
    "RpcError",
    "ServerRequest",
    "TextInput",
    "ThreadInfo",
    "ThreadInjectItemsParams",
    "ThreadStartParams",
    "ThreadStartResult",
    "TokenUsage",
    "TokenUsageBreakdown",
    "TokenUsageParams",
    "TurnError",
    "TurnInfo",
    "TurnInterruptParams",
    "TurnNotificationParams",
    "TurnStartParams",
    "TurnStartResult",
    "UserInput",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_result",
    "error_info_name",
    "error_info_status",
    "initialize_params",
    "parse_message",
    "text_output",
    "thread_id_of",
    "turn_id_of",
]

JSONObject: TypeAlias = dict[str, Any]
RequestId: TypeAlias = int | str

# -- methods: client -> server requests ----------------------------------------------------------

INITIALIZE: Final = "initialize"
INITIALIZED: Final = "initialized"  # the client's notification after `initialize` was answered
THREAD_START: Final = "thread/start"
THREAD_INJECT_ITEMS: Final = "thread/inject_items"  # experimental
# Frees an ephemeral thread: answered {"status": "unsubscribed"} at once, then ~60 s later the
# server unloads it (`thread/status/changed` notLoaded, then `thread/closed`). `thread/archive`
# and `thread/delete` refuse ephemeral threads with -32600.
THREAD_UNSUBSCRIBE: Final = "thread/unsubscribe"
THREAD_LOADED_LIST: Final = "thread/loaded/list"
TURN_START: Final = "turn/start"
TURN_STEER: Final = "turn/steer"
TURN_INTERRUPT: Final = "turn/interrupt"  # answered {} at once; the turn completes "interrupted"
MODEL_LIST: Final = "model/list"

# -- methods: server -> client notifications the gateway reads -----------------------------------

THREAD_STARTED: Final = "thread/started"
THREAD_STATUS_CHANGED: Final = "thread/status/changed"
THREAD_CLOSED: Final = "thread/closed"
TURN_STARTED: Final = "turn/started"
TURN_COMPLETED: Final = "turn/completed"
ITEM_STARTED: Final = "item/started"
ITEM_COMPLETED: Final = "item/completed"
AGENT_MESSAGE_DELTA: Final = "item/agentMessage/delta"
REASONING_SUMMARY_TEXT_DELTA: Final = "item/reasoning/summaryTextDelta"
REASONING_SUMMARY_PART_ADDED: Final = "item/reasoning/summaryPartAdded"
REASONING_TEXT_DELTA: Final = "item/reasoning/textDelta"
COMMAND_OUTPUT_DELTA: Final = "item/commandExecution/outputDelta"
FILE_CHANGE_OUTPUT_DELTA: Final = "item/fileChange/outputDelta"
TOKEN_USAGE_UPDATED: Final = "thread/tokenUsage/updated"
ERROR: Final = "error"  # {willRetry: true} is Codex retrying by itself; false ends the turn
WARNING: Final = "warning"
CONFIG_WARNING: Final = "configWarning"
SERVER_REQUEST_RESOLVED: Final = "serverRequest/resolved"  # not sent for item/tool/call (0.169)

# Noise a gateway never reads, switched off at `initialize` (checked: opted-out methods are not
# sent). Thread status is opted out too: `turn/*` and `thread/closed` say all a backend needs.
DEFAULT_OPT_OUT_NOTIFICATIONS: Final[tuple[str, ...]] = (
    "account/rateLimits/updated",  # after every model request, no thread id
    "remoteControl/status/changed",
    "thread/status/changed",
    "turn/diff/updated",
    "skills/changed",
    "app/list/updated",
    "mcpServer/startupStatus/updated",
    "fs/changed",
    "thread/readState/changed",
)

# -- methods: server -> client requests ----------------------------------------------------------

TOOL_CALL: Final = "item/tool/call"  # a dynamic tool was called
COMMAND_APPROVAL: Final = "item/commandExecution/requestApproval"
FILE_CHANGE_APPROVAL: Final = "item/fileChange/requestApproval"
PERMISSIONS_APPROVAL: Final = "item/permissions/requestApproval"
USER_INPUT_REQUEST: Final = "item/tool/requestUserInput"
MCP_ELICITATION: Final = "mcpServer/elicitation/request"

# Every server request the 0.169 schema lists (0.171's lists the same, less `currentTime/read` in
# its experimental API). A client must answer each one it receives (with a result or a JSON-RPC
# error): the server never times them out (checked: a dynamic tool call left unanswered for
# 100 s just waits, then goes on when answered).
SERVER_REQUEST_METHODS: Final[frozenset[str]] = frozenset(
    {
        TOOL_CALL,
        COMMAND_APPROVAL,
        FILE_CHANGE_APPROVAL,
        PERMISSIONS_APPROVAL,
        USER_INPUT_REQUEST,
        MCP_ELICITATION,
        "account/chatgptAuthTokens/refresh",
        "attestation/generate",
        "currentTime/read",
        "applyPatchApproval",  # legacy
        "execCommandApproval",  # legacy
    }
)


class ErrorCode:
    """JSON-RPC error codes: the standard ones, and those the app-server or codexgate use."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600  # the app-server's answer to unknown methods and bad params too
    METHOD_NOT_FOUND = -32601  # codexgate's answer to a server request it does not handle
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603  # codexgate's answer when its handler for a server request failed
    SERVER_OVERLOADED = -32001  # the app-server's ingress queue is full: retry with backoff
    NO_ANSWER = -32000  # codexgate's answer when its handler did not answer in time


# -- shapes the gateway sends --------------------------------------------------------------------


class ClientInfo(TypedDict):
    name: str  # becomes the `originator` header of Codex's model requests
    version: str
    title: NotRequired[str | None]


class InitializeCapabilities(TypedDict, total=False):
    experimentalApi: bool  # required for dynamicTools and thread/inject_items
    optOutNotificationMethods: list[str]


class InitializeParams(TypedDict):
    clientInfo: ClientInfo
    capabilities: NotRequired[InitializeCapabilities]


class InitializeResult(TypedDict, total=False):
    userAgent: str  # "gw/0.169.0 (Debian 12.0.0; x86_64) xterm (gw; 0.0.1)"
    codexHome: str
    platformFamily: str
    platformOs: str


class DynamicFunctionTool(TypedDict):
    """A tool the model may call; a call reaches the client as an `item/tool/call` request."""

    type: Literal["function"]
    name: str
    description: str
    inputSchema: JSONObject
    deferLoading: NotRequired[bool]


class DynamicNamespaceTool(TypedDict):
    type: Literal["namespace"]
    name: str
    description: str
    tools: list[JSONObject]


DynamicTool: TypeAlias = DynamicFunctionTool | DynamicNamespaceTool

ApprovalPolicy: TypeAlias = Literal["untrusted", "on-request", "never"]
SandboxMode: TypeAlias = Literal["read-only", "workspace-write", "danger-full-access"]


class ThreadStartParams(TypedDict, total=False):
    model: str
    modelProvider: str
    cwd: str
    approvalPolicy: ApprovalPolicy  # "never": no approval requests are sent
    sandbox: SandboxMode
    ephemeral: bool  # no rollout file; the thread lives until unsubscribed (or the process ends)
    baseInstructions: str
    developerInstructions: str
    dynamicTools: list[DynamicTool]  # experimental
    config: JSONObject  # config.toml overrides for this thread


class TextInput(TypedDict):
    type: Literal["text"]
    text: str
    text_elements: NotRequired[list[JSONObject]]


class ImageInput(TypedDict):
    """An image by URL; a `data:` URL is accepted. For a model whose catalog entry has no
    "image" input modality Codex sends the text "image content omitted ..." instead."""

    type: Literal["image"]
    url: str
    detail: NotRequired[Literal["auto", "low", "high", "original"] | None]


class LocalImageInput(TypedDict):
    type: Literal["localImage"]
    path: str


UserInput: TypeAlias = TextInput | ImageInput | LocalImageInput


class TurnStartParams(TypedDict, total=False):
    threadId: Required[str]
    input: Required[list[UserInput]]
    model: str
    effort: str
    cwd: str
    outputSchema: JSONObject


class TurnInterruptParams(TypedDict):
    threadId: str
    turnId: str


class ThreadInjectItemsParams(TypedDict):
    """Responses API items (`message`, `function_call`, `function_call_output`, ...) appended to
    the model-visible history; the next turn sends them, in order, after Codex's own context.
    The server does not check them (an unknown item type is accepted and answered {})."""

    threadId: str
    items: list[JSONObject]


class DynamicToolOutput(TypedDict):
    type: Literal["inputText", "inputImage"]
    text: NotRequired[str]
    imageUrl: NotRequired[str]


class DynamicToolCallResult(TypedDict):
    """The answer to `item/tool/call`. The model reads the texts as the tool's output; with
    `success: false` the item completes "failed" and the model still reads the texts. A JSON-RPC
    error answer reaches the model as "dynamic tool request failed" (its message is dropped)."""

    contentItems: list[DynamicToolOutput]
    success: bool


# -- shapes the gateway reads --------------------------------------------------------------------


class ThreadInfo(TypedDict, total=False):
    id: Required[str]
    sessionId: str
    ephemeral: bool
    model: str
    modelProvider: str
    cwd: str


class ThreadStartResult(TypedDict, total=False):
    thread: Required[ThreadInfo]
    model: str
    modelProvider: str
    cwd: str
    approvalPolicy: Any
    sandbox: JSONObject


class TurnError(TypedDict, total=False):
    message: Required[str]
    # A camelCase name ("contextWindowExceeded", "badRequest", ...) or a one-key object
    # ({"httpConnectionFailed": {"httpStatusCode": 502}}): see error_info_name/status.
    codexErrorInfo: str | JSONObject | None
    additionalDetails: str | None


class TurnInfo(TypedDict, total=False):
    id: Required[str]
    status: Required[Literal["inProgress", "completed", "interrupted", "failed"]]
    items: list[JSONObject]  # on turn/completed: the final agentMessage, not every item
    error: TurnError | None
    durationMs: int | None


class TurnStartResult(TypedDict):
    turn: TurnInfo


class TurnNotificationParams(TypedDict):
    """`turn/started` and `turn/completed`. An interrupted turn completes with `items: []`, and
    items it had started (an agentMessage being streamed) never get `item/completed`."""

    threadId: str
    turn: TurnInfo


class ItemNotificationParams(TypedDict, total=False):
    """`item/started` and `item/completed`; `item.type` is one of userMessage, agentMessage,
    reasoning, commandExecution, fileChange, dynamicToolCall, mcpToolCall, webSearch, ..."""

    threadId: Required[str]
    turnId: Required[str]
    item: Required[JSONObject]
    startedAtMs: int
    completedAtMs: int


class ItemDeltaParams(TypedDict):
    """The `item/*/delta`-like notifications (agent message, reasoning, command output)."""

    threadId: str
    turnId: str
    itemId: str
    delta: str


class ErrorNotificationParams(TypedDict):
    threadId: str
    turnId: str
    willRetry: bool
    error: TurnError


class TokenUsageBreakdown(TypedDict, total=False):
    totalTokens: int
    inputTokens: int
    cachedInputTokens: int
    cacheWriteInputTokens: int
    outputTokens: int
    reasoningOutputTokens: int


class TokenUsage(TypedDict, total=False):
    last: TokenUsageBreakdown  # the model request that just finished
    total: TokenUsageBreakdown  # the whole thread so far, over all its turns
    modelContextWindow: int | None  # 95% of the catalog's window


class TokenUsageParams(TypedDict):
    """`thread/tokenUsage/updated`: one per model request."""

    threadId: str
    turnId: str
    tokenUsage: TokenUsage


class DynamicToolCallParams(TypedDict):
    threadId: str
    turnId: str
    callId: str
    namespace: str | None
    tool: str
    arguments: Any  # the model's arguments, parsed (an object for a well-formed call)


class ModelEntry(TypedDict, total=False):
    id: Required[str]
    model: str
    displayName: str
    description: str
    hidden: bool
    isDefault: bool
    inputModalities: list[str]
    supportedReasoningEfforts: list[JSONObject]
    defaultReasoningEffort: str


class ModelListResult(TypedDict):
    data: list[ModelEntry]
    nextCursor: NotRequired[str | None]


# -- messages ------------------------------------------------------------------------------------


class ProtocolError(ValueError):
    """A line that is not a JSON-RPC message (not JSON, not an object, no method and no id)."""


@dataclass(frozen=True, slots=True)
class RpcError:
    code: int
    message: str
    data: Any = None


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to one of the client's requests."""

    id: RequestId
    result: Any
    kind: Literal["response"] = "response"


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """A JSON-RPC error answer to one of the client's requests."""

    id: RequestId
    error: RpcError
    kind: Literal["error"] = "error"


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: JSONObject
    emitted_at_ms: int | None = None  # the server's clock, top-level `emittedAtMs`
    kind: Literal["notification"] = "notification"

    @property
    def thread_id(self) -> str | None:
        return thread_id_of(self.method, self.params)

    @property
    def turn_id(self) -> str | None:
        return turn_id_of(self.params)


@dataclass(frozen=True, slots=True)
class ServerRequest:
    """A request from the server; it waits until the client answers it."""

    id: RequestId
    method: str
    params: JSONObject
    kind: Literal["server_request"] = "server_request"

    @property
    def thread_id(self) -> str | None:
        return thread_id_of(self.method, self.params)


Message: TypeAlias = Response | ErrorResponse | Notification | ServerRequest


def parse_message(line: bytes | str) -> Message:
    """One line from the server as a typed message. Unknown methods pass as data; `params` that
    are absent or not an object read as {} (the server always sends objects), so that a server
    request is never lost to a parse error: it must still be answered.

    Raises ProtocolError for a line that is not a JSON object with a method or an id.
    """
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"not a JSON object but {type(value).__name__}")
    method = value.get("method")
    raw_params = value.get("params")
    params: JSONObject = raw_params if isinstance(raw_params, dict) else {}
    if isinstance(method, str):
        if "id" in value and value["id"] is not None:
            return ServerRequest(_request_id(value["id"]), method, params)
        emitted = value.get("emittedAtMs")
        return Notification(method, params, emitted if _is_int(emitted) else None)
    if "id" not in value:
        raise ProtocolError("neither a method nor an id")
    request_id = _request_id(value["id"])
    if "error" in value:
        return ErrorResponse(request_id, _rpc_error(value["error"]))
    if "result" in value:
        return Response(request_id, value["result"])
    raise ProtocolError("an id without result or error")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _request_id(value: object) -> RequestId:
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return value
    raise ProtocolError(f"an id must be an integer or a string, not {value!r}")


def _rpc_error(value: object) -> RpcError:
    if not isinstance(value, dict):
        return RpcError(ErrorCode.INTERNAL_ERROR, str(value))
    code = value.get("code")
    message = value.get("message")
    return RpcError(
        code if isinstance(code, int) and not isinstance(code, bool) else ErrorCode.INTERNAL_ERROR,
        message if isinstance(message, str) else str(message),
        value.get("data"),
    )


# -- framing -------------------------------------------------------------------------------------


def _line(message: Mapping[str, Any]) -> bytes:
    # orjson escapes control characters inside strings, so the only newline is the terminator.
    return orjson.dumps(message) + b"\n"


def encode_request(request_id: RequestId, method: str, params: Mapping[str, Any] | None = None) -> bytes:
    """A request line. Raises TypeError for params that are not JSON-serialisable."""
    message: JSONObject = {"id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return _line(message)


def encode_notification(method: str, params: Mapping[str, Any] | None = None) -> bytes:
    message: JSONObject = {"method": method}
    if params is not None:
        message["params"] = params
    return _line(message)


def encode_result(request_id: RequestId, result: Any) -> bytes:
    """The answer to a server request. Raises TypeError for a result that is not serialisable."""
    return _line({"id": request_id, "result": result})


def encode_error(request_id: RequestId, code: int, message: str, data: Any = None) -> bytes:
    error: JSONObject = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _line({"id": request_id, "error": error})


# -- reading helpers -----------------------------------------------------------------------------


def initialize_params(
    name: str,
    version: str,
    *,
    title: str | None = None,
    opt_out: tuple[str, ...] | list[str] = DEFAULT_OPT_OUT_NOTIFICATIONS,
    experimental: bool = True,
) -> InitializeParams:
    """`initialize` params with experimental methods on (dynamic tools, item injection)."""
    info: ClientInfo = {"name": name, "version": version}
    if title is not None:
        info["title"] = title
    capabilities: InitializeCapabilities = {"experimentalApi": experimental}
    if opt_out:
        capabilities["optOutNotificationMethods"] = list(opt_out)
    return {"clientInfo": info, "capabilities": capabilities}


def text_output(text: str, *, success: bool = True) -> DynamicToolCallResult:
    """The answer to an `item/tool/call` whose output is one text."""
    return {"contentItems": [{"type": "inputText", "text": text}], "success": success}


def thread_id_of(method: str, params: Mapping[str, Any]) -> str | None:
    """The thread a notification or server request belongs to, or None (account, config and
    other process-wide messages)."""
    thread_id = params.get("threadId")
    if isinstance(thread_id, str):
        return thread_id
    thread = params.get("thread")
    if method == THREAD_STARTED and isinstance(thread, dict) and isinstance(thread.get("id"), str):
        return str(thread["id"])
    return None


def turn_id_of(params: Mapping[str, Any]) -> str | None:
    """The turn a notification belongs to: `turnId`, or `turn.id` on turn/started|completed."""
    turn_id = params.get("turnId")
    if isinstance(turn_id, str):
        return turn_id
    turn = params.get("turn")
    if isinstance(turn, dict) and isinstance(turn.get("id"), str):
        return str(turn["id"])
    return None


def error_info_name(info: object) -> str | None:
    """The kind of a `codexErrorInfo`: "contextWindowExceeded" for the plain form,
    "httpConnectionFailed" for `{"httpConnectionFailed": {"httpStatusCode": 502}}`."""
    if isinstance(info, str):
        return info
    if isinstance(info, dict) and len(info) == 1:
        return str(next(iter(info)))
    return None


def error_info_status(info: object) -> int | None:
    """The upstream HTTP status a `codexErrorInfo` carries, if any."""
    if isinstance(info, dict) and len(info) == 1:
        detail = next(iter(info.values()))
        if isinstance(detail, dict) and _is_int(detail.get("httpStatusCode")):
            return int(detail["httpStatusCode"])
    return None
