"""Content parts on the way to a chat upstream (translate/parts.py): each part becomes text or
an image the model reads, or the request is refused naming it; none is left out."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from codexgate.errors import Code, InvalidRequest
from codexgate.translate.chat_upstream.request import to_chat_request
from codexgate.translate.dialect import ChatDialect
from codexgate.wire.responses import parse_request
from tests.support.pdfs import text_pdf

IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}


def message(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": list(parts)}


def text(value: str, kind: str = "input_text") -> dict[str, Any]:
    return {"type": kind, "text": value}


def pdf_part(pages: list[list[str]], filename: str = "doc.pdf") -> dict[str, Any]:
    encoded = base64.b64encode(text_pdf(pages)).decode()
    return {"type": "input_file", "filename": filename, "file_data": f"data:application/pdf;base64,{encoded}"}


def messages(*items: dict[str, Any]) -> list[dict[str, Any]]:
    request = parse_request({"model": "m", "input": list(items)})
    chat: list[dict[str, Any]] = to_chat_request(request, ChatDialect(), "up").body["messages"]
    return chat


def refused(*items: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        messages(*items)
    return info.value


def test_a_pdf_in_a_user_message_reaches_the_model_as_text_beside_the_question() -> None:
    sent = messages(message("user", text("Summarise this."), pdf_part([["The treaty was signed in 1648."]])))
    assert sent == [
        {
            "role": "user",
            "content": "Summarise this.\n--- file: doc.pdf (PDF, 1 page) ---\n[page 1]\n"
            "The treaty was signed in 1648.\n--- end of doc.pdf ---",
        }
    ]


def test_a_file_in_a_tool_output_reaches_the_model_in_the_tool_message() -> None:
    encoded = base64.b64encode(b"a,b\n1,2\n").decode()
    sent = messages(
        message("user", text("read it")),
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [{"type": "input_file", "filename": "t.csv", "file_data": encoded}],
        },
    )
    assert sent[-1] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "--- file: t.csv ---\na,b\n1,2\n--- end of t.csv ---",
    }


def test_an_unreadable_file_is_refused_with_the_indices_of_the_request() -> None:
    zipped = {"type": "input_file", "filename": "a.zip", "file_data": "data:application/zip;base64,UEsDBA=="}
    error = refused(message("user", text("hi")), message("user", text("look"), zipped))
    assert error.param == "input[1].content[1]" and error.code == Code.UNSUPPORTED_FILE


@pytest.mark.parametrize(
    "part,param",
    [
        ({"type": "input_txt", "text": "typo"}, "input[0].content[0].type"),
        ({"text": "no type"}, "input[0].content[0].type"),
        (
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            "input[0].content[0].type",
        ),
        ({"type": "input_video", "video_url": "https://v"}, "input[0].content[0].type"),
        ({"type": "input_text"}, "input[0].content[0].text"),
        ({"type": "refusal"}, "input[0].content[0].refusal"),
        ({"type": "input_image", "file_id": "file-1"}, "input[0].content[0]"),
        ({"type": "input_image"}, "input[0].content[0].image_url"),
    ],
)
def test_a_part_that_would_reach_the_model_as_nothing_is_refused(part: dict[str, Any], param: str) -> None:
    error = refused(message("user", part))
    assert error.param == param and error.code == Code.INVALID_REQUEST


def test_unknown_parts_are_refused_in_every_role_and_in_tool_outputs() -> None:
    assert refused(message("developer", {"type": "x"})).param == "input[0].content[0].type"
    assert refused(message("assistant", text("a", "output_text"), {"type": "x"})).param == (
        "input[0].content[1].type"
    )
    error = refused(
        message("user", text("go")),
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [text("ok"), {"type": "x"}]},
    )
    assert error.param == "input[2].output[1].type"


@pytest.mark.parametrize("role", ["assistant", "developer", "system"])
def test_an_image_where_a_chat_upstream_takes_none_is_refused_not_dropped(role: str) -> None:
    assert refused(message(role, text("see"), IMAGE)).param == "input[0].content[1]"


def test_files_are_text_so_they_may_be_in_any_role() -> None:
    sent = messages(
        message("developer", pdf_part([["house rules"]], "rules.pdf")), message("user", text("hi"))
    )
    assert sent[0]["role"] == "system" and "house rules" in sent[0]["content"]


def test_codex_tool_outputs_with_plain_encrypted_content_are_read_and_opaque_ones_refused() -> None:
    call = {"type": "function_call", "call_id": "c", "name": "spawn_agent", "arguments": "{}"}

    def output(blob: str) -> dict[str, Any]:
        return {
            "type": "function_call_output",
            "call_id": "c",
            "output": [{"type": "encrypted_content", "encrypted_content": blob}],
        }

    sent = messages(message("user", text("go")), call, output("The worker said PONG."))
    assert sent[-1]["content"] == "The worker said PONG."
    error = refused(message("user", text("go")), call, output("gAAAAABo" + "x1Y2z3" * 30))
    assert error.param == "input[2].output[0].encrypted_content"


def test_reasoning_stays_lenient_its_unknown_parts_are_not_a_reason_to_fail() -> None:
    reasoning = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hm"}, {"type": "other"}]}
    sent = messages(message("user", text("q")), reasoning, message("assistant", text("a", "output_text")))
    assert sent[-1]["content"] == "a"


def test_the_part_kinds_codex_sends_still_pass() -> None:
    sent = messages(
        message("developer", text("base")),
        message("user", text("look"), IMAGE),
        message("assistant", text("done", "output_text"), {"type": "refusal", "refusal": "no"}),
    )
    assert sent[1]["content"][1]["type"] == "image_url"
    assert sent[2]["content"] == "done\nno"
