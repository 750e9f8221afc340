"""The canonical request -> what `codex app-server` is sent, for the Codex backend. Pure.

Codex keeps a conversation itself, as a thread; a client re-sends the whole history every turn.
The gateway therefore sends Codex only what is new: a user message starts a turn, tool results
answer the calls a waiting turn made. Which thread a request continues is found by its
*chain*: a hash of what a thread is made with (model, tools, instructions) folded with each
history item's key in order. After a response, the thread is filed under the chain of the
history the client will send next (the request's items and the response's output); the next
request's longest chain prefix that is filed names its thread, and the items after it are new.

Keys read what a client keeps of an item: a message's role and text, a call's id, an output's
id and text. Reasoning and items only Codex produced are not keys (chat clients drop them), and
consecutive assistant messages count as one (a chat client gets them joined, with a blank line
between), so a thread is found whichever face the client speaks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import (
    LOCAL_SHELL_NAME,
    ToolCatalogue,
    catalogue_of,
    flat_name,
    request_tools,
)
from codexgate.translate.chat_upstream.items import local_shell_arguments
from codexgate.translate.files import FileTexts, file_text
from codexgate.translate.parts import check_parts, image_url
from codexgate.wire.app_server import DynamicFunctionTool, DynamicToolCallResult, DynamicToolOutput, UserInput
from codexgate.wire.responses import Item, ResponsesRequest

__all__ = [
    "AgentAsk",
    "FollowUp",
    "chain_of",
    "client_tool_name",
    "dynamic_name",
    "dynamic_tools",
    "follow_up",
    "history_items",
    "opening",
    "output_schema",
    "read_agent_ask",
    "tool_result",
]

_OUTPUT_KINDS = frozenset(
    ("function_call_output", "custom_tool_call_output", "local_shell_call_output", "tool_search_output")
)
# Codex's own tools (0.169, every model and feature): a client tool of the same name would be
# hidden by Codex's, so the client's is offered under CLIENT_PREFIX + its name.
CODEX_TOOL_NAMES = frozenset(
    (
        "exec_command", "write_stdin", "shell", "local_shell", "apply_patch", "view_image", "update_plan",
        "request_user_input", "request_user_input_async", "get_goal", "create_goal", "update_goal",
        "tool_search", "web_search", "list_mcp_resources", "list_mcp_resource_templates",
        "read_mcp_resource", "spawn_agent", "send_input", "resume_agent", "wait_agent", "close_agent",
        "exec", "wait", "sleep",
    )
)  # fmt: skip
CLIENT_PREFIX = "client_"
_CALL_KINDS = frozenset(("function_call", "custom_tool_call"))
_ASSISTANT_JOIN = "\n\n"  # how the chat face joins an answer's messages (translate/chat_face/chunks.py)
# Marks a system or developer message that arrives mid-conversation: Codex's developer
# instructions are fixed when a thread starts, so a later one travels as turn input.
LATE_INSTRUCTIONS = "[Developer instructions]\n"
# A new thread whose history ends with tool results (no user message after them) has no input
# of its own to start a turn with: this one asks the model to go on from those results.
CONTINUE_AFTER_RESULTS = "(The tool results above answer your calls. Continue.)"


@dataclass(frozen=True, slots=True)
class AgentAsk:
    """One request as the Codex backend reads it."""

    catalogue: ToolCatalogue
    root: int  # what a thread answering it must be made with
    chain: list[tuple[int, int]]  # (number of leading items, chain hash), from (0, root)
    instructions: str | None  # the developer instructions a new thread is started with
    opening: int  # leading items that are instructions (part of `instructions`)


@dataclass(slots=True)
class FollowUp:
    """What the items after a thread's filed chain ask: results of the calls it waits on,
    then a user turn (input to start, or to steer into the waiting turn)."""

    results: dict[str, Item] = field(default_factory=dict)  # call id -> its output item
    turn: list[UserInput] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)  # call id -> its output's place (errors)


def read_agent_ask(req: ResponsesRequest, upstream_model: str, files: FileTexts | None = None) -> AgentAsk:
    """`files`: the files of the leading instructions, read ahead (translate/files.py; None:
    read here). Raises InvalidRequest for what Codex cannot be given, naming the field."""
    _refuse_unhonourable(req)
    _check_contents(req.input)
    catalogue = catalogue_of(request_tools(req.tools, req.input))
    opening = 0
    parts = [req.instructions] if req.instructions else []
    for index, item in enumerate(req.input):
        if _kind(item) == "message" and item.get("role") in ("system", "developer"):
            parts.append(_content_text(item.get("content"), f"input[{index}].content", files))
            opening += 1
        else:
            break
    instructions = "\n\n".join(p for p in parts if p) or None
    offered = [] if req.tool_choice == "none" else sorted(catalogue.specs)
    root = hash((upstream_model, instructions, _tools_digest(req), tuple(offered)))
    return AgentAsk(catalogue, root, chain_of(root, req.input, opening), instructions, opening)


def chain_of(root: int, items: list[Item], start: int = 0) -> list[tuple[int, int]]:
    """(n, hash of `root` and the keys of items[start:n]) after each item that has a key."""
    chain = [(start, root)]
    current = root
    assistant: str | None = None  # text of the assistant messages in a row, joined
    assistant_end = start
    for index in range(start, len(items)):
        key = _key(items[index])
        if key is None:
            continue
        if key[0] == "assistant":
            assistant = key[1] if assistant is None else assistant + _ASSISTANT_JOIN + key[1]
            assistant_end = index + 1
            continue
        if assistant is not None:
            current = hash((current, "assistant", assistant.strip()))
            chain.append((assistant_end, current))
            assistant = None
        current = hash((current, key))
        chain.append((index + 1, current))
    if assistant is not None:
        chain.append((assistant_end, hash((current, "assistant", assistant.strip()))))
    return chain


def follow_up(
    items: list[Item], pending: Iterable[str], start: int = 0, files: FileTexts | None = None
) -> FollowUp | None:
    """What `items` (those after a thread's filed chain, the first being input[start]) ask of
    it, or None when they cannot continue it (an assistant message, a call, a result for a call
    it does not wait on): then a new thread is made. `files`: their files read ahead (None:
    read here). Raises InvalidRequest for a file in them that cannot be read as text."""
    waiting = set(pending)
    asked = FollowUp()
    for index, item in enumerate(items, start):
        kind = _kind(item)
        if kind in _OUTPUT_KINDS:
            call_id = item.get("call_id")
            if asked.turn or call_id not in waiting:
                return None
            asked.results[call_id] = item
            asked.where[call_id] = f"input[{index}].output"
        elif kind == "message" and item.get("role") in ("user", "system", "developer"):
            asked.turn.extend(_turn_input(item, f"input[{index}]", files))
        elif _key(item) is not None:
            return None
    if not asked.results and not asked.turn:
        return None
    return asked


def opening(
    ask: AgentAsk, items: list[Item], files: FileTexts | None = None
) -> tuple[list[Item], list[UserInput]]:
    """A new thread for the whole request: the history to inject (Responses items Codex reads)
    and the input of its first turn (the trailing user messages, or a request to go on from
    trailing tool results). `files`: the request's files read ahead (None: read here). Raises
    InvalidRequest for a file that cannot be read as text."""
    end = len(items)
    while (
        end > ask.opening and _kind(items[end - 1]) == "message" and items[end - 1].get("role") != "assistant"
    ):
        end -= 1
    turn: list[UserInput] = []
    for index in range(end, len(items)):
        turn.extend(_turn_input(items[index], f"input[{index}]", files))
    history = history_items(items[ask.opening : end], ask.opening, files)
    if not turn:
        turn = [{"type": "text", "text": CONTINUE_AFTER_RESULTS, "text_elements": []}]
    return history, turn


def history_items(items: Iterable[Item], start: int = 0, files: FileTexts | None = None) -> list[Item]:
    """Earlier turns as Responses items Codex replays to its model: messages (their files as
    text), and the client's tool calls under the flat names its tools were offered by, with
    their results. Reasoning and items of other kinds are not replayed (another server produced
    them). `start`: the first item's index in the request; `files`: their files read ahead
    (None: read here). Raises InvalidRequest for a file that cannot be read as text."""
    out: list[Item] = []
    for index, item in enumerate(items, start):
        kind = _kind(item)
        if kind == "message":
            role = item.get("role")
            if role == "assistant":
                text = _content_text(item.get("content"), f"input[{index}].content", files)
                out.append(
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": text}],
                    }
                )
            else:
                content = _input_parts(item.get("content"), f"input[{index}].content", files)
                out.append(
                    {"type": "message", "role": "user" if role == "user" else "developer", "content": content}
                )
        elif kind in _CALL_KINDS:
            name = dynamic_name(flat_name(item.get("namespace"), item["name"]))
            arguments = item.get("arguments")
            if kind == "custom_tool_call":
                arguments = orjson.dumps({"input": item.get("input", "")}).decode()
            out.append(
                {"type": "function_call", "call_id": item["call_id"], "name": name, "arguments": arguments}
            )
        elif kind == "local_shell_call":  # its output is replayed: so must the call be
            shell = {"name": dynamic_name(LOCAL_SHELL_NAME), "arguments": local_shell_arguments(item)}
            out.append({"type": "function_call", "call_id": item["call_id"], **shell})
        elif kind in _OUTPUT_KINDS:
            output = _output_for_model(item, f"input[{index}].output", files)
            out.append({"type": "function_call_output", "call_id": item["call_id"], "output": output})
    return out


def dynamic_name(model_name: str) -> str:
    """The name a client tool is offered to Codex by: its flat name, prefixed when Codex has a
    tool of that name (`client_apply_patch`)."""
    return CLIENT_PREFIX + model_name if model_name in CODEX_TOOL_NAMES else model_name


def client_tool_name(dynamic: str) -> str:
    """The flat name of the client tool Codex called by `dynamic` (the turn resolves it)."""
    bare = dynamic.removeprefix(CLIENT_PREFIX)
    return bare if bare != dynamic and bare in CODEX_TOOL_NAMES else dynamic


def dynamic_tools(ask: AgentAsk, req: ResponsesRequest) -> list[DynamicFunctionTool]:
    """The client's tools, offered to Codex beside its own, under the flat names a model is
    shown (`dynamic_name`; the turn resolves calls back by them); none when the client said
    `tool_choice: none`."""
    if req.tool_choice == "none":
        return []
    no_parameters = {"type": "object", "properties": {}}
    return [
        {"type": "function", "name": dynamic_name(spec.model_name),
         "description": spec.description or spec.name, "inputSchema": spec.parameters or no_parameters}
        for spec in ask.catalogue.specs.values()
    ]  # fmt: skip


def output_text(item: Item) -> str:
    """A tool result's text as a key reads it (an array of parts is joined; images and files
    are not read; the tools a client-side tool search found, as JSON)."""
    if _kind(item) == "tool_search_output":
        return orjson.dumps(item.get("tools") or []).decode()
    output = item.get("output")
    if isinstance(output, str):
        return output
    return _text(output)


def _output_for_model(item: Item, param: str, files: FileTexts | None) -> str:
    """`output_text`, with the text of the files in it (checked by `_check_contents`)."""
    output = item.get("output")
    if _kind(item) == "tool_search_output" or not isinstance(output, list):
        return output_text(item)
    return _content_text(output, param, files)


def tool_result(item: Item, param: str = "output", files: FileTexts | None = None) -> DynamicToolCallResult:
    """A client's tool result as the answer to Codex's `item/tool/call`: its texts, files and
    images in order (parts checked by `_check_contents`). `param`: where the output is in the
    request; `files`: its files read ahead (None: read here). Raises InvalidRequest for a file
    that cannot be read as text."""
    output = item.get("output")
    content: list[DynamicToolOutput]
    if isinstance(output, list):
        content = [
            {"type": "inputImage", "imageUrl": value} if image else {"type": "inputText", "text": value}
            for image, value in _part_values(output, param, files)
        ]
    else:
        content = [{"type": "inputText", "text": output_text(item)}]
    return {"contentItems": content, "success": True}


def output_schema(req: ResponsesRequest) -> Any:
    """`text.format` as the schema Codex constrains its final message with, or None."""
    fmt = (req.text or {}).get("format")
    if not isinstance(fmt, dict):
        return None
    if fmt.get("type") == "json_schema":
        return fmt.get("schema") or {"type": "object"}
    if fmt.get("type") == "json_object":
        return {"type": "object"}
    return None


# -- what Codex cannot be given


# Sampling the agent chooses itself: a client asking for it would not get it.
_UNHONOURABLE = {
    "temperature": "the Codex agent chooses its own sampling",
    "top_p": "the Codex agent chooses its own sampling",
    "seed": "the Codex agent cannot be seeded",
    "frequency_penalty": "the Codex agent chooses its own sampling",
    "presence_penalty": "the Codex agent chooses its own sampling",
    "logit_bias": "the Codex agent chooses its own sampling",
}


def _refuse_unhonourable(req: ResponsesRequest) -> None:
    values = {"temperature": req.temperature, "top_p": req.top_p, "seed": req.seed}
    values.update(
        (name, req.extra.get(name)) for name in ("frequency_penalty", "presence_penalty", "logit_bias")
    )
    for name, value in values.items():
        if value is not None:
            raise InvalidRequest(
                f"'{name}' cannot be honoured by a Codex upstream: {_UNHONOURABLE[name]}.", param=name
            )
    choice = req.tool_choice
    # `allowed_tools` in mode "required" forces a call as much as "required" does.
    named = isinstance(choice, dict) and choice.get("type") != "allowed_tools"
    if choice == "required" or named or (isinstance(choice, dict) and choice.get("mode") == "required"):
        raise InvalidRequest(
            "'tool_choice' can only be auto or none with a Codex upstream: the agent decides which "
            "tools it calls.",
            param="tool_choice",
        )


# -- items


def _kind(item: Item) -> Any:
    kind = item.get("type")
    return "message" if kind is None and "role" in item else kind


def _key(item: Item) -> tuple[Any, ...] | None:
    """What a client keeps of an item (see the module docstring); None for what it need not."""
    kind = _kind(item)
    if kind == "message":
        role = item.get("role")
        content = item.get("content")
        if role == "assistant":
            return ("assistant", _text(content))
        images = (
            tuple(
                p.get("image_url") for p in content if isinstance(p, dict) and p.get("type") == "input_image"
            )
            if isinstance(content, list)
            else ()
        )
        return (role, _text(content), images)
    if kind in _CALL_KINDS:
        return ("call", item.get("call_id"))
    if kind in _OUTPUT_KINDS:
        return ("output", item.get("call_id"), output_text(item))
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts = []
    for part in content:
        if isinstance(part, dict):
            text = part.get("text") if isinstance(part.get("text"), str) else part.get("refusal")
            if isinstance(text, str):
                texts.append(text)
    return "".join(texts)


def _part_text(part: dict[str, Any]) -> str | None:
    """The text a text-bearing part carries (`text`, a refusal, plain text Codex copied into
    `encrypted_content`; `_check_contents` refused opaque blobs), or None."""
    for name in ("text", "refusal", "encrypted_content"):
        if isinstance(part.get(name), str):
            return str(part[name])
    return None


def _content_text(content: Any, param: str, files: FileTexts | None) -> str:
    """What the model reads of a message's content or a tool output (`param` names it): its
    text as `_text` reads it, then each readable blob's and each file's text, a line apart.
    Raises InvalidRequest for a file that cannot be read as text."""
    text = _text(content)
    if not isinstance(content, list):
        return text
    more: list[str] = []
    for index, part in enumerate(content):
        if not isinstance(part, dict):
            continue
        if part.get("type") == "input_file":
            more.append(_file(part, f"{param}[{index}]", files))
        elif part.get("type") == "encrypted_content" and isinstance(part.get("encrypted_content"), str):
            more.append(part["encrypted_content"])
    return "\n".join(t for t in (text, *more) if t)


def _file(part: dict[str, Any], param: str, files: FileTexts | None) -> str:
    return file_text(part, param) if files is None else files.text(part, param)


def _input_parts(content: Any, param: str, files: FileTexts | None) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    return [
        {"type": "input_image", "image_url": value} if image else {"type": "input_text", "text": value}
        for image, value in _part_values(content or (), param, files)
    ]


def _part_values(parts: Iterable[Any], param: str, files: FileTexts | None) -> Iterator[tuple[bool, str]]:
    """Each part, in order, as (True, its image's URL) or (False, its text: a file's, or what
    `_part_text` reads); parts with neither are passed over. `param` names the parts. Raises
    InvalidRequest for a file that cannot be read as text."""
    for index, part in enumerate(parts):
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "input_image":
            url = image_url(part)
            if url is not None:
                yield True, url
        elif kind == "input_file":
            yield False, _file(part, f"{param}[{index}]", files)
        elif isinstance(text := _part_text(part), str):
            yield False, text


def _turn_input(item: Item, param: str, files: FileTexts | None) -> list[UserInput]:
    """A user message as turn input; a system or developer one as marked text. `param`: the
    item's place in the request. Raises InvalidRequest for a file that cannot be read."""
    content = item.get("content")
    prefix = LATE_INSTRUCTIONS if item.get("role") != "user" else ""
    inputs: list[UserInput] = []
    text = _content_text(content, f"{param}.content", files)
    if text:
        inputs.append({"type": "text", "text": prefix + text, "text_elements": []})
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "input_image":
                url = image_url(part)
                if url is not None:
                    inputs.append({"type": "image", "url": url})
    return inputs


def _check_contents(items: list[Item]) -> None:
    """Every part of every message and tool output is one Codex can be given (files are not
    read here: the whole history passes here every turn, and only new items are sent). Images
    only from users and tools: Codex's instructions and replayed answers are text. Raises
    InvalidRequest naming the part."""
    for index, item in enumerate(items):
        kind = _kind(item)
        if kind == "message" and isinstance(content := item.get("content"), list):
            check_parts(content, f"input[{index}].content", images=item.get("role") == "user")
        elif kind in _OUTPUT_KINDS and isinstance(output := item.get("output"), list):
            check_parts(output, f"input[{index}].output", images=True)


def _tools_digest(req: ResponsesRequest) -> bytes:
    return orjson.dumps(request_tools(req.tools, req.input), option=orjson.OPT_SORT_KEYS)
