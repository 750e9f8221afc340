"""The request's tools as Chat Completions tools. Pure.

A chat upstream knows only functions: every tool of the catalogue (translate/catalogue.py) is
advertised as a function under the flat name a model is shown (`namespace__name`); a custom
tool takes its raw input as one `input` string, with its grammar in the description so the
model can write valid input. The turn resolves the calls back through the same catalogue.
"""

from __future__ import annotations

from typing import Any

from codexgate.translate.catalogue import CUSTOM_INPUT_PARAM, ToolCatalogue, ToolSpec, flat_name

__all__ = ["chat_tools", "translate_tool_choice"]


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
    return {"type": "function", "function": function}


def chat_tools(catalogue: ToolCatalogue) -> list[dict[str, Any]]:
    """Every callable tool as a chat `function` tool, in the client's order."""
    return [_chat_tool(spec) for spec in catalogue.specs.values()]


def translate_tool_choice(choice: Any) -> Any:
    """`auto`/`none`/`required` pass; a named tool becomes the chat form of its flat name."""
    if isinstance(choice, str):
        return choice if choice in ("auto", "none", "required") else "auto"
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind in ("function", "custom") and isinstance(choice.get("name"), str):
            name = flat_name(choice.get("namespace"), choice["name"])
            return {"type": "function", "function": {"name": name}}
        if kind == "allowed_tools":
            return "required" if choice.get("mode") == "required" else "auto"
    return "auto"
