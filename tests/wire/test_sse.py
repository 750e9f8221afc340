"""SSEDecoder and encode_event: recorded upstream bodies decode to the same payloads however the
network splits them, with any of the three line endings; the encoder round-trips."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import orjson
import pytest

from codexgate.wire.sse import SSEDecoder, SSEEventTooLarge, encode_event, encode_events

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "chat_streams"
FIXTURES = sorted(p.name for p in FIXTURES_DIR.glob("*.sse"))


def load(name: str) -> bytes:
    return (FIXTURES_DIR / name).read_bytes()


def decode(pieces: Iterable[bytes]) -> list[bytes]:
    decoder = SSEDecoder()
    payloads: list[bytes] = []
    for piece in pieces:
        payloads.extend(decoder.feed(piece))
    payloads.extend(decoder.finish())
    return payloads


def chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def with_line_ending(data: bytes, ending: bytes) -> bytes:
    """The same body with every line terminator replaced (JSON payloads hold no raw newlines)."""
    return data.replace(b"\r\n", b"\n").replace(b"\n", ending)


def data_lines(data: bytes) -> list[bytes]:
    """What each `data:` line carries, read naively line by line (every fixture event is one line)."""
    lines = data.replace(b"\r\n", b"\n").split(b"\n")
    return [line[len(b"data: ") :] for line in lines if line.startswith(b"data: ")]


def test_fixture_directory_is_populated() -> None:
    assert len(FIXTURES) >= 10
    assert (FIXTURES_DIR / "README.md").is_file()


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_decodes_to_its_data_lines(name: str) -> None:
    data = load(name)
    payloads = decode([data])
    assert payloads == data_lines(data)
    assert payloads, "a fixture with no events"
    complete = payloads[:-1] if name == "openai_cut_mid_event.sse" else payloads
    for payload in complete:
        if payload != b"[DONE]":
            assert isinstance(orjson.loads(payload), dict)
    assert all(not p.startswith(b":") for p in payloads), "a comment leaked through"


@pytest.mark.parametrize("name", FIXTURES)
def test_every_single_split_point_gives_the_same_payloads(name: str) -> None:
    data = load(name)
    expected = decode([data])
    for cut in range(1, len(data)):
        got = decode([data[:cut], data[cut:]])
        assert got == expected, f"split at byte {cut}: {data[max(0, cut - 20) : cut + 20]!r}"


@pytest.mark.parametrize("size", [1, 7, 97])
@pytest.mark.parametrize("name", FIXTURES)
def test_fixed_chunk_sizes_give_the_same_payloads(name: str, size: int) -> None:
    data = load(name)
    assert decode(chunks(data, size)) == decode([data])


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("name", FIXTURES)
def test_line_endings_do_not_matter(name: str, ending: bytes) -> None:
    data = load(name)
    expected = decode([data])
    variant = with_line_ending(data, ending)
    assert decode([variant]) == expected
    for size in (1, 2, 7, 97):
        assert decode(chunks(variant, size)) == expected, f"chunk size {size}"


def test_crlf_fixture_really_uses_crlf() -> None:
    data = load("llamacpp_python_crlf.sse")
    assert b"\r\n\r\n" in data
    assert data.count(b"\n") == data.count(b"\r\n")


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_crlf_split_between_cr_and_lf_is_one_line_ending(ending: str) -> None:
    body = f"data: a{ending}{ending}data: b{ending}{ending}".encode()
    for cut in range(len(body) + 1):
        assert decode([body[:cut], body[cut:]]) == [b"a", b"b"], cut
    # every byte on its own, then the same with empty chunks in between
    assert decode([bytes([b]) for b in body]) == [b"a", b"b"]
    assert decode([p for b in body for p in (bytes([b]), b"")]) == [b"a", b"b"]


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_multi_line_data_is_joined_with_newlines(ending: str) -> None:
    e = ending
    body = f'data: {{"a":{e}data: 1}}{e}{e}data: x{e}data:{e}data: y{e}{e}'
    assert decode([body.encode()]) == [b'{"a":\n1}', b"x\n\ny"]
    assert orjson.loads(decode([body.encode()])[0]) == {"a": 1}


def test_only_one_leading_space_is_stripped() -> None:
    assert decode([b"data:no-space\n\ndata:  two\n\ndata: one\n\n"]) == [b"no-space", b" two", b"one"]


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_comments_and_other_fields_are_ignored(ending: str) -> None:
    e = ending
    body = (
        f": OPENROUTER PROCESSING{e}{e}"
        f":{e}{e}"
        f": keep-alive{e}{e}"
        f"event: message{e}id: 7{e}retry: 3000{e}data: payload{e}: a comment inside an event{e}{e}"
        f"id: 8{e}{e}"  # an event with no data dispatches nothing
        f"data: [DONE]{e}{e}"
    ).encode()
    assert decode([body]) == [b"payload", b"[DONE]"]
    assert decode(chunks(body, 1)) == [b"payload", b"[DONE]"]


@pytest.mark.parametrize(
    "tail",
    [b"data: last\n", b"data: last", b"data: last\r\n", b"data: last\r", b"data: a\ndata: last"],
    ids=["lf", "no-newline", "crlf", "cr", "multi-line"],
)
def test_final_event_without_blank_line_is_delivered_at_finish(tail: bytes) -> None:
    body = b"data: first\n\n" + tail
    expected_last = b"a\nlast" if tail.startswith(b"data: a") else b"last"
    for size in (1, 3, len(body)):
        decoder = SSEDecoder()
        fed: list[bytes] = []
        for piece in chunks(body, size):
            fed.extend(decoder.feed(piece))
        assert fed == [b"first"], "the last event must wait for the blank line or the end"
        assert decoder.finish() == [expected_last]
        assert decoder.finish() == [], "finish twice delivers nothing new"


def test_blank_lines_alone_deliver_nothing() -> None:
    assert decode([b"\n\n\r\n\r\r\n"]) == []
    assert decode([b""]) == []
    assert decode([]) == []


def test_decoder_keeps_working_after_a_payload_split_inside_utf8() -> None:
    text = "Hello! 😊 — café".encode()
    body = b"data: " + text + b"\n\n"
    for cut in range(len(body) + 1):
        assert decode([body[:cut], body[cut:]]) == [text]


@pytest.mark.parametrize(
    "body",
    [
        b"data: {}\n\n",
        b'data: {"a":1}\n\ndata:{"b":2}\n\ndata: [DONE]\n\n',
        b"data:\n\n",
        b"data:  two spaces\n\n",
        b"data: a\ndata: b\n\n",  # multi-line data: the general path
        b": keep-alive\n\ndata: x\n\n",
        b"event: x\ndata: y\n\nid: 3\n\n",
        b"data: a\n\n\ndata: b\n\n",
        b"\n\n",
        b"data: a\r\n\r\n",
        b"retry: 5\n\n",
        b"data: a\n\ndata:b\n\n",  # a later event without the space
        b"data: \n\ndata: b\n\n",
        b"data: a\n\ndata: b\n\n: c\n\n",
        b'data: {"t":"\\n\\ndata: x"}\n\n',  # the separator, escaped inside a payload
    ],
)
def test_whole_events_in_one_read_decode_as_byte_by_byte(body: bytes) -> None:
    """A read of whole one-line events takes a shorter path; it must agree with the general
    one (one byte at a time never takes it), also after a read that left something held."""
    assert decode([body]) == decode(chunks(body, 1))
    assert decode([b"data: hel", b"lo\n\n", body]) == [b"hello", *decode(chunks(body, 1))]
    assert decode([b"data: a\n", b"\n", body]) == [b"a", *decode(chunks(body, 1))]


def test_whole_events_larger_than_the_limit_still_raise() -> None:
    decoder = SSEDecoder(max_event_bytes=8)
    with pytest.raises(SSEEventTooLarge):
        decoder.feed(b"data: 0123456789\n\n")


# -- encoder


def sample_events() -> list[dict]:
    return [
        {
            "type": "response.created",
            "sequence_number": 0,
            "response": {"id": "resp_1", "status": "in_progress"},
        },
        {
            "type": "response.output_text.delta",
            "sequence_number": 1,
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": 'line one\nline two\r\n\rthree 😊 "quoted" \\ data: no',
            "logprobs": [],
        },
        {
            "type": "response.function_call_arguments.delta",
            "sequence_number": 2,
            "item_id": "fc_1",
            "output_index": 1,
            "delta": '{"cmd":"echo \\"hi\\"\\n"}',
        },
        {"type": "response.completed", "sequence_number": 3, "response": {"id": "resp_1", "usage": None}},
    ]


def test_encode_event_frame_shape() -> None:
    event = sample_events()[1]
    frame = encode_event(event)
    assert frame.startswith(b"event: response.output_text.delta\ndata: ")
    assert frame.endswith(b"\n\n")
    assert frame.count(b"\n") == 3, "the JSON must be on one line"


@pytest.mark.parametrize("size", [1, 5, 64, 10_000])
def test_encode_event_round_trips_through_the_decoder(size: int) -> None:
    events = sample_events()
    wire = b"".join(encode_event(e) for e in events)
    assert [orjson.loads(p) for p in decode(chunks(wire, size))] == events
    assert encode_events(events) == wire
    assert encode_events(events[:1]) == encode_event(events[0])


def test_an_event_type_outside_the_catalogue_is_framed_too() -> None:
    assert encode_event({"type": "x.y", "a": 1}) == b'event: x.y\ndata: {"type":"x.y","a":1}\n\n'
    frames = encode_events([{"type": "x.y"}, sample_events()[0]])
    assert frames == encode_event({"type": "x.y"}) + encode_event(sample_events()[0])


def test_encode_event_round_trips_every_split_point() -> None:
    events = sample_events()
    wire = encode_events(events)
    for cut in range(len(wire) + 1):
        assert [orjson.loads(p) for p in decode([wire[:cut], wire[cut:]])] == events
