"""The app-server wire catalogue: one JSON-RPC line in, one typed message out, and back."""

from __future__ import annotations

import orjson
import pytest

from codexgate.wire import app_server as wire
from codexgate.wire.app_server import (
    ErrorCode,
    ErrorResponse,
    Notification,
    ProtocolError,
    Response,
    RpcError,
    ServerRequest,
    parse_message,
)

# Lines as the 0.169 binary wrote them (shortened where marked).
TURN_STARTED = (
    b'{"method":"turn/started","params":{"threadId":"01a2-thr","turn":{"id":"01a2-turn",'
    b'"items":[],"status":"inProgress","error":null}},"emittedAtMs":1795601929774}\n'
)
THREAD_STARTED = b'{"method":"thread/started","params":{"thread":{"id":"01a2-thr","ephemeral":true}}}'
TOOL_CALL = (
    b'{"method":"item/tool/call","id":0,"params":{"threadId":"01a2-thr","turnId":"01a2-turn",'
    b'"callId":"call_1","namespace":null,"tool":"get_weather","arguments":{"city":"Oslo"}}}'
)


def test_a_notification_keeps_its_params_and_the_servers_clock() -> None:
    message = parse_message(TURN_STARTED)
    assert isinstance(message, Notification)
    assert message.kind == "notification"
    assert message.method == wire.TURN_STARTED
    assert message.emitted_at_ms == 1795601929774
    assert message.thread_id == "01a2-thr"
    assert message.turn_id == "01a2-turn"


def test_thread_started_is_routed_by_the_thread_inside_it() -> None:
    message = parse_message(THREAD_STARTED)
    assert isinstance(message, Notification)
    assert message.thread_id == "01a2-thr"
    assert message.emitted_at_ms is None


def test_a_message_with_a_method_and_an_id_is_a_server_request() -> None:
    message = parse_message(TOOL_CALL)
    assert isinstance(message, ServerRequest)
    assert (message.id, message.method, message.thread_id) == (0, wire.TOOL_CALL, "01a2-thr")
    assert message.params["arguments"] == {"city": "Oslo"}


def test_answers_and_error_answers() -> None:
    assert parse_message(b'{"id":7,"result":{}}') == Response(7, {})
    assert parse_message(b'{"id":"s-1","result":null}') == Response("s-1", None)
    refused = parse_message(b'{"error":{"code":-32600,"message":"Not initialized"},"id":1}')
    assert refused == ErrorResponse(1, RpcError(ErrorCode.INVALID_REQUEST, "Not initialized"))


def test_a_malformed_error_object_still_fails_its_request() -> None:
    message = parse_message(b'{"id":3,"error":"boom"}')
    assert message == ErrorResponse(3, RpcError(ErrorCode.INTERNAL_ERROR, "boom"))
    message = parse_message(b'{"id":3,"error":{"code":true,"message":5,"data":{"x":1}}}')
    assert message == ErrorResponse(3, RpcError(ErrorCode.INTERNAL_ERROR, "5", {"x": 1}))


def test_unknown_methods_pass_as_data() -> None:
    note = parse_message(b'{"method":"thread/hologram/updated","params":{"threadId":"t","x":[1]}}')
    assert isinstance(note, Notification) and note.params == {"threadId": "t", "x": [1]}
    request = parse_message(b'{"id":4,"method":"future/ask","params":{}}')
    assert isinstance(request, ServerRequest) and request.method == "future/ask"


