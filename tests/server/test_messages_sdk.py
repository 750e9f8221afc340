"""The Messages face (server/faces/messages.py) held to the official `anthropic` SDK: the SDK's
own request is read by the face, the canonical events of a real turn go back through the face's
encoders as SSE bytes or a JSON body, and the SDK's stream helpers accumulate the whole message
(text, tool_use with its input, thinking with its signature, usage with the cache fields, the
stop reason); its errors, before the first byte and after, are the SDK's exceptions.

No network: the SDK's HTTP client is given a mock transport that calls the face."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from codexgate.errors import ContextLengthExceeded, GatewayError, RateLimited, UpstreamStreamCut
from codexgate.server.delivery import BodyEncoder, StreamEncoder
from codexgate.server.faces.messages import MessagesFace, MessagesSSE, anthropic_error
from codexgate.translate.catalogue import catalogue_of
from codexgate.translate.reasoning import encode_reasoning, encode_thinking
from codexgate.translate.turn import Turn, TurnOptions
from codexgate.wire.responses_events import Event
from tests.support.tools import BASH
from tests.support.turns import counter_ids

USAGE = {
    "input_tokens": 1200,
    "input_tokens_details": {"cached_tokens": 1000, "cache_creation_tokens": 150},
    "output_tokens": 42,
    "output_tokens_details": {"reasoning_tokens": 12},
    "total_tokens": 1242,
}

Script = Callable[[Turn], "list[Event] | None"]


class Gateway:
    """The face behind the SDK: each request is read by `MessagesFace`, its answer made by a
    turn the script drives (events taken batch by batch, as a backend hands them over), and
    written by the face's encoder."""

    def __init__(self, script: Script, *, fail_first: GatewayError | None = None, pings: bool = True) -> None:
        self.face = MessagesFace()
        self.script = script
        self.fail_first = fail_first
        self.pings = pings
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        body = request.read()
        self.requests.append(orjson.loads(body))
        self.headers.append(dict(request.headers))
        if request.url.path == "/v1/messages/count_tokens":
            status, answer = self.face.count_tokens(body, request.headers)
            return httpx2.Response(status, json=answer)
        if self.fail_first is not None:  # an error before the first byte
            status, answer = anthropic_error(self.fail_first)
            return httpx2.Response(status, json=answer)
        # As the server hands them over: ASGI's pairs, names lower-cased.
        pairs = [(name.lower().encode(), value.encode()) for name, value in request.headers.items()]
        ask = self.face.read(body, "tester", pairs)
        # The turn of a chat backend (its reasoning blob; the stop sequences the gateway applies),
        # for the very canonical request the face made.
        options = TurnOptions(reasoning_blob=encode_reasoning, stop=ask.req.stop)
        turn = Turn(ask.req, catalogue_of(ask.req.tools), options, new_id=counter_ids(), now=lambda: 0)
        batches = list(self._batches(turn))
        encoder = ask.encoder
        if isinstance(encoder, BodyEncoder):
            status, answer = encoder.whole(batches[-1][-1])
            return httpx2.Response(status, json=answer)
        assert isinstance(encoder, StreamEncoder) and isinstance(encoder, MessagesSSE)
        chunks: list[bytes] = []
        for batch in batches:
            chunks.append(encoder.batch(batch))
            if self.pings:
                chunks.append(encoder.keepalive)  # as the server does while the upstream is silent
        chunks.append(encoder.end(batches[-1][-1]))
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=b"".join(chunks))

    def _batches(self, turn: Turn) -> Iterator[list[Event]]:
        yield turn.start()
        made = self.script(turn)  # fail() hands its events over itself
        events = made if made is not None else turn.take()
        for start in range(0, len(events), 3):  # a few events per batch, as an upstream's reads give them
            yield events[start : start + 3]


def client_for(gateway: Gateway) -> anthropic.Anthropic:
    http = httpx2.Client(transport=httpx2.MockTransport(gateway.handle))
    return anthropic.Anthropic(base_url="http://gateway.test", api_key="x", http_client=http, max_retries=0)


