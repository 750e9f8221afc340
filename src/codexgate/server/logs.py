"""How the gateway's log lines look: `logfmt` (the default: a time, a level, the logger, then the
message, which for access lines is key=value pairs) or `json` (one object per line, for log
pipelines that parse JSON: `timestamp`, `level`, `logger`, `message`, and an access line's
fields as keys of their own).

Secrets are masked before a record is formatted, by the RedactingFilter on every handler
(redact.py), which also masks the structured fields a record carries.
"""

from __future__ import annotations

import copy
import logging
import time
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from uvicorn.config import LOGGING_CONFIG

__all__ = [
    "LOGFMT_FORMAT",
    "JsonFormatter",
    "LogfmtFormatter",
    "LogFormat",
    "configure_logging",
    "uvicorn_log_config",
]

LogFormat = Literal["logfmt", "json"]
LOGFMT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# LogRecord attributes that are not the caller's `extra`: everything else on a record is.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
_SKIPPED_EXTRA = frozenset(("color_message",))  # uvicorn's coloured copy of its message


class JsonFormatter(logging.Formatter):
    """A record as one JSON object: `timestamp` (UTC, ISO 8601), `level`, `logger`, `message`,
    the record's structured `fields` (the access line's) as keys, any other `extra` the caller
    gave, and `exception` / `stack` when present. Keys of the record win over fields of the
    same name, so a field can never pass for the level or the message."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "timestamp": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key == "fields" and isinstance(value, dict):
                for name, field in value.items():
                    data.setdefault(name, field)
            elif key not in _STANDARD and key not in _SKIPPED_EXTRA:
                data.setdefault(key, value)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            data["exception"] = record.exc_text
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        # default=str: an `extra` value orjson does not know still logs, as its text.
        return orjson.dumps(data, default=str).decode()


class LogfmtFormatter(logging.Formatter):
    """`LOGFMT_FORMAT`, its time as `logging.Formatter` writes it (local time, milliseconds), the
    date and time part made once per second: every request's access line passes here, and
    `time.strftime` was a tenth of the line's cost."""

    def __init__(self) -> None:
        super().__init__(LOGFMT_FORMAT)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        if datefmt:
            return super().formatTime(record, datefmt)
        second = int(record.created)
        if self._second[0] != second:
            self._second = (second, time.strftime(self.default_time_format, self.converter(second)))
        return f"{self._second[1]},{int(record.msecs):03d}"  # logging's default_msec_format


def formatter(log_format: LogFormat) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else LogfmtFormatter()


def configure_logging(level: str, log_format: LogFormat) -> None:
    """The process's root handler (stderr) at `level` with the chosen format. uvicorn's own
    loggers are configured by uvicorn from `uvicorn_log_config`."""
    logging.basicConfig(level=level.upper(), format=LOGFMT_FORMAT)
    chosen = formatter(log_format)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(chosen)


def uvicorn_log_config(log_format: LogFormat) -> dict[str, Any]:
    """uvicorn's logging config (its `log_config`): its own for logfmt, the same handlers with
    JsonFormatter for json."""
    if log_format != "json":
        return LOGGING_CONFIG
    config = copy.deepcopy(LOGGING_CONFIG)
    config["formatters"] = {name: {"()": JsonFormatter} for name in config["formatters"]}
    return config
