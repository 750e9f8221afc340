"""The checks both faces' request validation is written with (wire/responses.py, wire/chat.py):
JSON types named as a client reads them, and the limits both faces hold a request to. No I/O.
Each raises InvalidRequest naming the parameter."""

from __future__ import annotations

import re
from typing import Any

import orjson

from codexgate.errors import InvalidRequest

__all__ = [
    "MAX_DEPTH",
    "MAX_METADATA_KEYS",
    "MAX_METADATA_KEY_CHARS",
    "MAX_METADATA_VALUE_CHARS",
    "MAX_STOP_SEQUENCES",
    "MAX_TOKEN_COUNT",
    "NUMBER",
    "TEMPERATURE_RANGE",
    "TOOL_CHOICE_MODES",
    "TOP_P_RANGE",
    "check_metadata",
    "check_model",
    "check_optional",
    "check_range",
    "check_token_count",
    "check_type",
    "is_tool_choice_mode",
    "required_field",
    "decode_json_object",
    "stop_sequences",
]

# OpenAI's documented limits on `metadata`, which is echoed in every response event.
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 512
MAX_STOP_SEQUENCES = 4  # OpenAI's limit on `stop`

# Deepest nesting accepted, the body itself being level 1 (wire/responses.py check_depth).
# Codex's deepest part is a tool's JSON schema (~10 levels); 64 leaves room for any real schema
# and keeps every echo of the request (a few levels more inside an event) far below what orjson
# can write (~255 levels; it reads 1,024).
MAX_DEPTH = 64
# The largest count of tokens a request may ask for (max_output_tokens, max_tokens): the largest
# 32-bit signed integer, as llama.cpp reads n_predict (a larger one would wrap there, not be
# refused) and far above any model's output. orjson reads an integer past 64 bits as a float.
MAX_TOKEN_COUNT = 2**31 - 1
# OpenAI's documented ranges of the sampling parameters.
TEMPERATURE_RANGE = (0, 2)
TOP_P_RANGE = (0, 1)

NUMBER = (int, float)
TOOL_CHOICE_MODES = frozenset(("none", "auto", "required"))
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_JSON_NAMES = {
    str: "a string",
    list: "an array",
    dict: "an object",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
}


def _type_name(expected: type | tuple[type, ...]) -> str:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    if kinds == NUMBER:
        return "a number"
    return " or ".join(_JSON_NAMES.get(k, k.__name__) for k in kinds)


def _exact(expected: type | tuple[type, ...]) -> frozenset[type]:
    """The types a decoded JSON value of `expected` has: exactly these (JSON's bool is no
    int), so one set lookup answers for the common value."""
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return frozenset(kind for kind in kinds if kind is not bool or bool in kinds)


_EXACT: dict[type | tuple[type, ...], frozenset[type]] = {}


def check_type(value: Any, expected: type | tuple[type, ...], param: str) -> None:
    exact = _EXACT.get(expected)
    if exact is None:
        exact = _EXACT[expected] = _exact(expected)
    if type(value) in exact:  # decoded JSON: the common case, one lookup
        return
    kinds = expected if isinstance(expected, tuple) else (expected,)
    # bool is an int in Python; JSON keeps them apart.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise InvalidRequest(f"Invalid type for '{param}': expected {_type_name(expected)}.", param=param)


def check_optional(obj: dict[str, Any], name: str, expected: type | tuple[type, ...], param: str) -> Any:
    """`obj[name]` when present and not null, checked against `expected`; else None."""
    value = obj.get(name)
    if value is not None:
        exact = _EXACT.get(expected)
        if exact is None or type(value) not in exact:  # the parameter's name is made for a miss only
            check_type(value, expected, f"{param}.{name}")
    return value


def check_token_count(value: Any, param: str) -> None:
    """A count of tokens asked for (`max_output_tokens`, `max_tokens`), when not None: an
    integer from 1 to MAX_TOKEN_COUNT. Raises InvalidRequest saying the range, or the type."""
    kind = type(value)
    if value is None or (kind is int and 0 < value <= MAX_TOKEN_COUNT):
        return  # the common case: two comparisons
    if (kind is int or kind is float) and not 1 <= value <= MAX_TOKEN_COUNT:
        raise InvalidRequest(
            f"'{param}' must be an integer between 1 and {MAX_TOKEN_COUNT} (a 32-bit integer), got {value}.",
            param=param,
        )
    check_type(value, int, param)  # a fraction, or not a number: raises


def check_range(value: Any, bounds: tuple[int, int], param: str) -> None:
    """`value`, when not None, a number within `bounds` (both included). Raises InvalidRequest
    saying the range, or the type."""
    kind = type(value)
    if kind is float or kind is int:
        low, high = bounds
        if not low <= value <= high:
            raise InvalidRequest(f"'{param}' must be between {low} and {high}, got {value}.", param=param)
    elif value is not None:
        check_type(value, NUMBER, param)


