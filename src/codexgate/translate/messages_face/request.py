"""Anthropic Messages request -> the canonical request (`ResponsesRequest`). Pure: no I/O, no clock.

The Messages face's way in: a body checked by wire/messages.py becomes a `MessagesAsk`, the
canonical request and what only the face acts on. It is built directly, as the chat face's is
(translate/chat_face/request.py): the body is already checked, and a Responses body parsed
again would name Responses fields the client never sent. docs/faces.md ("The Messages face")
has the table of what each field and block becomes; the choices, briefly:

- the top-level `system` is `instructions` (its text blocks joined by a blank line), without
  Claude Code's billing line, which changes every release and would spoil an upstream's prefix
  cache; `role: "system"` messages stay system messages in their place (Claude Code sends one
  after the user's), and their tool changes (`tool_addition`, `tool_removal`) change the tools;
- a user message's tool results come first, as function call outputs, then a user message
  with the rest of its blocks; an assistant message is its items in the order of its blocks
  (thinking -> reasoning, text -> a message, tool_use -> a function call);
- documents become what the `input_file` reader takes (a PDF) or text under their title;
- server tools are left out of the tools, and the model is told they are not available;
  deferred tools (`defer_loading`) are left out until a `tool_reference` loads them;
- the whole checked body, and the `anthropic-*` headers, travel beside it (`native`) for a
  backend that speaks Messages itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import unavailable_notice
from codexgate.translate.messages_face.thinking import reasoning_item
from codexgate.wire.messages import is_billing_header, is_server_tool, validate_messages_request
from codexgate.wire.responses import Item, NativeRequest, ResponsesRequest

__all__ = [
    "MessagesAsk",
    "budget_effort",
    "parse_messages_request",
    "reused_messages",
    "session_id",
    "translate_messages_request",
]

SESSION_HEADER = "x-claude-code-session-id"
# Set on a sub-agent's requests (the Agent tool): its own conversation inside the session.
AGENT_HEADER = "x-claude-code-agent-id"
# A tool result with `is_error`: what the model reads before the output, as no canonical
# output carries the flag (a chat model sees a tool message, a Responses model an output).
ERROR_PREFIX = "Error: "
# Canonical efforts of Anthropic's; `max` is the canonical model's highest.
_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh", "max": "xhigh"}
_LOW_BUDGET = 4096  # budget_tokens below this: low effort (Claude Code's "think" asks 4,000)
_MEDIUM_BUDGET = 16384  # below this: medium ("think hard", 10,000); above: high ("ultrathink", 31,999)
_OLD_USER_ID = re.compile(r"_session_([0-9A-Za-z-]+)$")  # user_<hash>_account_<uuid>_session_<uuid>


@dataclass(frozen=True, slots=True)
class MessagesAsk:
    """What a Messages client asked for: the canonical request, and what only the face acts on."""

    request: ResponsesRequest
    model: str  # as the client named it: the answer's `model`
    # The client's conversation (Claude Code's session id), for the server to key it by.
    conversation_key: str | None = None
    thinking: str | None = None  # thinking.type: enabled, adaptive, between_tools, disabled
    display: str | None = None  # thinking.display: summarized, omitted, updates
    context_management: dict[str, Any] | None = None  # kept for an `anthropic` backend only
    version: str | None = None  # the anthropic-version header
    betas: tuple[str, ...] = ()  # the anthropic-beta header, as given
    server_tools: tuple[str, ...] = ()  # tools the API runs, left out (named to the model)
    # Where each message's items end in `request.input` (after messages[:i + 1]), up to the
    # first whose items depend on later messages: the next request of the conversation takes
    # the items of the messages it repeats from here.
    ends: tuple[int, ...] = ()

    @property
    def shows_thinking(self) -> bool:
        """Whether thinking blocks carry their text (`display` is not `omitted`)."""
        return self.display != "omitted"


def parse_messages_request(
    data: dict[str, Any],
    headers: Mapping[str, str] | None = None,
    *,
    count_tokens: bool = False,
    earlier: MessagesAsk | None = None,
    known: int = 0,
    same: tuple[str, ...] = (),
) -> MessagesAsk:
    """Check a decoded /v1/messages body (`count_tokens`: a /v1/messages/count_tokens body)
    and translate it. `headers`: the request's, any case. `earlier`, `known`: the first
    `known` messages equal those `earlier` was read from (an earlier request of the same
    conversation), which are neither checked nor translated again; `same`: the fields equal
    to that request's, not checked again (validate_messages_request). Raises InvalidRequest
    naming the Messages parameter."""
    validate_messages_request(data, count_tokens=count_tokens, known=known, same=same)
    return translate_messages_request(data, headers, earlier, known)


def translate_messages_request(
    data: dict[str, Any],
    headers: Mapping[str, str] | None = None,
    earlier: MessagesAsk | None = None,
    known: int = 0,
) -> MessagesAsk:
    """A body that passed `validate_messages_request` -> the canonical request. `earlier`,
    `known` as for `parse_messages_request`: the items of those messages are `earlier`'s own
    (the result is the same). Raises InvalidRequest only for a `tool_choice` that forces a
    tool the gateway cannot offer."""
    own_headers = {name.lower(): value for name, value in (headers or {}).items()}
    messages = data["messages"]
    choice = data.get("tool_choice")
    forced = choice["name"] if choice is not None and choice["type"] == "tool" else None
    tools, server_tools = _tools(data.get("tools") or (), messages, forced)
    tool_choice, parallel = _tool_choice(choice, tools, server_tools)
    thinking = data.get("thinking") or {}
    output_config = data.get("output_config") or {}
    metadata = data.get("metadata") or {}
    user = metadata.get("user_id")
    session = session_id(user, own_headers)
    notice = unavailable_notice([name for name, _ in server_tools])
    instructions = _instructions(data.get("system"), notice)
    top_k = data.get("top_k")
    items, ends = _input_items(messages, earlier, known)
    request = ResponsesRequest(
        model=data["model"],
        input=items,
        instructions=instructions,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        stream=bool(data.get("stream")),
        reasoning=_reasoning(thinking, output_config),
        text=_text(output_config.get("format")),
        max_output_tokens=data.get("max_tokens"),
        temperature=data.get("temperature"),
        top_p=data.get("top_p"),
        store=False,  # the Messages API keeps nothing: there is no previous_response_id to serve
        prompt_cache_key=session,
        user=user,
        stop=list(data["stop_sequences"]) if data.get("stop_sequences") else None,
        extra={"top_k": top_k} if top_k is not None else {},
        native=NativeRequest(
            "messages",
            data,
            {name: value for name, value in own_headers.items() if name.startswith("anthropic-")},
        ),
    )
    betas = own_headers.get("anthropic-beta") or ""
    return MessagesAsk(
        request,
        data["model"],
        conversation_key=session,
        thinking=thinking.get("type"),
        display=thinking.get("display"),
        context_management=data.get("context_management"),
        version=own_headers.get("anthropic-version"),
        betas=tuple(beta.strip() for beta in betas.split(",") if beta.strip()),
        server_tools=tuple(kind for _, kind in server_tools),
        ends=ends,
    )


def session_id(user_id: str | None, headers: Mapping[str, str]) -> str | None:
    """The conversation a Claude Code request belongs to: its session, and within it the
    sub-agent that sends it (`X-Claude-Code-Agent-Id`, as `SESSION/agent/ID`), so that a
    sub-agent's requests, whose prefix is not the main conversation's, neither replace the main
    conversation's remembered request nor share its cache key. The session is the
    `X-Claude-Code-Session-Id` header (lower-cased `headers`), else the `session_id` of
    `metadata.user_id`. None when neither says."""
    session = _session(user_id, headers)
    agent = headers.get(AGENT_HEADER)
    return f"{session}/agent/{agent}" if session and agent else session


def _session(user_id: str | None, headers: Mapping[str, str]) -> str | None:
    """The session of `X-Claude-Code-Session-Id`, else of `metadata.user_id` (a JSON object in
    a string since 2.1; before, `user_<hash>_account_<uuid>_session_<uuid>`)."""
    header = headers.get(SESSION_HEADER)
    if header:
        return header
    if not user_id:
        return None
    if user_id.startswith("{"):
        try:
            parsed = orjson.loads(user_id)
        except orjson.JSONDecodeError:
            return None
        found = parsed.get("session_id") if isinstance(parsed, dict) else None
        return found if isinstance(found, str) and found else None
    match = _OLD_USER_ID.search(user_id)
    return match.group(1) if match else None


# -- instructions, reasoning, output format


def _instructions(system: str | list[dict[str, Any]] | None, notice: str | None) -> str | None:
    if isinstance(system, str):
        texts = [system] if system else []
    else:
        texts = [block["text"] for block in system or () if not is_billing_header(block) and block["text"]]
    if notice:
        texts.append(notice)
    return "\n\n".join(texts) or None


def budget_effort(budget_tokens: int) -> str:
    """The canonical effort of a thinking budget."""
    if budget_tokens < _LOW_BUDGET:
        return "low"
    return "medium" if budget_tokens < _MEDIUM_BUDGET else "high"


def _reasoning(thinking: dict[str, Any], output_config: dict[str, Any]) -> dict[str, Any] | None:
    """`thinking` and `output_config.effort` -> the canonical `reasoning`: enabled thinking by
    its budget, adaptive thinking by the effort asked (else medium), disabled none; an effort
    without thinking is an effort too. A summary is asked for when thinking is shown."""
    kind = thinking.get("type")
    asked = output_config.get("effort")
    if kind == "disabled":
        return None
    if kind == "enabled":
        effort = budget_effort(thinking["budget_tokens"])
    elif kind is not None:  # adaptive, between_tools
        effort = _EFFORTS[asked] if asked is not None else "medium"
    elif asked is not None:
        return {"effort": _EFFORTS[asked]}
    else:
        return None
    reasoning = {"effort": effort}
    if thinking.get("display") != "omitted":
        reasoning["summary"] = "auto"
    return reasoning


def _text(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    """`output_config.format` (structured outputs) -> the canonical `text.format`."""
    if fmt is None:
        return None
    return {"format": {"type": "json_schema", "name": "output", "schema": fmt["schema"]}}


# -- tools


def _tools(
    raw_tools: Any, messages: list[dict[str, Any]], forced: str | None = None
) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
    """The canonical tools: the client tools of `tools`, changed by the system messages'
    tool_addition and tool_removal blocks in order; and the server tools left out, as (name,
    type) pairs. A tool with `defer_loading: true` is offered only once a `tool_reference`
    in a tool result names it (or `tool_choice` forces it, `forced`), as the API loads it:
    Claude Code lists its searchable tools so (and a `DeferredToolPlaceholder` the model is
    never to see) and names one in its ToolSearch result when the model asks for it."""
    offered: dict[str, dict[str, Any]] = {}  # by name, in the client's order
    declared: dict[str, dict[str, Any]] = {}  # every client tool named anywhere, for re-additions
    server: list[tuple[str, str]] = []
    loaded = _referenced_tools(messages)
    if forced is not None:
        loaded.add(forced)
    for tool in raw_tools:
        _offer(tool, offered, declared, server, loaded)
    for message in messages:
        if message["role"] != "system" or isinstance(message["content"], str):
            continue
        for block in message["content"]:
            kind = block["type"]
            if kind != "tool_addition" and kind != "tool_removal":
                continue
            tool = block["tool"]
            if kind == "tool_removal":
                if tool["type"] == "tool_reference":
                    offered.pop(tool["name"], None)
            elif tool["type"] == "tool_definition":
                _offer(tool["definition"], offered, declared, server, loaded)
            elif tool["type"] == "tool_reference" and tool["name"] in declared:
                offered.setdefault(tool["name"], declared[tool["name"]])
            # MCP references name servers the API calls: nothing the gateway could offer.
    return list(offered.values()), server


def _offer(
    tool: dict[str, Any],
    offered: dict[str, dict[str, Any]],
    declared: dict[str, dict[str, Any]],
    server: list[tuple[str, str]],
    loaded: set[str],
) -> None:
    if is_server_tool(tool):
        kind = str(tool["type"])
        name = tool.get("name")
        entry = (name if isinstance(name, str) and name else kind, kind)
        if entry not in server:
            server.append(entry)
        return
    name = tool["name"]
    declared[name] = canonical = _function_tool(tool)
    if tool.get("defer_loading") is not True or name in loaded:
        offered[name] = canonical


def _referenced_tools(messages: list[dict[str, Any]]) -> set[str]:
    """The tools the `tool_reference` blocks of the tool results name (tool search's answers)."""
    names: set[str] = set()
    for message in messages:
        content = message["content"]
        if message["role"] != "user" or isinstance(content, str):
            continue
        for block in content:
            inner = block.get("content") if block["type"] == "tool_result" else None
            if isinstance(inner, list):
                names.update(part["tool_name"] for part in inner if part["type"] == "tool_reference")
    return names


class _RecentTools:
    """Client tools translated lately, by name: a request's tool equal to one (one comparison,
    C code) is the canonical tool made then. Claude Code sends the same tools every turn, and
    what the backends make of a tool (its catalogue entry, its chat function) is found by the
    tool object's identity (wire/recent.py)."""

    def __init__(self, limit: int = 1024) -> None:
        self._limit = limit
        self._by_name: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    def get(self, tool: dict[str, Any]) -> dict[str, Any] | None:
        name = tool["name"]
        found = self._by_name.get(name)
        if found is None or (found[0] is not tool and found[0] != tool):
            return None
        if found[0] is not tool:
            # The latest equal one is kept: a session's next request, whose tools are the very
            # objects when its body was read by its bytes, then costs no comparison.
            self._by_name[name] = (tool, found[1])
        return found[1]

    def put(self, tool: dict[str, Any], canonical: dict[str, Any]) -> dict[str, Any]:
        if len(self._by_name) >= self._limit:
            self._by_name.clear()  # a client sending ever new tools: start again
        self._by_name[tool["name"]] = (tool, canonical)
        return canonical


_RECENT_TOOLS = _RecentTools()


def _function_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A client tool -> a canonical function tool. The schema's top-level `$schema` (Claude
    Code sends draft 2020-12's) is left out: several chat servers refuse a schema with it."""
    known = _RECENT_TOOLS.get(tool)
    if known is not None:
        return known
    schema = tool["input_schema"]
    if "$schema" in schema:
        schema = {key: value for key, value in schema.items() if key != "$schema"}
    canonical: dict[str, Any] = {"type": "function", "name": tool["name"]}
    if tool.get("description") is not None:
        canonical["description"] = tool["description"]
    canonical["parameters"] = schema
    if tool.get("strict") is not None:
        canonical["strict"] = tool["strict"]
    return _RECENT_TOOLS.put(tool, canonical)


def _tool_choice(
    choice: dict[str, Any] | None, tools: list[dict[str, Any]], server: list[tuple[str, str]]
) -> tuple[Any, bool | None]:
    """The canonical `tool_choice` and `parallel_tool_calls`. Raises InvalidRequest for a
    choice that forces a tool the gateway cannot offer."""
    if choice is None:
        return "auto", None
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice["type"]
    if kind == "tool":
        name = choice["name"]
        if any(tool["name"] == name for tool in tools):
            return {"type": "function", "name": name}, parallel
        for server_name, server_kind in server:
            if name in (server_name, server_kind):
                raise InvalidRequest(
                    f"tool_choice.name: '{name}' is a tool the API runs ({server_kind}); the gateway runs no "
                    "server tools, so it cannot be forced",
                    param="tool_choice.name",
                )
        raise InvalidRequest(
            f"tool_choice.name: no tool named '{name[:80]}' in 'tools'", param="tool_choice.name"
        )
    if kind == "any":
        if not tools:
            raise InvalidRequest(
                "tool_choice.type: 'any' needs a tool the model can call, and the request offers none "
                "(tools the API runs are not available through the gateway)",
                param="tool_choice.type",
            )
        return "required", parallel
    return kind, parallel  # auto, none


# -- messages


def _input_items(
    messages: list[dict[str, Any]], earlier: MessagesAsk | None = None, known: int = 0
) -> tuple[list[Item], tuple[int, ...]]:
    """The canonical items of `messages`, and where each message's items end, up to the first
    whose items depend on the messages after it (a system message shown until the next user
    message: whether one follows changes); those of the first `known` messages are `earlier`'s
    (see translate_messages_request), as far as its ends go."""
    start = reused_messages(earlier, known)
    if start and earlier is not None and isinstance(earlier.request.input, list):
        ends = list(earlier.ends[:start])
        items = earlier.request.input[: ends[-1]]
    else:
        ends, items = [], []
    settled = True  # every message so far made its items alone
    last_user: int | None = None  # asked of the messages only when a system message needs it
    for index in range(start, len(messages)):
        message = messages[index]
        role, content = message["role"], message["content"]
        if role == "user":
            _user_items(content, items)
        elif role == "assistant":
            _assistant_items(content, items)
        elif message.get("clear_at") != "next_user_message":
            _system_item(content, items)
        else:
            # A system message shown "until the next user message" is not shown once one follows.
            settled = False
            if last_user is None:
                last_user = next(
                    (i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "user"), -1
                )
            if index > last_user:
                _system_item(content, items)
        if settled:
            ends.append(len(items))
    return items, tuple(ends)


def reused_messages(earlier: MessagesAsk | None, known: int) -> int:
    """How many of the first `known` messages, equal to those `earlier` was read from, keep the
    items `earlier` made of them (translate_messages_request): they are its first
    `earlier.ends[n - 1]` items."""
    if earlier is None or not isinstance(earlier.request.input, list):
        return 0
    return min(known, len(earlier.ends))


def _system_item(content: str | list[dict[str, Any]], items: list[Item]) -> None:
    if isinstance(content, str):
        items.append({"type": "message", "role": "system", "content": content})
        return
    parts = [{"type": "input_text", "text": block["text"]} for block in content if block["type"] == "text"]
    if parts:  # a message of tool changes alone says nothing to the model
        items.append({"type": "message", "role": "system", "content": parts})


def _user_items(content: str | list[dict[str, Any]], items: list[Item]) -> None:
    if isinstance(content, str):
        items.append({"type": "message", "role": "user", "content": content})
        return
    parts: list[dict[str, Any]] = []
    for block in content:
        if block["type"] == "tool_result":
            items.append(_tool_output(block))
        else:
            parts += _user_parts(block)
    if parts:
        items.append({"type": "message", "role": "user", "content": parts})


def _tool_output(block: dict[str, Any]) -> Item:
    content = block.get("content")
    output: str | list[dict[str, Any]]
    if content is None or isinstance(content, str):
        output = content or ""
        if block.get("is_error"):
            output = ERROR_PREFIX + output
    else:
        output = [part for item in content for part in _user_parts(item)]
        if block.get("is_error"):
            output.insert(0, {"type": "input_text", "text": ERROR_PREFIX.strip()})
    return {"type": "function_call_output", "call_id": block["tool_use_id"], "output": output}


def _user_parts(block: dict[str, Any]) -> list[dict[str, Any]]:
    """A user block (or one inside a tool result or a document) as canonical input parts."""
    kind = block["type"]
    if kind == "text":
        return [{"type": "input_text", "text": block["text"]}]
    if kind == "image":
        return [_image(block["source"])]
    if kind == "document":
        return _document(block)
    if kind == "search_result":
        texts = "\n\n".join(part["text"] for part in block["content"])
        return [
            {
                "type": "input_text",
                "text": f"Search result: {block['title']}\nSource: {block['source']}\n\n{texts}",
            }
        ]
    # tool_reference: a deferred tool searched for, offered from now on (_tools).
    return [{"type": "input_text", "text": f"Tool loaded: {block['tool_name']}"}]


def _image(source: dict[str, Any]) -> dict[str, Any]:
    if source["type"] == "base64":
        url = f"data:{source['media_type']};base64,{source['data']}"
    else:  # url: checked, the only other kind
        url = source["url"]
    return {"type": "input_image", "image_url": url, "detail": "auto"}


def _document(block: dict[str, Any]) -> list[dict[str, Any]]:
    """A PDF -> an `input_file` (read by translate/files.py, as every input_file is); text ->
    the text under its title, framed as that reader frames a file; content blocks -> their
    text, framed alike, and their images."""
    source, title = block["source"], block.get("title")
    parts: list[dict[str, Any]] = []
    if block.get("context"):
        parts.append(
            {"type": "input_text", "text": f"Context of {title or 'the document'}: {block['context']}"}
        )
    if source["type"] == "base64":
        data = f"data:application/pdf;base64,{source['data']}"
        parts.append({"type": "input_file", "filename": title or "document.pdf", "file_data": data})
        return parts
    images: list[dict[str, Any]] = []
    if source["type"] == "text":
        text = source["data"]
    elif isinstance(source["content"], str):
        text = source["content"]
    else:
        text = "\n\n".join(part["text"] for part in source["content"] if part["type"] == "text")
        images = [_image(part["source"]) for part in source["content"] if part["type"] == "image"]
    name = title or "document"
    body = text if text.endswith("\n") else text + "\n"
    parts.append({"type": "input_text", "text": f"--- file: {name} ---\n{body}--- end of {name} ---"})
    return parts + images


def _assistant_items(content: str | list[dict[str, Any]], items: list[Item]) -> None:
    if isinstance(content, str):
        items.append(
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": content}]}
        )
        return
    texts: list[dict[str, Any]] = []
    for block in content:
        kind = block["type"]
        if kind == "text":
            texts.append({"type": "output_text", "text": block["text"]})
            continue
        if texts:
            items.append({"type": "message", "role": "assistant", "content": texts})
            texts = []
        if kind == "tool_use":
            items.append(
                {
                    "type": "function_call",
                    "call_id": block["id"],
                    "name": block["name"],
                    "arguments": orjson.dumps(block["input"]).decode(),
                }
            )
        else:  # thinking, redacted_thinking
            items.append(reasoning_item(block))
    if texts:
        items.append({"type": "message", "role": "assistant", "content": texts})
