"""TextToolCallParser: tool calls printed as text (Hermes, Qwen3-Coder XML, Mistral, Llama,
DeepSeek, bare JSON) become calls whatever the chunking; anything that is not a good call to an
advertised tool comes back as the model's own text; plain text is never held longer than needed."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from codexgate.translate.open_models import textcalls
from codexgate.translate.open_models.textcalls import (
    FORMATS,
    MODES,
    CallPiece,
    Piece,
    TextPiece,
    TextToolCallParser,
)

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "textcalls"
FIXTURES = sorted(p.name for p in FIXTURES_DIR.glob("*.json"))
CANDIDATE_CHARS = "<[{`"

# Codex's tool shapes (chat side) and one tool without a schema.
TOOLS: dict[str, dict[str, Any] | None] = {
    "exec_command": {
        "type": "object",
        "properties": {
            "cmd": {"type": "string"},
            "workdir": {"type": "string"},
            "yield_time_ms": {"type": "integer"},
            "with_escalated_permissions": {"type": "boolean"},
        },
        "required": ["cmd"],
        "additionalProperties": False,
    },
    "read_file": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "offset": {"type": "integer"},
            "limit": {"type": "integer"},
        },
        "required": ["path"],
    },
    "apply_patch": {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]},
    "update_plan": {
        "type": "object",
        "properties": {
            "explanation": {"type": "string"},
            "plan": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "step": {"type": "string"},
                        "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]},
                    },
                    "required": ["step", "status"],
                },
            },
        },
        "required": ["plan"],
    },
    "get_weather": None,
}


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES_DIR / name).read_text(encoding="utf-8"))
    return data


FIXTURE_MODES = [(name, mode) for name in FIXTURES for mode in load(name)["modes"]]


def merged(pieces: Iterable[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for piece in pieces:
        if out and isinstance(piece, TextPiece) and isinstance(out[-1], TextPiece):
            out[-1] = TextPiece(out[-1].text + piece.text)
        else:
            out.append(piece)
    return out


def run(
    chunks: Iterable[str],
    mode: str = "auto",
    tools: Mapping[str, dict[str, Any] | None] = TOOLS,
) -> tuple[list[Piece], Counter[str]]:
    counts: Counter[str] = Counter()
    parser = TextToolCallParser(tools, mode, counts)
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces.extend(parser.feed(chunk))
    pieces.extend(parser.finish())
    return merged(pieces), counts


def described(pieces: list[Piece]) -> list[dict[str, Any]]:
    """The fixture's `expected` shape; also checks that arguments are compact JSON objects."""
    out: list[dict[str, Any]] = []
    for piece in pieces:
        if isinstance(piece, TextPiece):
            out.append({"text": piece.text})
            continue
        arguments = json.loads(piece.arguments)
        assert isinstance(arguments, dict)
        assert piece.arguments == json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        out.append({"call": piece.name, "arguments": arguments})
    return out


def call(name: str, **arguments: Any) -> CallPiece:
    return CallPiece(name, json.dumps(arguments, ensure_ascii=False, separators=(",", ":")))


