"""The quick checks of Codex's common input items and tools, and of JSON types, agree with the
full checks.

`_common_item` passes the shapes Codex sends most with a few lookups and no parameter names;
whatever it passes, `_validate_item` must pass too (and so for `_common_tool`) (it is asked whenever the quick check says
no, and names what is wrong). Items are drawn from those shapes with any field swapped for
any JSON value, so both the passing and the failing sides are exercised.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codexgate.errors import InvalidRequest
from codexgate.wire.checks import NUMBER, check_optional, check_type
from codexgate.wire.responses import _common_item, _common_tool, _validate_item, _validate_tool, parse_request

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5))
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
part = st.fixed_dictionaries(
    {"type": st.sampled_from(["input_text", "output_text", "summary_text", "input_image", "input_file"])},
    optional={"text": st.one_of(st.text(max_size=5), json_values), "encrypted_content": json_values},
)
SHAPES: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": "hi"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
    {"type": "function_call", "call_id": "c", "name": "shell", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c", "output": "done"},
    {"type": "custom_tool_call", "call_id": "c", "name": "apply_patch", "input": "*** Begin Patch"},
    {"type": "custom_tool_call_output", "call_id": "c", "output": "ok"},
    {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}], "encrypted_content": "x"},
]
FIELDS = ["type", "role", "content", "call_id", "name", "arguments", "output", "input", "namespace",
          "summary", "encrypted_content"]  # fmt: skip


@st.composite
def items(draw: st.DrawFn) -> Any:
    item = dict(draw(st.sampled_from(SHAPES)))
    for _ in range(draw(st.integers(0, 2))):
        field = draw(st.sampled_from(FIELDS))
        if draw(st.booleans()):
            item[field] = draw(st.one_of(json_values, st.lists(part, max_size=2)))
        else:
            item.pop(field, None)
    return item if draw(st.integers(0, 20)) else draw(json_values)


@settings(max_examples=1500)
@given(items())
def test_what_the_quick_check_passes_the_full_checks_pass(item: Any) -> None:
    if _common_item(item):
        _validate_item(item, "input[0]")


def test_the_quick_check_passes_every_common_shape() -> None:
    assert all(_common_item(item) for item in SHAPES)


@pytest.mark.parametrize(
    "item, param",
    [
        ({"type": "message", "role": ["user"], "content": "hi"}, "input[0].role"),
        ({"type": "message", "role": "user", "content": [{"type": "input_text", "text": 5}]},
         "input[0].content[0].text"),
        ({"type": "function_call", "call_id": "c", "name": "shell", "arguments": {}}, "input[0].arguments"),
        ({"type": ["function_call"], "call_id": "c"}, "input[0].type"),
        ({"type": "reasoning", "summary": [{"type": "summary_text", "text": True}]}, "input[0].summary[0].text"),
    ],
)  # fmt: skip
def test_an_item_the_quick_check_refuses_is_named_as_before(item: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_request({"model": "m", "input": [item]})
    assert caught.value.param == param


@given(json_values)
def test_check_type_agrees_with_isinstance_for_json_values(value: Any) -> None:
    for expected in (str, list, dict, bool, int, NUMBER, (str, list), (dict, str)):
        kinds = expected if isinstance(expected, tuple) else (expected,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        try:
            check_type(value, expected, "p")
            check_optional({"v": value}, "v", expected, "p")
        except InvalidRequest:
            assert not ok
        else:
            assert ok or value is None


TOOLS: list[dict[str, Any]] = [
    {"type": "function", "name": "shell", "description": "d", "strict": False,
     "parameters": {"type": "object", "properties": {}}},
    {"type": "custom", "name": "apply_patch", "description": "d",
     "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
    {"type": "custom", "name": "note", "format": {"type": "text"}},
]  # fmt: skip
TOOL_FIELDS = ["type", "name", "description", "strict", "parameters", "format", "function"]
formats = st.fixed_dictionaries(
    {"type": st.one_of(st.sampled_from(["text", "grammar", "regex"]), json_values)},
    optional={"syntax": json_values, "definition": json_values},
)


@st.composite
def tools(draw: st.DrawFn) -> Any:
    tool = dict(draw(st.sampled_from(TOOLS)))
    for _ in range(draw(st.integers(0, 2))):
        field = draw(st.sampled_from(TOOL_FIELDS))
        if draw(st.booleans()):
            tool[field] = draw(st.one_of(json_values, formats))
        else:
            tool.pop(field, None)
    return tool


@settings(max_examples=1000)
@given(tools())
def test_what_the_quick_tool_check_passes_the_full_checks_pass(tool: Any) -> None:
    if _common_tool(tool):
        _validate_tool(tool, "tools[0]")


def test_the_quick_tool_check_passes_codex_tools() -> None:
    assert all(_common_tool(tool) for tool in TOOLS)