def reasoning_tool_answer(turn: Turn) -> None:
    turn.reasoning("The user wants ")
    turn.reasoning("the files.")
    turn.text("Listing ")
    turn.text("them.")
    turn.open_call("c1", "Bash", "toolu_01")
    turn.call_arguments("c1", '{"command": ')
    turn.call_arguments("c1", '"ls -la"}')
    turn.usage(USAGE)
    turn.finish("tool_calls")


def ask(client: anthropic.Anthropic, **fields: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,  # the SDK streams only above ~21k without stream=True
        "messages": [{"role": "user", "content": "list the files"}],
        "tools": [BASH],
        **fields,
    }


def test_the_sdks_stream_helper_accumulates_the_whole_message() -> None:
    gateway = Gateway(reasoning_tool_answer)
    client = client_for(gateway)
    with client.messages.stream(**ask(client, thinking={"type": "enabled", "budget_tokens": 8000})) as stream:
        events = list(stream)
        message = stream.get_final_message()
    assert message.model == "claude-sonnet-4-5" and message.id.startswith("msg_")
    thinking, text, tool = message.content
    assert thinking.type == "thinking" and thinking.thinking == "The user wants the files."
    assert thinking.signature == "cgs1:cgr2:The user wants the files."
    assert text.type == "text" and text.text == "Listing them."
    assert tool.type == "tool_use" and (tool.id, tool.name, tool.input) == (
        "toolu_01",
        "Bash",
        {"command": "ls -la"},
    )
    assert message.stop_reason == "tool_use" and message.stop_sequence is None
    usage = message.usage
    assert (usage.input_tokens, usage.cache_read_input_tokens, usage.cache_creation_input_tokens, usage.output_tokens) == (
        50, 1000, 150, 42,
    )  # fmt: skip
    assert "signature" in {getattr(event, "type", "") for event in events}  # the helper's own signature event
    # the SDK's own request was read: the session went nowhere, the betas were none
    assert gateway.requests[0]["thinking"] == {"type": "enabled", "budget_tokens": 8000}


def test_the_sdks_non_streamed_message_is_the_same_message() -> None:
    client = client_for(Gateway(reasoning_tool_answer))
    streamed = client.messages.stream(**ask(client, thinking={"type": "enabled", "budget_tokens": 8000}))
    with streamed as stream:
        expected = stream.get_final_message()
    message = client_for(Gateway(reasoning_tool_answer)).messages.create(
        **ask(client, thinking={"type": "enabled", "budget_tokens": 8000})
    )
    # (the stream helper sets stop_details from message_delta, which has none to give)
    assert message.to_dict() == expected.to_dict(exclude_none=True) | {"stop_sequence": None}


def test_with_thinking_omitted_the_sdk_gets_the_block_and_the_signature_that_carries_it() -> None:
    client = client_for(Gateway(reasoning_tool_answer))
    thinking = {"type": "adaptive", "display": "omitted"}
    with client.messages.stream(**ask(client, thinking=thinking)) as stream:
        message = stream.get_final_message()
    block = message.content[0]
    assert (
        block.type == "thinking"
        and block.thinking == ""
        and block.signature == "cgs1:cgr2:The user wants the files."
    )


def test_an_anthropic_upstreams_blocks_reach_the_sdk_exactly() -> None:
    signed = {"type": "thinking", "thinking": "Hmm.", "signature": "EqQBCkYIBxgCKkDj"}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}

    def script(turn: Turn) -> None:
        turn.reasoning("Hmm.")
        turn.close_reasoning(encode_thinking(signed))
        turn.close_reasoning(encode_thinking(redacted))
        turn.text("Done.")
        turn.usage(USAGE)
        turn.finish("stop")

    client = client_for(Gateway(script))
    with client.messages.stream(**ask(client)) as stream:
        message = stream.get_final_message()
    assert [block.to_dict() for block in message.content] == [
        signed,
        redacted,
        {"type": "text", "text": "Done."},
    ]
    assert message.stop_reason == "end_turn"


