"""A body or frame that is not a JSON object is answered in plain words: what is wrong and
where, never the JSON library's own message."""

from __future__ import annotations

import pytest

from codexgate.errors import InvalidRequest
from codexgate.wire.checks import decode_json_object


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
