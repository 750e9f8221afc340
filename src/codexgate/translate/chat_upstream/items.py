"""Input items that have no Chat Completions twin: what each becomes, or why it is refused.
Pure: no I/O. The "Input items" table of docs/faces.md is the summary of this module and
messages.py.

Nothing is left out in silence. An item is carried in a form the upstream reads (a message, a
tool call, a short note) or refused with a 400 naming it; the one exception is reasoning with
nothing readable in it (another server's opaque chain of thought, which no upstream could use).
"""

from __future__ import annotations

import re
from typing import Any, NoReturn

import orjson

from codexgate.errors import InvalidRequest
from codexgate.wire.responses import Item

# History of hosted tools the server ran: the model should know it happened, as a note.
HOSTED_CALL_KINDS = frozenset(
    (
        "web_search_call",
        "image_generation_call",
        "file_search_call",
        "code_interpreter_call",
        "computer_call",
        "mcp_call",
        "mcp_list_tools",
    )
)
# Items whose content only OpenAI's servers can read: refused when nothing readable is left.
_OPAQUE_ONLY = frozenset(("compaction", "compaction_summary"))

# An OpenAI encrypted blob is base64 (Fernet, "gAAAA...") with no whitespace. Text a model wrote
# has spaces or is short. Codex multi-agent v2 copies the parent's `message` argument (marked
# `"encrypted": true` in the tool schema) verbatim into the child's `encrypted_content`, so a
# gateway answer's text comes back there as plain text.
_OPAQUE_BLOB = re.compile(r"[A-Za-z0-9+/_=-]{40,}")
_NOTE_CHARS = 300  # a hosted call's note: the query or prompt, clipped


def is_opaque(text: str) -> bool:
    return _OPAQUE_BLOB.fullmatch(text) is not None


def agent_message_text(item: Item, param: str) -> str:
    """A multi-agent v2 message as the text the receiving model reads, with who sent it to
    whom. Raises InvalidRequest for content only OpenAI can read."""
    pieces: list[str] = []
    for index, part in enumerate(item.get("content") or []):
        if not isinstance(part, dict):
            continue
        text = part.get("text")
        if isinstance(text, str):
            pieces.append(text)
            continue
        blob = part.get("encrypted_content")
        if isinstance(blob, str):
            if is_opaque(blob):
                raise InvalidRequest(
                    f"'{param}.content[{index}].encrypted_content' of this agent_message is encrypted by "
                    "another server and cannot be read by this model; start the sub-agent again "
                    "through codexgate.",
                    param=f"{param}.content[{index}].encrypted_content",
                )
            pieces.append(blob)
    body = ""
    for piece in pieces:  # Codex's header part ends "Payload:\n"; the payload follows it
        body += piece if not body or body.endswith("\n") else "\n" + piece
    author = item.get("author") or "unknown"
    recipient = item.get("recipient") or "unknown"
    return f"[Message from {author} to {recipient}]\n{body}"


def hosted_call_note(item: Item) -> str:
    """A one-line note of a hosted tool's call, for the assistant turn it belongs to."""
    kind = str(item.get("type"))
    raw_action = item.get("action")
    action: dict[str, Any] = raw_action if isinstance(raw_action, dict) else {}
    detail = (
        action.get("query")
        or action.get("url")
        or item.get("revised_prompt")
        or item.get("query")
        or item.get("name")
        or ""
    )
    if not isinstance(detail, str):
        detail = orjson.dumps(detail).decode()
    detail = detail if len(detail) <= _NOTE_CHARS else detail[: _NOTE_CHARS - 3] + "..."
    status = item.get("status")
    text = f"[{kind.removesuffix('_call')} ran on the server"
    text += f" ({status})" if isinstance(status, str) else ""
    return text + (f": {detail}]" if detail else "]")


def local_shell_arguments(item: Item) -> str:
    """A `local_shell_call`'s action as the arguments of the `local_shell` function."""
    raw_action = item.get("action")
    action: dict[str, Any] = raw_action if isinstance(raw_action, dict) else {}
    args = {k: action[k] for k in ("command", "working_directory", "timeout_ms", "env") if k in action}
    return orjson.dumps(args).decode()


def tool_search_arguments(item: Item) -> str:
    arguments = item.get("arguments")
    if isinstance(arguments, str):
        return arguments
    return orjson.dumps(arguments if isinstance(arguments, dict) else {}).decode()


def tool_search_output_text(item: Item) -> str:
    """What a client-side tool search found: the tools' names and descriptions. The tools
    themselves reach the model as tools in the same request."""
    lines = []
    for tool in item.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        name = tool.get("name") or tool.get("type")
        description = tool.get("description") or ""
        if isinstance(description, str) and len(description) > 200:
            description = description[:197] + "..."
        lines.append(f"- {name}: {description}" if description else f"- {name}")
    return "Tools found:\n" + "\n".join(lines) if lines else "No tools found."


def refuse_unreadable(item: Item, param: str) -> NoReturn:
    """Refuse an item the upstream could not read. Raises InvalidRequest."""
    kind = item.get("type")
    if kind == "compaction_trigger":
        raise InvalidRequest(
            f"'{param}' asks for remote compaction, which codexgate does not serve (Codex sends it only to "
            "a provider named OpenAI); name the provider otherwise so that Codex compacts locally.",
            param=f"{param}.type",
        )
    if kind in _OPAQUE_ONLY:
        raise InvalidRequest(
            f"'{param}' is a '{kind}' item holding history encrypted by another server; this model "
            "cannot read it. Compact the conversation through codexgate or start a new one.",
            param=param,
        )
    raise InvalidRequest(
        f"'{param}' has type '{_clip(str(kind))}', which codexgate cannot translate and which carries no "
        "text. Codex adds item types in new releases: update codexgate, or report the item type.",
        param=f"{param}.type",
    )


def unknown_item_note(item: Item, param: str) -> str:
    """What an item of a kind codexgate does not know is sent as: its type, and the text it
    carries. Raises InvalidRequest for one that carries none (refuse_unreadable); `param`
    names it."""
    text = _readable_text(item)
    if not text:
        refuse_unreadable(item, param)
    return f"[Input item of type '{_clip(str(item.get('type')))}']\n{text}"


def _readable_text(item: Item) -> str:
    """Text an unknown item carries (its content parts, `text`, or a string `output`), or ''."""
    content = item.get("content")
    texts: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
    for key in ("text", "output"):
        if isinstance(item.get(key), str):
            texts.append(item[key])
    return "\n".join(t for t in texts if t)


def _clip(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