def test_a_stop_sequence_reaches_the_sdk_with_the_sequence() -> None:
    def script(turn: Turn) -> None:
        turn.text("The answer.\n\nHu")
        turn.text("man: more")
        turn.usage(USAGE)
        turn.finish("stop")

    client = client_for(Gateway(script))
    with client.messages.stream(**ask(client, stop_sequences=["\n\nHuman:"])) as stream:
        message = stream.get_final_message()
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "\n\nHuman:")
    assert message.content[0].text == "The answer."  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("error", "error_type"),
    [(UpstreamStreamCut("The upstream stopped before the model finished."), "overloaded_error"),
     (RateLimited("Upstream error: slow down."), "rate_limit_error")],
)  # fmt: skip
def test_a_failure_mid_stream_is_raised_by_the_sdk_with_its_type(
    error: GatewayError, error_type: str
) -> None:
    def script(turn: Turn) -> list[Event]:
        turn.text("Half an ")
        return turn.fail(error)

    client = client_for(Gateway(script))
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(**ask(client)) as stream:
            for event in stream:
                seen.append(event.type)
    assert "text" in seen  # the answer had started
    body = caught.value.body
    assert isinstance(body, dict) and body["error"]["type"] == error_type


@pytest.mark.parametrize(
    ("error", "exception", "status"),
    [
        (RateLimited("Upstream error: slow down.", retry_after=2), anthropic.RateLimitError, 429),
        (GatewayError("Overloaded.", status=503, code="server_is_overloaded"), anthropic.OverloadedError, 529),
        (ContextLengthExceeded("maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens"),
         anthropic.BadRequestError, 400),
        (GatewayError("Invalid API key.", status=401, code="invalid_api_key"), anthropic.AuthenticationError, 401),
        (GatewayError("internal gateway error"), anthropic.InternalServerError, 500),
    ],
)  # fmt: skip
def test_an_error_before_the_first_byte_is_the_sdks_exception_for_it(
    error: GatewayError, exception: type[anthropic.APIStatusError], status: int
) -> None:
    client = client_for(Gateway(reasoning_tool_answer, fail_first=error))
    with pytest.raises(exception) as caught:
        client.messages.create(**ask(client))
    assert caught.value.status_code == status
    if isinstance(error, ContextLengthExceeded):
        assert "prompt is too long: 9000 tokens > 8192 maximum" in caught.value.message


def test_a_bad_request_is_a_400_the_sdk_raises_naming_the_field() -> None:
    face = MessagesFace()
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})  # no max_tokens
    with pytest.raises(GatewayError) as caught:
        face.read(body, None)
    status, answer = anthropic_error(caught.value)

    def handle(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(status, json=answer)

    client = anthropic.Anthropic(
        base_url="http://gateway.test", api_key="x", max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handle)),
    )  # fmt: skip
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "hi"}])
    assert "max_tokens: Field required" in raised.value.message


def test_the_betas_the_sdk_sends_are_read_and_kept_for_a_messages_upstream() -> None:
    gateway = Gateway(reasoning_tool_answer)
    client = client_for(gateway)
    message = client.beta.messages.create(
        **ask(client), betas=["interleaved-thinking-2025-05-14", "some-future-beta-2027-01-01"]
    )
    assert message.stop_reason == "tool_use"  # an unknown beta is ignored, not refused
    ask_ = gateway.face.read_messages(orjson.dumps(gateway.requests[0]), None, gateway.headers[0])[1]
    assert ask_.betas == ("interleaved-thinking-2025-05-14", "some-future-beta-2027-01-01")
    native = ask_.request.native
    assert native is not None and native.headers["anthropic-beta"] == gateway.headers[0]["anthropic-beta"]
    assert (
        native.headers["anthropic-version"] == gateway.headers[0]["anthropic-version"]
    )  # as the SDK sent it


def test_count_tokens_answers_the_sdk() -> None:
    client = client_for(Gateway(reasoning_tool_answer))
    count = client.messages.count_tokens(
        model="m", messages=[{"role": "user", "content": "foo"}], tools=[BASH]
    )  # type: ignore[list-item]
    assert count.input_tokens > 0
