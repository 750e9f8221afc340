"""Tool-call arguments as a model wrote them -> a compact JSON object string, or a clear no.

Open models get the JSON of their tool arguments slightly wrong in a few recurring ways. Each
repair here fixes exactly one of them, and only when there is a single possible reading:

| kind | what the model wrote | what it becomes |
|---|---|---|
| `empty` | nothing (`None`, `""`) | `{}` |
| `object_not_string` | an object where a string was due | that object |
| `code_fence` | the JSON inside a Markdown code fence | the JSON |
| `double_encoded` | a JSON string whose content is the JSON object | the object |
| `single_quotes` | `{'a': 'b'}` with no double quote anywhere | `{"a": "b"}` |
| `python_literals` | `True`, `False`, `None` outside strings | `true`, `false`, `null` |
| `trailing_comma` | `[1, 2,]`, `{"a": 1,}` | `[1, 2]`, `{"a": 1}` |
| `missing_closers` | `{"a": [1, 2` ending after a whole value | `{"a": [1, 2]}` |

Anything else (an unterminated string, a value cut after `:` or `,`, prose around the JSON, an
apostrophe inside single-quoted text) is left alone and reported `unparseable`: a guess would put
words in the model's mouth. The object is then checked against the tool's JSON Schema (the draft
its `$schema` names, 2020-12 when it names none); a failure is `schema_mismatch`.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ArgumentsResult", "Outcome", "load_json_lenient", "repair_arguments"]

Outcome = Literal["valid", "repaired", "unparseable", "schema_mismatch"]

_FENCE = re.compile(r"\A```[A-Za-z0-9_+-]*[ \t]*\n?(?P<body>.*?)\n?[ \t]*```\Z", re.DOTALL)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_CLOSER = {"{": "}", "[": "]"}


@dataclass(frozen=True, slots=True)
class ArgumentsResult:
    """`arguments` is a compact JSON object string when the outcome is `valid` or `repaired`,
    else None. `repairs` lists the repair kinds applied, in order; `detail` says why, in words
    meant for logs."""

    arguments: str | None
    outcome: Outcome
    repairs: tuple[str, ...]
    detail: str


class _NotJson(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


def _strict(text: str) -> Any:
    """Standard JSON only (no NaN/Infinity). Raises _NotJson."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise _NotJson(f"{exc.msg} (line {exc.lineno}, column {exc.colno})") from None


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- the text repairs


def _single_to_double_quotes(text: str) -> str | None:
    """`'...'` strings as `"..."` strings. Only called on text without any `"`, so no string
    content needs escaping. None when a single-quoted string is left open."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "'":
            out.append(ch)
            i += 1
            continue
        out.append('"')
        i += 1
        while True:
            if i >= n:
                return None
            ch = text[i]
            if ch == "\\" and i + 1 < n:
                nxt = text[i + 1]
                out.append("'" if nxt == "'" else ch + nxt)  # \' means a quote; keep other escapes
                i += 2
            elif ch == "'":
                out.append('"')
                i += 1
                break
            else:
                out.append(ch)
                i += 1
    return "".join(out)


@dataclass(slots=True)
class _Syntax:
    """One pass over JSON-ish text: what lies outside strings."""

    text: str
    kinds: list[str]
    open_brackets: list[str]
    in_string: bool
    mismatched: bool
    last_significant: str


def _fix_syntax(text: str) -> _Syntax:
    """Drop trailing commas and turn Python literals into JSON, both outside strings only;
    note the brackets left open at the end."""
    out: list[str] = []
    kinds: list[str] = []
    stack: list[str] = []
    mismatched = False
    last = ""
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if j >= n:  # open string at the end: whatever follows would be a guess
                out.append(text[i:])
                return _Syntax("".join(out), kinds, stack, True, mismatched, '"')
            out.append(text[i : j + 1])
            last = '"'
            i = j + 1
            continue
        if ch == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":
                if "trailing_comma" not in kinds:
                    kinds.append("trailing_comma")
                i += 1
                continue
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if stack and _CLOSER[stack[-1]] == ch:
                stack.pop()
            else:
                mismatched = True
        elif ch.isascii() and (ch.isalpha() or ch == "_"):
            match = _IDENT.match(text, i)
            assert match is not None
            word = match.group()
            if word in _PY_LITERALS:
                word = _PY_LITERALS[word]
                if "python_literals" not in kinds:
                    kinds.append("python_literals")
            out.append(word)
            last = word[-1]
            i = match.end()
            continue
        out.append(ch)
        if ch not in " \t\r\n":
            last = ch
        i += 1
    return _Syntax("".join(out), kinds, stack, False, mismatched, last)


def _repair_text(text: str, repairs: list[str], *, allow_double: bool = True) -> Any:
    """Parse `text` as JSON, applying the unambiguous repairs (appended to `repairs`) when the
    strict parse fails. Raises _NotJson with the strict parser's complaint."""
    text = text.strip()
    try:
        value = _strict(text)
    except _NotJson as first_error:
        value = _repair_syntax(text, repairs, first_error)
    if allow_double and isinstance(value, str) and value.strip()[:1] in ("{", "["):
        inner: list[str] = []
        try:
            decoded = _repair_text(value, inner, allow_double=False)
        except _NotJson:
            return value
        if isinstance(decoded, dict):
            repairs.append("double_encoded")
            repairs.extend(inner)
            return decoded
    return value


