"""Log lines as JSON (`log_format = "json"`, server/logs.py): every line one object, the access
line's fields as keys, secrets masked in the fields as in the message."""

from __future__ import annotations

import io
import logging
import logging.config
import random
import sys
from typing import Any

import httpx
import orjson
import pytest

from codexgate.config import ConfigError, load_settings
from codexgate.redact import MASK, RedactingFilter, Redactor
from codexgate.server.exchange import Exchange
from codexgate.server.logs import LOGFMT_FORMAT, JsonFormatter, LogfmtFormatter, uvicorn_log_config
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.processes import serve_process
from tests.support.servers import run_asgi_server

SECRET = "sk-upstream-secret-0123456789"


def test_the_served_gateway_logs_one_json_object_per_line_with_secrets_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("UP_KEY", SECRET)
    fake = FakeUpstream([text_reply("hi")])
    with (
        run_asgi_server(fake) as upstream,
        serve_process(
            "--upstream", upstream + "/v1", "--upstream-api-key-env", "UP_KEY", "--no-discover",
            "--log-format", "json",
        ) as gw,
    ):  # fmt: skip
        # A hostile client names the upstream's key as its model: it is logged masked.
        response = httpx.post(gw.base + "/v1/responses", json={"model": SECRET, "input": "hi"}, timeout=10)
        assert response.status_code == 200
    assert fake.requests[0].headers["authorization"] == f"Bearer {SECRET}"  # the key was in use
    records = [orjson.loads(line) for line in gw.output if line.strip()]  # raises if a line is not JSON
    assert all({"timestamp", "level", "logger", "message"} <= record.keys() for record in records)
    [access] = [r for r in records if r["logger"] == "codexgate.access"]
    assert access["level"] == "info" and access["model"] == MASK
    assert access["status"] == 200 and access["outcome"] == "completed" and access["upstream"] == "default"
    assert isinstance(access["duration_ms"], int) and access["input_tokens"] > 0
    assert any(r["logger"].startswith("uvicorn") for r in records)  # uvicorn's own lines too
    assert not any(SECRET in line for line in gw.output)


def _format(record: logging.LogRecord, redactor: Redactor | None = None) -> dict[str, Any]:
    if redactor is not None:
        RedactingFilter(redactor).filter(record)
    parsed: dict[str, Any] = orjson.loads(JsonFormatter().format(record))
    return parsed


def _record(message: str, **extra: Any) -> logging.LogRecord:
    record = logging.LogRecord("codexgate.test", logging.WARNING, __file__, 1, message, None, None)
    record.__dict__.update(extra)
    return record


def test_fields_become_keys_but_never_replace_the_records_own() -> None:
    exchange = Exchange("req-1", "responses")
    exchange.model, exchange.status, exchange.outcome = "m" * 300, 200, "completed"
    fields = exchange.fields()
    line = _format(_record(exchange.line(fields), fields={**fields, "level": "forged"}))
    assert line["level"] == "warning" and line["logger"] == "codexgate.test"
    assert line["request_id"] == "req-1" and line["status"] == 200 and line["model"] == "m" * 80
    assert line["message"] == exchange.line(fields) and "model=" + "m" * 80 in line["message"]
    assert line["timestamp"].endswith("+00:00")


def test_secrets_in_fields_are_masked_like_the_message() -> None:
    record = _record(f"model={SECRET}", fields={"model": SECRET, "status": 200})
    line = _format(record, Redactor([SECRET]))
    assert line["model"] == MASK and line["message"] == f"model={MASK}" and line["status"] == 200


def test_an_exception_and_extra_values_are_kept() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record("failed", upstream="u", when=object())
        record.exc_info = sys.exc_info()
    line = _format(record)
    assert line["upstream"] == "u" and line["when"].startswith("<object")
    assert "ValueError: boom" in line["exception"]


def test_uvicorn_logs_through_the_json_formatter_when_asked() -> None:
    config = uvicorn_log_config("json")
    configurator = logging.config.DictConfigurator(config)
    formatters = [configurator.configure_formatter(dict(f)) for f in config["formatters"].values()]
    assert formatters and all(isinstance(f, JsonFormatter) for f in formatters)
    assert uvicorn_log_config("logfmt")["formatters"]["default"]["()"] == "uvicorn.logging.DefaultFormatter"