def test_params_that_are_not_an_object_read_as_empty_so_a_request_can_still_be_answered() -> None:
    request = parse_message(b'{"id":9,"method":"item/tool/call","params":[1,2]}')
    assert isinstance(request, ServerRequest) and request.params == {} and request.id == 9
    note = parse_message(b'{"method":"warning"}')
    assert isinstance(note, Notification) and note.params == {} and note.thread_id is None


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"[1,2]",
        b'"text"',
        b"{}",
        b'{"params":{}}',
        b'{"id":1}',
        b'{"id":true,"result":1}',
        b'{"id":1.5,"result":1}',
        b'{"id":{"a":1},"method":"x"}',
    ],
)
def test_lines_that_are_not_json_rpc_are_refused(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        parse_message(line)


def test_a_null_id_with_a_method_is_a_notification() -> None:
    assert isinstance(parse_message(b'{"id":null,"method":"warning","params":{}}'), Notification)


def test_text_lines_parse_as_bytes_do() -> None:
    assert parse_message(TURN_STARTED.decode()) == parse_message(TURN_STARTED)


def test_encoded_lines_have_no_jsonrpc_field_and_one_newline() -> None:
    line = wire.encode_request(1, wire.THREAD_START, {"developerInstructions": "a\nb\r\nc\u2028"})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert orjson.loads(line) == {
        "id": 1,
        "method": "thread/start",
        "params": {"developerInstructions": "a\nb\r\nc\u2028"},
    }
    assert orjson.loads(wire.encode_request("r", "model/list")) == {"id": "r", "method": "model/list"}
    assert orjson.loads(wire.encode_notification(wire.INITIALIZED)) == {"method": "initialized"}


def test_answers_to_server_requests_round_trip() -> None:
    result = wire.text_output("Sunny, 21 C")
    assert parse_message(wire.encode_result(0, result)) == Response(0, result)
    assert result == {"contentItems": [{"type": "inputText", "text": "Sunny, 21 C"}], "success": True}
    line = wire.encode_error(5, ErrorCode.METHOD_NOT_FOUND, "no", data={"why": 1})
    assert parse_message(line) == ErrorResponse(5, RpcError(-32601, "no", {"why": 1}))
    assert "data" not in orjson.loads(wire.encode_error(5, -32603, "x"))["error"]


def test_encoding_what_json_cannot_hold_raises_type_error() -> None:
    with pytest.raises(TypeError):
        wire.encode_result(1, {"x": object()})


def test_initialize_params_turn_on_experimental_api_and_opt_out_of_noise() -> None:
    params = wire.initialize_params("codexgate", "1.2.3", title="codexgate gateway")
    assert params["clientInfo"] == {"name": "codexgate", "version": "1.2.3", "title": "codexgate gateway"}
    capabilities = params["capabilities"]
    assert capabilities["experimentalApi"] is True
    assert "account/rateLimits/updated" in capabilities["optOutNotificationMethods"]
    # Nothing a backend reads is opted out.
    read = {wire.TURN_STARTED, wire.TURN_COMPLETED, wire.ITEM_STARTED, wire.ITEM_COMPLETED, wire.ERROR}
    read |= {wire.AGENT_MESSAGE_DELTA, wire.TOKEN_USAGE_UPDATED, wire.THREAD_CLOSED}
    assert not read & set(capabilities["optOutNotificationMethods"])
    assert "optOutNotificationMethods" not in wire.initialize_params("x", "1", opt_out=())["capabilities"]


def test_every_server_request_the_0_169_schema_lists_is_named() -> None:
    assert len(wire.SERVER_REQUEST_METHODS) == 11
    assert {wire.TOOL_CALL, wire.COMMAND_APPROVAL, wire.USER_INPUT_REQUEST} <= wire.SERVER_REQUEST_METHODS


@pytest.mark.parametrize(
    ("info", "name", "status"),
    [
        ("contextWindowExceeded", "contextWindowExceeded", None),
        ({"httpConnectionFailed": {"httpStatusCode": 502}}, "httpConnectionFailed", 502),
        ({"responseStreamDisconnected": {"httpStatusCode": None}}, "responseStreamDisconnected", None),
        (None, None, None),
        ({"a": 1, "b": 2}, None, None),
    ],
)
def test_codex_error_info_reads_both_forms(info: object, name: str | None, status: int | None) -> None:
    assert wire.error_info_name(info) == name
    assert wire.error_info_status(info) == status


def test_turn_ids_come_from_turn_id_or_the_turn_object() -> None:
    assert wire.turn_id_of({"turnId": "a"}) == "a"
    assert wire.turn_id_of({"turn": {"id": "b"}}) == "b"
    assert wire.turn_id_of({"turn": "c"}) is None


def test_the_public_surface_is_pinned() -> None:
    assert sorted(wire.__all__) == sorted(set(wire.__all__))
    for name in wire.__all__:
        assert hasattr(wire, name), name