def _repair_syntax(text: str, repairs: list[str], first_error: _NotJson) -> Any:
    applied: list[str] = []
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group("body").strip()
        applied.append("code_fence")
        try:
            value = _strict(text)
        except _NotJson:
            pass
        else:
            repairs.extend(applied)
            return value
    if '"' not in text and "'" in text:
        converted = _single_to_double_quotes(text)
        if converted is None:
            raise first_error
        text = converted
        applied.append("single_quotes")
    syntax = _fix_syntax(text)
    text = syntax.text
    applied.extend(syntax.kinds)
    if (
        syntax.open_brackets
        and not syntax.in_string
        and not syntax.mismatched
        and syntax.last_significant not in ("", ",", ":", "{", "[")
    ):
        text += "".join(_CLOSER[b] for b in reversed(syntax.open_brackets))
        applied.append("missing_closers")
    if not applied:
        raise first_error
    try:
        value = _strict(text)
    except _NotJson:
        raise first_error from None
    repairs.extend(applied)
    return value


def load_json_lenient(text: str) -> tuple[Any, tuple[str, ...]]:
    """Any JSON value from `text` with the same unambiguous repairs as `repair_arguments`, and
    the repair kinds it took. Raises ValueError when no single reading exists."""
    repairs: list[str] = []
    value = _repair_text(text, repairs)
    return value, tuple(repairs)


# -- the schema


def _compile(schema: dict[str, Any]) -> Any:
    """A validator for `schema` in the draft it names, or None when the schema is not valid."""
    # jsonschema (with referencing and rpds) is imported when a first call is checked: memory
    # a gateway holds only once its models call tools. It ships no type information; its
    # stubs (types-jsonschema) are not a dependency.
    from jsonschema import validators  # type: ignore[import-untyped, unused-ignore]
    from jsonschema.exceptions import SchemaError  # type: ignore[import-untyped, unused-ignore]

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError:
        return None
    return cls(schema)


@functools.lru_cache(maxsize=256)
def _compiled(schema_json: str) -> Any:
    # Checking a schema against its metaschema costs milliseconds and every call of a tool
    # brings the same schema: a bounded memo keyed by the canonical JSON, with no other state.
    return _compile(json.loads(schema_json))


def _schema_problem(value: dict[str, Any], schema: dict[str, Any] | None) -> str | None:
    """None when `value` satisfies `schema` (or the schema cannot be used), else the reason."""
    if not schema:
        return None
    try:
        validator = _compiled(json.dumps(schema, sort_keys=True))
    except (TypeError, ValueError):  # not JSON-serialisable: compile it uncached
        validator = _compile(schema)
    if validator is None:
        return None  # the client's own schema is broken: nothing to hold the model to
    from jsonschema.exceptions import best_match  # type: ignore[import-untyped, unused-ignore]
    from referencing.exceptions import Unresolvable

    try:
        error = best_match(validator.iter_errors(value))
    except Unresolvable:
        # A $ref to elsewhere (never fetched): we cannot judge, and a native tool parser
        # would have held the model to nothing better.
        return None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where or '(root)'}: {error.message}"


# -- the entry point


def repair_arguments(
    raw: str | dict[str, Any] | list[Any] | None,
    schema: dict[str, Any] | None,
    *,
    counts: Counter[str] | None = None,
    prior_repairs: tuple[str, ...] = (),
) -> ArgumentsResult:
    """Judge and, where unambiguous, repair a tool call's arguments.

    `raw` is what the model produced for the arguments: normally a string, sometimes an object
    (a server that already parsed it) or a list. `schema` is the tool's JSON Schema for its
    parameters; None or `{}` accepts any object. `prior_repairs` are repairs already made to
    the text that carried these arguments (a text-format call's envelope); they are reported
    and counted with these. With `counts`, adds one to `arguments.<outcome>` and, for a
    repaired call, to `arguments.repaired.<kind>` for each kind. Never raises for bad input."""
    repairs: list[str] = list(prior_repairs)
    value: Any
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        value = {}
        repairs.append("empty")
    elif isinstance(raw, dict):
        value = raw
        repairs.append("object_not_string")
    elif isinstance(raw, list):
        return _result(None, "unparseable", repairs, "arguments are a JSON array, not an object", counts)
    else:
        try:
            value = _repair_text(raw, repairs)
        except _NotJson as exc:
            return _result(None, "unparseable", repairs, f"not JSON: {exc}", counts)
    if not isinstance(value, dict):
        kind = type(value).__name__ if value is not None else "null"
        return _result(None, "unparseable", repairs, f"arguments are a JSON {kind}, not an object", counts)
    problem = _schema_problem(value, schema)
    if problem is not None:
        return _result(None, "schema_mismatch", repairs, f"schema: {problem}", counts)
    if repairs:
        return _result(_compact(value), "repaired", repairs, "repaired: " + ", ".join(repairs), counts)
    return _result(_compact(value), "valid", repairs, "valid JSON object", counts)


def _result(
    arguments: str | None,
    outcome: Outcome,
    repairs: list[str],
    detail: str,
    counts: Counter[str] | None,
) -> ArgumentsResult:
    if counts is not None:
        counts[f"arguments.{outcome}"] += 1
        if outcome == "repaired":
            for kind in repairs:
                counts[f"arguments.repaired.{kind}"] += 1
    return ArgumentsResult(arguments, outcome, tuple(repairs), detail)
