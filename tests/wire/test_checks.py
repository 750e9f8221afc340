"""A body or frame that is not a JSON object is answered in plain words: what is wrong and
where, never the JSON library's own message."""

from __future__ import annotations

from typing import Any

import pytest

from codexgate.errors import InvalidRequest
from codexgate.wire.chat import validate_chat_request
from codexgate.wire.checks import decode_json_object
from codexgate.wire.responses import MAX_DEPTH, parse_request


@pytest.mark.parametrize(
    "raw,said",
    [
        (b"not json", "The frame is not JSON: it starts with 'not json', where a JSON object starts with {."),
        (b"nope", "The frame is not JSON: it starts with 'nope', where a JSON object starts with {."),
        (b"  ", "The frame is empty: send a JSON object."),
        (
            b'{"model": "m", ',
            "The frame is not complete JSON: it ends (line 1, column 16) before the JSON does.",
        ),
        (b'{"a": 1,}', "The frame is not valid JSON at line 1, column 8, near '{\"a\": 1,}'."),
        (b"\xff{}", "The frame is not UTF-8 text (byte 0), so it cannot be JSON."),
        (b"[1, 2]", "The frame must be a JSON object ({...}), not an array."),
        (b"null", "The frame must be a JSON object ({...}), not null."),
    ],
)
def test_what_is_not_a_json_object_is_said_plainly(raw: bytes, said: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        decode_json_object(raw, "The frame")
    assert info.value.message == said
    assert "invalid literal" not in said and "expected" not in said


def test_a_json_object_is_decoded() -> None:
    assert decode_json_object(b' {"type": "response.create"} ', "The frame") == {"type": "response.create"}


def _responses(raw: bytes) -> None:
    parse_request(decode_json_object(b'{"model": "m", "input": "hi", ' + raw + b"}", "The request body"))


def _chat(raw: bytes) -> None:
    messages = b'"messages": [{"role": "user", "content": "hi"}], '
    validate_chat_request(decode_json_object(b'{"model": "m", ' + messages + raw + b"}", "The request body"))


HUGE = b"1000000000000000000000000000000"  # 10**30: orjson reads it as a float


@pytest.mark.parametrize(
    ("face", "field", "value", "said"),
    [
        (
            _responses,
            "max_output_tokens",
            HUGE,
            "must be an integer between 1 and 2147483647 (a 32-bit integer)",
        ),
        (_responses, "max_output_tokens", b"2147483648", "must be an integer between 1 and 2147483647"),
        (_responses, "max_output_tokens", b"0", "must be an integer between 1 and 2147483647"),
        (_chat, "max_tokens", HUGE, "must be an integer between 1 and 2147483647"),
        (_chat, "max_completion_tokens", HUGE, "must be an integer between 1 and 2147483647"),
        (_chat, "max_tokens", b"-1", "must be an integer between 1 and 2147483647"),
        (_responses, "temperature", b"50", "must be between 0 and 2, got 50."),
        (_responses, "temperature", b"-0.5", "must be between 0 and 2, got -0.5."),
        (_responses, "top_p", b"1.5", "must be between 0 and 1, got 1.5."),
        (_chat, "temperature", b"50", "must be between 0 and 2, got 50."),
        (_chat, "top_p", b"-1", "must be between 0 and 1, got -1."),
        (
            _responses,
            "max_output_tokens",
            b"1.5",
            "Invalid type for 'max_output_tokens': expected an integer.",
        ),
        (_chat, "temperature", b'"hot"', "Invalid type for 'temperature': expected a number."),
    ],
)
def test_a_number_out_of_its_range_is_a_400_saying_the_range(
    face: Any, field: str, value: bytes, said: str
) -> None:
    with pytest.raises(InvalidRequest) as info:
        face(b'"' + field.encode() + b'": ' + value)
    assert info.value.status == 400 and info.value.param == field
    assert said in info.value.message and (said.startswith("Invalid") or f"'{field}' " in info.value.message)


@pytest.mark.parametrize("face", [_responses, _chat])
def test_the_ends_of_the_ranges_are_accepted(face: Any) -> None:
    face(b'"temperature": 0, "top_p": 1')
    face(b'"temperature": 2.0, "top_p": 0.0')
    tokens = b"max_output_tokens" if face is _responses else b"max_tokens"
    face(b'"' + tokens + b'": 1')
    face(b'"' + tokens + b'": 2147483647')


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 1025, 5000])
def test_json_nested_too_deep_is_said_to_be_so_with_the_limit(levels: int) -> None:
    deep = b"[" * levels + b"]" * levels
    with pytest.raises(InvalidRequest) as info:
        _responses(b'"metadata": {"a": ' + deep + b"}")
    assert "is nested too deep: more than" in info.value.message and "valid JSON" not in info.value.message
    assert f"{MAX_DEPTH}" in info.value.message
