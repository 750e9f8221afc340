"""`POST /v1/responses` over a chat upstream, through the real app: what a client sends reaches
the model, or the client gets a 400 naming it before the upstream is called."""

from __future__ import annotations

import base64
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from codexgate.app import build_app
from codexgate.config import load_settings
from codexgate.translate import files
from tests.support.asgi_client import StreamingASGITransport
from tests.support.asgi_upstream import ASGIUpstreamTransport
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.openresponses import schema_validator, validate_response
from tests.support.pdfs import hand_made_pdf, text_pdf


@asynccontextmanager
async def gateway(script: Any = ()) -> AsyncIterator[tuple[httpx.AsyncClient, FakeUpstream]]:
    fake = FakeUpstream(script)
    settings = load_settings({"discover": False, "upstream": "http://upstream.test/v1"}, environ={})
    app = build_app(settings, transport=ASGIUpstreamTransport(fake), environ={})
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=10
    ) as client:
        yield client, fake


def file_input_request(file_part: dict[str, Any]) -> dict[str, Any]:
    """An Open Responses request with a file beside a question (valid against the spec's
    CreateResponseBody, checked below)."""
    return {
        "model": "m",
        "input": [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "What year does the document name?"}, file_part],
            }
        ],
    }


async def test_a_pdf_a_client_sends_reaches_the_model_as_its_text() -> None:
    pdf = text_pdf([["The Peace of Westphalia"], ["was signed in 1648."]])
    part = {
        "type": "input_file",
        "filename": "history.pdf",
        "file_data": "data:application/pdf;base64," + base64.b64encode(pdf).decode(),
    }
    request = file_input_request(part)
    schema_validator("CreateResponseBody").validate(request)
    async with gateway([text_reply("1648")]) as (client, fake):
        response = await client.post("/v1/responses", json=request)
    assert response.status_code == 200, response.text
    validate_response(response.json())
    assert fake.requests[0].body["messages"] == [
        {
            "role": "user",
            "content": "What year does the document name?\n"
            "--- file: history.pdf (PDF, 2 pages) ---\n"
            "[page 1]\nThe Peace of Westphalia\n[page 2]\nwas signed in 1648.\n"
            "--- end of history.pdf ---",
        }
    ]


def pdf_part(pdf: bytes, filename: str = "test.pdf") -> dict[str, Any]:
    return {
        "type": "input_file",
        "filename": filename,
        "file_data": "data:application/pdf;base64," + base64.b64encode(pdf).decode(),
    }


async def test_the_compliance_tests_file_input_case_a_hand_made_pdf_reaches_the_model() -> None:
    """The Open Responses compliance test `file-input` sends a one-page PDF written by hand,
    with no cross-reference table and no `startxref`: browsers open it, so does the gateway."""
    request = file_input_request(pdf_part(hand_made_pdf(["Signed in 1648."])))
    schema_validator("CreateResponseBody").validate(request)
    async with gateway([text_reply("1648")]) as (client, fake):
        response = await client.post("/v1/responses", json=request)
    assert response.status_code == 200, response.text
    validate_response(response.json())
    assert fake.requests[0].body["messages"][0]["content"] == (
        "What year does the document name?\n"
        "--- file: test.pdf (PDF, 1 page) ---\n[page 1]\nSigned in 1648.\n--- end of test.pdf ---"
    )


async def test_files_are_read_in_a_worker_thread_while_the_event_loop_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readers: list[threading.Thread] = []
    block = files._block

    def recording(part: Any, data: str) -> str:
        readers.append(threading.current_thread())
        return block(part, data)

    monkeypatch.setattr(files, "_block", recording)
    pdf = pdf_part(text_pdf([["The Peace of Westphalia"]]))
    notes = {"type": "input_file", "filename": "notes.txt", "file_data": "data:text/plain,was%20in%201648"}
    request = file_input_request(pdf)
    request["input"][0]["content"].append(notes)
    async with gateway([text_reply("1648")]) as (client, fake):
        response = await client.post("/v1/responses", json=request)
    assert response.status_code == 200, response.text
    content = fake.requests[0].body["messages"][0]["content"]
    assert "[page 1]\nThe Peace of Westphalia\n" in content and "was in 1648" in content
    assert len(readers) == 2 and threading.current_thread() not in readers  # the loop's thread read none


@pytest.mark.parametrize(
    "file_part,code",
    [
        ({"type": "input_file", "file_id": "file-abc"}, "unsupported_file"),
        ({"type": "input_file", "file_url": "https://example.com/a.pdf"}, "unsupported_file"),
        (
            {"type": "input_file", "filename": "a.zip", "file_data": "data:application/zip;base64,UEsDBA=="},
            "unsupported_file",
        ),
        (
            {
                "type": "input_file",
                "filename": "scan.pdf",
                "file_data": base64.b64encode(text_pdf([[]])).decode(),
            },
            "file_without_text",
        ),
    ],
)
async def test_a_file_the_model_could_not_read_is_a_400_naming_the_part(
    file_part: dict[str, Any], code: str
) -> None:
    async with gateway() as (client, fake):
        response = await client.post("/v1/responses", json={**file_input_request(file_part), "stream": True})
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["param"], error["code"], error["type"]) == (
        "input[0].content[1]",
        code,
        "invalid_request_error",
    )
    assert fake.requests == []


@pytest.mark.parametrize(
    "body,param",
    [
        (
            {
                "input": [
                    {"type": "message", "role": "user", "content": [{"type": "input_txt", "text": "typo"}]}
                ]
            },
            "input[0].content[0].type",
        ),
        ({"input": [{"role": "user", "content": [{"text": "no type"}]}]}, "input[0].content[0].type"),
        ({"input": "hi", "tools": [{"type": "function"}]}, "tools[0].name"),
        ({"input": "hi", "include": ["message.output_text.logprobs"]}, "include[0]"),
        ({"input": "hi", "tool_choice": {"type": "function", "name": "missing"}}, "tool_choice.name"),
    ],
)
async def test_what_used_to_vanish_is_a_400_before_the_upstream_is_called(
    body: dict[str, Any], param: str
) -> None:
    async with gateway() as (client, fake):
        response = await client.post("/v1/responses", json={"model": "m", "stream": True, **body})
    assert response.status_code == 400 and response.json()["error"]["param"] == param
    assert fake.requests == []
