"""The tool-call markups open models print, one `TextCallFormat` each, for
translate/open_models/textcalls.py's parser. Pure.

Formats, with the sources their markers were checked against:

- `qwen3_coder`: `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n
  </function>\\n</tool_call>`, also without the `<tool_call>` wrapper. Values are raw text; one
  leading and one trailing newline belong to the markup; a value is JSON when the tool's schema
  types the parameter as anything but a string. (Qwen3-Coder `chat_template.jinja`; vLLM
  `tool_parsers/qwen3coder_tool_parser.py`; ollama `model/parsers/qwen3coder.go`.)
- `hermes` (Hermes 2 Pro, Qwen2.5, Qwen3): `<tool_call>{"name": ..., "arguments": {...}}
  </tool_call>`, one block per call; `arguments` may be a JSON string, or be named `parameters`.
  (vLLM `tool_parsers/hermes_tool_parser.py`; the Qwen2.5 template's tool instructions.)
- `mistral`: `[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]` (tokenizer v3),
  `[TOOL_CALLS]NAME{...}` and `[TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}` (v11),
  `[TOOL_CALLS]NAME[ARGS]{...}` (v13: Magistral, Devstral 2, Ministral 3), one marker per call.
  (vLLM `tool_parsers/mistral_tool_parser.py` and `tests/tool_parsers/test_mistral_tool_parser.py`;
  ollama `model/parsers/ministral.go` and its tests; mistral-common's v11 `[CALL_ID]`.)
- `llama` (Llama 3.1-3.3): `<|python_tag|>{"name": ..., "parameters": {...}}`, several joined
  by `;` (`arguments` accepted too); or the same JSON, with `parameters`, without the tag, as
  the whole message. (vLLM
  `tool_parsers/llama_tool_parser.py`; Meta's Llama 3.1 JSON tool-calling template: "Respond in
  the format {"name": function name, "parameters": dictionary of argument name and its value}".)
- `deepseek` (V3, R1, V3.1): `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
  \\n```json\\n{...}\\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>` and the V3.1 form
  `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` (fullwidth `｜`, `▁` for
  spaces). The opener spellings llama.cpp accepts are accepted too. (vLLM
  `tool_parsers/deepseekv3_tool_parser.py`, `deepseekv31_tool_parser.py`; llama.cpp
  `common/chat.cpp`, DeepSeek R1 handler.)
- `json`: a bare or fenced (```` ```json ````) JSON object `{"name": ..., "arguments": ...}`, or a
  JSON array of them, starting a line and being the whole rest of the message.

A new format is one `TextCallFormat` subclass added to `FORMATS`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal, TypeAlias

from codexgate.translate.open_models.repair import load_json_lenient

__all__ = [
    "FORMATS",
    "MODES",
    "NEED_MORE",
    "Block",
    "NeedMore",
    "NotACall",
    "Opener",
    "Problem",
    "RawCall",
    "ScanContext",
    "ScanResult",
    "TextCallFormat",
]

Problem = Literal["unknown_tool", "bad_arguments", "unterminated"]


# -- what a format sees and says


@dataclass(frozen=True, slots=True)
class Opener:
    """Literal text that begins a call; `line_start` openers count only at the start of a line,
    `message_start` ones only before anything else in the message."""

    text: str
    where: Literal["anywhere", "line_start", "message_start"] = "anywhere"


@dataclass(frozen=True, slots=True)
class RawCall:
    """A call as written: `arguments` is the text, the object, or None when absent."""

    name: object
    arguments: object
    repairs: tuple[str, ...] = ()  # made while reading the markup around the arguments


class NeedMore:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_MORE"


NEED_MORE = NeedMore()


@dataclass(frozen=True, slots=True)
class NotACall:
    """Not this format's call: the first `skip` characters are plain text."""

    skip: int = 1


@dataclass(frozen=True, slots=True)
class Block:
    """The format's markup ends at `end` (relative to the opener). Either `calls`, or the
    `problem` that makes the whole block plain text."""

    end: int
    calls: tuple[RawCall, ...] = ()
    problem: Problem | None = None


ScanResult: TypeAlias = NeedMore | NotACall | Block


