"""check_custom_input against Codex's real apply_patch grammar (tests/fixtures/apply_patch.lark):
valid patches pass, the usual slips are repaired into exactly the patch that was meant, anything
else goes on unchanged."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import lark
import orjson
import pytest

from codexgate.translate.open_models import patch_grammar
from codexgate.translate.open_models.patch_grammar import (
    EARLEY_MAX_CHARS,
    LALR_MAX_CHARS,
    InputCheck,
    check_custom_input,
    unified_diff_to_patch,
)

GRAMMAR = (Path(__file__).resolve().parents[2] / "fixtures" / "apply_patch.lark").read_text(encoding="utf-8")
FMT: dict[str, Any] = {"type": "grammar", "syntax": "lark", "definition": GRAMMAR}
# What Codex 0.169 advertises when environments are enabled (see fixtures/apply_patch.README.md).
ENV_GRAMMAR = GRAMMAR.replace(
    "start: begin_patch hunk+ end_patch",
    'start: begin_patch environment_id? hunk+ end_patch\nenvironment_id: "*** Environment ID: " filename LF',
)
ENV_FMT: dict[str, Any] = {**FMT, "definition": ENV_GRAMMAR}


def check(text: str, fmt: dict[str, Any] = FMT) -> InputCheck:
    return check_custom_input(text, fmt)


def assert_parses(text: str, fmt: dict[str, Any] = FMT) -> None:
    assert check(text, fmt).outcome == "valid", check(text, fmt)


def test_fixture_is_the_grammar_codex_advertises() -> None:
    assert GRAMMAR.startswith("start: begin_patch hunk+ end_patch\n")
    assert GRAMMAR.endswith("%import common.LF\n")
    assert 'change_line: ("+" | "-" | " ") /(.*)/ LF' in GRAMMAR


# -- valid patches ----------------------------------------------------------------------------

ADD = "*** Begin Patch\n*** Add File: hello.txt\n+Hello world\n+\n+bye\n*** End Patch\n"
UPDATE = (
    "*** Begin Patch\n"
    "*** Update File: src/app.py\n"
    "@@ def greet():\n"
    '-    print("Hi")\n'
    '+    print("Hello, world!")\n'
    " \n"
    "@@\n"
    " x = 1\n"
    "-y = 2\n"
    "*** End of File\n"
    "*** End Patch"
)
DELETE = "*** Begin Patch\n*** Delete File: obsolete.txt\n*** End Patch\n"
MOVE = "*** Begin Patch\n*** Update File: src/a.py\n*** Move to: src/b.py\n@@\n-old\n+new\n*** End Patch\n"
MULTI = (
    "*** Begin Patch\n"
    "*** Add File: hello.txt\n"
    "+Hello world\n"
    "*** Update File: src/app.py\n"
    "*** Move to: src/main.py\n"
    "@@ def greet():\n"
    '-print("Hi")\n'
    '+print("Hello, world!")\n'
    "*** Delete File: obsolete.txt\n"
    "*** End Patch\n"
)


@pytest.mark.parametrize(
    "patch", [ADD, UPDATE, DELETE, MOVE, MULTI], ids=["add", "update", "delete", "move", "multi"]
)
def test_valid_patches_pass_unchanged(patch: str) -> None:
    counts: Counter[str] = Counter()
    result = check_custom_input(patch, FMT, counts)
    assert result == InputCheck(patch, "valid")
    assert counts == Counter({"patch.valid": 1})


def test_environment_variant_of_the_grammar() -> None:
    patch = "*** Begin Patch\n*** Environment ID: remote-1\n*** Delete File: x\n*** End Patch\n"
    assert check(patch, ENV_FMT).outcome == "valid"
    assert check(patch).outcome == "invalid"  # the plain grammar has no environment line
    assert check("*** Delete File: x\n", ENV_FMT).text == DELETE.replace("obsolete.txt", "x")


def test_large_patch_is_checked() -> None:
    body = "".join(f" line {i}\n-old {i}\n+new {i}\n" for i in range(3000))
    assert check(f"*** Begin Patch\n*** Update File: big.txt\n@@\n{body}*** End Patch\n").outcome == "valid"


# -- repairs ----------------------------------------------------------------------------------

REPAIRS: list[tuple[str, str, tuple[str, ...], str]] = [
    ("fence-patch", f"```patch\n{ADD}```", ("fence",), ADD),
    ("fence-diff-lang-and-spaces", f"\n```diff\n{DELETE}```\n", ("fence",), DELETE),
    ("fence-bare", f"```\n{MULTI}```", ("fence",), MULTI),
    ("fence-tilde", f"~~~\n{MOVE}~~~", ("fence",), MOVE),
    (
        "fence-keeps-inner-fences",
        "```patch\n*** Begin Patch\n*** Add File: README.md\n+```sh\n+make\n+```\n*** End Patch\n```",
        ("fence",),
        "*** Begin Patch\n*** Add File: README.md\n+```sh\n+make\n+```\n*** End Patch\n",
    ),
    ("json-input", orjson.dumps({"input": ADD}).decode(), ("json",), ADD),
    ("json-patch", orjson.dumps({"patch": DELETE, "explanation": "remove it"}).decode(), ("json",), DELETE),
    ("json-string", orjson.dumps(MOVE).decode(), ("json",), MOVE),
    ("json-single-field", orjson.dumps({"apply_patch": UPDATE}).decode(), ("json",), UPDATE),
    (
        "json-in-json",
        orjson.dumps({"arguments": orjson.dumps({"input": ADD}).decode()}).decode(),
        ("json", "json"),
        ADD,
    ),
    ("json-in-fence", f"```json\n{orjson.dumps({'input': ADD}).decode()}\n```", ("fence", "json"), ADD),
    ("heredoc", f"<<'EOF'\n{DELETE}EOF\n", ("heredoc",), DELETE),
    ("heredoc-apply-patch", f'apply_patch <<"EOF"\n{ADD}EOF', ("heredoc",), ADD),
    ("envelope-both", "*** Add File: hello.txt\n+Hello world\n+\n+bye\n", ("envelope",), ADD),
    ("envelope-begin", "*** Delete File: obsolete.txt\n*** End Patch", ("envelope",), DELETE),
    ("envelope-end", "*** Begin Patch\n*** Delete File: obsolete.txt\n", ("envelope",), DELETE),
    (
        "envelope-keeps-trailing-context-line",
        "*** Update File: a\n@@\n-x\n+y\n \n",
        ("envelope",),
        "*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n \n*** End Patch\n",
    ),
    ("envelope-in-fence", "```\n*** Delete File: obsolete.txt\n```", ("fence", "envelope"), DELETE),
    ("newline-trailing-blank-lines", DELETE + "\n\n", ("newline",), DELETE),
    ("newline-leading-blank-lines", "\n\n" + DELETE, ("newline",), DELETE),
    ("newline-trailing-spaces", DELETE.rstrip("\n") + "   ", ("newline",), DELETE),
    ("newline-crlf", DELETE.replace("\n", "\r\n"), ("newline",), DELETE),
]


@pytest.mark.parametrize(
    ("text", "repairs", "expected"), [r[1:] for r in REPAIRS], ids=[r[0] for r in REPAIRS]
)
def test_repairs(text: str, repairs: tuple[str, ...], expected: str) -> None:
    counts: Counter[str] = Counter()
    result = check_custom_input(text, FMT, counts)
    assert (result.outcome, result.repairs, result.text) == ("repaired", repairs, expected)
    assert result.detail  # what was wrong with the original
    assert_parses(result.text)
    assert counts == Counter(
        {"patch.repaired": 1, **{f"patch.repaired.{k}": repairs.count(k) for k in repairs}}
    )


def test_newline_repair_adds_a_final_newline_the_grammar_needs() -> None:
    strict = {
        **FMT,
        "definition": GRAMMAR.replace('end_patch: "*** End Patch" LF?', 'end_patch: "*** End Patch" LF'),
    }
    text = DELETE.rstrip("\n")
    assert check(text).outcome == "valid"
    result = check(text, strict)
    assert (result.outcome, result.repairs, result.text) == ("repaired", ("newline",), DELETE)


# -- unified diffs ----------------------------------------------------------------------------

DIFF_NEW_FILE = """\
diff --git a/docs/new.md b/docs/new.md
new file mode 100644
index 0000000..3b18e51
--- /dev/null
+++ b/docs/new.md
@@ -0,0 +1,3 @@
+# Title
+
+Body
"""
PATCH_NEW_FILE = """\
*** Begin Patch
*** Add File: docs/new.md
+# Title
+
+Body
*** End Patch
"""

DIFF_EDIT = (
    "--- a/src/app.py\n"
    "+++ b/src/app.py\n"
    "@@ -1,4 +1,4 @@\n"
    " import os\n"
    "-import sys\n"
    "+import re\n"
    " \n"
    " def main():\n"
    "@@ -10,2 +10,3 @@ def main():\n"
    "     run()\n"
    "-    return 0\n"
    "\\ No newline at end of file\n"
    "+    return 1\n"
    "+# end\n"
    "\\ No newline at end of file\n"
)
PATCH_EDIT = (
    "*** Begin Patch\n"
    "*** Update File: src/app.py\n"
    "@@\n"
    " import os\n"
    "-import sys\n"
    "+import re\n"
    " \n"
    " def main():\n"
    "@@\n"
    "     run()\n"
    "-    return 0\n"
    "+    return 1\n"
    "+# end\n"
    "*** End Patch\n"
)

DIFF_DELETE = """\
diff --git a/old.txt b/old.txt
deleted file mode 100644
index e69de29..0000000
--- a/old.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-first
-second
"""
PATCH_DELETE = "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch\n"

DIFF_RENAME = """\
diff --git a/lib/a.txt b/lib/b.txt
similarity index 90%
rename from lib/a.txt
rename to lib/b.txt
index 1111111..2222222 100644
--- a/lib/a.txt
+++ b/lib/b.txt
@@ -1 +1 @@
-x
+y
"""
PATCH_RENAME = (
    "*** Begin Patch\n*** Update File: lib/a.txt\n*** Move to: lib/b.txt\n@@\n-x\n+y\n*** End Patch\n"
)

DIFF_PLAIN_TIMESTAMPS = """\
--- foo.c\t2024-01-01 10:00:00.000000000 +0000
+++ foo.c\t2024-01-02 11:00:00.000000000 +0000
@@ -3,3 +3,3 @@
 int a;