def hermes(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


# -- the surface


def test_public_surface_is_pinned() -> None:
    assert sorted(textcalls.__all__) == sorted(
        [
            "FORMATS",
            "MODES",
            "NEED_MORE",
            "Block",
            "CallPiece",
            "NotACall",
            "Opener",
            "Piece",
            "RawCall",
            "ScanContext",
            "ScanResult",
            "TextCallFormat",
            "TextPiece",
            "TextToolCallParser",
        ]
    )
    assert MODES == ("auto", "off", "qwen3_coder", "hermes", "mistral", "deepseek", "llama", "json")
    assert len({f.name for f in FORMATS}) == len(FORMATS)


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown text tool-call mode"):
        TextToolCallParser(TOOLS, mode="qwen")


# -- the recorded fixtures, however they are split


def test_fixture_directory_is_populated() -> None:
    assert len(FIXTURES) >= 15
    assert (FIXTURES_DIR / "README.md").is_file()
    covered = {mode for _, mode in FIXTURE_MODES}
    assert covered >= {f.name for f in FORMATS} | {"auto"}


@pytest.mark.parametrize(("name", "mode"), FIXTURE_MODES)
def test_fixture_as_recorded(name: str, mode: str) -> None:
    fixture = load(name)
    pieces, counts = run(fixture["chunks"], mode)
    assert described(pieces) == fixture["expected"]
    assert counts == Counter(fixture["counts"])


@pytest.mark.parametrize(("name", "mode"), FIXTURE_MODES)
def test_fixture_whole_and_one_character_at_a_time(name: str, mode: str) -> None:
    fixture = load(name)
    content = "".join(fixture["chunks"])
    expected, _ = run(fixture["chunks"], mode)
    assert run([content], mode)[0] == expected
    assert run(list(content), mode)[0] == expected


@pytest.mark.parametrize(("name", "mode"), FIXTURE_MODES)
def test_fixture_split_at_every_character_boundary(name: str, mode: str) -> None:
    fixture = load(name)
    content = "".join(fixture["chunks"])
    expected, expected_counts = run(fixture["chunks"], mode)
    for cut in range(len(content) + 1):
        pieces, counts = run([content[:cut], content[cut:]], mode)
        assert pieces == expected, f"split at {cut}: {content[:cut]!r} | {content[cut:]!r}"
        assert counts == expected_counts


@pytest.mark.parametrize(("name", "mode"), FIXTURE_MODES)
def test_fixture_in_random_chunk_sizes(name: str, mode: str) -> None:
    fixture = load(name)
    content = "".join(fixture["chunks"])
    expected, _ = run(fixture["chunks"], mode)
    rng = random.Random(f"{name}:{mode}")
    for _ in range(25):
        chunks, at = [], 0
        while at < len(content):
            size = rng.randint(1, 24)
            chunks.append(content[at : at + size])
            at += size
        assert run(chunks, mode)[0] == expected, chunks


@pytest.mark.parametrize("name", FIXTURES)
def test_only_text_that_may_begin_a_marker_is_held(name: str) -> None:
    """Fed one character at a time, up to the first call: the text released is what was fed,
    less a held tail that begins with a character that may start a marker (or, before anything
    was released, whitespace that goes if a call follows)."""
    content = "".join(load(name)["chunks"])
    parser = TextToolCallParser(TOOLS)
    released = ""
    for at, char in enumerate(content):
        pieces = parser.feed(char)
        if any(isinstance(p, CallPiece) for p in pieces):
            break
        released += "".join(p.text for p in pieces if isinstance(p, TextPiece))
        fed = content[: at + 1]
        assert fed.startswith(released)
        held = fed[len(released) :] if released else fed.lstrip()
        assert held == "" or held[0] in CANDIDATE_CHARS, (fed, held)


# -- how long text is held


def test_plain_text_is_released_in_the_same_feed() -> None:
    parser = TextToolCallParser(TOOLS)
    text = "The build passed: 12 tests, 0 failures, coverage 91%."
    assert parser.feed(text) == [TextPiece(text)]
    assert parser.feed(" Next, the docs.") == [TextPiece(" Next, the docs.")]
    assert parser.finish() == []


@pytest.mark.parametrize(
    "text",
    [
        "if a < b then swap",
        "see [1] and [the docs](https://example.com)",
        "a dict {x: 1} inline",
        "run `ls -la` first",
        "arrows <- and <= and <> and <｜> here",
    ],
)
def test_candidate_characters_that_cannot_start_a_marker_are_released_at_once(text: str) -> None:
    assert TextToolCallParser(TOOLS).feed(text) == [TextPiece(text)]


@pytest.mark.parametrize(
    "feeds",
    [
        pytest.param(
            [("if a <", "if a "), (" b", "< b")], id="a_less_than_sign_is_held_only_until_the_next_character"
        ),
        pytest.param(
            [
                ("an HTML <t", "an HTML "),
                ("o", ""),
                ("ast>", "<toast>"),
            ],  # "<to" may still become <tool_call>
            id="a_tag_prefix_is_held_until_it_stops_matching",
        ),
        pytest.param(
            [("done<｜", "done"), ("tool▁", ""), ("outputs▁begin｜>", "<｜tool▁outputs▁begin｜>")],
            id="a_fullwidth_deepseek_prefix_is_held_until_it_stops_matching",
        ),
        pytest.param(
            [("Result: {", "Result: {"), ("\n  {", "\n  "), ("x", "{x")],
            id="a_brace_is_a_candidate_only_at_the_start_of_a_line",
        ),
        pytest.param(
            [("Code:\n``", "Code:\n"), ("`py", "```py")],
            id="a_fence_is_released_as_soon_as_its_language_is_not_json",
        ),
        pytest.param(
            [
                ("Hermes wraps calls in <tool_call>", "Hermes wraps calls in "),
                (" tags.", "<tool_call> tags."),
            ],
            id="a_marker_named_in_prose_is_released_at_the_next_character",
        ),
    ],
)
def test_text_that_may_start_a_marker_is_held_until_it_cannot(feeds: list[tuple[str, str]]) -> None:
    """Each feed releases the text given with it (nothing where that is empty)."""
    parser = TextToolCallParser(TOOLS)
    for fed, released in feeds:
        assert parser.feed(fed) == ([TextPiece(released)] if released else [])


def test_text_after_a_call_is_released_at_once() -> None:
    parser = TextToolCallParser(TOOLS)
    assert parser.feed(hermes("exec_command", '{"cmd": "ls"}')) == [call("exec_command", cmd="ls")]
    assert parser.feed("\n\nDone, that was quick.") == [TextPiece("\n\nDone, that was quick.")]


# -- text around calls


def test_prose_before_a_call_is_preserved_exactly() -> None:
    text = "Let me check.\n" + hermes("read_file", '{"path": "a.py"}')
    assert run([text])[0] == [TextPiece("Let me check.\n"), call("read_file", path="a.py")]


def test_whitespace_around_and_between_calls_is_dropped() -> None:
    text = (
        "\n\n" + hermes("read_file", '{"path": "a"}') + "\n\n  " + hermes("read_file", '{"path": "b"}') + "\n"
    )
    assert run([text])[0] == [call("read_file", path="a"), call("read_file", path="b")]


def test_leading_whitespace_of_a_message_without_calls_is_kept() -> None:
    assert run(["\n  Hello"])[0] == [TextPiece("\n  Hello")]


def test_text_between_calls_is_preserved_exactly() -> None:
    text = hermes("read_file", '{"path": "a"}') + "\nand then\n" + hermes("read_file", '{"path": "b"}')
    assert run([text])[0] == [
        call("read_file", path="a"),
        TextPiece("\nand then\n"),
        call("read_file", path="b"),
    ]


# -- unknown tools and unusable arguments: the model's text, counted


def test_a_call_to_an_unknown_tool_is_text() -> None:
    text = "Searching.\n" + hermes("web_search", '{"query": "x"}') + "\n"
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts == Counter({"textcalls.hermes.unknown_tool": 1})


def test_no_advertised_tools_means_every_call_is_text() -> None:
    text = hermes("read_file", '{"path": "a"}')
    assert run([text], tools={})[0] == [TextPiece(text)]


def test_a_tool_without_a_schema_accepts_any_object() -> None:
    assert run([hermes("get_weather", '{"anything": [1, 2]}')])[0] == [call("get_weather", anything=[1, 2])]


@pytest.mark.parametrize(
    ("arguments", "repaired", "kind"),
    [
        ('{"path": "a.py",}', {"path": "a.py"}, "trailing_comma"),
        ('{"path": "a.py", "limit": 5', {"path": "a.py", "limit": 5}, "missing_closers"),
        ('"{\\"path\\": \\"a.py\\"}"', {"path": "a.py"}, None),
    ],
)
def test_broken_arguments_with_one_reading_are_repaired(
    arguments: str, repaired: dict[str, Any], kind: str | None
) -> None:
    pieces, counts = run([hermes("read_file", arguments)])
    assert pieces == [call("read_file", **repaired)]
    assert counts["textcalls.hermes.parsed"] == 1
    if kind:
        assert counts[f"arguments.repaired.{kind}"] == 1


def test_single_quoted_calls_are_repaired() -> None:
    text = "<tool_call>\n{'name': 'read_file', 'arguments': {'path': 'a.py'}}\n</tool_call>"
    pieces, counts = run([text])
    assert pieces == [call("read_file", path="a.py")]
    assert counts["arguments.repaired.single_quotes"] == 1


@pytest.mark.parametrize(
    "body",
    [
        "{'name': 'exec_command', 'arguments': {'cmd': 'echo it's'}}",  # apostrophe in single quotes
        '{"name": "exec_command", "arguments": {"cmd": "echo hi}}',  # string left open
        '{"name": "exec_command", "arguments": {"cmd": "ls",}, "extra": 1}',  # a key a call cannot carry
        '{"name": "exec_command", "arguments": {"cmd": 7}}',  # schema: cmd is a string
        '{"name": "exec_command", "arguments": "ls -la"}',  # a string that is not JSON
        '{"name": "exec_command", "arguments": {}, "parameters": {"cmd": "ls"}}',  # which one?
        '{"arguments": {"cmd": "ls"}}',  # no name
        "[]",
    ],
)
def test_ambiguous_or_invalid_arguments_stay_text(body: str) -> None:
    text = f"<tool_call>\n{body}\n</tool_call>"
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts["textcalls.hermes.bad_arguments"] == 1
    assert counts["textcalls.hermes.parsed"] == 0


def test_an_unterminated_call_is_text_at_finish() -> None:
    text = 'Now:\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n'
    parser = TextToolCallParser(TOOLS, counts=(counts := Counter()))
    assert parser.feed(text) == [TextPiece("Now:\n")]
    assert parser.finish() == [TextPiece(text[len("Now:\n") :])]
    assert counts == Counter({"textcalls.hermes.unterminated": 1})


# -- Qwen3-Coder XML


QWEN_TYPES: dict[str, dict[str, Any] | None] = {
    "typed": {
        "type": "object",
        "properties": {
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "meta": {"type": "object"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "maybe": {"type": ["integer", "null"]},
            "level": {"enum": [1, 2, 3]},
            "code": {"type": "string"},
            "label": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        },
    }
}


def qwen(name: str, **parameters: str) -> str:
    body = "".join(f"<parameter={key}>\n{value}\n</parameter>\n" for key, value in parameters.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def test_qwen_parameters_take_the_type_their_schema_names() -> None:
    text = qwen(
        "typed",
        count="42",
        ratio="0.25",
        flag="true",
        meta='{"a": [1, 2]}',
        tags='["x", "y"]',
        maybe="null",
        level="2",
        code="007",
        label="null",
        extra="12",
    )
    pieces, _ = run([text], tools=QWEN_TYPES)
    assert described(pieces) == [
        {
            "call": "typed",
            "arguments": {
                "count": 42,
                "ratio": 0.25,
                "flag": True,
                "meta": {"a": [1, 2]},
                "tags": ["x", "y"],
                "maybe": None,
                "level": 2,
                "code": "007",  # a string stays the text, however numeric it looks
                "label": "null",  # may be a string: the text
                "extra": "12",  # not in the schema: the text
            },
        }
    ]


def test_qwen_values_lose_exactly_one_newline_on_each_side() -> None:
    text = "<tool_call>\n<function=apply_patch>\n<parameter=input>\n\n  indented\n\n</parameter>\n</function>\n</tool_call>"
    assert run([text])[0] == [call("apply_patch", input="\n  indented\n")]
    inline = "<tool_call><function=apply_patch><parameter=input>x</parameter></function></tool_call>"
    assert run([inline])[0] == [call("apply_patch", input="x")]


def test_a_python_boolean_is_repaired_and_counted() -> None:
    pieces, counts = run([qwen("typed", flag="True")], tools=QWEN_TYPES)
    assert pieces == [call("typed", flag=True)]
    assert counts["arguments.repaired.python_literals"] == 1


def test_a_value_that_does_not_fit_its_type_makes_the_call_text() -> None:
    text = qwen("typed", count="forty-two")
    pieces, counts = run([text], tools=QWEN_TYPES)
    assert pieces == [TextPiece(text)]
    assert counts == Counter({"arguments.schema_mismatch": 1, "textcalls.qwen3_coder.bad_arguments": 1})


def test_qwen_function_without_the_tool_call_wrapper() -> None:
    text = "Running it.\n<function=exec_command>\n<parameter=cmd>\nmake test\n</parameter>\n</function>\n</tool_call>"
    assert run([text])[0] == [TextPiece("Running it.\n"), call("exec_command", cmd="make test")]
    bare = "<function=exec_command><parameter=cmd>ls</parameter></function>\nDone."
    assert run([bare])[0] == [call("exec_command", cmd="ls"), TextPiece("\nDone.")]


@pytest.mark.parametrize(
    "body",
    [
        '<function=exec_command>{"cmd": "ls"}</function>',  # Llama's <function=> JSON form: no parameters
        "<function=exec_command>\n<parameter=cmd>\nls\n</function>",  # parameter never closed
        "<function=exec_command>\n<parameter=cmd>a</parameter>\n<parameter=cmd>b</parameter>\n</function>",
    ],
)
def test_qwen_markup_that_does_not_parse_stays_text(body: str) -> None:
    text = f"<tool_call>\n{body}\n</tool_call>"
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts["textcalls.qwen3_coder.bad_arguments"] == 1


# -- Mistral, Llama, DeepSeek, JSON


def test_a_mistral_block_is_all_or_nothing() -> None:
    text = (
        '[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "a"}}, {"name": "rm_rf", "arguments": {}}]'
    )
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts == Counter({"arguments.valid": 1, "textcalls.mistral.unknown_tool": 1})


def test_mistral_v11_name_then_json_without_bracket_tokens() -> None:
    text = '[TOOL_CALLS]read_file{"path": "a"}[TOOL_CALLS]exec_command{"cmd": "ls"}'
    assert run([text])[0] == [call("read_file", path="a"), call("exec_command", cmd="ls")]


def test_llama_call_followed_by_text() -> None:
    text = '<|python_tag|>{"name": "read_file", "parameters": {"path": "a"}}\nReading it now.'
    assert run([text])[0] == [call("read_file", path="a"), TextPiece("\nReading it now.")]


def test_llama_builtin_tool_syntax_is_text() -> None:
    text = '<|python_tag|>brave_search.call(query="weather in Paris")'
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts == Counter()


def test_a_tagless_whole_message_call_is_llama_with_parameters_and_json_with_arguments() -> None:
    parameters = '{"name": "read_file", "parameters": {"path": "a"}}'
    arguments = '{"name": "read_file", "arguments": {"path": "a"}}'
    assert run([parameters])[1]["textcalls.llama.parsed"] == 1
    assert run([arguments])[1]["textcalls.json.parsed"] == 1
    assert run([arguments], mode="llama")[0] == [TextPiece(arguments)]


def test_llama_plain_json_must_be_the_whole_message() -> None:
    text = '{"name": "read_file", "parameters": {"path": "a"}}\nis the call I would make.'
    assert run([text])[0] == [TextPiece(text)]


DEEPSEEK_CALL = (
    '<｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file\n```json\n{"path": "a"}\n```<｜tool▁call▁end｜>'
)


@pytest.mark.parametrize("opener", ["<｜tool▁calls▁begin｜>", "<｜tool▁calls｜>", "<｜tool calls begin｜>"])
def test_deepseek_opener_spellings(opener: str) -> None:
    text = f"{opener}{DEEPSEEK_CALL}<｜tool▁calls▁end｜>"
    pieces, counts = run([text])
    assert pieces == [call("read_file", path="a")]
    assert counts["textcalls.deepseek.parsed"] == 1


def test_deepseek_without_the_closing_marker_is_text() -> None:
    text = f"<｜tool▁calls▁begin｜>{DEEPSEEK_CALL}"
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts == Counter({"textcalls.deepseek.unterminated": 1})


def test_deepseek_call_without_separator_is_text() -> None:
    text = '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>read_file {"path": "a"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts == Counter({"textcalls.deepseek.bad_arguments": 1})


@pytest.mark.parametrize(
    "text",
    [
        'Example:\n```json\n{"name": "read_file", "arguments": {"path": "a"}}\n```\nThat is how you call it.',
        '```python\n{"name": "read_file", "arguments": {"path": "a"}}\n```',
        '{"name": "Alice", "age": 31, "city": "Lyon"}',  # JSON output, not a call
        '[{"id": 1}, {"id": 2}]',
        "```json\n[1, 2, 3]\n```",
    ],
)
def test_json_that_is_not_a_trailing_call_is_text(text: str) -> None:
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts == Counter()


def test_a_call_shaped_json_answer_for_an_unknown_tool_is_text_and_counted() -> None:
    text = 'Here it is:\n{"name": "summarise", "arguments": {"length": "short"}}'
    pieces, counts = run([text])
    assert pieces == [TextPiece(text)]
    assert counts == Counter({"textcalls.json.unknown_tool": 1})


# -- modes


def test_off_mode_passes_everything_through_at_once() -> None:
    text = "Let me check.\n" + hermes("read_file", '{"path": "a"}')
    parser = TextToolCallParser(TOOLS, mode="off", counts=(counts := Counter()))
    assert parser.feed(text[:20]) == [TextPiece(text[:20])]
    assert parser.feed(text[20:]) == [TextPiece(text[20:])]
    assert parser.feed("") == []
    assert parser.finish() == []
    assert counts == Counter()


def test_a_named_mode_only_recognises_its_own_format() -> None:
    mistral = '[TOOL_CALLS]read_file[ARGS]{"path": "a"}'
    assert run([mistral], mode="hermes")[0] == [TextPiece(mistral)]
    assert run([mistral], mode="mistral")[0] == [call("read_file", path="a")]
    xml = qwen("exec_command", cmd="ls")
    assert run([xml], mode="hermes")[0] == [TextPiece(xml)]
    assert run([xml], mode="qwen3_coder")[0] == [call("exec_command", cmd="ls")]


# -- counts


def test_counts_cover_every_outcome_of_one_message() -> None:
    text = (
        hermes("read_file", '{"path": "a"}')
        + hermes("read_file", '{"path": "b",}')
        + hermes("nope", "{}")
        + hermes("read_file", '{"limit": 1}')
        + "<tool_call>\n{"
    )
    _, counts = run([text])
    assert counts == Counter(
        {
            "textcalls.hermes.parsed": 2,
            "textcalls.hermes.unknown_tool": 1,
            "textcalls.hermes.bad_arguments": 1,
            "textcalls.hermes.unterminated": 1,
            "arguments.valid": 1,
            "arguments.repaired": 1,
            "arguments.repaired.trailing_comma": 1,
            "arguments.schema_mismatch": 1,
        }
    )


def test_counts_are_optional() -> None:
    parser = TextToolCallParser(TOOLS)
    assert parser.feed(hermes("read_file", '{"path": "a"}')) == [call("read_file", path="a")]
    assert parser.finish() == []
