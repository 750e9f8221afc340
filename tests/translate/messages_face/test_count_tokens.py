"""The input token estimate of /v1/messages/count_tokens (translate/messages_face/count_tokens.py):
the gateway's usage rule (bytes / 4) over what a model is given."""

from __future__ import annotations

import base64
from typing import Any

import orjson

from codexgate.translate.messages_face.count_tokens import IMAGE_TOKENS, count_tokens, estimate_input_tokens
from codexgate.translate.messages_face.request import parse_messages_request
from tests.support.pdfs import text_pdf

TOOLS = [{"name": "Bash", "description": "Run a command.", "input_schema": {"type": "object"}}]


def counted(body: dict[str, Any]) -> int:
    return estimate_input_tokens(parse_messages_request(body, count_tokens=True))


def test_claude_codes_count_request_is_the_bytes_of_what_the_model_reads_over_four() -> None:
    ask = parse_messages_request({"model": "m", "messages": [{"role": "user", "content": "foo"}], "tools": TOOLS},
                                 count_tokens=True)  # fmt: skip
    req = ask.request
    size = len(orjson.dumps({"instructions": req.instructions, "input": req.input, "tools": req.tools}))
    assert count_tokens(ask) == {"input_tokens": -(-size // 4)}


def test_what_no_model_reads_is_not_counted() -> None:
    plain = {"model": "m", "system": [{"type": "text", "text": "You are Claude Code."}],
             "messages": [{"role": "user", "content": "foo"}]}  # fmt: skip
    billed = {
        **plain,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328;"},
            *plain["system"],
        ],
    }
    assert counted(billed) == counted(plain)


def test_an_image_counts_a_fixed_amount_whatever_its_bytes() -> None:
    def with_image(data: str) -> dict[str, Any]:
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
        return {
            "model": "m",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "see"}, image]}],
        }

    small, large = counted(with_image("iVBOR")), counted(with_image("A" * 1_000_000))
    assert small == large
    text_only = counted(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "see"}]}]}
    )
    assert IMAGE_TOKENS <= small - text_only < IMAGE_TOKENS + 20


def test_an_image_in_a_tool_result_counts_too() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100_000}},
    ]}  # fmt: skip
    assert (
        IMAGE_TOKENS
        <= counted({"model": "m", "messages": [{"role": "user", "content": [result]}]})
        < IMAGE_TOKENS + 40
    )


def test_a_pdf_counts_as_the_text_the_file_reader_makes_of_it() -> None:
    pdf = base64.b64encode(text_pdf([["Quarterly figures"] * 3])).decode()
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
    }
    count = counted({"model": "m", "messages": [{"role": "user", "content": [document]}]})
    assert count < len(pdf) // 4  # its text, not its bytes
    assert count > len("Quarterly figures" * 3) // 4


def test_a_pdf_the_reader_refuses_counts_by_its_size_rather_than_failing() -> None:
    scan = base64.b64encode(text_pdf([[]])).decode()  # no text layer
    document = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": scan},
    }
    assert counted({"model": "m", "messages": [{"role": "user", "content": [document]}]}) >= len(scan) // 4


def test_counting_leaves_the_request_unchanged() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}}
    ask = parse_messages_request(
        {"model": "m", "messages": [{"role": "user", "content": [image]}]}, count_tokens=True
    )
    before = orjson.dumps(ask.request.input)
    estimate_input_tokens(ask)
    assert orjson.dumps(ask.request.input) == before