def required_field(data: dict[str, Any], name: str, expected: type) -> Any:
    """`data[name]`: present, of the `expected` JSON type, and not empty."""
    value = data.get(name)
    if value is None:
        raise InvalidRequest(f"Missing required parameter: '{name}'.", param=name)
    check_type(value, expected, name)
    if not value:
        raise InvalidRequest(f"'{name}' must not be empty.", param=name)
    return value


def check_model(data: dict[str, Any]) -> str:
    """`model`: a string, not empty, without control characters."""
    model = required_field(data, "model", str)
    if _CONTROL.search(model):
        raise InvalidRequest("'model' must not contain control characters.", param="model")
    return str(model)


def is_tool_choice_mode(choice: Any) -> bool:
    """Whether `tool_choice` is a mode (none, auto, required) rather than an object. Raises
    InvalidRequest for a string that is no mode."""
    if not isinstance(choice, str):
        return False
    if choice not in TOOL_CHOICE_MODES:
        raise InvalidRequest(
            "Invalid value for 'tool_choice': expected none, auto, required or an object.",
            param="tool_choice",
        )
    return True


def check_metadata(metadata: dict[str, Any]) -> None:
    if len(metadata) > MAX_METADATA_KEYS:
        raise InvalidRequest(
            f"'metadata' may hold at most {MAX_METADATA_KEYS} keys, got {len(metadata)}.", param="metadata"
        )
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise InvalidRequest(
                f"'metadata' keys may be at most {MAX_METADATA_KEY_CHARS} characters long.", param="metadata"
            )
        param = f"metadata.{key}"
        check_type(value, str, param)
        if len(value) > MAX_METADATA_VALUE_CHARS:
            raise InvalidRequest(
                f"'{param}' may be at most {MAX_METADATA_VALUE_CHARS} characters long.", param=param
            )


def stop_sequences(value: Any) -> list[str] | None:
    """`stop`: a string or an array of at most MAX_STOP_SEQUENCES non-empty strings, as a
    list; None or an empty array is no stop sequence."""
    if value is None:
        return None
    sequences = [value] if isinstance(value, str) else value
    if not isinstance(sequences, list) or not all(isinstance(s, str) for s in sequences):
        raise InvalidRequest(
            "Invalid type for 'stop': expected a string or an array of strings.", param="stop"
        )
    if len(sequences) > MAX_STOP_SEQUENCES:
        raise InvalidRequest(
            f"'stop' may hold at most {MAX_STOP_SEQUENCES} sequences, got {len(sequences)}.", param="stop"
        )
    if any(not s for s in sequences):
        raise InvalidRequest("'stop' sequences must not be empty.", param="stop")
    return sequences or None


def decode_json_object(raw: bytes | str, what: str) -> dict[str, Any]:
    """`raw` (`what`: "The request body", "The frame") as the JSON object it must be. Raises
    InvalidRequest saying in plain words what is wrong and where, never the JSON library's own
    message ("invalid literal, expected 'null'" for a body that starts with n)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if exc.msg == _ORJSON_TOO_DEEP:
            raise InvalidRequest(
                f"{what} is nested too deep: more than {_ORJSON_MAX_DEPTH} levels of arrays and objects "
                f"(at most {MAX_DEPTH} are accepted)."
            ) from None
        raise InvalidRequest(_not_json(raw, what, exc.pos, exc.lineno, exc.colno)) from None
    if not isinstance(data, dict):
        kind = "null" if data is None else _type_name(type(data))
        raise InvalidRequest(f"{what} must be a JSON object ({{...}}), not {kind}.")
    return data


# orjson refuses JSON nested past 1,024 levels with this message and no other sign (the one
# message of the library read here: tests/wire/test_checks.py holds it to it).
_ORJSON_TOO_DEEP = "depth limit exceeded"
_ORJSON_MAX_DEPTH = 1024


def _not_json(raw: bytes | str, what: str, pos: int, line: int, column: int) -> str:
    if isinstance(raw, bytes):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"{what} is not UTF-8 text (byte {exc.start}), so it cannot be JSON."
    else:
        text = raw
    start = text.lstrip()
    if not start:
        return f"{what} is empty: send a JSON object."
    if start[0] not in "{[":
        return f"{what} is not JSON: it starts with {start[:20]!r}, where a JSON object starts with {{."
    if pos >= len(text.rstrip()):
        return f"{what} is not complete JSON: it ends (line {line}, column {column}) before the JSON does."
    near = text[max(0, pos - 20) : pos + 20]
    return f"{what} is not valid JSON at line {line}, column {column}, near {near!r}."
