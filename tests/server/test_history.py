"""What the gateway remembers of a conversation between turns (translate/history_memo.py, the Responses face's
RequestReader, translate/chat_upstream/messages.py History, translate/chat_upstream/request.py Checkpoint): never a
different upstream body, never a skipped check on what changed, and bounded memory."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from codexgate.backends.base import Inbound
from codexgate.errors import InvalidRequest
from codexgate.server.faces.responses import Remembered, RequestReader
from codexgate.translate.chat_upstream.request import ChatRequest, Checkpoint, to_chat_request
from codexgate.translate.cuts import cut_marker
from codexgate.translate.dialect import ChatDialect
from codexgate.translate.history_memo import Memo
from codexgate.translate.reasoning import encode_reasoning
from codexgate.wire.responses import ResponsesRequest, parse_request

TOOLS = [
    {"type": "function", "name": "exec_command", "parameters": {"type": "object", "properties": {}}},
    {
        "type": "custom",
        "name": "apply_patch",
        "format": {"type": "grammar", "syntax": "lark", "definition": "s"},
    },
    {"type": "web_search"},  # hosted: left out, with a notice in the first message
]
DIALECTS = [
    ChatDialect(),
    ChatDialect(developer_role="system"),
    ChatDialect(developer_role="developer", reasoning_replay="reasoning"),
    ChatDialect(reasoning_replay="none"),
]


def message(role: str, text: str, item_id: str | None = None) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    item: dict[str, Any] = {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}
    if item_id:
        item["id"] = item_id
    return item


class Conversation:
    """Random, Codex-like histories: every kind of item the chat translation groups or holds
    back (calls and outputs, reasoning, hosted-call notes, images from tool outputs, late
    developer messages, failed answers with their cut markers)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.items: list[dict[str, Any]] = [message("developer", "<permissions/>"), message("user", "fix it")]
        self.open_calls: list[str] = []
        self.n = 0

    def _id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}_{self.n}"

    def step(self) -> None:
        rng, items = self.rng, self.items
        kind = rng.choice(
            ["call", "call", "output", "output", "reasoning", "answer", "user", "developer", "hosted", "image",
             "failed", "custom"]
        )  # fmt: skip
        if kind in ("call", "custom"):
            call_id = self._id("call")
            self.open_calls.append(call_id)
            if kind == "call":
                items.append({"type": "function_call", "id": self._id("fc"), "call_id": call_id,
                              "name": "exec_command", "arguments": '{"cmd":"ls"}'})  # fmt: skip
            else:
                items.append({"type": "custom_tool_call", "id": self._id("ctc"), "call_id": call_id,
                              "name": "apply_patch", "input": "*** Begin Patch\n"})  # fmt: skip
        elif kind == "output":
            call_id = self.open_calls.pop(0) if self.open_calls and rng.random() < 0.8 else self._id("orphan")
            items.append({"type": "function_call_output", "call_id": call_id, "output": f"out {self.n}"})
        elif kind == "image":
            call_id = self.open_calls.pop(0) if self.open_calls else self._id("orphan")
            output = [{"type": "input_text", "text": "a screenshot"},
                      {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]  # fmt: skip
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        elif kind == "reasoning":
            text = f"thinking {self.n}"
            items.append({"type": "reasoning", "id": self._id("rs"), "summary": [],
                          "encrypted_content": encode_reasoning(text)})  # fmt: skip
        elif kind == "answer":
            items.append(message("assistant", f"answer {self.n}", self._id("msg")))
        elif kind == "user":
            items.append(message("user", f"more {self.n}"))
        elif kind == "developer":
            items.append(message("developer", f"late rule {self.n}"))
        elif kind == "hosted":
            items.append({"type": "web_search_call", "id": self._id("ws"), "status": "completed",
                          "action": {"query": f"q{self.n}"}})  # fmt: skip
        else:  # a failed answer: its items, then the marker naming them
            said = [message("assistant", "loop loop", self._id("msg")),
                    {"type": "reasoning", "id": self._id("rs"), "summary": [], "encrypted_content": "x"}]  # fmt: skip
            items.extend(said)
            items.append(cut_marker(self._id("rs"), [i["id"] for i in said]))

    def request(self) -> dict[str, Any]:
        return {"model": "m", "instructions": "be brief", "input": list(self.items), "tools": TOOLS,
                "prompt_cache_key": "thread-1"}  # fmt: skip


def translate(body: dict[str, Any], dialect: ChatDialect, earlier: Checkpoint | None = None) -> ChatRequest:
    return to_chat_request(parse_request(orjson.loads(orjson.dumps(body))), dialect, "up", earlier)


@pytest.mark.parametrize("seed", range(40))
def test_resuming_from_any_earlier_turn_gives_the_same_upstream_body(seed: int) -> None:
    dialect = DIALECTS[seed % len(DIALECTS)]
    conversation = Conversation(seed)
    requests = []
    for _ in range(25):
        conversation.step()
        requests.append(conversation.request())
    # A chain, as a conversation runs: each turn resumes from the one before.
    checkpoint: Checkpoint | None = None
    for body in requests:
        fresh = translate(body, dialect)
        resumed = translate(body, dialect, checkpoint)
        expected = fresh.encode()
        assert orjson.loads(expected) == fresh.body  # what goes upstream is the body
        assert resumed.encode() == expected
        assert resumed.body == fresh.body
        # A request the memory would not keep makes no checkpoint, and the same bytes.
        unkept = to_chat_request(parse_request(orjson.loads(orjson.dumps(body))), dialect, "up", keep=False)
        assert unkept.checkpoint is None and unkept.encode() == expected
        checkpoint = resumed.checkpoint
    # And from any earlier turn, including one that does not prefix this one any more.
    rng = random.Random(seed)
    for _ in range(10):
        i, j = sorted(rng.sample(range(len(requests)), 2))
        earlier = translate(requests[j if rng.random() < 0.2 else i], dialect)
        earlier.encode()
        assert (
            translate(requests[j], dialect, earlier.checkpoint).encode()
            == translate(requests[j], dialect).encode()
        )


def test_a_resumed_turn_reads_only_the_new_items_and_reuses_the_encoded_history() -> None:
    conversation = Conversation(3)
    for _ in range(30):
        conversation.step()
    first = translate(conversation.request(), ChatDialect())
    first.encode()
    assert first.checkpoint is not None
    known = dict(first.checkpoint.history.encoded)
    assert len(known) > 10
    conversation.items.append(message("user", "and the docs"))
    second = translate(conversation.request(), ChatDialect(), first.checkpoint)
    assert second.checkpoint is not None
    assert second.checkpoint.history.builder is not first.checkpoint.history.builder
    # The earlier messages are the same objects, so their JSON was not made again.
    shared = [m for m in second.body["messages"] if id(m) in known]
    assert len(shared) == len(known)
    assert second.checkpoint.catalogue is first.checkpoint.catalogue
    assert first.checkpoint.history.encoded == known  # the earlier checkpoint is untouched


def test_the_unavailable_tools_notice_is_added_once_however_often_a_checkpoint_is_used() -> None:
    body = {"model": "m", "input": [message("system", "rules"), message("user", "hi")], "tools": TOOLS}
    dialect = ChatDialect(developer_role="system")
    first = translate(body, dialect)
    for _ in range(3):
        again = translate(body, dialect, first.checkpoint)
        assert again.body["messages"][0]["content"].count("web_search") == 1
        assert again.encode() == first.encode()


def test_a_cut_marker_naming_an_item_of_the_remembered_turn_makes_a_full_pass() -> None:
    items = [message("user", "hi"), message("assistant", "loop loop loop", "msg_1")]
    first = translate({"model": "m", "input": items}, ChatDialect())
    later = items + [cut_marker("rs_9", ["msg_1"]), message("user", "again")]
    resumed = translate({"model": "m", "input": later}, ChatDialect(), first.checkpoint)
    assert [m["content"] for m in resumed.body["messages"]] == ["hi", "again"]


def test_changed_instructions_or_tools_are_translated_again() -> None:
    body = {"model": "m", "instructions": "a", "input": [message("user", "hi")], "tools": TOOLS[:1]}
    first = translate(body, ChatDialect())
    other = translate({**body, "instructions": "b", "tools": TOOLS[1:2]}, ChatDialect(), first.checkpoint)
    assert other.body["messages"][0] == {"role": "system", "content": "b"}
    assert [t["function"]["name"] for t in other.body["tools"]] == ["apply_patch"]


# -- the face: validation of what a conversation re-sends


def read(reader: RequestReader, body: dict[str, Any], caller: str | None = None) -> ResponsesRequest:
    return read_with_inbound(reader, body, caller)[0]


def read_with_inbound(
    reader: RequestReader, body: dict[str, Any], caller: str | None = None
) -> tuple[ResponsesRequest, Inbound]:
    return reader.read(orjson.dumps(body), caller)


def test_a_changed_item_in_a_re_sent_history_is_still_validated() -> None:
    reader = RequestReader(Memo(1 << 20))
    body = {"model": "m", "input": [message("user", "hi"), message("user", "more")], "prompt_cache_key": "k"}
    read(reader, body)
    broken = {**body, "input": [message("user", "hi"), {"type": "message", "role": "robot", "content": "x"}]}
    with pytest.raises(InvalidRequest) as info:
        read(reader, broken)
    assert info.value.param == "input[1].role"
    deep: Any = "x"
    for _ in range(70):
        deep = [deep]
    nested = {**body, "input": [*body["input"], {"type": "note", "text": "t", "extra": deep}]}
    with pytest.raises(InvalidRequest, match="is nested too deep"):
        read(reader, nested)
    bad_tool = {**body, "tools": [{"type": "function", "name": 5}]}
    with pytest.raises(InvalidRequest):
        read(reader, bad_tool)


def test_requests_are_remembered_per_caller_and_key_from_the_second_and_only_with_a_key() -> None:
    memo: Memo[Remembered] = Memo(1 << 20)
    reader = RequestReader(memo)
    body = {"model": "m", "input": [message("user", "hi")], "prompt_cache_key": "k"}
    (_, alice), (_, bob) = read_with_inbound(reader, body, "alice"), read_with_inbound(reader, body, "bob")
    assert alice.conversation != bob.conversation
    assert (alice.caller, bob.caller) == ("alice", "bob")
    assert len(memo) == 0  # one request is not yet a conversation worth memory
    (_, alice), (_, bob) = read_with_inbound(reader, body, "alice"), read_with_inbound(reader, body, "bob")
    assert len(memo) == 2 and alice.known_prefix is None
    _, anonymous = read_with_inbound(reader, {"model": "m", "input": "hi"})
    assert anonymous.conversation is None and len(memo) == 2
    assert alice.body_size == len(orjson.dumps(body))
    _, third = read_with_inbound(
        reader, {**body, "input": [message("user", "hi"), message("user", "go")]}, "alice"
    )
    assert third.known_prefix is not None and third.known_prefix[1] == 1


def test_an_additional_tools_item_a_later_turn_adds_is_offered() -> None:
    # The face's item types (Inbound.input_kinds) tell the chat translation whether to look
    # for `additional_tools` items at all: a later turn's new one must still be found.
    reader = RequestReader(Memo(1 << 20))
    late = {"type": "additional_tools", "tools": [{"type": "function", "name": "late"}]}
    items: list[dict[str, Any]] = []
    offered, known = [], []
    for turn in range(5):
        if turn == 3:
            items.append(late)
        items.append(message("user", f"turn {turn}"))
        req, inbound = read_with_inbound(reader, {"model": "m", "input": items, "prompt_cache_key": "k"})
        chat = to_chat_request(req, ChatDialect(), "m", kinds=inbound.input_kinds)
        offered.append([tool["function"]["name"] for tool in chat.body.get("tools", ())])
        known.append(inbound.input_kinds is not None)
    assert offered == [[], [], [], ["late"], ["late"]]
    assert known == [False, True, True, True, True]


def test_a_memo_knows_a_returning_key_among_its_last_entries() -> None:
    memo: Memo[str] = Memo(max_weight=100, max_entries=2)
    assert not memo.returning("a") and memo.returning("a")
    assert not memo.returning("b") and not memo.returning("c")  # "a" is now the oldest of three
    assert not memo.returning("a")
    memo.put("kept", "x", 10)
    assert memo.returning("kept")


@pytest.mark.parametrize("seed", range(6))
def test_a_spliced_body_reads_as_the_whole_body_does(seed: int) -> None:
    # From the third turn the face reads the repeated history from its memory of the bytes
    # (wire/known_body.py): the request must be what a full read gives, every field.
    memo: Memo[Remembered] = Memo(1 << 24)
    reader = RequestReader(memo)
    conversation = Conversation(300 + seed)
    spliced = 0
    for turn in range(12):
        conversation.step()
        if turn == 8:  # an old item rewritten: the splice stops there
            conversation.items[1] = message("user", "fix it again")
        body = {**conversation.request(), "text": {"verbosity": "low"}, "metadata": {"turn": "x"}}
        remembered = memo.get("\x00thread-1")
        req, _ = read_with_inbound(reader, body)
        assert req == parse_request(orjson.loads(orjson.dumps(body)))
        if remembered is not None and remembered.body is not None:
            spliced += req.input[0] is remembered.body.items[0]
    assert spliced >= 8


@pytest.mark.parametrize("seed", range(4))
def test_the_face_knows_every_item_type_a_request_holds(seed: int) -> None:
    # server/state.py looks for item references and compaction items among these instead
    # of reading every item: each type a request holds must be there (more only costs time).
    reader = RequestReader(Memo(1 << 24))
    conversation = Conversation(500 + seed)
    rng = random.Random(seed)
    for turn in range(14):
        conversation.step()
        if turn == 6:
            conversation.items.append({"type": "compaction", "encrypted_content": "x"})
        if turn == 9:  # an earlier turn sent again, without the compaction item
            conversation.items = conversation.items[: rng.randint(1, 5)]
        req, inbound = read_with_inbound(reader, conversation.request())
        kinds = {item.get("type") for item in req.input}
        assert inbound.input_kinds is None or kinds <= inbound.input_kinds, turn
        if turn >= 2:
            assert inbound.input_kinds is not None
        if 6 <= turn < 9:
            assert "compaction" in (inbound.input_kinds or ())


def test_a_spliced_body_still_checks_what_is_new() -> None:
    reader = RequestReader(Memo(1 << 20))
    body = {"model": "m", "input": [message("user", "hi")], "prompt_cache_key": "k"}
    for _ in range(2):
        read(reader, body)
    with pytest.raises(InvalidRequest) as info:
        read(
            reader,
            {**body, "input": [message("user", "hi"), {"type": "message", "role": "robot", "content": "x"}]},
        )
    assert info.value.param == "input[1].role"


def test_the_memo_is_bounded_by_entries_and_weight_least_recently_used_first() -> None:
    memo: Memo[str] = Memo(max_weight=100, max_entries=3)
    for key in "abc":
        memo.put(key, key, 10)
    assert memo.get("a") == "a"  # now the most recent
    memo.put("d", "d", 10)
    assert memo.get("b") is None and len(memo) == 3
    memo.put("e", "e", 85)  # over the weight: the oldest go until it fits
    assert memo.get("e") == "e" and memo.get("c") is None and memo.get("a") is None
    assert memo.weight == 95
    memo.put("huge", "x", 101)  # heavier than the whole budget: not kept, nothing evicted
    assert memo.get("huge") is None and memo.get("e") == "e"
    memo.put("e", "e2", 5)  # replacing re-weighs
    assert memo.get("e") == "e2" and memo.get("d") == "d" and memo.weight == 15


def test_a_value_lighter_than_the_memos_minimum_is_not_kept_and_drops_the_older_one() -> None:
    memo: Memo[str] = Memo(max_weight=100, min_weight=20)
    memo.put("a", "big", 30)
    memo.put("b", "small", 19)
    assert memo.get("b") is None and memo.get("a") == "big"
    memo.put("a", "shrunk", 10)  # a key whose new value is too light forgets the old one
    assert memo.get("a") is None and memo.weight == 0


def test_the_gateway_remembers_only_conversations_past_history_cache_min_kb() -> None:
    from codexgate.backends.http.transport import AiohttpTransport
    from codexgate.backends.kinds import Building
    from codexgate.backends.log import OnceLog
    from codexgate.config import Settings

    def building(settings: Settings) -> Building:
        return Building(settings, {}, AiohttpTransport(), OnceLog())

    memo = building(Settings(history_cache_mb=1, history_cache_min_kb=4)).history()
    assert memo is not None
    memo.put("short", "x", 4095)
    memo.put("long", "y", 4096)
    assert memo.get("short") is None and memo.get("long") == "y"
    assert building(Settings(history_cache_mb=0)).history() is None


def test_cut_markers_of_the_remembered_turn_still_apply_to_new_items() -> None:
    # A client that sends a cut answer again, with its id, after the marker: a full pass
    # leaves it out, so resuming must too.
    items = [message("user", "hi"), message("assistant", "loop", "msg_1"), cut_marker("rs_2", ["msg_1"])]
    first = translate({"model": "m", "input": items}, ChatDialect())
    later = [*items, message("assistant", "loop", "msg_1"), message("user", "again")]
    resumed = translate({"model": "m", "input": later}, ChatDialect(), first.checkpoint)
    assert resumed.encode() == translate({"model": "m", "input": later}, ChatDialect()).encode()
    assert [m["content"] for m in resumed.body["messages"]] == ["hi", "again"]


@pytest.mark.parametrize("seed", range(8))
def test_a_conversation_read_by_the_face_and_resumed_by_the_backend_matches_a_full_pass(seed: int) -> None:
    # The face compares the re-sent items once and says so (known_prefix); the backend then
    # trusts that only for the very list its checkpoint was made from.
    reader = RequestReader(Memo(1 << 24))
    conversation = Conversation(100 + seed)
    checkpoint: Checkpoint | None = None
    previous: ResponsesRequest | None = None
    for turn in range(20):
        conversation.step()
        if turn % 7 == 6:  # now and then the client rewrites an old item: nothing is trusted
            conversation.items[1] = message("user", f"fix it, take {turn}")
        body = conversation.request()
        req, inbound = read_with_inbound(reader, body)
        if previous is not None and inbound.known_prefix is not None:
            assert inbound.known_prefix[0] is previous.input
        resumed = to_chat_request(req, ChatDialect(), "up", checkpoint, inbound.known_prefix)
        assert resumed.encode() == translate(body, ChatDialect()).encode()
        checkpoint, previous = resumed.checkpoint, req


@pytest.mark.parametrize("instructions", [None, "be brief"])
@pytest.mark.parametrize("tools", [[], TOOLS])  # TOOLS: a hosted tool, so a notice
@pytest.mark.parametrize("first_role", ["user", "system", "developer"])
def test_a_checkpoint_keeps_the_json_of_every_message_it_holds_and_no_other(
    instructions: str | None, tools: list[dict[str, Any]], first_role: str
) -> None:
    """Whatever `finish` puts before the translated messages (the instructions' system message,
    a notice), the encodings kept for the next turn are exactly those of the messages the
    checkpoint holds and the request sent: none is encoded again next turn, and none is kept
    for a message that only this request sends."""
    items = [
        message(first_role, "rules"),
        message("user", "hi"),
        message("assistant", "hi"),
        message("user", "go"),
    ]
    body = {"model": "m", "instructions": instructions, "input": items, "tools": tools}
    for dialect in (ChatDialect(), ChatDialect(developer_role="system")):
        first = translate(body, dialect)
        first.encode()
        assert first.checkpoint is not None
        assert set(first.checkpoint.history.encoded) == _held_and_sent(first)
        items.append(message("user", "more"))
        second = translate({**body, "input": list(items)}, dialect, first.checkpoint)
        assert second.encode() == translate({**body, "input": list(items)}, dialect).encode()
        assert second.checkpoint is not None
        assert set(second.checkpoint.history.encoded) == _held_and_sent(second)
        items.pop()


def _held_and_sent(request: ChatRequest) -> set[int]:
    """The ids of the messages a request's checkpoint holds that the request sent as they are
    (a notice joins a leading system message as a copy: the held one is not sent)."""
    assert request.checkpoint is not None
    sent = set(map(id, request.body["messages"]))
    return {id(m) for m in request.checkpoint.history.builder.messages if id(m) in sent}