class _JsonExtent:
    """Where a JSON object or array that starts at `start` ends, found incrementally as text
    arrives. Strings may be double- or single-quoted (the repairs accept both)."""

    __slots__ = ("pos", "stack", "quote", "end")
    _STRUCT = re.compile(r"[\"'{}\[\]]")
    _STOP = {'"': re.compile(r'[\\"]'), "'": re.compile(r"[\\']")}
    _CLOSE = {"{": "}", "[": "]"}

    def __init__(self, start: int) -> None:
        self.pos = start
        self.stack: list[str] = []
        self.quote = ""
        self.end: int | None = None

    def advance(self, text: str) -> int | None:
        """The end (exclusive), None while the text stops before it, -1 if brackets mismatch."""
        if self.end is not None:
            return self.end
        i, n = self.pos, len(text)
        while i < n:
            if self.quote:
                stop = self._STOP[self.quote].search(text, i)
                if stop is None:
                    i = n
                elif stop.group() == "\\":
                    if stop.end() >= n:  # the escaped character has not arrived yet
                        i = stop.start()
                        break
                    i = stop.end() + 1
                else:
                    self.quote = ""
                    i = stop.end()
                continue
            mark = self._STRUCT.search(text, i)
            if mark is None:
                i = n
                continue
            ch, i = mark.group(), mark.end()
            if ch in "\"'":
                self.quote = ch
            elif ch in "{[":
                self.stack.append(ch)
            elif not self.stack or self._CLOSE[self.stack.pop()] != ch:
                self.end = -1
                return -1
            elif not self.stack:
                self.end = i
                return i
        self.pos = i
        return None


class ScanContext:
    """What a format's `scan` may use: the advertised tools, whether the message has ended, and
    incremental searches that remember their progress while the same candidate waits for text."""

    def __init__(self, tools: Mapping[str, dict[str, Any] | None]) -> None:
        self.tools = tools
        self.final = False
        self._json: dict[int, _JsonExtent] = {}
        self._found: dict[tuple[str, int], int] = {}

    def find(self, text: str, marker: str, start: int) -> int:
        """`text.find(marker, start)`, resuming where the last search for it gave up."""
        key = (marker, start)
        at = text.find(marker, self._found.get(key, start))
        self._found[key] = at if at >= 0 else max(start, len(text) - len(marker) + 1)
        return at

    def json_end(self, text: str, start: int) -> int | None:
        """End of the JSON object/array opening at `text[start]`; None: not yet; -1: broken."""
        extent = self._json.get(start)
        if extent is None:
            extent = self._json[start] = _JsonExtent(start)
        return extent.advance(text)

    def unterminated(self, text: str) -> ScanResult:
        """For a call whose end has not arrived: wait, or at the end of the message, give up."""
        return Block(len(text), problem="unterminated") if self.final else NEED_MORE


class TextCallFormat:
    """One way of writing tool calls as text. `scan` gets the text from one of its `openers`
    on (`text.startswith(opener)`) and says whether a call is there, which, and where it ends."""

    name: ClassVar[str]
    openers: ClassVar[tuple[Opener, ...]]

    def scan(self, text: str, opener: str, ctx: ScanContext) -> ScanResult:
        raise NotImplementedError


# -- helpers shared by the formats

_WS = " \t\r\n"
_CALL_KEYS = frozenset(("name", "arguments", "parameters", "id", "type"))


def _skip_ws(text: str, i: int) -> int:
    n = len(text)
    while i < n and text[i] in _WS:
        i += 1
    return i


_ARGUMENT_KEYS = ("arguments", "parameters")


def _call_from_object(
    obj: object, *, require_arguments: bool, keys: tuple[str, ...] = _ARGUMENT_KEYS
) -> RawCall | None:
    """`{"name": ..., "arguments" | "parameters": ...}` (the argument key one of `keys`) as a
    RawCall; None for anything else (other keys would be information a call cannot carry)."""
    if not isinstance(obj, dict) or "name" not in obj or not set(obj) <= _CALL_KEYS:
        return None
    present = [key for key in _ARGUMENT_KEYS if key in obj]
    if len(present) > 1 or (present and present[0] not in keys) or (require_arguments and not present):
        return None
    return RawCall(obj["name"], obj[present[0]] if present else None)


def _calls_from_json(
    text: str, *, require_arguments: bool, keys: tuple[str, ...] = _ARGUMENT_KEYS
) -> tuple[RawCall, ...] | None:
    """A call object or a non-empty array of them, leniently parsed; None otherwise."""
    try:
        value, repairs = load_json_lenient(text)
    except ValueError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        call = _call_from_object(item, require_arguments=require_arguments, keys=keys)
        if call is None:
            return None
        calls.append(replace(call, repairs=repairs))
    return tuple(calls) or None


def _partial(text: str, i: int, marker: str) -> bool:
    """`text[i:]` is a proper beginning of `marker` (the marker may still be on its way)."""
    rest = text[i:]
    return len(rest) < len(marker) and marker.startswith(rest)


# -- the formats


