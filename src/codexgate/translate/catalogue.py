"""The request's tools, as every backend and stage reads them. Pure.

A client advertises tools in Responses shapes: functions, `custom` (freeform, with a grammar),
`namespace` groups of either, client-run kinds (`tool_search`, `local_shell`), hosted kinds the
Responses server runs (`web_search`, ...). `ToolCatalogue` is the one neutral reading of them:
each callable tool with its kind, its name and namespace as the client knows them, its schema
or grammar, and the flat name a model is shown (`namespace__name`, sanitised), by which a
backend that cannot carry namespaces (a chat upstream, an open model) advertises it and by
which the model calls it back. Hosted and unknown kinds are listed as unavailable.

The stages (argument repair, grammar check, tool calls written as text) and the turn read
this, whatever the backend; a backend only decides how to advertise it upstream.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from codexgate.wire.recent import SameObject

__all__ = [
    "ADDITIONAL_TOOLS",
    "CUSTOM_INPUT_PARAM",
    "CUSTOM_INPUT_SCHEMA",
    "HOSTED_TOOL_KINDS",
    "LOCAL_SHELL_NAME",
    "LOCAL_SHELL_PARAMETERS",
    "NON_SCHEMA_KEYS",
    "TOOL_SEARCH_NAME",
    "TOOL_SEARCH_PARAMETERS",
    "UNAVAILABLE_METADATA_KEY",
    "ToolCatalogue",
    "ToolKind",
    "ToolSpec",
    "catalogue_of",
    "clean_schema",
    "flat_name",
    "request_tools",
    "unavailable_metadata",
    "unavailable_notice",
]

ToolKind = Literal["function", "custom", "tool_search", "local_shell"]

# Tools advertised as an input item (Codex's Responses Lite sends no `tools` at all).
ADDITIONAL_TOOLS = "additional_tools"

# Hosted tools: the Responses server runs them, and a Chat Completions upstream has none of
# them. A tool kind codexgate does not know is treated the same way: refusing it would fail
# every request of the Codex release that introduced it.
HOSTED_TOOL_KINDS = frozenset(
    (
        "web_search",
        "web_search_preview",
        "file_search",
        "computer_use_preview",
        "code_interpreter",
        "image_generation",
        "mcp",
    )
)

# Client-executed tools without a function form of their own: shown to models as functions
# under these names, their calls given back as the item kinds the client runs.
TOOL_SEARCH_NAME = "tool_search"
LOCAL_SHELL_NAME = "local_shell"
LOCAL_SHELL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "argv of the command"},
        "working_directory": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "env": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["command"],
}
TOOL_SEARCH_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["query"],
}
_TOOL_SEARCH_DESCRIPTION = "Search for more tools by what they do."
_LOCAL_SHELL_DESCRIPTION = "Run a command on the user's machine; `command` is its argv."
# A custom (freeform) tool shown as a function takes its raw input as this one string.
CUSTOM_INPUT_PARAM = "input"
CUSTOM_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {CUSTOM_INPUT_PARAM: {"type": "string", "description": "The raw tool input."}},
    "required": [CUSTOM_INPUT_PARAM],
}
_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
# Schema keys Codex adds that are not JSON Schema (strict upstreams such as OpenAI's own chat
# endpoint or vLLM's guided decoding reject unknown keywords): removed before they go upstream.
NON_SCHEMA_KEYS = frozenset(("encrypted",))

# The response names the kinds left out in its metadata under this key (comma-separated).
UNAVAILABLE_METADATA_KEY = "codexgate_unavailable_tools"
_NOTICE_KINDS = 8  # kinds named in the notice at most (client-chosen strings)
_NOTICE_KIND_CHARS = 40

_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def _sanitize(name: str) -> str:
    """A name function-calling APIs accept (`^[a-zA-Z0-9_-]{1,64}$`), stable for a given input."""
    if _VALID_NAME.match(name):
        return name
    clean = _INVALID_CHARS.sub("_", name) or "tool"
    if len(clean) > 64:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        clean = f"{clean[:55]}_{digest}"
    return clean


@functools.lru_cache(maxsize=1024)  # every call in every history asks again
def flat_name(namespace: str | None, name: str) -> str:
    """The name a model is shown for a (namespace, name) tool; deterministic, so that calls in
    the history map to the same name as the advertised tool."""
    return _sanitize(f"{namespace}__{name}" if namespace else name)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """One callable tool of the request."""

    kind: ToolKind
    name: str  # as the client knows it
    namespace: str | None
    model_name: str  # as a model is shown it when namespaces cannot be carried (flat_name)
    description: str | None = None
    # The JSON schema of the arguments a model passes when shown the tool as a function,
    # cleaned of NON_SCHEMA_KEYS (a custom tool's: one `input` string).
    # None: a tool the request does not have (any object is accepted).
    parameters: dict[str, Any] | None = field(default_factory=lambda: _NO_PARAMETERS)
    grammar: dict[str, Any] | None = None  # a custom tool's `format` when it is a grammar
    source: Mapping[str, Any] | None = None  # the client's own tool object


@dataclass(slots=True)
class ToolCatalogue:
    """The callable tools by the name a model is shown, the kinds left out, and clashes."""

    specs: dict[str, ToolSpec] = field(default_factory=dict)
    unavailable: list[str] = field(default_factory=list)  # hosted or unknown kinds, once each
    skipped: list[str] = field(default_factory=list)  # every kind left out, and name clashes
    _by_client_name: dict[tuple[str | None, str], ToolSpec] = field(default_factory=dict)
    _schemas: dict[str, dict[str, Any] | None] | None = None  # made once: shared by requests

    def resolve(self, model_name: str) -> ToolSpec:
        """The tool a model called by the name it was shown; an unknown name is a plain
        function of that name (the client reports it to the model)."""
        spec = self.specs.get(model_name)
        if spec is None:
            spec = self._by_client_name.get((None, model_name))
        return spec or ToolSpec("function", model_name, None, model_name, parameters=None)

    def find(self, namespace: str | None, name: str) -> ToolSpec:
        """The tool a backend that carries namespaces got called by (namespace, name)."""
        spec = self._by_client_name.get((namespace, name))
        if spec is not None:
            return spec
        return self.resolve(flat_name(namespace, name))

    def named(self, namespace: str | None, name: str) -> ToolSpec | None:
        """The tool a client names (by its namespace and name, or by the flat name a model is
        shown), or None when the request has no such callable tool."""
        spec = self._by_client_name.get((namespace, name))
        return spec if spec is not None else self.specs.get(flat_name(namespace, name))

    @property
    def schemas(self) -> dict[str, dict[str, Any] | None]:
        """Model name -> JSON schema of its arguments as a function, for the stages that read
        tool calls written as text and repair arguments. Read-only: a catalogue is shared by
        the requests whose tools are the same."""
        if self._schemas is None:
            self._schemas = {name: spec.parameters for name, spec in self.specs.items()}
        return self._schemas

    def add(self, spec: ToolSpec) -> None:
        if spec.model_name in self.specs:  # a clash after sanitising: keep the first
            self.skipped.append(f"duplicate:{spec.model_name}")
            return
        self.specs[spec.model_name] = spec
        self._schemas = None
        self._by_client_name.setdefault((spec.namespace, spec.name), spec)

    def leave_out(self, kind: str) -> None:
        self.skipped.append(kind)
        if kind not in self.unavailable:
            self.unavailable.append(kind)


def request_tools(
    tools: Iterable[Mapping[str, Any]],
    items: Iterable[Mapping[str, Any]],
    kinds: frozenset[Any] | None = None,
) -> list[Any]:
    """The request's tools: `tools`, then those of every `additional_tools` input item.
    `kinds`: the items' types when known (Inbound.input_kinds); without `additional_tools`
    among them the items are not looked at (a long history is most of a request)."""
    found = list(tools)
    if kinds is not None and ADDITIONAL_TOOLS not in kinds:
        return found
    for item in items:
        if item.get("type") == ADDITIONAL_TOOLS:
            found.extend(item.get("tools") or ())
    return found


def catalogue_of(tools: Iterable[Mapping[str, Any]]) -> ToolCatalogue:
    """Read the client's tools (validated by wire/responses.py). Hosted and unknown kinds are
    left out and named in `unavailable`."""
    catalogue = ToolCatalogue()
    for tool in tools:
        entries = _ENTRIES.get(tool)
        if entries is None:
            entries = _ENTRIES.put(tool, _entries_of(tool))
        for entry in entries:
            if isinstance(entry, str):
                catalogue.leave_out(entry)
            else:
                catalogue.add(entry)
    return catalogue


# A tool's entries, by the tool object: a request's tool checked lately is the object checked
# then (wire/recent.py), so the tools Codex sessions share are read once.
_ENTRIES: SameObject[tuple[ToolSpec | str, ...]] = SameObject()


def _entries_of(tool: Mapping[str, Any]) -> tuple[ToolSpec | str, ...]:
    """What one client tool adds to a catalogue: its specs, or the kinds it leaves out."""
    kind = tool.get("type")
    if kind == "function":
        name = tool.get("name") or (tool.get("function") or {}).get("name")
        return (_function_spec(tool, name, None),) if isinstance(name, str) else ()
    if kind == "custom":
        return (_custom_spec(tool, None),) if isinstance(tool.get("name"), str) else ()
    if kind == "namespace":
        namespace = tool.get("name")
        entries: list[ToolSpec | str] = []
        for sub in tool.get("tools") or ():
            if not isinstance(sub, dict) or not isinstance(sub.get("name"), str):
                continue
            sub_kind = sub.get("type", "function")
            if sub_kind == "custom":
                entries.append(_custom_spec(sub, namespace))
            elif sub_kind == "function":
                entries.append(_function_spec(sub, sub["name"], namespace))
            else:
                entries.append(f"{namespace}.{sub_kind}")
        return tuple(entries)
    if kind == "tool_search" and tool.get("execution", "client") == "client":
        parameters = tool.get("parameters") or TOOL_SEARCH_PARAMETERS
        description = tool.get("description") or _TOOL_SEARCH_DESCRIPTION
        return (
            ToolSpec("tool_search", TOOL_SEARCH_NAME, None, TOOL_SEARCH_NAME, description,
                     clean_schema(parameters), source=tool),
        )  # fmt: skip
    if kind == "local_shell":
        return (
            ToolSpec("local_shell", LOCAL_SHELL_NAME, None, LOCAL_SHELL_NAME, _LOCAL_SHELL_DESCRIPTION,
                     LOCAL_SHELL_PARAMETERS, source=tool),
        )  # fmt: skip
    return (str(kind),)


def _function_spec(tool: Mapping[str, Any], name: str, namespace: str | None) -> ToolSpec:
    parameters = tool.get("parameters")
    if parameters is None and isinstance(tool.get("function"), dict):
        parameters = tool["function"].get("parameters")  # the Chat Completions shape
    description = tool.get("description") or (tool.get("function") or {}).get("description")
    return ToolSpec(
        "function",
        name,
        namespace,
        flat_name(namespace, name),
        description,
        clean_schema(parameters) if isinstance(parameters, dict) else _NO_PARAMETERS,
        source=tool,
    )


def _custom_spec(tool: Mapping[str, Any], namespace: str | None) -> ToolSpec:
    fmt = tool.get("format")
    grammar = fmt if isinstance(fmt, dict) and fmt.get("type") == "grammar" else None
    name = tool["name"]
    return ToolSpec(
        "custom", name, namespace, flat_name(namespace, name), tool.get("description"), CUSTOM_INPUT_SCHEMA,
        grammar, tool,
    )  # fmt: skip


def _has_non_schema_keys(schema: dict[str, Any]) -> bool:
    """Whether a NON_SCHEMA_KEYS key sits anywhere in `schema` (a walk that allocates little:
    most tools have none, and then the schema is passed on as it is). Every tool of every
    request passes here; schemas are decoded JSON or literals, plain dicts and lists, so exact
    type checks serve (half the time of isinstance and generator expressions)."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            if not NON_SCHEMA_KEYS.isdisjoint(node):
                return True
            children: Any = node.values()
        else:
            children = node
        for child in children:
            kind = type(child)
            if kind is dict or kind is list:
                stack.append(child)
    return False


