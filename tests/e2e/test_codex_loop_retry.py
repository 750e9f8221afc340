"""The real Codex CLI (the current release) recovers from an answer the gateway had to cut short.

Codex records every `output_item.done` item, the partial answer of a failed attempt included,
and sends it back on its retry and on every later turn. The upstream here behaves like
llama.cpp: a request whose messages end with an assistant message is refused with a 400 (which
Codex does not retry). The first attempt fails (a loop the guard stops, a stream cut, an idle
timeout, an error object in the stream), the second answers: the turn must complete with the second answer, and no request may carry the
cut-off text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.codex_cli import serving_tapped
from tests.e2e.test_codex_gateway import JSON, codex
from tests.support.fake_upstream import (
    FakeUpstream,
    Reply,
    cut_reply,
    ends_with_assistant_text,
    raw_reply,
    refusing_prefill,
    stall_reply,
    text_reply,
)

pytestmark = pytest.mark.e2e

LOOP = "I'm sure you'll find them all to your liking.\n\n"  # SmolLM2's loop, seen through Codex
ANSWER = "Here is a proper answer."
IDLE_TIMEOUT = 1.0  # seconds; the stalled attempt below waits on it once


@contextmanager
def serving(script: Any) -> Iterator[tuple[str, FakeUpstream]]:
    with serving_tapped(script, idle_timeout=IDLE_TIMEOUT) as (gateway, fake, _):
        yield gateway, fake


def looping(_: JSON) -> Reply:
    # ~140 kB if nobody stops it; the guard needs >= 8 repeats over >= 1200 characters
    return text_reply("Sure.\n\n" + LOOP * 3000, chunk_chars=8)


def looping_after_reasoning(_: JSON) -> Reply:
    reply = looping(_)
    reply.reasoning = "The user says hello. I will greet them."
    return reply


def cut_off(_: JSON) -> Reply:
    return cut_reply("This answer stops in the mid")


def stalled(_: JSON) -> Reply:
    # silent far longer than the idle timeout (the gateway cancels it)
    return stall_reply("This answer stalls in the middle.", 60 * IDLE_TIMEOUT)


def erroring(_: JSON) -> Reply:
    text = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Half an answer"}}]}
    error = {
        "error": {"message": "The server had an error while processing your request.", "type": "server_error"}
    }
    return raw_reply(
        [b"data: " + orjson.dumps(text) + b"\n\n", b"data: " + orjson.dumps(error) + b"\n\n"],
        headers={"content-type": "text/event-stream"},
    )


FIRST_ATTEMPTS = {
    "loop": looping,
    "loop_after_reasoning": looping_after_reasoning,
    "stream_cut": cut_off,
    "idle_timeout": stalled,
    "error_in_stream": erroring,
}


def first_fails_then(
    answer: Callable[[JSON], Reply], first: Callable[[JSON], Reply]
) -> Callable[[JSON], Reply]:
    """Attempt 1 (no assistant message yet) fails with `first`; any later request is answered."""
    attempts: list[JSON] = []

    def script(body: JSON) -> Reply:
        attempts.append(body)
        return first(body) if len(attempts) == 1 else answer(body)

    return refusing_prefill(script)


def roles(body: JSON) -> list[str]:
    return [m["role"] for m in body["messages"]]


@pytest.mark.parametrize("first", list(FIRST_ATTEMPTS), ids=list(FIRST_ATTEMPTS))
def test_a_cut_answer_is_left_out_of_the_retry_and_the_turn_completes(tmp_path: Path, first: str) -> None:
    script = first_fails_then(lambda _: text_reply(ANSWER), FIRST_ATTEMPTS[first])
    with serving(script) as (gateway, fake):
        run = codex(tmp_path, gateway, "hello")
    assert run.ok, run.describe()
    assert run.final_message == ANSWER
    # The cut marker (a reasoning item with no summary) is not shown to the user.
    assert all(item.get("text") for item in run.items("reasoning")), run.describe()
    assert len(run.of_type("error")) == 1, run.describe()  # one "Reconnecting..." for the failure
    # Exactly two upstream requests: the failed attempt and Codex's retry, which was accepted.
    assert len(fake.requests) == 2 and fake.errors == [], [r.body["messages"] for r in fake.requests]
    failed, retry = (r.body for r in fake.requests)
    assert not ends_with_assistant_text(retry)
    # The retry is the first request again: no partial text, no reasoning of the failed attempt.
    assert retry["messages"] == failed["messages"]
    assert roles(retry)[-1] == "user" and "assistant" not in roles(retry)
    if first.startswith("loop") or first == "idle_timeout":
        assert fake.disconnects == 1  # the looping or stalled generation was cancelled


def test_later_turns_do_not_carry_the_cut_answer(tmp_path: Path) -> None:
    answers = iter(["First answer.", "Second answer."])
    script = first_fails_then(lambda _: text_reply(next(answers)), looping)
    with serving(script) as (gateway, fake):
        first = codex(tmp_path, gateway, "hello")
        assert first.ok, first.describe()
        # `codex exec resume --last PROMPT`: the same conversation, one more turn
        second = codex(tmp_path, gateway, "and now?", "resume", "--last")
    assert second.ok, second.describe()
    assert second.final_message == "Second answer."
    assert len(fake.requests) == 3, [r.body["messages"] for r in fake.requests]
    history = fake.requests[2].body
    assert roles(history)[-4:] == ["user", "user", "assistant", "user"]
    assert [m["content"] for m in history["messages"] if m["role"] == "assistant"] == ["First answer."]
    assert not any(LOOP.strip() in str(m["content"]) for m in history["messages"])