class Qwen3CoderFormat(TextCallFormat):
    name = "qwen3_coder"
    openers = (Opener("<tool_call>"), Opener("<function="))
    _FUNCTION, _PARAMETER = "<function=", "<parameter="
    _END_FUNCTION, _END_PARAMETER, _END_CALL = "</function>", "</parameter>", "</tool_call>"

    def scan(self, text: str, opener: str, ctx: ScanContext) -> ScanResult:
        if opener == "<tool_call>":
            i = _skip_ws(text, len(opener))
            if _partial(text, i, self._FUNCTION):
                return NotACall() if ctx.final else NEED_MORE
            if not text.startswith(self._FUNCTION, i):
                return NotACall()  # a JSON body: Hermes
            close = ctx.find(text, self._END_CALL, i)
            if close < 0:
                return ctx.unterminated(text)
            body, end = text[i:close], close + len(self._END_CALL)
        else:  # bare <function=...>...</function>, maybe followed by a stray </tool_call>
            close = ctx.find(text, self._END_FUNCTION, 0)
            if close < 0:
                return ctx.unterminated(text)
            body = text[: close + len(self._END_FUNCTION)]
            end = len(body)
            k = _skip_ws(text, end)
            if k == len(text) or _partial(text, k, self._END_CALL):
                if not ctx.final:
                    return NEED_MORE
            elif text.startswith(self._END_CALL, k):
                end = k + len(self._END_CALL)
        calls = self._functions(body, ctx)
        return Block(end, calls) if calls else Block(end, problem="bad_arguments")

    def _functions(self, body: str, ctx: ScanContext) -> tuple[RawCall, ...] | None:
        calls: list[RawCall] = []
        i = _skip_ws(body, 0)
        while i < len(body):
            if not body.startswith(self._FUNCTION, i):
                return None
            head_end = body.find(">", i)
            close = body.find(self._END_FUNCTION, i)
            if head_end < 0 or close < head_end:
                return None
            name = body[i + len(self._FUNCTION) : head_end].strip()
            schema = ctx.tools.get(name)
            properties = schema.get("properties") if isinstance(schema, dict) else None
            parsed = self._parameters(
                body[head_end + 1 : close], properties if isinstance(properties, dict) else {}
            )
            if parsed is None:
                return None
            calls.append(RawCall(name, json.dumps(parsed[0], ensure_ascii=False), parsed[1]))
            i = _skip_ws(body, close + len(self._END_FUNCTION))
        return tuple(calls) or None

    def _parameters(
        self, text: str, properties: dict[str, Any]
    ) -> tuple[dict[str, Any], tuple[str, ...]] | None:
        values: dict[str, Any] = {}
        repairs: list[str] = []
        i = _skip_ws(text, 0)
        while i < len(text):
            if not text.startswith(self._PARAMETER, i):
                return None  # free text inside <function>: not this markup
            head_end = text.find(">", i)
            close = text.find(self._END_PARAMETER, i)
            if head_end < 0 or close < head_end:
                return None
            key = text[i + len(self._PARAMETER) : head_end].strip()
            if not key or key in values:
                return None
            value = text[head_end + 1 : close]
            value = value[1:] if value.startswith("\n") else value
            value = value[:-1] if value.endswith("\n") else value
            values[key] = _typed_value(value, properties.get(key), repairs)
            i = _skip_ws(text, close + len(self._END_PARAMETER))
        return values, tuple(repairs)


_JSON_TYPE_OF = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    dict: "object",
    list: "array",
    type(None): "null",
}


def _declared_types(schema: object) -> set[str]:
    """The JSON types a property schema allows, as far as `type`, `anyOf`/`oneOf`, `enum` and
    `const` say; empty when they say nothing."""
    if not isinstance(schema, dict):
        return set()
    declared = schema.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return {t for t in declared if isinstance(t, str)}
    types: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for member in schema.get(key) or ():
            types |= _declared_types(member)
    samples = list(schema.get("enum") or ()) + ([schema["const"]] if "const" in schema else [])
    for sample in samples:
        types.add(_JSON_TYPE_OF.get(type(sample), "string"))
    return types


def _typed_value(raw: str, schema: object, repairs: list[str]) -> Any:
    """A Qwen XML parameter value: the text itself unless the schema wants a non-string."""
    types = _declared_types(schema)
    if not types or "string" in types:
        return raw
    try:
        value, fixes = load_json_lenient(raw)
    except ValueError:
        return raw  # the schema check will refuse it: never guess
    repairs.extend(kind for kind in fixes if kind not in repairs)
    return value