def clean_schema(schema: Any) -> Any:
    """`schema` without the keys of NON_SCHEMA_KEYS, at any depth where a schema can sit: the
    same object when it has none, else a copy; iterative, so a deep schema cannot exhaust the
    stack."""
    if not isinstance(schema, dict) or not _has_non_schema_keys(schema):
        return schema
    root: dict[str, Any] = {}
    stack: list[tuple[Any, Any]] = [(schema, root)]
    while stack:
        source, target = stack.pop()
        items = source.items() if isinstance(source, dict) else enumerate(source)
        for key, value in items:
            if isinstance(source, dict) and key in NON_SCHEMA_KEYS and not isinstance(value, (dict, list)):
                continue
            if isinstance(value, (dict, list)):
                copy: Any = {} if isinstance(value, dict) else [None] * len(value)
                stack.append((value, copy))
                value = copy
            target[key] = value
    return root


def unavailable_notice(kinds: list[str]) -> str | None:
    """The one line a model is told when tools were left out (appended to its system prompt
    by backends that leave tools out), or None."""
    if not kinds:
        return None
    named = [_clip(k, _NOTICE_KIND_CHARS) for k in kinds[:_NOTICE_KINDS]]
    more = f" and {len(kinds) - _NOTICE_KINDS} more" if len(kinds) > _NOTICE_KINDS else ""
    return (
        f"Note: these tools are not available here and cannot be called: {', '.join(named)}{more}. "
        "Do not claim to have used them."
    )


def unavailable_metadata(kinds: Iterable[str]) -> str:
    """The value of UNAVAILABLE_METADATA_KEY in the response: kinds joined by commas, at most
    512 characters (OpenAI's limit on a metadata value)."""
    text = ",".join(_clip(k, _NOTICE_KIND_CHARS) for k in kinds)
    return _clip(text, 512)


_INVALID_NOTE_CHARS = re.compile(r"[^\x20-\x7e]")


def _clip(text: str, limit: int) -> str:
    text = _INVALID_NOTE_CHARS.sub("?", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
