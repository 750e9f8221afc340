"""Reading a conversation's next body without decoding what it repeats (wire/known_body.py):
whatever the body, a splice gives what decoding it whole gives, or nothing."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from codexgate.wire.known_body import KnownBody, cache_key_hint, learn, splice

JSON = dict[str, Any]
LONG_TOOLS = [{"type": "function", "name": f"tool_{n}", "description": "does a thing " * 8} for n in range(4)]


def item(n: int) -> JSON:
    if n % 3 == 0:
        return {"type": "function_call", "call_id": f"c{n}", "name": "exec", "arguments": '{"cmd":"ls"}'}
    if n % 3 == 1:
        return {"type": "function_call_output", "call_id": f"c{n - 1}", "output": f'out é "{n}"\n'}
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"step {n}"}]}


def body(items: list[JSON], **fields: Any) -> JSON:
    return {"model": "m", "instructions": "be brief", "input": items, "tools": [{"type": "function",
            "name": "exec"}], "reasoning": {"effort": "low"}, "prompt_cache_key": "thread-1", **fields}  # fmt: skip


def known_of(data: JSON) -> KnownBody:
    raw = orjson.dumps(data)
    known = learn(raw, orjson.loads(raw)["input"])
    assert known is not None
    return known


def spliced(raw: bytes, known: KnownBody) -> tuple[JSON, int, KnownBody | None] | None:
    """A splice, checked against decoding the body whole."""
    got = splice(raw, known)
    if got is not None:
        assert got[0] == orjson.loads(raw)
    return got


def test_the_next_turn_shares_the_known_items_and_decodes_only_the_new() -> None:
    first = body([item(n) for n in range(6)])
    known = known_of(first)
    raw = orjson.dumps(body([item(n) for n in range(9)]))
    got = spliced(raw, known)
    assert got is not None
    data, count, following = got
    assert count == 6
    assert all(a is b for a, b in zip(data["input"][:6], known.items, strict=True))
    assert data["input"] is not known.items  # the request's own list
    assert following is not None and following.ends[-1] == len(raw) - len(following.suffix)
    again = spliced(orjson.dumps(body([item(n) for n in range(10)])), following)
    assert again is not None and again[1] == 9


@pytest.mark.parametrize("kept", [1, 3, 5])
def test_an_earlier_turn_sent_again_shares_the_items_it_has(kept: int) -> None:
    known = known_of(body([item(n) for n in range(6)]))
    got = spliced(orjson.dumps(body([item(n) for n in range(kept)])), known)
    assert got is not None and got[1] == kept


def test_a_changed_item_ends_the_shared_part_there() -> None:
    known = known_of(body([item(n) for n in range(6)]))
    items = [item(n) for n in range(8)]
    items[3] = {**items[3], "arguments": '{"cmd":"rm"}'}
    got = spliced(orjson.dumps(body(items)), known)
    assert got is not None and got[1] == 3


@pytest.mark.parametrize(
    "changed",
    [
        {"reasoning": {"effort": "high"}},  # after the input: the suffix differs
        {"prompt_cache_key": "thread-2"},
        {"store": False},
    ],
)
def test_a_body_whose_fields_after_the_input_changed_is_decoded_whole(changed: JSON) -> None:
    known = known_of(body([item(n) for n in range(4)]))
    assert splice(orjson.dumps(body([item(n) for n in range(5)], **changed)), known) is None


@pytest.mark.parametrize(
    "changed", [{"model": "other-model"}, {"instructions": "be long " * 50}, {"model": "m"}]
)
def test_another_head_before_the_same_items_shares_them(changed: JSON) -> None:
    known = known_of(body([item(n) for n in range(4)]))
    got = spliced(orjson.dumps(body([item(n) for n in range(5)], **changed)), known)
    assert got is not None and got[1] == 4 and got[2] is not None
    again = spliced(orjson.dumps(body([item(n) for n in range(6)], **changed)), got[2])
    assert again is not None and again[1] == 5


@pytest.mark.parametrize("turns", [1, 3])
def test_other_fields_after_the_input_are_decoded_and_the_items_still_shared(turns: int) -> None:
    # Codex's client_metadata (after the tools) comes in another order every request.
    known = known_of(codex_like(4, {"a": "1", "b": "2"}))
    for turn in range(turns):
        raw = orjson.dumps(codex_like(5 + turn, {"b": "2", "a": str(turn)}))
        got = spliced(raw, known)
        assert got is not None and got[1] == 4 + turn and got[2] is not None
        assert got[0]["tools"] is known.tail["tools"]  # the same list: compared by identity next
        known = got[2]


def codex_like(n: int, meta: JSON, **fields: Any) -> JSON:
    return body([item(i) for i in range(n)], tools=LONG_TOOLS, **fields, client_metadata=meta)


def test_only_the_last_field_is_decoded_when_only_it_changed() -> None:
    # Codex's client_metadata, last, names the turn: the tools before it are not decoded again.
    meta = {
        "session_id": "s",
        "x-codex-turn-metadata": '{"turn_id":"t0","sandbox":"ro"}',
        "nested": {"a": "1", "b": "2"},
    }
    known = known_of(codex_like(3, meta))
    assert known.last_field > 0 and "client_metadata" not in known.before_last
    for turn in range(1, 4):
        raw = orjson.dumps(codex_like(3 + turn, {**meta, "turn_id": f"t{turn}"}))
        got = spliced(raw, known)
        assert got is not None and got[2] is not None
        assert got[2].before_last is known.before_last  # not decoded again
        assert got[0]["tools"] is known.tail["tools"]
        known = got[2]


@pytest.mark.parametrize(
    ("after", "splices"),
    [
        (b',"reasoning":{"effort":"high"}', True),  # a later duplicate key wins, as decoded whole
        (b',"tools":[]', True),
        (b',"input":[]', False),  # replaces the input when decoded whole: never spliced
        (b',"x":{"a":1}}', False),  # not JSON
        (b'],"y":1', False),
    ],
)
def test_fields_added_after_the_last_read_as_the_whole_body_does(after: bytes, splices: bool) -> None:
    known = known_of(codex_like(3, {"a": "1"}))
    raw = orjson.dumps(codex_like(4, {"a": "2"}))
    edited = raw[:-1] + after + b"}"
    try:
        orjson.loads(edited)
    except orjson.JSONDecodeError:
        assert not splices and splice(edited, known) is None
        return
    got = spliced(edited, known)
    assert (got is not None) is splices


def test_a_field_changed_before_the_last_is_decoded_with_it() -> None:
    known = known_of(codex_like(3, {"a": "1"}))
    raw = orjson.dumps(codex_like(4, {"a": "2"}, reasoning={"effort": "high"}))
    got = spliced(raw, known)
    assert got is not None and got[0]["reasoning"] == {"effort": "high"}
    assert got[2] is not None and got[2].before_last is not known.before_last


def test_another_head_with_a_rewritten_item_is_decoded_whole() -> None:
    known = known_of(body([item(n) for n in range(4)]))
    items = [item(n) for n in range(5)]
    items[0] = item(9)
    assert splice(orjson.dumps(body(items, model="other")), known) is None


def test_the_known_items_under_a_decoy_key_before_the_input_are_not_taken_for_it() -> None:
    items = [item(n) for n in range(3)]
    known = known_of(body(items))
    raw = orjson.dumps(body([*items, item(3)], model="other"))
    decoy = raw.replace(b'"instructions"', b'"x":' + orjson.dumps(items) + b',"instructions"', 1)
    got = spliced(decoy, known)  # found under "x" first: that head does not open the input
    assert got is None


def test_bodies_orjson_writes_otherwise_are_not_learned_or_not_spliced() -> None:
    items = [item(n) for n in range(3)]
    spaced = orjson.dumps(body(items), option=orjson.OPT_INDENT_2)
    assert learn(spaced, items) is None
    floats = b'{"model":"m","input":[{"type":"x","n":1.50}],"prompt_cache_key":"k"}'
    assert learn(floats, orjson.loads(floats)["input"]) is None
    escaped = b'{"model":"m","input":[{"type":"x","t":"\\u00e9"}],"prompt_cache_key":"k"}'
    assert learn(escaped, orjson.loads(escaped)["input"]) is None
    # A new item written otherwise: spliced, but not learned for the turn after.
    known = known_of(body(items))
    raw = orjson.dumps(body(items))
    raw = raw.replace(b"}],", b'},{"type":"x", "n":1}],', 1)
    got = spliced(raw, known)
    assert got is not None and got[2] is None


def test_a_duplicate_input_key_after_the_items_is_never_spliced() -> None:
    # A later `input` replaces the array when decoded whole: the tail's marker is gone.
    known = known_of(body([item(n) for n in range(3)]))
    raw = orjson.dumps(body([item(n) for n in range(3)]))
    twice = raw[:-1] + b',"input":[]}'
    assert learn(twice, [item(n) for n in range(3)]) is None
    assert splice(raw[:-1] + b',"input":[]}', known) is None


def test_an_input_key_inside_a_string_is_not_taken_for_the_input() -> None:
    # A decoy key ending in `input`, holding the same items, before the real one: found
    # first, it fails the head's check; a decoy alone is not the input either.
    items = [item(0)]
    written = b'{"input":' + orjson.dumps(items) + b"}"
    decoy = b'{"x\\"input":' + orjson.dumps(items) + b',"input":' + orjson.dumps(items) + b"}"
    assert learn(decoy, items) is None
    alone = b'{"x\\"input":' + orjson.dumps(items) + b',"input":[]}'
    assert learn(alone, items) is None
    assert learn(written, items) is not None


def splices_as_whole_or_not(mutated: bytes, known: KnownBody) -> None:
    """A body not JSON is never spliced; one that is splices to its whole decoding, or not."""
    try:
        whole = orjson.loads(mutated)
    except orjson.JSONDecodeError:
        assert splice(mutated, known) is None
        return
    got = splice(mutated, known)
    if got is not None:
        assert got[0] == whole


@pytest.mark.parametrize("seed", range(30))
def test_random_edits_splice_to_the_whole_decoding_or_not_at_all(seed: int) -> None:
    rng = random.Random(seed)
    items = [item(n) for n in range(rng.randint(1, 8))]
    fields = {"tools": LONG_TOOLS, "client_metadata": {"k": "v"}} if seed % 2 else {}
    known = known_of(body(items, **fields))
    raw = orjson.dumps(body(items + [item(n) for n in range(8, 8 + rng.randint(0, 3))], **fields))
    for _ in range(20):  # bytes cut, inserted or changed anywhere
        at = rng.randrange(len(raw))
        edit = rng.choice([b"", b",", b"]", b"}", b'"', b"0", b" ", b'{"a":1}', b"\\"])
        splices_as_whole_or_not(raw[:at] + edit + raw[at + rng.randint(0, 2) :], known)


@pytest.mark.parametrize("seed", range(30))
def test_random_edits_to_the_last_fields_splice_to_the_whole_decoding_or_not_at_all(seed: int) -> None:
    rng = random.Random(seed)
    known = known_of(codex_like(3, {"k": "v", "n": {"a": "1"}}))
    raw = orjson.dumps(codex_like(4, {"k": "w", "n": {"a": "2"}}))
    for _ in range(20):  # in the last 80 bytes: the last field, and the one before it
        at = len(raw) - rng.randint(1, 80)
        edit = rng.choice([b"", b",", b"]", b"}", b'"', b'"input":[]', b',"input":[],', b'"tools":1,', b"\\"])
        splices_as_whole_or_not(raw[:at] + edit + raw[at + rng.randint(0, 2) :], known)


def test_the_cache_key_hint_reads_the_plain_key_only() -> None:
    assert cache_key_hint(orjson.dumps(body([item(0)]))) == "thread-1"
    assert cache_key_hint(b'{"prompt_cache_key":"a\\"b"}') is None
    assert cache_key_hint(b'{"model":"m"}') is None
    assert cache_key_hint(b'{"prompt_cache_key":"\xff"}') is None


def messages_body(messages: list[JSON]) -> JSON:
    """Claude Code's order: the messages first, the system prompt and tools after them."""
    return {"model": "claude-sonnet-4-5", "messages": messages, "system": [{"type": "text", "text": "be brief"}],
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}], "max_tokens": 32000, "stream": True}  # fmt: skip