class HermesFormat(TextCallFormat):
    name = "hermes"
    openers = (Opener("<tool_call>"),)
    _END = "</tool_call>"

    def scan(self, text: str, opener: str, ctx: ScanContext) -> ScanResult:
        i = _skip_ws(text, len(opener))
        if i == len(text):
            return ctx.unterminated(text)
        if text[i] not in "{[`":  # the tag named in prose, not a JSON body
            return NotACall()
        close = ctx.find(text, self._END, i)
        if close < 0:
            return ctx.unterminated(text)
        end = close + len(self._END)
        calls = _calls_from_json(text[i:close], require_arguments=False)
        return Block(end, calls) if calls else Block(end, problem="bad_arguments")


class MistralFormat(TextCallFormat):
    name = "mistral"
    openers = (Opener("[TOOL_CALLS]"),)
    _NAME = re.compile(r"[A-Za-z0-9_.\-]+")
    _CALL_ID = re.compile(r"[A-Za-z0-9]*")
    _CALL_ID_MARK, _ARGS_MARK = "[CALL_ID]", "[ARGS]"

    def scan(self, text: str, opener: str, ctx: ScanContext) -> ScanResult:
        i = _skip_ws(text, len(opener))
        if i == len(text):
            return ctx.unterminated(text)
        if text[i] in "[{":  # v3: a JSON array of calls (or a single call object)
            end = ctx.json_end(text, i)
            if end is None:
                return ctx.unterminated(text)
            if end < 0:
                return NotACall()
            calls = _calls_from_json(text[i:end], require_arguments=False)
            return Block(end, calls) if calls else Block(end, problem="bad_arguments")
        name = self._NAME.match(text, i)
        if name is None:  # the marker named in prose
            return NotACall()
        k = name.end()
        if text.startswith(self._CALL_ID_MARK, k):
            call_id = self._CALL_ID.match(text, k + len(self._CALL_ID_MARK))
            assert call_id is not None  # the pattern matches the empty string
            k = call_id.end()
        if text.startswith(self._ARGS_MARK, k):
            k += len(self._ARGS_MARK)
        elif k == len(text) or _partial(text, k, self._CALL_ID_MARK) or _partial(text, k, self._ARGS_MARK):
            return ctx.unterminated(text)
        k = _skip_ws(text, k)
        if k == len(text):
            return ctx.unterminated(text)
        if text[k] != "{":
            return NotACall()
        end = ctx.json_end(text, k)
        if end is None:
            return ctx.unterminated(text)
        if end < 0:
            return NotACall()
        return Block(end, (RawCall(name.group(), text[k:end]),))


class DeepSeekFormat(TextCallFormat):
    name = "deepseek"
    # The first is what the models write; llama.cpp also accepts the others.
    openers = tuple(
        Opener(t)
        for t in (
            "<｜tool▁calls▁begin｜>",
            "<｜tool_calls_begin｜>",
            "<｜tool calls begin｜>",
            "<｜tool\\_calls\\_begin｜>",
            "<｜tool▁calls｜>",
        )
    )
    _END = "<｜tool▁calls▁end｜>"
    _CALL, _SEP, _END_CALL = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
    _FENCED = re.compile(r"```(?:json)?[ \t]*\n?(?P<json>.*?)\n?```", re.DOTALL)

    def scan(self, text: str, opener: str, ctx: ScanContext) -> ScanResult:
        i = _skip_ws(text, len(opener))
        if i == len(text) or _partial(text, i, self._CALL):
            return ctx.unterminated(text)
        if not text.startswith(self._CALL, i):
            return NotACall()
        close = ctx.find(text, self._END, i)
        if close < 0:
            return ctx.unterminated(text)
        end = close + len(self._END)
        calls = self._calls(text[i:close])
        return Block(end, calls) if calls else Block(end, problem="bad_arguments")

    def _calls(self, body: str) -> tuple[RawCall, ...] | None:
        calls: list[RawCall] = []
        i = _skip_ws(body, 0)
        while i < len(body):
            if not body.startswith(self._CALL, i):
                return None
            close = body.find(self._END_CALL, i)
            if close < 0:
                return None
            head, sep, arguments = body[i + len(self._CALL) : close].partition(self._SEP)
            if not sep:
                return None
            name = head.strip()
            if name == "function" and "\n" in arguments.strip(" \t"):
                # V3/R1: type, separator, name, newline, the arguments in a json fence
                name, _, arguments = arguments.strip(" \t").partition("\n")
                fenced = self._FENCED.fullmatch(arguments.strip())
                if fenced:
                    arguments = fenced.group("json")
            calls.append(RawCall(name.strip(), arguments))
            i = _skip_ws(body, close + len(self._END_CALL))
        return tuple(calls) or None


