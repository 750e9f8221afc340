"""repair_arguments: tool-call arguments become a compact JSON object string, repaired only where
there is a single reading, then checked against the tool's JSON Schema; every outcome counted."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from codexgate.translate.open_models import repair
from codexgate.translate.open_models.repair import ArgumentsResult, load_json_lenient, repair_arguments

EXEC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cmd": {"type": "string"},
        "workdir": {"type": "string"},
        "timeout_ms": {"type": "integer"},
        "login": {"type": "boolean"},
    },
    "required": ["cmd"],
    "additionalProperties": False,
}


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def test_public_surface_is_pinned() -> None:
    assert sorted(repair.__all__) == ["ArgumentsResult", "Outcome", "load_json_lenient", "repair_arguments"]


# -- valid input


def test_valid_arguments_come_back_compact_in_the_order_written() -> None:
    result = repair_arguments('{ "cmd" : "ls -la",\n  "workdir": "/tmp" }', EXEC_SCHEMA)
    assert result == ArgumentsResult('{"cmd":"ls -la","workdir":"/tmp"}', "valid", (), "valid JSON object")


def test_non_ascii_and_escapes_survive() -> None:
    result = repair_arguments('{"cmd": "echo \\"Zürich\\" \\u2713\\n"}', EXEC_SCHEMA)
    assert result.outcome == "valid"
    assert result.arguments == compact({"cmd": 'echo "Zürich" ✓\n'})


@pytest.mark.parametrize("schema", [None, {}])
def test_no_schema_accepts_any_object(schema: dict[str, Any] | None) -> None:
    result = repair_arguments('{"anything": [1, {"x": null}]}', schema)
    assert result.outcome == "valid"
    assert result.arguments == '{"anything":[1,{"x":null}]}'


# -- each repair, alone


@pytest.mark.parametrize(
    ("raw", "kind", "expected"),
    [
        ('{"cmd": "ls", "workdir": "/tmp",}', "trailing_comma", {"cmd": "ls", "workdir": "/tmp"}),
        ('{"cmd": "ls",\n}', "trailing_comma", {"cmd": "ls"}),
        ("{'cmd': 'ls -la', 'workdir': '/srv'}", "single_quotes", {"cmd": "ls -la", "workdir": "/srv"}),
        ("{'cmd': 'echo \\'hi\\''}", "single_quotes", {"cmd": "echo 'hi'"}),
        ('{"cmd": "ls", "workdir": "/tmp"', "missing_closers", {"cmd": "ls", "workdir": "/tmp"}),
        ('{"cmd": "ls", "timeout_ms": 500', "missing_closers", {"cmd": "ls", "timeout_ms": 500}),
        ('{"cmd": "ls", "login": True}', "python_literals", {"cmd": "ls", "login": True}),
        ('```json\n{"cmd": "ls"}\n```', "code_fence", {"cmd": "ls"}),
        ('```\n{"cmd": "ls"}\n```', "code_fence", {"cmd": "ls"}),
        ('"{\\"cmd\\": \\"ls\\"}"', "double_encoded", {"cmd": "ls"}),
    ],
)
def test_each_unambiguous_repair(raw: str, kind: str, expected: dict[str, Any]) -> None:
    counts: Counter[str] = Counter()
    result = repair_arguments(raw, EXEC_SCHEMA, counts=counts)
    assert result.outcome == "repaired"
    assert result.repairs == (kind,)
    assert result.arguments == compact(expected)
    assert counts == Counter({"arguments.repaired": 1, f"arguments.repaired.{kind}": 1})


def test_nested_missing_closers_close_in_order() -> None:
    result = repair_arguments('{"plan": [{"step": "a", "status": "done"}, {"step": "b"', None)
    assert result.arguments == '{"plan":[{"step":"a","status":"done"},{"step":"b"}]}'
    assert result.repairs == ("missing_closers",)


def test_python_none_and_false_become_null_and_false() -> None:
    result = repair_arguments("{'a': None, 'b': False}", None)
    assert result.arguments == '{"a":null,"b":false}'
    assert result.repairs == ("single_quotes", "python_literals")


def test_an_object_instead_of_a_string_is_serialised() -> None:
    counts: Counter[str] = Counter()
    result = repair_arguments({"cmd": "pwd"}, EXEC_SCHEMA, counts=counts)
    assert (result.arguments, result.outcome, result.repairs) == (
        '{"cmd":"pwd"}',
        "repaired",
        ("object_not_string",),
    )
    assert counts["arguments.repaired.object_not_string"] == 1


@pytest.mark.parametrize("raw", [None, "", "   \n"])
def test_no_arguments_mean_an_empty_object(raw: str | None) -> None:
    result = repair_arguments(raw, None)
    assert (result.arguments, result.outcome, result.repairs) == ("{}", "repaired", ("empty",))


def test_repairs_combine() -> None:
    result = repair_arguments("```json\n{'cmd': 'make', 'login': True,}\n```", EXEC_SCHEMA)
    assert result.arguments == '{"cmd":"make","login":true}'
    assert result.repairs == ("code_fence", "single_quotes", "python_literals", "trailing_comma")


def test_double_encoded_text_is_repaired_inside() -> None:
    result = repair_arguments('"{\\"cmd\\": \\"ls\\",}"', EXEC_SCHEMA)
    assert result.arguments == '{"cmd":"ls"}'
    assert result.repairs == ("double_encoded", "trailing_comma")


def test_repairs_never_touch_string_contents() -> None:
    raw = '{"cmd": "python -c \\"print(True, None)\\" ,}", "workdir": "x",}'
    result = repair_arguments(raw, EXEC_SCHEMA)
    assert result.arguments == compact({"cmd": 'python -c "print(True, None)" ,}', "workdir": "x"})
    assert result.repairs == ("trailing_comma",)


def test_prior_repairs_are_reported_and_counted() -> None:
    counts: Counter[str] = Counter()
    result = repair_arguments('{"cmd": "ls"}', EXEC_SCHEMA, counts=counts, prior_repairs=("single_quotes",))
    assert (result.outcome, result.repairs) == ("repaired", ("single_quotes",))
    assert counts == Counter({"arguments.repaired": 1, "arguments.repaired.single_quotes": 1})


# -- no single reading: no repair


@pytest.mark.parametrize(
    "raw",
    [
        "{'cmd': 'echo it's done'}",  # an apostrophe inside single quotes
        "{\"cmd\": 'ls'}",  # mixed quotes: which ones are strings?
        '{"cmd": "echo hi',  # a string left open
        '{"cmd": ',  # cut after a colon
        '{"cmd": "ls",',  # cut after a comma: more keys were coming
        '{"cmd": [',  # an open container with nothing in it
        '{"cmd": "ls"]',  # mismatched brackets
        'Sure! {"cmd": "ls"}',  # prose around the JSON
        '{"cmd": "ls"} and then more',
        '{"cmd": NaN}',
        "cmd=ls",
    ],
)
def test_ambiguous_text_is_unparseable(raw: str) -> None:
    counts: Counter[str] = Counter()
    result = repair_arguments(raw, EXEC_SCHEMA, counts=counts)
    assert result.arguments is None
    assert result.outcome == "unparseable"
    assert result.detail.startswith("not JSON: ")
    assert counts == Counter({"arguments.unparseable": 1})


@pytest.mark.parametrize(
    ("raw", "kind"), [("[1, 2]", "list"), ("42", "int"), ('"ls"', "str"), ("null", "null")]
)
def test_json_that_is_not_an_object_is_unparseable(raw: str, kind: str) -> None:
    result = repair_arguments(raw, None)
    assert (result.arguments, result.outcome) == (None, "unparseable")
    assert result.detail == f"arguments are a JSON {kind}, not an object"


def test_a_list_given_as_arguments_is_unparseable() -> None:
    assert repair_arguments([{"cmd": "ls"}], None).outcome == "unparseable"


# -- the schema


def test_missing_required_property_is_a_schema_mismatch() -> None:
    counts: Counter[str] = Counter()
    result = repair_arguments('{"workdir": "/tmp"}', EXEC_SCHEMA, counts=counts)
    assert (result.arguments, result.outcome) == (None, "schema_mismatch")
    assert "'cmd' is a required property" in result.detail
    assert counts == Counter({"arguments.schema_mismatch": 1})


def test_wrong_type_is_a_schema_mismatch_even_after_repairs() -> None:
    counts: Counter[str] = Counter()
    result = repair_arguments('{"cmd": "ls", "timeout_ms": "soon",}', EXEC_SCHEMA, counts=counts)
    assert (result.arguments, result.outcome, result.repairs) == (
        None,
        "schema_mismatch",
        ("trailing_comma",),
    )
    assert result.detail.startswith("schema: timeout_ms: ")
    assert counts == Counter({"arguments.schema_mismatch": 1})


def test_unknown_property_is_refused_when_the_schema_says_so() -> None:
    assert repair_arguments('{"cmd": "ls", "shell": "zsh"}', EXEC_SCHEMA).outcome == "schema_mismatch"


def test_the_declared_draft_is_used() -> None:
    # prefixItems exists in 2020-12 only: under draft 7 it is an unknown keyword and accepts.
    items = {
        "type": "object",
        "properties": {"pair": {"type": "array", "prefixItems": [{"type": "integer"}]}},
    }
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", **items}
    assert repair_arguments('{"pair": ["x"]}', items).outcome == "schema_mismatch"
    assert repair_arguments('{"pair": ["x"]}', draft7).outcome == "valid"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"cmd": {"type": "no-such-type"}}},
        {"$ref": "https://schemas.example.invalid/tool.json"},  # never fetched
    ],
)
def test_a_schema_that_cannot_be_used_does_not_block_the_call(schema: dict[str, Any]) -> None:
    result = repair_arguments('{"cmd": "ls"}', schema)
    assert (result.arguments, result.outcome) == ('{"cmd":"ls"}', "valid")


# -- load_json_lenient


def test_load_json_lenient_returns_any_value_and_its_repairs() -> None:
    assert load_json_lenient("[1, 2,]") == ([1, 2], ("trailing_comma",))
    assert load_json_lenient('"plain"') == ("plain", ())


def test_load_json_lenient_raises_value_error() -> None:
    with pytest.raises(ValueError):
        load_json_lenient("{'a': 'it's'}")
