"""The request's tools as Chat Completions tools. Pure.

A chat upstream knows only functions: every tool of the catalogue (translate/catalogue.py) is
advertised as a function under the flat name a model is shown (`namespace__name`); a custom
tool takes its raw input as one `input` string, with its grammar in the description so the
model can write valid input. The turn resolves the calls back through the same catalogue.
"""

from __future__ import annotations

from typing import Any

from codexgate.errors import InvalidRequest
from codexgate.translate.catalogue import CUSTOM_INPUT_PARAM, ToolCatalogue, ToolSpec
from codexgate.wire.recent import SameObject

__all__ = ["chat_tool_choice", "chat_tools"]


def _chat_tool(spec: ToolSpec) -> dict[str, Any]:
    description = spec.description or ""
    grammar = spec.grammar
    if grammar is not None and grammar.get("definition"):
        # The model only sees a string parameter, so it must see the grammar to write valid input.
        description += (
            f"\n\nPass the raw input as the '{CUSTOM_INPUT_PARAM}' string. It must match this "
            f"{grammar.get('syntax', '')} grammar:\n{grammar['definition']}"
        )
        description = description.strip()
    function: dict[str, Any] = {"name": spec.model_name}
    if description:
        function["description"] = description
    function["parameters"] = spec.parameters
    if spec.kind == "function" and _is_strict(spec.source):
        function["strict"] = True  # the client asked the server to hold the model to the schema
    return {"type": "function", "function": function}


def _is_strict(tool: Any) -> bool:
    if not tool:
        return False
    chat_shape = tool.get("function")
    return tool.get("strict") is True or (isinstance(chat_shape, dict) and chat_shape.get("strict") is True)


def chat_tools(catalogue: ToolCatalogue) -> list[dict[str, Any]]:
    """Every callable tool as a chat `function` tool, in the client's order (read-only: a
    spec's function is shared by the requests that have its tool, see catalogue_of)."""
    functions = []
    for spec in catalogue.specs.values():
        function = _FUNCTIONS.get(spec)
        functions.append(function if function is not None else _FUNCTIONS.put(spec, _chat_tool(spec)))
    return functions


_FUNCTIONS: SameObject[dict[str, Any]] = SameObject()


def chat_tool_choice(
    choice: Any, catalogue: ToolCatalogue, functions: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], Any]:
    """The functions to advertise and the chat `tool_choice` for the request's `tool_choice`
    (validated on input): `none`/`auto`/`required` as they are, a named tool as its function,
    `allowed_tools` as only the functions it allows (chat servers know no such choice) with its
    mode. Raises InvalidRequest for a choice a chat upstream cannot honour: a tool the request
    does not have (a hosted one included: none runs here), or a call required with none to make."""
    if isinstance(choice, str):
        if choice == "required" and not functions:
            raise InvalidRequest(
                "'tool_choice' is required, but the request has no tool this model can call.",
                param="tool_choice",
            )
        return functions, choice
    kind = choice["type"]
    if kind == "allowed_tools":
        allowed = _allowed_names(choice["tools"], catalogue)
        kept = [f for f in functions if f["function"]["name"] in allowed]
        mode = choice.get("mode") or "auto"
        if mode == "required" and not kept:
            raise InvalidRequest(
                "'tool_choice' requires a call of an allowed tool, but none of them can be called here.",
                param="tool_choice.tools",
            )
        return kept, mode
    spec = _chosen(choice, catalogue)
    if spec is None:
        param = "tool_choice.name" if kind in ("function", "custom") else "tool_choice.type"
        raise InvalidRequest(
            f"'tool_choice' forces the tool '{_label(choice)}', which this model cannot call (the request "
            "does not have it, or it runs only on OpenAI's servers).",
            param=param,
        )
    return functions, {"type": "function", "function": {"name": spec.model_name}}


def _chosen(choice: dict[str, Any], catalogue: ToolCatalogue) -> ToolSpec | None:
    """The callable tool a choice names: a function or custom tool by name, a client-run kind
    (`tool_search`, `local_shell`) by its kind; None for anything else."""
    kind = choice.get("type")
    if kind in ("function", "custom"):
        name = choice.get("name")
        return catalogue.named(choice.get("namespace"), name) if isinstance(name, str) else None
    return next((spec for spec in catalogue.specs.values() if spec.kind == kind), None)


def _allowed_names(tools: list[dict[str, Any]], catalogue: ToolCatalogue) -> set[str]:
    """The model names of the tools an `allowed_tools` choice allows. Hosted kinds allow
    nothing here (they are not offered; the model is told so); a function or custom tool the
    request does not have is refused."""
    names: set[str] = set()
    for index, tool in enumerate(tools):
        spec = _chosen(tool, catalogue)
        if spec is not None:
            names.add(spec.model_name)
        elif tool.get("type") in ("function", "custom"):
            raise InvalidRequest(
                f"'tool_choice.tools[{index}]' allows the tool '{_label(tool)}', which the request does "
                "not have.",
                param=f"tool_choice.tools[{index}].name",
            )
    return names


def _label(choice: dict[str, Any]) -> str:
    name = choice.get("name")
    label = name if isinstance(name, str) else str(choice.get("type"))
    return label if len(label) <= 80 else label[:77] + "..."
