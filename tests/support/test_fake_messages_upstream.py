"""The scripted Messages server's own rules (tests/support/fake_messages_upstream.py): the cache
accounting that bench/prompt_cache.py's figure rests on, and the refusals that stand for
Anthropic's, so that a test passing against it means something."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fake_messages_upstream import (
    MIN_CACHE_TOKENS,
    CacheBook,
    Refused,
    prompt_blocks,
    sign,
    tokens_of,
    validate,
)

JSON = dict[str, Any]
MARK = {"type": "ephemeral"}


def text(chars: int, marked: bool = False, tag: str = "x") -> JSON:
    block: JSON = {"type": "text", "text": tag * chars}
    if marked:
        block["cache_control"] = MARK
    return block


def body(*turns: list[JSON]) -> JSON:
    roles = ["user", "assistant"]
    return {
        "model": "m",
        "max_tokens": 100,
        "messages": [{"role": roles[i % 2], "content": c} for i, c in enumerate(turns)],
    }


def test_a_prefix_under_the_minimum_is_not_written() -> None:
    book = CacheBook()
    small = body([text(100, marked=True)])
    assert book.account(small)["cache_creation_input_tokens"] == 0
    assert book.account(small)["cache_read_input_tokens"] == 0


def test_a_later_request_reads_the_prefix_up_to_a_breakpoint_it_shares() -> None:
    book = CacheBook()
    first = body([text(5000, marked=True)])
    written = book.account(first)
    assert written["cache_creation_input_tokens"] == sum(tokens_of(b) for b, _ in prompt_blocks(first))
    assert written["cache_creation_input_tokens"] >= MIN_CACHE_TOKENS
    second = body([text(5000, marked=True)], [text(40)], [text(200, marked=True)])
    usage = book.account(second)
    assert usage["cache_read_input_tokens"] == written["cache_creation_input_tokens"]
    assert usage["input_tokens"] == 0 and usage["cache_creation_input_tokens"] > 0


def test_the_lookback_reaches_20_blocks_before_a_breakpoint_and_no_further() -> None:
    head = [text(5000, marked=True, tag="h")]
    book = CacheBook()
    book.account(body(head))
    unmarked_head = [text(5000, tag="h")]
    near = body(unmarked_head + [text(10, tag=str(i % 10)) for i in range(19)] + [text(10, marked=True)])
    assert book.account(near)["cache_read_input_tokens"] > 0
    book = CacheBook()
    book.account(body(head))
    far = body(unmarked_head + [text(10, tag=str(i % 10)) for i in range(25)] + [text(10, marked=True)])
    assert book.account(far)["cache_read_input_tokens"] == 0


def test_a_changed_prefix_reads_nothing() -> None:
    book = CacheBook()
    book.account(body([text(5000, marked=True)]))
    assert book.account(body([text(5000, marked=True, tag="y")]))["cache_read_input_tokens"] == 0


@pytest.mark.parametrize(
    "request_body,words",
    [
        (
            body([text(5, True)], [text(5, True)], [text(5, True)], [text(5, True)], [text(5, True)]),
            "A maximum of 4",
        ),
        (
            body([text(5)], [{"type": "thinking", "thinking": "t", "signature": sign("other")}]),
            "Invalid `signature`",
        ),
        (
            body([text(5)], [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}], [text(5)]),
            "tool_result",
        ),
        (
            body([text(5)], [text(5)], [text(5)]) | {"messages": [{"role": "assistant", "content": "a"}]},
            "first message",
        ),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ],
)
def test_what_anthropic_refuses_is_refused(request_body: JSON, words: str) -> None:
    with pytest.raises(Refused, match=words):
        validate(request_body)


def test_thinking_on_needs_the_tool_loop_s_thinking_first() -> None:
    loop = body(
        [text(5)],
        [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}],
        [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
    )
    loop["tools"] = [{"name": "x", "input_schema": {"type": "object"}}]
    loop["max_tokens"] = 4000
    validate(loop)
    with pytest.raises(Refused, match="must start with a thinking block"):
        validate({**loop, "thinking": {"type": "enabled", "budget_tokens": 1024}})
