"""A chat stream's plain text chunks read from their bytes (translate/chat_upstream/plain_chunks.py):
always what decoding the chunk whole and reading it gives."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from codexgate.translate.chat_upstream.plain_chunks import PlainChunks
from codexgate.translate.chat_upstream.stream import _plain_content


def chunk(text: str, **more: Any) -> bytes:
    delta = {"content": text, **more.pop("delta", {})}
    return orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None}], **more})  # fmt: skip


def expected(payload: bytes) -> Any:
    """What decoding the payload whole and reading it gives (`decode`'s contract)."""
    value = orjson.loads(payload)
    return [value] if type(value) is str else read(value)


def read(decoded: Any) -> Any:
    """A decoded chunk as the stream translator reads it: a plain chunk's text, whether
    `decode` gave the text or the chunk."""
    if type(decoded) is dict:
        text = _plain_content(decoded)
        return text if text is not None else decoded
    return decoded


def test_a_learned_stream_reads_its_text_chunks_from_their_bytes() -> None:
    plain = PlainChunks(_plain_content)
    assert plain.text(chunk("a")) is None  # nothing learned yet
    assert plain.decode(chunk("Hello")) == "Hello"
    for text in ["x", "é ü", 'say "hi"\n', "\u2028", "\\", "{}"]:
        assert plain.text(chunk(text)) == text
        assert plain.decode(chunk(text)) == text


@pytest.mark.parametrize(
    "payload",
    [
        chunk(""),  # empty: not a plain chunk
        chunk("a", delta={"role": "assistant"}),
        chunk("a", usage={"prompt_tokens": 1}),
        b'"just a string"',
        b"[1, 2]",
        chunk("a").replace(b'"a"', b'"a","tool_calls":[]'),  # two values where the text was
    ],
)
def test_what_is_not_the_template_around_one_text_is_decoded_whole(payload: bytes) -> None:
    plain = PlainChunks(_plain_content)
    plain.decode(chunk("learned"))
    assert plain.text(payload) is None
    assert read(plain.decode(payload)) == expected(payload)


def test_space_around_the_text_reads_as_it_decodes() -> None:
    plain = PlainChunks(_plain_content)
    plain.decode(chunk("learned"))
    assert plain.decode(chunk("a").replace(b'"a"', b' "a" ')) == "a"


def test_text_another_server_escapes_otherwise_is_not_learned_but_still_read() -> None:
    plain = PlainChunks(_plain_content)
    ascii_only = chunk("é").replace("é".encode(), b"\\u00e9")
    assert plain.decode(ascii_only) == "é"
    assert plain.text(chunk("x")) is None


def test_a_content_key_that_is_not_the_deltas_is_never_learned() -> None:
    plain = PlainChunks(_plain_content)
    decoy = chunk("tok", extra={"content": "tok"})  # the same text in a later field
    assert plain.decode(decoy) == "tok"
    assert plain.text(decoy.replace(b'"extra":{"content":"tok"}', b'"extra":{"content":"other"}')) is None


def test_a_stream_whose_template_changes_is_learned_again() -> None:
    plain = PlainChunks(_plain_content)
    for second in range(20):  # llama.cpp writes the time in every chunk
        plain.decode(chunk("first", created=second))
        assert plain.text(chunk("next", created=second)) == "next"


def test_learning_stops_after_a_few_chunks_that_teach_nothing() -> None:
    plain = PlainChunks(_plain_content)
    for _ in range(10):
        plain.decode(chunk("a", delta={"role": "assistant"}))
    plain.decode(chunk("b"))
    assert plain.text(chunk("c")) is None


_EDITS = [b"", b'"', b"\\", b",", b"}", b"]", b"\\n", b"\\u0041", b"\x01", b"\xff", b' "x":1,']


def edited(rng: random.Random, count: int) -> list[bytes]:
    """`count` plain chunks, each with a random edit somewhere."""
    base = chunk("some text")
    out = []
    for _ in range(count):
        at = rng.randrange(len(base))
        out.append(base[:at] + rng.choice(_EDITS) + base[at + rng.randint(0, 2) :])
    return out


@pytest.mark.parametrize("seed", range(20))
def test_random_edits_read_as_decoding_whole_does(seed: int) -> None:
    plain = PlainChunks(_plain_content)
    plain.decode(chunk("learned"))
    for payload in edited(random.Random(seed), 50):
        try:
            whole = expected(payload)
        except orjson.JSONDecodeError:
            with pytest.raises(orjson.JSONDecodeError):
                plain.decode(payload)
            continue
        assert read(plain.decode(payload)) == whole


def test_a_read_of_many_chunks_decodes_as_each_one_does() -> None:
    """`decode_all` gives what `decode` gives for each payload in turn, across a template
    learned, relearned (the time in every chunk) and chunks that are not plain."""
    payloads = [chunk("a", delta={"role": "assistant"}), chunk("first"), chunk("x"), chunk(""),
                chunk("y", created=2), chunk("z", created=2), chunk("w", usage={"prompt_tokens": 1}),
                b'"a string"', chunk('"quoted" \\ é'), chunk("last", created=2)]  # fmt: skip
    one_by_one = PlainChunks(_plain_content)
    in_one_call = PlainChunks(_plain_content)
    assert in_one_call.decode_all(payloads) == [one_by_one.decode(p) for p in payloads]
    assert in_one_call.decode_all([chunk("q", created=2)]) == ["q"]  # read with the template it learned last


@pytest.mark.parametrize("seed", range(10))
def test_random_edits_in_a_read_of_many_decode_as_each_one_does(seed: int) -> None:
    plain = PlainChunks(_plain_content)
    plain.decode(chunk("learned"))
    payloads = []
    for payload in edited(random.Random(seed), 40):
        try:
            whole = expected(payload)
        except orjson.JSONDecodeError:
            with pytest.raises(orjson.JSONDecodeError):
                plain.decode_all([chunk("before"), payload])
            continue
        payloads.append((payload, whole))
    got = plain.decode_all([payload for payload, _ in payloads])
    assert [read(value) for value in got] == [whole for _, whole in payloads]