-int b;
+long b;
 int c;
"""
PATCH_PLAIN_TIMESTAMPS = """\
*** Begin Patch
*** Update File: foo.c
@@
 int a;
-int b;
+long b;
 int c;
*** End Patch
"""

# A blank context line whose leading space an editor stripped, and wrong counts.
DIFF_LOOSE = """\
--- a/notes.md
+++ b/notes.md
@@ -1,2 +1,2 @@
 # Notes

-old
+new
 end
"""
PATCH_LOOSE = "*** Begin Patch\n*** Update File: notes.md\n@@\n # Notes\n \n-old\n+new\n end\n*** End Patch\n"

# `--- x` / `+++ y` inside a hunk are changed lines while the counts say lines remain.
DIFF_DASHES = """\
--- a/q.sql
+++ b/q.sql
@@ -1,2 +1,2 @@
--- old comment
+++ new comment
 SELECT 1;
"""
PATCH_DASHES = "*** Begin Patch\n*** Update File: q.sql\n@@\n--- old comment\n+++ new comment\n SELECT 1;\n*** End Patch\n"

DIFFS: list[tuple[str, str, str]] = [
    ("new-file", DIFF_NEW_FILE, PATCH_NEW_FILE),
    ("edit", DIFF_EDIT, PATCH_EDIT),
    ("delete", DIFF_DELETE, PATCH_DELETE),
    ("rename", DIFF_RENAME, PATCH_RENAME),
    ("plain-timestamps", DIFF_PLAIN_TIMESTAMPS, PATCH_PLAIN_TIMESTAMPS),
    ("loose", DIFF_LOOSE, PATCH_LOOSE),
    ("dashes", DIFF_DASHES, PATCH_DASHES),
    (
        "multi-file",
        DIFF_NEW_FILE + DIFF_EDIT + "\n" + DIFF_DELETE + DIFF_RENAME,
        PATCH_NEW_FILE.removesuffix("*** End Patch\n")
        + PATCH_EDIT.removeprefix("*** Begin Patch\n").removesuffix("*** End Patch\n")
        + PATCH_DELETE.removeprefix("*** Begin Patch\n").removesuffix("*** End Patch\n")
        + PATCH_RENAME.removeprefix("*** Begin Patch\n"),
    ),
]


@pytest.mark.parametrize(("diff", "expected"), [d[1:] for d in DIFFS], ids=[d[0] for d in DIFFS])
def test_unified_diff_becomes_the_same_patch(diff: str, expected: str) -> None:
    counts: Counter[str] = Counter()
    result = check_custom_input(diff, FMT, counts)
    assert (result.outcome, result.repairs, result.text) == ("repaired", ("unified_diff",), expected)
    assert_parses(expected)
    assert counts == Counter({"patch.repaired": 1, "patch.repaired.unified_diff": 1})


def test_unified_diff_in_a_fence_and_in_the_envelope() -> None:
    result = check(f"```diff\n{DIFF_EDIT}```\n")
    assert (result.repairs, result.text) == (("fence", "unified_diff"), PATCH_EDIT)
    result = check(f"*** Begin Patch\n{DIFF_DELETE}*** End Patch")
    assert (result.repairs, result.text) == (("unified_diff",), PATCH_DELETE)
    result = check(DIFF_RENAME.replace("\n", "\r\n"))
    assert (result.repairs, result.text) == (("unified_diff",), PATCH_RENAME)


NOT_ONE_TO_ONE: list[tuple[str, str]] = [
    ("prose-before", "Here is the change:\n" + DIFF_EDIT),
    ("pure-rename", "diff --git a/a b/b\nsimilarity index 100%\nrename from a\nrename to b\n"),
    (
        "mode-change-alone",
        "diff --git a/s.sh b/s.sh\nold mode 100644\nnew mode 100755\n"
        "diff --git a/src/app.py b/src/app.py\n" + DIFF_EDIT,
    ),
    (
        "mode-change-with-edit",
        "diff --git a/src/app.py b/src/app.py\nold mode 100644\nnew mode 100755\n" + DIFF_EDIT,
    ),
    ("executable-new-file", DIFF_NEW_FILE.replace("new file mode 100644", "new file mode 100755")),
    ("copy", DIFF_RENAME.replace("rename from", "copy from").replace("rename to", "copy to")),
    ("binary", "diff --git a/i.png b/i.png\nBinary files a/i.png and b/i.png differ\n"),
    ("empty-new-file", "diff --git a/e b/e\nnew file mode 100644\nindex 0000000..e69de29\n"),
    ("context-in-new-file", "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1,2 @@\n+a\n b\n"),
    ("additions-in-deleted-file", "--- a/d.txt\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-a\n+b\n"),
    ("context-only", "--- a/c.txt\n+++ b/c.txt\n@@ -1,1 +1,1 @@\n same\n"),
    ("headers-without-hunks", "--- a/c.txt\n+++ b/c.txt\n"),
    ("hunk-without-headers", "@@ -1,1 +1,1 @@\n-a\n+b\n"),
    ("quoted-escaped-name", '--- "a/t\\tab"\n+++ "b/t\\tab"\n@@ -1 +1 @@\n-a\n+b\n'),
]


@pytest.mark.parametrize("diff", [d[1] for d in NOT_ONE_TO_ONE], ids=[d[0] for d in NOT_ONE_TO_ONE])
def test_diff_that_does_not_map_one_to_one_stays_invalid(diff: str) -> None:
    assert unified_diff_to_patch(diff) is None
    result = check(diff)
    assert (result.outcome, result.text, result.repairs) == ("invalid", diff, ())


# -- invalid and unchecked --------------------------------------------------------------------

GARBAGE = [
    "",
    "please apply my change",
    "*** Begin Patch\n*** End Patch\n",  # no hunk
    "*** Begin Patch\n*** Frobnicate File: x\n*** End Patch\n",
    "*** Begin Patch\n*** Add File: a\nno plus sign\n*** End Patch\n",
    "```\nnot a patch\n```",
    '{"input": 42}',
    '{"input": "still not a patch"}',
    "*** Begin Patch\n*** Delete File: x\n*** End Patch\ntrailing prose\n",
]


@pytest.mark.parametrize("text", GARBAGE)
def test_garbage_stays_unchanged_and_invalid(text: str) -> None:
    counts: Counter[str] = Counter()
    result = check_custom_input(text, FMT, counts)
    assert (result.outcome, result.text, result.repairs) == ("invalid", text, ())
    assert result.detail
    assert counts == Counter({"patch.invalid": 1})


def test_error_detail_points_at_the_problem() -> None:
    assert check("*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch\n").detail == (
        "unexpected 'no plus' at line 3, column 1"
    )
    assert check("*** Begin Patch\n*** Delete File: a\n").detail == "unexpected end of input"


@pytest.mark.parametrize(
    ("fmt", "reason"),
    [
        ({"type": "text"}, "format type 'text' has no grammar"),
        ({}, "format type None has no grammar"),
        (
            {"type": "grammar", "syntax": "regex", "definition": "^.*$"},
            "grammar syntax 'regex' is not checked",
        ),
        ({"type": "grammar", "syntax": "lark"}, "grammar has no definition"),
    ],
)
def test_non_lark_formats_are_unchecked(fmt: dict[str, Any], reason: str) -> None:
    counts: Counter[str] = Counter()
    assert check_custom_input("```anything```", fmt, counts) == InputCheck(
        "```anything```", "unchecked", detail=reason
    )
    assert counts == Counter({"patch.unchecked": 1})


def test_nested_grammar_shape_is_checked() -> None:
    fmt = {"type": "grammar", "grammar": {"syntax": "lark", "definition": GRAMMAR}}
    assert check(ADD, fmt).outcome == "valid"


@pytest.mark.parametrize(
    "definition",
    [
        "start: foo\n",  # undefined rule
        "start: /a|/\n",  # zero-width, not of the /R*/ shape
        "start: /(a*)*/\n",  # /R*/ whose R may itself be empty
        "LINE: /.*/\nstart: LINE\n",  # a whole terminal that may be empty
        "start: (",  # not a grammar
        "%llguidance {}\nstart: /x/\n",  # OpenAI-only directive
    ],
)
def test_grammar_lark_cannot_compile_is_unchecked(definition: str) -> None:
    result = check(ADD, {**FMT, "definition": definition})
    assert (result.outcome, result.text) == ("unchecked", ADD)
    assert result.detail.startswith("grammar does not compile: ")


def test_input_beyond_the_limit_is_unchecked() -> None:
    text = "x" * (LALR_MAX_CHARS + 1)
    result = check(text)
    assert (result.outcome, result.text) == ("unchecked", text)


# -- grammars with conflicts go to Earley ------------------------------------------------------

AMBIGUOUS = {"type": "grammar", "syntax": "lark", "definition": 'start: e\ne: e "+" e | /[0-9]+/\n'}


def test_grammar_with_conflicts_is_parsed_exactly_by_earley() -> None:
    assert check("1+2+3", AMBIGUOUS).outcome == "valid"  # LALR's shift-preference would reject this
    assert check("```\n1+2\n```", AMBIGUOUS) == InputCheck(
        "1+2", "repaired", ("fence", "newline"), "unexpected '`' at line 1, column 1"
    )
    assert check("1++2", AMBIGUOUS).outcome == "invalid"
    long = "+".join(["1"] * (EARLEY_MAX_CHARS // 2 + 1))
    assert check(long, AMBIGUOUS).outcome == "unchecked"


def test_zero_width_regexps_are_rewritten_to_the_same_language() -> None:
    fmt = {**FMT, "definition": 'start: "<" /[^>\\n]*/ ">" item*\nitem: "," /(?:xy)*/i\n'}
    for text in ["<>", "<abc>", "<>,", "<>,xYXy,", "<a>,,xy"]:
        assert check(text, fmt).outcome == "valid", text
    for text in ["<a", "<>,x"]:
        assert check(text, fmt).outcome == "invalid", text


# -- the cache --------------------------------------------------------------------------------


def test_compiled_grammars_are_cached_by_text_in_a_bounded_lru(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    real_lark = lark.Lark

    def counting_lark(grammar: str, **options: Any) -> lark.Lark:
        built.append(grammar)
        return real_lark(grammar, **options)

    monkeypatch.setattr(lark, "Lark", counting_lark)

    def fmt(n: int) -> dict[str, Any]:
        return {**FMT, "definition": GRAMMAR + f"// cache test {n}\n"}

    assert check(ADD, fmt(0)).outcome == "valid"
    first = len(built)
    assert first >= 1
    for _ in range(3):
        assert check(ADD, fmt(0)).outcome == "valid"
        assert check(DIFF_EDIT, fmt(0)).outcome == "repaired"
    assert len(built) == first  # compiled once, reused
    for n in range(1, patch_grammar._GRAMMAR_CACHE_SIZE + 1):
        check(ADD, fmt(n))
    built.clear()
    check(ADD, fmt(0))  # evicted by as many newer grammars as the cache holds
    assert built