def test_the_log_format_is_a_setting_with_two_values() -> None:
    assert load_settings({}, environ={}).log_format == "logfmt"
    assert load_settings({}, environ={"CODEXGATE_LOG_FORMAT": "json"}).log_format == "json"
    with pytest.raises(ConfigError, match="log_format"):
        load_settings({"log_format": "xml"}, environ={})


def test_a_handler_with_the_json_formatter_writes_one_line_per_record() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("codexgate.test.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("two\nlines")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    [line] = stream.getvalue().splitlines()
    assert orjson.loads(line)["message"] == "two\nlines"


def test_uvicorns_coloured_message_is_not_printed_with_its_arguments_gone() -> None:
    from codexgate.redact import RedactingFilter, Redactor

    record = logging.LogRecord(
        "uvicorn.error", logging.INFO, __file__, 1, "Started server process [%d]", (42,), None
    )
    record.color_message = "Started server process [\x1b[36m%d\x1b[0m]"
    assert RedactingFilter(Redactor()).filter(record)
    assert record.getMessage() == "Started server process [42]"
    assert "color_message" not in record.__dict__


def test_a_record_and_its_fields_are_masked_as_each_text_alone_would_be() -> None:
    """The filter first redacts the message and the fields joined in one text, and masks them one
    by one only when that finds something: over records made of credential-shaped pieces and
    near misses, split across fields (a cue in one, its token in the next), the result must be
    what redacting each text alone gives."""
    redactor = Redactor([SECRET, "cg-key-abcdefghijkl"])
    pieces = [
        "Bearer", "basic", "abc123def456", "x-api-key=", "zzzz9999", "sk-0123456789abcdefXYZ", SECRET,
        "cg-key-abcdefghijkl", "https://u:pw@host/v1", "model=qwen3", "200", " ", "\n", "é", "=",
    ]  # fmt: skip
    rng = random.Random(27)
    for _ in range(2000):
        texts = ["".join(rng.choices(pieces, k=rng.randint(0, 4))) for _ in range(rng.randint(1, 5))]
        fields: dict[str, Any] = {f"f{i}": text for i, text in enumerate(texts[1:])} | {"n": 200}
        record = _record(texts[0], fields=dict(fields))
        assert RedactingFilter(redactor).filter(record)
        assert record.getMessage() == redactor.redact(texts[0]), texts
        masked = {key: redactor.redact(v) if isinstance(v, str) else v for key, v in fields.items()}
        assert record.fields == masked, texts


def test_a_handlers_filter_still_masks_records_no_logger_filter_saw() -> None:
    """A record the logger's filter cleaned is passed over by the handler's filter of the same
    redactor; any other record (from a logger without the filter, or cleaned by a filter that
    knew other secrets) is masked there."""
    key = "gateway-key-abcdefghijkl"  # masked only as a known secret: no credential shape
    redactor = Redactor([key])
    on_logger, on_handler = RedactingFilter(redactor), RedactingFilter(redactor)
    gateway = _record(f"key {key}")
    assert on_logger.filter(gateway) and on_handler.filter(gateway)
    assert gateway.getMessage() == f"key {MASK}"
    other = logging.LogRecord("aiohttp.client", logging.INFO, __file__, 1, "key %s", (key,), None)
    assert on_handler.filter(other)
    assert other.getMessage() == f"key {MASK}"
    elsewhere = _record(f"key {key}")
    assert RedactingFilter(Redactor()).filter(elsewhere) and elsewhere.getMessage() == f"key {key}"
    assert on_handler.filter(elsewhere) and elsewhere.getMessage() == f"key {MASK}"


def test_the_logfmt_time_is_the_standard_formatters() -> None:
    """LogfmtFormatter makes each second's date and time once: its lines must be the ones
    `logging.Formatter` writes, in one second, across seconds, and with a date format."""
    ours, standard = LogfmtFormatter(), logging.Formatter(LOGFMT_FORMAT)
    record = _record("line")
    seconds = (1_700_000_000.0, 1_700_000_000.999, 1_700_000_001.0015, 1_699_999_999.5, 1_700_086_400.25)
    for created in seconds:
        record.created, record.msecs = created, int((created - int(created)) * 1000)
        assert ours.format(record) == standard.format(record)
        assert ours.formatTime(record, "%H:%M") == standard.formatTime(record, "%H:%M")
