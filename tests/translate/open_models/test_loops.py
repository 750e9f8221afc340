"""The repetition guard: loops are caught early, real text never is."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from codexgate.translate.open_models.loops import Loop, RepetitionGuard
from tests.server.test_app import UPSTREAM, gateway, terminal
from tests.support.fake_upstream import FakeUpstream, text_reply
from tests.support.openresponses import validate_stream
from tests.support.sse import stream_events

ROOT = Path(__file__).resolve().parents[3]
SMOLLM2_LOOP = "I'm sure you'll find them all to your liking.\n\n"  # seen from SmolLM2 via Codex


def feed_in_chunks(text: str, seed: int = 0) -> tuple[Loop | None, int]:
    """(the loop found, characters fed when it was found)."""
    guard, rng, fed = RepetitionGuard(), random.Random(seed), 0
    while fed < len(text):
        size = rng.randint(1, 12)
        found = guard.feed(text[fed : fed + size])
        fed += size
        if found:
            return found, fed
    return None, fed


@pytest.mark.parametrize("seed", range(5))
def test_a_sentence_loop_is_caught_within_about_1500_characters(seed: int) -> None:
    text = "Here are a few suggestions.\n\n" + SMOLLM2_LOOP * 300
    loop, fed = feed_in_chunks(text, seed)
    assert loop is not None and fed < 1600
    assert loop.unit == SMOLLM2_LOOP  # told as the model wrote it, from the start of a line
    assert loop.repeats >= 8


def random_text(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefgh ") for _ in range(n))


def test_short_and_long_units_are_caught() -> None:
    assert feed_in_chunks("ha" * 2000)[0] is not None
    loop, _ = feed_in_chunks("intro " + random_text(300, 1) * 9)
    assert loop is not None and len(loop.unit) == 300


def test_fewer_repeats_than_the_threshold_are_left_alone() -> None:
    unit = random_text(300, 2)
    assert feed_in_chunks(unit * 7 + "and then something else entirely.")[0] is None


def real_texts() -> list[Path]:
    files = sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    files += [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "tests" / "fixtures").rglob("*.sse"))
    return files


@pytest.mark.parametrize("path", real_texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_real_code_and_prose_never_trip_it(path: Path) -> None:
    assert feed_in_chunks(path.read_text())[0] is None


def test_tables_and_lists_with_repeated_shapes_do_not_trip_it() -> None:
    table = "| name | value |\n|---|---|\n" + "".join(f"| row {i} | {i * i} |\n" for i in range(200))
    numbered = "".join(f"{i}. Check that step {i} passed.\n" for i in range(1, 120))
    assert feed_in_chunks(table)[0] is None and feed_in_chunks(numbered)[0] is None
    assert feed_in_chunks(random_text(5000, 3))[0] is None


# -- in the gateway


async def test_the_gateway_stops_a_looping_model_and_says_why() -> None:
    looping = text_reply("Sure.\n\n" + SMOLLM2_LOOP * 2000, chunk_chars=6, delay_between_chunks=0.0005)
    async with gateway([looping]) as (client, fake, _):
        events = await stream_events(client, {"model": "m", "input": "hi"})
        await fake.wait_for_disconnects(1)  # the generation was cancelled upstream, not run out
        health = (await client.get("/healthz")).json()
    validate_stream(events)
    end = terminal(events)
    assert end["type"] == "response.failed"
    error = end["response"]["error"]
    assert error["code"] == "model_output_loop" and "find them all to your liking" in error["message"]
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert len(streamed) < 2000  # stopped early, of ~96 kB
    assert health["counts"]["default"]["loops.stopped"] == 1


async def test_the_loop_guard_can_be_switched_off(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[[upstreams]]\nname = "u"\nbase_url = "{UPSTREAM}"\nloop_guard = false\n')
    fake = FakeUpstream([text_reply(SMOLLM2_LOOP * 100, chunk_chars=50)])
    async with gateway(fake=fake, config=config) as (client, _, _):
        events = await stream_events(client, {"model": "m", "input": "hi"})
    assert terminal(events)["type"] == "response.completed"


@pytest.mark.parametrize("seed", range(12))
def test_a_run_taken_at_once_finds_the_loop_at_the_delta_feeding_each_one_does(seed: int) -> None:
    """`take_all` checks as it goes, and leaves the delta whose check finds a loop to `feed`:
    the same loop, at the same delta, as feeding the deltas one by one, and the same state."""
    rng = random.Random(seed)
    prose = " ".join(
        rng.choice(["parse", "the", "tokens", "fix", "x = 1;", "\n", "café"]) for _ in range(300)
    )
    text = prose[: rng.randint(0, len(prose))] + SMOLLM2_LOOP * rng.choice([0, 3, 30])
    deltas: list[str] = []
    while sum(map(len, deltas)) < len(text):
        at = sum(map(len, deltas))
        deltas.append(text[at : at + rng.choice([0, 1, 4, 30, 250])])
    one_by_one, in_runs = RepetitionGuard(), RepetitionGuard()
    expected = next(((i, loop) for i, d in enumerate(deltas) if (loop := one_by_one.feed(d))), None)
    got, at = None, 0
    while at < len(deltas) and got is None:
        end = min(len(deltas), at + rng.randint(1, 60))
        taken = in_runs.take_all(deltas[at:end], end - at)
        at += taken
        if at < end:  # left for feed: its check is due
            loop = in_runs.feed(deltas[at])
            got = (at, loop) if loop else None
            at += 1
    assert got == expected
    if expected is None:
        assert (in_runs._tail, in_runs._pending, in_runs._unchecked) == (
            one_by_one._tail, one_by_one._pending, one_by_one._unchecked)  # fmt: skip
