"""Check a custom tool's input against the Lark grammar the client advertised. Pure and synchronous.

Codex declares `apply_patch` as a custom tool whose input must match a Lark grammar
(`format: {"type": "grammar", "syntax": "lark", "definition": ...}`). OpenAI constrains the
model's sampling to that grammar; a Chat Completions model is not constrained and slips: it fences
the patch, wraps it in JSON, forgets the envelope or writes a unified diff. `check_custom_input`
parses the input with the client's own grammar (via `lark`) and, when it does not parse, tries a
few repairs, keeping one only if its result then parses. Otherwise the input goes on unchanged
and Codex reports the error to the model, which retries.

Compiling the client's grammar with `lark`:

- Codex's grammar uses zero-width terminals (`/(.*)/` for a line that may be empty), which
  OpenAI's grammar engine allows and `lark`'s lexers refuse. Such a terminal `/R*/` is rewritten
  to the optional non-empty `/R+/?`, which accepts the same strings. A zero-width regexp not of
  that shape is left alone (the grammar then does not compile and the input is `unchecked`).
- LALR with the contextual lexer first: linear time, and any parse it finds is a real derivation.
  It is used only when `lark` finds no shift/reduce or reduce/reduce conflict (strict mode), since
  a conflict could make it reject valid input. Otherwise Earley, which is exact but slow, so it
  checks shorter inputs only (`EARLEY_MAX_CHARS`).
- Compiled grammars are cached by their text in a small LRU (Codex sends the same grammar with
  every request).

Repairs (each named in `InputCheck.repairs` and counted as `patch.repaired.<kind>`): the wrappers
`heredoc` (`<<'EOF' … EOF`, as gpt-4.1 writes for a shell), `fence` (a Markdown code fence
around the whole input) and `json` (`{"input": "…"}`, `{"patch": …}`, a JSON string), peeled in
any order and nesting; then, on what is inside, `newline` (CRLF, blank lines or whitespace around
the patch, the final newline), `envelope` (a missing `*** Begin Patch` / `*** End Patch` line) and
`unified_diff` (a `---`/`+++`/`@@` diff turned into the apply_patch format when every part maps
one to one: new files, deleted files, edits and renames with hunks; line numbers and hunk
section headings are dropped, as are `\\ No newline at end of file` lines).

A patch cut off by the token limit also lacks its `*** End Patch`; do not check the input of a
tool call that was cut short, or the `envelope` repair would make half a patch applicable.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import orjson

# lark (and the `regex` module it loads) is imported when a grammar is first compiled: ~8 MB
# that a gateway whose models never call a grammar tool does not hold.
if TYPE_CHECKING:
    import lark
    from lark.exceptions import UnexpectedInput

__all__ = [
    "EARLEY_MAX_CHARS",
    "LALR_MAX_CHARS",
    "InputCheck",
    "InputOutcome",
    "check_custom_input",
    "unified_diff_to_patch",
]

InputOutcome = Literal["valid", "repaired", "invalid", "unchecked"]

LALR_MAX_CHARS = 256 * 1024  # about half a second of parsing
EARLEY_MAX_CHARS = 8 * 1024  # Earley is some thirty times slower
_GRAMMAR_CACHE_SIZE = 16

BEGIN_PATCH = "*** Begin Patch"
END_PATCH = "*** End Patch"


@dataclass(frozen=True, slots=True)
class InputCheck:
    """The input to pass on (`text`: repaired, or the original) and what the check found.

    `detail` is empty for `valid`; the parse error of the original input for `repaired` and
    `invalid`; the reason for `unchecked`.
    """

    text: str
    outcome: InputOutcome
    repairs: tuple[str, ...] = ()
    detail: str = ""


def check_custom_input(text: str, fmt: Mapping[str, Any], counts: Counter[str] | None = None) -> InputCheck:
    """Check `text` against the custom tool format `fmt`; repair it when that makes it parse."""
    result = _check(text, fmt)
    if counts is not None:
        counts[f"patch.{result.outcome}"] += 1
        for kind in result.repairs:
            counts[f"patch.repaired.{kind}"] += 1
    return result


def _check(text: str, fmt: Mapping[str, Any]) -> InputCheck:
    definition = _lark_definition(fmt)
    if isinstance(definition, _Unchecked):
        return InputCheck(text, "unchecked", detail=definition.reason)
    grammar = _compile(definition)
    if isinstance(grammar, _Unchecked):
        return InputCheck(text, "unchecked", detail=grammar.reason)
    if len(text) > grammar.max_chars:
        return InputCheck(text, "unchecked", detail=f"input too long to check ({len(text)} characters)")
    error = grammar.error(text)
    if error is None:
        return InputCheck(text, "valid")
    for repairs, candidate in _candidates(text):
        if len(candidate) <= grammar.max_chars and grammar.error(candidate) is None:
            return InputCheck(candidate, "repaired", repairs, error)
    return InputCheck(text, "invalid", detail=error)


@dataclass(frozen=True, slots=True)
class _Unchecked:
    reason: str


def _lark_definition(fmt: Mapping[str, Any]) -> str | _Unchecked:
    kind = fmt.get("type")
    if kind != "grammar":
        return _Unchecked(f"format type {kind!r} has no grammar")
    # The Responses API flattens the grammar into the format; early SDKs nested it.
    nested = fmt.get("grammar")
    spec: Mapping[str, Any] = nested if isinstance(nested, Mapping) else fmt
    syntax = spec.get("syntax")
    definition = spec.get("definition")
    if syntax != "lark":
        return _Unchecked(f"grammar syntax {syntax!r} is not checked")
    if not isinstance(definition, str):
        return _Unchecked("grammar has no definition")
    return definition


# -- compiling the client's grammar ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Grammar:
    parser: lark.Lark
    max_chars: int

    def error(self, text: str) -> str | None:
        """None when `text` parses, else a short description of the first error."""
        from lark.exceptions import LarkError, UnexpectedInput

        try:
            self.parser.parse(text)
        except UnexpectedInput as exc:
            return _describe(exc)
        except (LarkError, RecursionError) as exc:
            return f"{type(exc).__name__}: {_first_line(str(exc))}"
        return None


@functools.lru_cache(maxsize=_GRAMMAR_CACHE_SIZE)
def _compile(definition: str) -> _Grammar | _Unchecked:
    import lark
    from lark.exceptions import GrammarError, LexError

    source = _nonempty_regexps(definition)
    # The grammar is the client's text: any failure to build it means "cannot check".
    try:
        return _Grammar(lark.Lark(source, parser="lalr", lexer="contextual", strict=True), LALR_MAX_CHARS)
    except GrammarError:
        pass  # LALR conflicts (or a broken grammar, which Earley will report)
    except LexError:
        # Strict mode's lexer checks need the optional `interegular`; the LALR tables were
        # built without conflicts by then, which is what matters here.
        try:
            return _Grammar(lark.Lark(source, parser="lalr", lexer="contextual"), LALR_MAX_CHARS)
        except Exception:
            pass  # Earley below
    except Exception:
        pass  # Earley below
    try:
        return _Grammar(lark.Lark(source, parser="earley", lexer="dynamic"), EARLEY_MAX_CHARS)
    except Exception as exc:
        return _Unchecked(f"grammar does not compile: {type(exc).__name__}: {_first_line(str(exc))}")


_GRAMMAR_TOKEN = re.compile(
    r"""(?P<string>"(?:\\.|[^"\\\n])*"i?)
      | (?P<comment>(?://|\#)[^\n]*)
      | (?P<regexp>/(?!/)(?:\\.|[^/\\\n])+/(?P<flags>[imslux]*))(?P<op>[ \t]*[?*+])?""",
    re.VERBOSE,
)
# A single atom repeated with `*`, optionally in one group: `.*`, `(.*)`, `[^\n]*?`, `(?:ab)*`.
_STAR = re.compile(
    r"(?P<open>\((?:\?:)?)?"
    r"(?P<atom>\\.|\[(?:\\.|[^\]\\])+\]|\((?:\?:)?(?:\\.|[^()\\])+\)|\.|[^\\()\[\]{}*+?|^$])"
    r"\*(?P<lazy>\??)(?P<close>\))?"
)
_RE_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": 0, "l": 0}


def _nonempty_regexps(definition: str) -> str:
    """Rewrite zero-width regexps `/R*/` to `/R+/?` (same strings, never an empty token)."""

    def rewrite(match: re.Match[str]) -> str:
        if match["regexp"] is None:
            return match[0]
        body = match["regexp"][1 : -1 - len(match["flags"])]
        flags = 0
        for flag in match["flags"]:
            flags |= _RE_FLAGS[flag]
        try:
            zero_width = re.fullmatch(body, "", flags) is not None
        except re.error:
            return match[0]
        star = _STAR.fullmatch(body)
        if not zero_width or star is None or bool(star["open"]) != bool(star["close"]):
            return match[0]
        plus = f"{star['open'] or ''}{star['atom']}+{star['lazy']}{star['close'] or ''}"
        if re.fullmatch(plus, "", flags) is not None:
            return match[0]  # `(a*)*`: the atom itself may be empty
        op = (match["op"] or "").strip()
        return f"/{plus}/{match['flags']}{'*' if op in ('*', '+') else '?'}"

    return _GRAMMAR_TOKEN.sub(rewrite, definition)


def _describe(exc: UnexpectedInput) -> str:
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedToken

    where = f"line {exc.line}, column {exc.column}"
    if isinstance(exc, UnexpectedCharacters):
        return f"unexpected {exc.char!r} at {where}"
    if isinstance(exc, UnexpectedEOF) or (isinstance(exc, UnexpectedToken) and exc.token.type == "$END"):
        return "unexpected end of input"
    if isinstance(exc, UnexpectedToken):
        return f"unexpected {_short(str(exc.token))!r} at {where}"
    return _first_line(str(exc))


def _first_line(text: str) -> str:
    return _short(text.strip().split("\n", 1)[0])


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# -- repairs -----------------------------------------------------------------------------------


def _candidates(text: str) -> Iterator[tuple[tuple[str, ...], str]]:
    """Repaired texts to try, in order, each with the repairs that made it."""
    for kinds, inner in _unwrapped(text):
        if kinds:
            yield kinds, inner
        for kind, fix in _FIXES:
            for candidate in fix(inner):
                if candidate != inner:
                    yield (*kinds, kind), candidate


def _unwrapped(text: str) -> list[tuple[tuple[str, ...], str]]:
    """The text and what is left after peeling each wrapper in turn (at most four)."""
    layers: list[tuple[tuple[str, ...], str]] = [((), text)]
    kinds: tuple[str, ...] = ()
    for _ in range(4):
        for kind, unwrap in _WRAPPERS:
            inner = unwrap(text)
            if inner is not None and inner != text:
                text, kinds = inner, (*kinds, kind)
                layers.append((kinds, text))
                break
        else:
            break
    return layers


_FENCE = re.compile(
    r"\A\s*(?P<fence>`{3,}|~{3,})[^\n`]*\n(?P<body>.*?\n)?[ \t]*(?P=fence)\s*\Z",
    re.DOTALL,
)


def _strip_fence(text: str) -> str | None:
    match = _FENCE.match(text)
    return None if match is None else match["body"] or ""


_HEREDOC = re.compile(r"(?:apply_patch\s+)?<<-?\s*(['\"]?)(?P<tag>\w+)\1")


def _strip_heredoc(text: str) -> str | None:
    lines = text.strip().split("\n")
    if len(lines) < 3:
        return None
    match = _HEREDOC.fullmatch(lines[0].strip())
    if match is None or lines[-1].strip() != match["tag"]:
        return None
    return "\n".join(lines[1:-1]) + "\n"


_JSON_KEYS = ("input", "patch", "diff", "content", "text", "code", "arguments")


def _unwrap_json(text: str) -> str | None:
    stripped = text.strip()
    if not stripped.startswith(("{", '"')):
        return None
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError:
        return None
    return _string_in(value, depth=3)


def _string_in(value: object, depth: int) -> str | None:
    """The patch inside a decoded JSON value: the string itself, the string under a usual key, or
    the only field of an object."""
    if isinstance(value, str):
        return value
    if not isinstance(value, dict) or depth == 0:
        return None
    for key in _JSON_KEYS:
        if key in value and (found := _string_in(value[key], depth - 1)) is not None:
            return found
    if len(value) == 1:
        return _string_in(next(iter(value.values())), depth - 1)
    return None


_WRAPPERS: tuple[tuple[str, Callable[[str], str | None]], ...] = (
    ("heredoc", _strip_heredoc),
    ("fence", _strip_fence),
    ("json", _unwrap_json),
)


def _fix_newlines(text: str) -> list[str]:
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return []
    lines[0] = lines[0].lstrip()
    lines[-1] = lines[-1].rstrip()
    body = "\n".join(lines)
    return [body + "\n", body]


def _fix_envelope(text: str) -> list[str]:
    lines = text.split("\n")
    # Only empty lines are dropped at the ends: a line holding a space is a context line.
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    if not lines:
        return []
    has_begin = lines[0].strip() == BEGIN_PATCH
    has_end = len(lines) > int(has_begin) and lines[-1].strip() == END_PATCH
    if has_begin and has_end:
        return []
    if has_begin:
        lines = lines[1:]
    if has_end:
        lines = lines[:-1]
    return ["\n".join([BEGIN_PATCH, *lines, END_PATCH]) + "\n"]


def _fix_unified_diff(text: str) -> list[str]:
    converted = unified_diff_to_patch(text)
    return [] if converted is None else [converted]


_FIXES: tuple[tuple[str, Callable[[str], list[str]]], ...] = (
    ("newline", _fix_newlines),
    ("envelope", _fix_envelope),
    ("unified_diff", _fix_unified_diff),
)


# -- unified diff -> apply_patch ---------------------------------------------------------------

_HUNK_HEADER = re.compile(r"@@ -\d+(?:,(?P<old>\d+))? \+\d+(?:,(?P<new>\d+))? @@")
_GIT_METADATA = (
    "index ",
    "new file mode 100644",
    "deleted file mode ",
    "similarity index ",
    "dissimilarity index ",
    "rename from ",
    "rename to ",
)
# Also git metadata, but apply_patch cannot say it: mode changes, executable new files, copies
# (as an update with a move, a copy would delete its source).
_GIT_UNMAPPABLE = ("old mode ", "new mode ", "new file mode ", "copy from ", "copy to ")
_DEV_NULL = "/dev/null"


@dataclass(slots=True)
class _FileDiff:
    old: str  # _DEV_NULL for a new file
    new: str  # _DEV_NULL for a deleted file
    hunks: list[list[str]]


def unified_diff_to_patch(text: str) -> str | None:
    """The apply_patch text for a unified diff (git's or plain), or None when the diff holds
    anything that does not map one to one (prose, binary files, pure renames, copies, mode
    changes, empty new files, context lines in a new or deleted file)."""
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    # A diff inside the apply_patch envelope.
    if lines and lines[0].strip() == BEGIN_PATCH:
        lines.pop(0)
    if lines and lines[-1].strip() == END_PATCH:
        lines.pop()
    files = _parse_unified(lines)
    if not files:
        return None
    out = [BEGIN_PATCH]
    for diff in files:
        section = _file_section(diff)
        if section is None:
            return None
        out += section
    out.append(END_PATCH)
    return "\n".join(out) + "\n"


def _is_file_header(lines: Sequence[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _parse_unified(lines: Sequence[str]) -> list[_FileDiff] | None:
    files: list[_FileDiff] = []
    git_block_open = False  # a `diff --git` line not yet followed by its ---/+++ lines
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff "):
            if git_block_open:
                return None  # a rename, mode change or empty file: nothing to map it to
            git_block_open = True
            i += 1
        elif not line.strip() or line.startswith(_GIT_METADATA):
            i += 1
        elif line.startswith(_GIT_UNMAPPABLE):
            return None
        elif _is_file_header(lines, i):
            old, new = _diff_paths(line[4:], lines[i + 1][4:])
            if old is None or new is None:
                return None
            i += 2
            hunks: list[list[str]] = []
            while i < len(lines) and (header := _HUNK_HEADER.match(lines[i])):
                hunk, i = _hunk_lines(lines, i + 1, header)
                hunks.append(hunk)
            if not hunks:
                return None
            files.append(_FileDiff(old, new, hunks))
            git_block_open = False
        else:
            return None  # prose, "Binary files … differ", a hunk without file headers …
    return None if git_block_open else files


def _hunk_lines(lines: Sequence[str], i: int, header: re.Match[str]) -> tuple[list[str], int]:
    """The lines of the hunk starting at `i`, and the index after it.

    The header's counts only settle whether `--- x` + `+++ y` are two changed lines or the next
    file's header: models often get the counts wrong, so the hunk otherwise ends where its lines
    stop. An empty line (a context line whose space was stripped) counts as context when more
    hunk lines follow it.
    """
    old_left = int(header["old"] or 1)
    new_left = int(header["new"] or 1)
    hunk: list[str] = []
    while i < len(lines):
        line = lines[i]
        if line.startswith("\\"):  # "\ No newline at end of file"
            i += 1
            continue
        if not line:
            j = i
            while j < len(lines) and not lines[j]:
                j += 1
            if j == len(lines) or not lines[j].startswith((" ", "+", "-")) or _is_file_header(lines, j):
                break
            hunk += [" "] * (j - i)
            old_left -= j - i
            new_left -= j - i
            i = j
            continue
        if not line.startswith((" ", "+", "-")):
            break
        if _is_file_header(lines, i) and (old_left <= 0 or new_left <= 0):
            break
        hunk.append(line)
        old_left -= int(line[0] in " -")
        new_left -= int(line[0] in " +")
        i += 1
    return hunk, i


def _diff_paths(old_field: str, new_field: str) -> tuple[str | None, str | None]:
    old, new = _diff_path(old_field), _diff_path(new_field)
    if old is None or new is None or (old == _DEV_NULL and new == _DEV_NULL):
        return None, None
    # git's a/ and b/ prefixes
    if (old == _DEV_NULL or old.startswith("a/")) and (new == _DEV_NULL or new.startswith("b/")):
        old = old if old == _DEV_NULL else old[2:]
        new = new if new == _DEV_NULL else new[2:]
    return old, new


def _diff_path(field: str) -> str | None:
    path = field.split("\t", 1)[0].strip()  # a timestamp may follow a tab
    if path.startswith('"'):
        if not path.endswith('"') or "\\" in path or len(path) < 3:
            return None  # git's C-quoted names with escapes: not worth guessing
        path = path[1:-1]
    return path or None


def _file_section(diff: _FileDiff) -> list[str] | None:
    body = [line for hunk in diff.hunks for line in hunk]
    if diff.old == _DEV_NULL:
        if not body or any(not line.startswith("+") for line in body):
            return None
        return [f"*** Add File: {diff.new}", *body]
    if diff.new == _DEV_NULL:
        if any(not line.startswith("-") for line in body):
            return None
        return [f"*** Delete File: {diff.old}"]
    if not any(line.startswith(("+", "-")) for line in body):
        return None  # nothing changes; apply_patch rejects an update without changes
    section = [f"*** Update File: {diff.old}"]
    if diff.new != diff.old:
        section.append(f"*** Move to: {diff.new}")
    for hunk in diff.hunks:
        section += ["@@", *hunk]
    return section
