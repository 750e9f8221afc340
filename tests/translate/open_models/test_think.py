"""ThinkSplitter: inline thinking split from answer text, the same however the stream is cut."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from codexgate.translate.open_models.think import Piece, ThinkSplitter


def merged(pieces: Iterable[Piece]) -> list[Piece]:
    out: list[Piece] = []
    for kind, text in pieces:
        assert text, "no empty pieces"
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


def run(chunks: Sequence[str], **kwargs: Any) -> tuple[list[Piece], Counter[str]]:
    counts: Counter[str] = Counter()
    splitter = ThinkSplitter(counts=counts, **kwargs)
    pieces: list[Piece] = []
    for chunk in chunks:
        pieces += splitter.feed(chunk)
    pieces += splitter.finish()
    return merged(pieces), counts


def chunkings(text: str) -> Iterable[list[str]]:
    """Whole; every single cut; one character at a time; every pair of cuts for short texts."""
    yield [text]
    for i in range(len(text) + 1):
        yield [text[:i], text[i:]]
    yield list(text)
    if len(text) <= 60:
        for i in range(1, len(text)):
            for j in range(i + 1, len(text)):
                yield [text[:i], text[i:j], text[j:]]


R = "reasoning"
T = "text"
LONG = "The user wants a file created. I should check the directory first, then write it."  # > 64

# (id, text, kwargs, expected pieces, expected outcome)
CASES: list[tuple[str, str, dict[str, Any], list[Piece], str]] = [
    (
        "block",
        "<think>\nLet me see.\n</think>\n\nHello!",
        {},
        [(R, "Let me see."), (T, "Hello!")],
        "think.block",
    ),
    (
        "block-case-and-leading-ws",
        "\n  <THINK>plan</Think>answer",
        {},
        [(R, "plan"), (T, "answer")],
        "think.block",
    ),
    (
        "block-crlf",
        "<think>\r\na\r\n\r\nb\r\n</think>\r\n\r\nc",
        {},
        [(R, "a\r\n\r\nb"), (T, "c")],
        "think.block",
    ),
    ("block-spaces-after-close-kept", "<think>a</think>  b", {}, [(R, "a"), (T, "  b")], "think.block"),
    ("block-empty", "<think>\n\n</think>\n\nHi", {}, [(T, "Hi")], "think.block"),
    ("block-only", "<think>\nhm\n</think>\n\n", {}, [(R, "hm")], "think.block"),
    (
        "block-unicode",
        "<think>h\u00e9llo \U0001f30d \u0130</think>\u0130stanbul",
        {},
        [(R, "h\u00e9llo \U0001f30d \u0130"), (T, "\u0130stanbul")],
        "think.block",
    ),
    ("block-unclosed", "<think>still thinking</thin", {}, [(R, "still thinking</thin")], "think.unclosed"),
    (
        "block-nested-open-stays-reasoning",
        "<think>a <think> b</think>c",
        {},
        [(R, "a <think> b"), (T, "c")],
        "think.block",
    ),
    ("thinking", "<thinking>\nx\n</thinking>\ny", {}, [(R, "x"), (T, "y")], "think.block"),
    ("reasoning", "<reasoning>x</reasoning>\ny", {}, [(R, "x"), (T, "y")], "think.block"),
    ("seed", "<seed:think>x</seed:think>y", {}, [(R, "x"), (T, "y")], "think.block"),
    ("kimi", "\u25c1think\u25b7x\u25c1/think\u25b7y", {}, [(R, "x"), (T, "y")], "think.block"),
    ("cohere", "<|START_THINKING|>x<|END_THINKING|>y", {}, [(R, "x"), (T, "y")], "think.block"),
    (
        "begin-of-thought",
        "<|begin_of_thought|>\n\nstep 1\n\nstep 2\n\n<|end_of_thought|>\n\n<|begin_of_solution|>\n\n42\n"
        "<|end_of_solution|>",
        {},
        [(R, "step 1\n\nstep 2"), (T, "42\n")],
        "think.block",
    ),
    (
        "harmony",
        "<|channel|>analysis<|message|>We need to answer.<|end|><|start|>assistant<|channel|>final<|message|>Hi",
        {},
        [(R, "We need to answer."), (T, "Hi")],
        "think.block",
    ),
    (
        "harmony-commentary-stays-text",
        "<|channel|>analysis<|message|>Run ls.<|end|><|start|>assistant<|channel|>commentary to=functions.x",
        {},
        [(R, "Run ls."), (T, "<|start|>assistant<|channel|>commentary to=functions.x")],
        "think.block",
    ),
    (
        "start-inside",
        "First, the user wants X.\nSo Y.\n</think>\n\nDone.",
        {"start_inside": True},
        [(R, "First, the user wants X.\nSo Y."), (T, "Done.")],
        "think.start_inside",
    ),
    (
        "start-inside-long",
        LONG + "\n</think>\n\nDone.",
        {"start_inside": True},
        [(R, LONG), (T, "Done.")],
        "think.start_inside",
    ),
    (
        "start-inside-explicit-open",
        "<think>\nx\n</think>\ny",
        {"start_inside": True},
        [(R, "x"), (T, "y")],
        "think.block",
    ),
    (
        "start-inside-other-family",
        "x</thinking>y",
        {"start_inside": True},
        [(R, "x"), (T, "y")],
        "think.start_inside",
    ),
    (
        "start-inside-unclosed",
        "no tags at all",
        {"start_inside": True},
        [(R, "no tags at all")],
        "think.unclosed",
    ),
    ("auto-empty", "</think>\n\nHello", {}, [(T, "Hello")], "think.auto_inside"),
    (
        "auto-short",
        "Short thought.\n</think>\n\nAnswer",
        {},
        [(R, "Short thought."), (T, "Answer")],
        "think.auto_inside",
    ),
    (
        "auto-close-starts-at-63",
        "x" * 63 + "</think>rest",
        {},
        [(R, "x" * 63), (T, "rest")],
        "think.auto_inside",
    ),
    (
        "auto-close-starts-at-64-is-text",
        "x" * 64 + "</think>rest",
        {},
        [(T, "x" * 64 + "</think>rest")],
        "think.none",
    ),
    (
        "auto-bound-after-leading-ws",
        "\n\n" + "x" * 63 + "</think>rest",
        {},
        [(R, "x" * 63), (T, "rest")],
        "think.auto_inside",
    ),
    (
        "auto-long-reasoning-is-text",
        LONG + "\n</think>\n\nDone.",
        {},
        [(T, LONG + "\n</think>\n\nDone.")],
        "think.none",
    ),
    (
        "auto-custom-bound",
        LONG + "\n</think>\n\nDone.",
        {"probe_chars": 200},
        [(R, LONG), (T, "Done.")],
        "think.auto_inside",
    ),
    ("plain", "Hello, world.", {}, [(T, "Hello, world.")], "think.none"),
    ("plain-whitespace-kept", "  \n Hi", {}, [(T, "  \n Hi")], "think.none"),
    ("plain-whitespace-only", " \n", {}, [(T, " \n")], "think.none"),
    ("plain-lookalike-tag", "<thinker> is a word", {}, [(T, "<thinker> is a word")], "think.none"),
    ("plain-partial-tag-at-end", "<think", {}, [(T, "<think")], "think.none"),
    ("plain-lt", "<", {}, [(T, "<")], "think.none"),
    (
        "prose-about-tags",
        "Models write <think>x</think> first.",
        {},
        [(T, "Models write <think>x</think> first.")],
        "think.none",
    ),
    (
        "later-think-after-block-stays-text",
        "<think>a</think>b <think>c</think>",
        {},
        [(R, "a"), (T, "b <think>c</think>")],
        "think.block",
    ),
    (
        "plain-late-think-tag-stays-text",
        LONG + " <think>c</think>",
        {},
        [(T, LONG + " <think>c</think>")],
        "think.none",
    ),
]


@pytest.mark.parametrize(
    ("text", "kwargs", "expected", "outcome"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_every_chunking_gives_the_same_pieces(
    text: str, kwargs: dict[str, Any], expected: list[Piece], outcome: str
) -> None:
    for chunks in chunkings(text):
        pieces, counts = run(chunks, **kwargs)
        assert pieces == expected, chunks
        assert counts[outcome] == 1, (chunks, counts)


def test_reasoning_streams_before_the_close_arrives() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("<think>\nStep one.") == [("reasoning", "Step one.")]
    assert splitter.feed(" Step two.\n") == [("reasoning", " Step two.")]  # the newline may end it
    assert splitter.feed("\nStep three </th") == [("reasoning", "\n\nStep three ")]
    assert splitter.feed("ink>\n\nAns") == [("text", "Ans")]
    assert splitter.feed("wer") == [("text", "wer")]
    assert splitter.finish() == []


def test_start_inside_streams_reasoning_at_once() -> None:
    splitter = ThinkSplitter(start_inside=True)
    assert splitter.feed("Okay, the user") == [("reasoning", "Okay, the user")]


def test_auto_mode_holds_back_only_up_to_the_bound() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("x" * 63) == []
    assert splitter.feed("x") == [("text", "x" * 64)]
    assert splitter.feed("</think>") == [("text", "</think>")]


def test_auto_mode_waits_for_a_closing_tag_that_starts_inside_the_bound() -> None:
    splitter = ThinkSplitter()
    assert splitter.feed("x" * 62 + "</thi") == []
    assert splitter.feed("nk>a") == [("reasoning", "x" * 62), ("text", "a")]


def test_late_closing_tag_is_counted_once() -> None:
    counts: Counter[str] = Counter()
    splitter = ThinkSplitter(counts=counts)
    splitter.feed(LONG + "</thi")
    splitter.feed("nk> and </think>")
    splitter.finish()
    assert counts == Counter({"think.none": 1, "think.late_close": 1})


def test_feed_after_finish_raises() -> None:
    splitter = ThinkSplitter()
    splitter.finish()
    with pytest.raises(RuntimeError):
        splitter.feed("x")
    with pytest.raises(RuntimeError):
        splitter.finish()


FRAGMENTS = [
    "<think>",
    "</think>",
    "<THINK>",
    "</Think>",
    "<",
    "</",
    "think",
    ">",
    "\n",
    "\r\n",
    " ",
    "a",
    "b\u00e9",
    "\U0001f30d",
]


def _visible(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("start_inside", [False, True])
def test_random_streams_lose_and_duplicate_nothing(start_inside: bool) -> None:
    rng = random.Random(20240611)
    for _ in range(300):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(0, 25)))
        whole, counts = run([text], start_inside=start_inside, probe_chars=16)
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(3, len(text) + 1)))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert run(chunks, start_inside=start_inside, probe_chars=16) == (whole, counts), text
        assert run(list(text), start_inside=start_inside, probe_chars=16) == (whole, counts), text
        # Only tags and whitespace are ever dropped: one opening tag for a block, one closing tag
        # for a block that was closed.
        (outcome,) = (k for k in counts if k != "think.late_close")
        low = text.lower()
        opened = low.lstrip().startswith("<think>")
        dropped = {
            "think.block": 15,
            "think.start_inside": 8,
            "think.auto_inside": 8,
            "think.none": 0,
            "think.unclosed": 7 if opened else 0,
        }[outcome]
        out = "".join(piece for _, piece in whole)
        assert len(_visible(out)) == len(_visible(text)) - dropped, (text, whole)
        assert [kind for kind, _ in whole] in ([], ["reasoning"], ["text"], ["reasoning", "text"])


@pytest.mark.parametrize("seed", range(5))
def test_the_marker_searches_agree_with_reading_each_marker(seed: int) -> None:
    """The precomputed searches (the probe of every first delta uses them) give what trying
    each marker in turn gives."""
    from codexgate.translate.open_models.think import _DEFAULT_MARKERS, _find_first, _lower, _partial_suffix

    def first(low: str, markers: Sequence[str]) -> tuple[int, int]:
        found = [(low.find(m), i) for i, m in enumerate(markers) if low.find(m) != -1]
        return min(found) if found else (-1, -1)

    def partial(low: str, markers: Sequence[str], shortest: int) -> int:
        for k in range(len(low), max(shortest, 1) - 1, -1):
            if any(len(m) > k and m.startswith(low[-k:]) for m in markers):
                return k
        return 0

    rng = random.Random(seed)
    closes, opens = _DEFAULT_MARKERS.implicit_closes, _DEFAULT_MARKERS.opens
    alphabet = "<>/|_thinkgseo:◁▷ Tx"
    for _ in range(400):
        low = _lower("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 24))))
        low += rng.choice(["", *closes])[: rng.randint(0, 20)]
        assert _find_first(low, closes) == first(low, closes)
        shortest = rng.randint(1, 4)
        assert _partial_suffix(low, closes, shortest) == partial(low, closes, shortest)
        assert (low in _DEFAULT_MARKERS.open_prefixes) == any(o.startswith(low) for o in opens if low)
    assert _lower("ÀB<Think>") == "Àb<think>"  # ASCII only: indices stay those of the text
