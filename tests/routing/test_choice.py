"""Which member first (routing/choice.py): rendezvous hashing moves only a lost member's
conversations, the balances order as they say, and stickiness yields only to a large imbalance."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from codexgate.routing.choice import Chooser, rendezvous, yields


@dataclass
class M:
    name: str
    load: int = 0


def test_losing_a_member_moves_only_its_conversations_and_adding_one_only_some() -> None:
    three = [M("a"), M("b"), M("c")]
    keys = [f"conversation-{i}" for i in range(600)]
    before = {key: rendezvous(key, three)[0].name for key in keys}
    after = {key: rendezvous(key, [m for m in three if m.name != "b"])[0].name for key in keys}
    moved = [key for key in keys if before[key] != after[key]]
    assert moved and all(before[key] == "b" for key in moved)
    assert 150 < Counter(before.values())["a"] < 250  # about a third each
    four = {key: rendezvous(key, [*three, M("d")])[0].name for key in keys}
    changed = [key for key in keys if four[key] != before[key]]
    assert all(four[key] == "d" for key in changed) and 100 < len(changed) < 200


def test_the_same_conversation_ranks_the_members_alike_everywhere() -> None:
    members = [M("gpu1"), M("gpu2"), M("gpu3")]
    order = [m.name for m in rendezvous("thread-42", members)]
    assert [m.name for m in rendezvous("thread-42", list(reversed(members)))] == order


def test_stickiness_yields_only_past_both_thresholds() -> None:
    assert not yields(3, 0)  # 3 more: not enough
    assert yields(4, 0) and yields(6, 1)
    assert not yields(7, 3)  # 4 more, but not twice the idlest's load plus one


def test_least_busy_round_robin_and_weighted() -> None:
    members = [M("a", 3), M("b", 0), M("c", 1)]
    assert [m.name for m in Chooser("least_busy").order(members, [0, 1, 2])][:2] == ["b", "c"]
    rr = Chooser("round_robin")
    firsts = [rr.order(members, [0, 1, 2])[0].name for _ in range(6)]
    assert Counter(firsts) == {"a": 2, "b": 2, "c": 2}
    weighted = Chooser("weighted", [3, 1, 0.5])
    picks = Counter(weighted.order(members, [0, 1, 2])[0].name for _ in range(900))
    assert picks == {"a": 600, "b": 200, "c": 100}
    assert Counter(weighted.order(members[1:], [1, 2])[0].name for _ in range(300)) == {"b": 200, "c": 100}