def message(n: int, marked: bool = False) -> JSON:
    block: JSON = {"type": "text", "text": f"turn {n} é"}
    if marked:  # Claude Code's cache mark, on the newest message only
        block["cache_control"] = {"type": "ephemeral"}
    return {"role": "user" if n % 2 == 0 else "assistant", "content": [block]}


def conversation(turns: int) -> JSON:
    return messages_body([message(n, marked=n == turns - 1) for n in range(turns)])


def test_a_messages_body_is_spliced_by_its_messages_array() -> None:
    raw = orjson.dumps(conversation(6))
    known = learn(raw, orjson.loads(raw)["messages"], key="messages")
    assert known is not None and known.key == "messages"
    got = spliced(orjson.dumps(conversation(8)), known)
    assert got is not None
    data, count, following = got
    # the cache mark moved from the sixth message to the eighth: the first five are shared
    assert count == 5
    assert all(a is b for a, b in zip(data["messages"][:5], known.items[:5], strict=True))
    assert following is not None and following.key == "messages"
    again = spliced(orjson.dumps(conversation(10)), following)
    assert again is not None and again[1] == 7


@pytest.mark.parametrize("rewritten", [1, 2, 3])
def test_all_but_the_items_rewritten_at_the_end_are_shared(rewritten: int) -> None:
    messages = [message(n) for n in range(12)]
    raw = orjson.dumps(messages_body(messages))
    known = learn(raw, orjson.loads(raw)["messages"], key="messages")
    assert known is not None
    changed = messages[: 12 - rewritten] + [message(n, marked=True) for n in range(12 - rewritten, 12)]
    got = spliced(orjson.dumps(messages_body(changed + [message(12)])), known)
    assert got is not None and got[1] == 12 - rewritten


def test_a_messages_key_inside_an_earlier_field_is_not_taken_for_the_messages() -> None:
    decoy = {"model": "m", "metadata": {"messages": [message(0)]}, "messages": [message(0), message(1)]}
    raw = orjson.dumps(decoy)
    known = learn(raw, orjson.loads(raw)["messages"], key="messages")
    assert known is not None and known.start == raw.rindex(b'"messages":[') + len(b'"messages":[')
    assert known.head == {"model": "m", "metadata": decoy["metadata"]}
    got = spliced(orjson.dumps({**decoy, "messages": [message(0), message(1), message(2)]}), known)
    assert got is not None and got[1] == 2