def _json_sequence(text: str, start: int, ctx: ScanContext, *, whole_message: bool) -> ScanResult:
    """Llama call objects from `text[start]`, joined by `;`. With `whole_message` (no tag), only
    whitespace may follow, the arguments must be under Llama's own `parameters` key, and
    anything unexpected means plain text; without, the markup ends after the last object and
    what follows is ordinary text."""
    calls: list[RawCall] = []
    i = start
    while True:
        end = ctx.json_end(text, i)
        if end is None:
            return ctx.unterminated(text)
        if end < 0:
            return NotACall() if whole_message else Block(i, problem="bad_arguments")
        found = (
            _calls_from_json(text[i:end], require_arguments=True, keys=("parameters",))
            if whole_message
            else _calls_from_json(text[i:end], require_arguments=False)
        )
        if found is None:
            return NotACall(end) if whole_message else Block(end, problem="bad_arguments")
        calls.extend(found)
        k = _skip_ws(text, end)
        if k == len(text):
            return Block(len(text), tuple(calls)) if ctx.final else NEED_MORE
        if text[k] == ";":
            i = _skip_ws(text, k + 1)
            if i == len(text):
                return Block(len(text), tuple(calls)) if ctx.final else NEED_MORE
            if text[i] == "{":
                continue
            return NotACall(k) if whole_message else Block(k + 1, tuple(calls))
        return NotACall(k) if whole_message else Block(end, tuple(calls))


class LlamaFormat(TextCallFormat):
    name = "llama"
    openers = (Opener("<|python_tag|>"), Opener("{", "message_start"))

    def scan(self, text: str, opener: str, ctx: ScanContext) -> ScanResult:
        if opener == "{":
            i = _skip_ws(text, 1)
            if i == len(text):
                return NotACall() if ctx.final else NEED_MORE
            if text[i] not in "\"'":
                return NotACall()
            return _json_sequence(text, 0, ctx, whole_message=True)
        i = _skip_ws(text, len(opener))
        if i == len(text):
            return ctx.unterminated(text)
        if text[i] != "{":  # a built-in tool (`brave_search.call(...)`, code): not ours
            return NotACall()
        return _json_sequence(text, i, ctx, whole_message=False)


class JsonFormat(TextCallFormat):
    name = "json"
    openers = (Opener("```", "line_start"), Opener("{", "line_start"), Opener("[", "line_start"))
    _FENCE_HEAD = re.compile(r"```([A-Za-z]*)[ \t]*")
    _FENCE = "```"

    def scan(self, text: str, opener: str, ctx: ScanContext) -> ScanResult:
        if opener == self._FENCE:
            head = self._FENCE_HEAD.match(text)
            assert head is not None
            language, i = head.group(1).lower(), head.end()
            if language not in ("", "json"):
                return (
                    NEED_MORE
                    if i == len(text) and "json".startswith(language) and not ctx.final
                    else NotACall()
                )
            if i == len(text):
                return NotACall() if ctx.final else NEED_MORE
            if text[i] != "\n":
                return NotACall()
            i = _skip_ws(text, i)
            if i == len(text):
                return NotACall() if ctx.final else NEED_MORE
        else:
            i = 0
        if text[i] not in "{[":
            return NotACall()
        k = _skip_ws(text, i + 1)
        if k == len(text):
            return NotACall() if ctx.final else NEED_MORE
        if text[k] not in ("\"'" if text[i] == "{" else "{"):
            return NotACall()
        end = ctx.json_end(text, i)
        if end is None:
            return ctx.unterminated(text)
        if end < 0:
            return NotACall()
        calls = _calls_from_json(text[i:end], require_arguments=True)
        if calls is None:
            return NotACall(end)
        tail = _skip_ws(text, end)
        if opener == self._FENCE:
            if tail == len(text) or _partial(text, tail, self._FENCE):
                return NotACall(end) if ctx.final else NEED_MORE
            if not text.startswith(self._FENCE, tail):
                return NotACall(end)
            tail = _skip_ws(text, tail + len(self._FENCE))
        if tail < len(text):
            return NotACall(tail)  # more text follows: an example, not a call
        return Block(len(text), calls) if ctx.final else NEED_MORE


# Order matters where openers are shared: Qwen3-Coder looks at a <tool_call> body before Hermes
# does, Llama at a message-opening `{` before the generic JSON format.
FORMATS: tuple[TextCallFormat, ...] = (
    Qwen3CoderFormat(),
    HermesFormat(),
    MistralFormat(),
    DeepSeekFormat(),
    LlamaFormat(),
    JsonFormat(),
)
MODES: tuple[str, ...] = ("auto", "off", *(f.name for f in FORMATS))
