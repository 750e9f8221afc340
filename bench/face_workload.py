"""The same conversations in two dialects, for bench/faces.py: a Responses body as Codex sends it
and a Messages body as Claude Code sends it, each carrying the same system text, the same
function tools, the same history (user text, the model's words, tool calls and their outputs)
and the same max tokens, so that both faces hand the upstream the same chat request.

A conversation is written once in a neutral form (`Conversation`: turns of blocks) and then
encoded in each dialect (`responses_body`, `messages_body`). `Sessions` holds many such
conversations as bytes, each request one turn further (an answer and the user's next message,
as `under_load.Sessions` does for Codex), with its session named as each client names it: Codex
by `prompt_cache_key`, Claude Code by the `X-Claude-Code-Session-Id` header and the
`session_id` in `metadata.user_id` (a JSON object in a string, as Claude Code 2.1+ sends it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import orjson
from workload import _prose, _test_log, codex_tools

JSON = dict[str, Any]
RESPONSES, MESSAGES = "responses", "messages"
FACES = (RESPONSES, MESSAGES)
MAX_TOKENS = 32_000  # what Claude Code asks for, whatever the model
SESSION_HEADER = "x-claude-code-session-id"
# The other headers Claude Code sends (the betas of 2.1.x; the gateway ignores unknown ones).
CLAUDE_HEADERS = {
    "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27",
    "x-app": "cli",
}
_MODEL = "__bench_model__"
# Claude Code's first system block (after its billing line, which the gateway drops), the
# Responses body's instructions too: the upstream's system message is then the same.
IDENTITY = "You are Claude Code, Anthropic's official CLI for Claude."
_MARKER = "__bench_tail__"


# -- the neutral conversation ------------------------------------------------------------------


@dataclass
class Conversation:
    """System text, function tools (name, description, JSON Schema) and turns: each a role
    ("user" or "assistant") and its blocks: ("text", text), ("call", id, name, arguments as
    JSON text) from the assistant, ("result", id, output) from the user."""

    system: str
    tools: list[tuple[str, str, JSON]]
    turns: list[tuple[str, list[tuple[str, ...]]]] = field(default_factory=list)


def conversation(seed: int, size: int, tool: tuple[str, str, JSON] | None = None) -> Conversation:
    """A coding session of about `size` bytes of text: a system prompt of ~10 KB, Codex's
    function tools (and `tool`, a session's own), the user's task, then tool turns (a shell
    call and its test log, now and then the model's words and the user's next request)."""
    rng = random.Random(seed)
    tools = [(t["name"], t["description"], t["parameters"]) for t in codex_tools() if t["type"] == "function"]
    if tool is not None:
        tools.append(tool)
    conv = Conversation(
        "You are a coding agent working in the user's repository.\n\n" + _prose(rng, 10_000), tools
    )
    environment = "<environment>\n  cwd: /work/project\n  shell: bash\n</environment>"
    task = "The parser test with nested quotes fails; find out why and fix it."
    conv.turns.append(("user", [("text", environment), ("text", task)]))
    written = len(conv.system) + 3000
    turn = 0
    while written < size:
        turn += 1
        add_tool_turn(
            conv, rng, f"toolu_{seed:05d}{turn:04d}{rng.getrandbits(48):012x}", rng.randint(1000, 6000)
        )
        written += len(conv.turns[-1][1][0][2]) + 200
    return conv


def add_tool_turn(conv: Conversation, rng: random.Random, call_id: str, output_chars: int) -> None:
    """The model calls the shell; the user's next turn is its output."""
    words: list[tuple[str, ...]] = []
    if rng.random() < 0.3:
        words.append(("text", _prose(rng, 200)))
    arguments = orjson.dumps({"command": ["bash", "-lc", "uv run pytest -q"], "workdir": "/work/project"})
    conv.turns.append(("assistant", [*words, ("call", call_id, "shell", arguments.decode())]))
    log = _test_log(rng, output_chars)
    conv.turns.append(
        ("user", [("result", call_id, f"Exit code: 0\nWall time: 0.4 seconds\nOutput:\n{log}")])
    )


def session_tool(i: int) -> tuple[str, str, JSON]:
    """An MCP tool of session `i`'s own (as under_load's sessions have)."""
    schema = {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
              "required": ["query"]}  # fmt: skip
    return f"mcp__repo{i}__search_code", f"Search the code of repository {i}.", schema


def next_turn(turn: int) -> list[tuple[str, list[tuple[str, ...]]]]:
    """What a conversation gains in its `turn`-th request: the answer and the user's next words."""
    return [
        ("assistant", [("text", f"Step {turn} is done; the tests pass.")]),
        ("user", [("text", f"Good. Now do step {turn + 1} of the plan.")]),
    ]


# -- each dialect ------------------------------------------------------------------------------


def responses_items(turns: list[tuple[str, list[tuple[str, ...]]]]) -> list[JSON]:
    """Items; a turn's text blocks one after another are one message's parts (one message, as
    the Messages face makes of a message's text blocks)."""
    items: list[JSON] = []
    for role, blocks in turns:
        kind = "input_text" if role == "user" else "output_text"
        last: JSON | None = None  # the message the turn's next text block joins
        for block in blocks:
            if block[0] == "text":
                if last is None:
                    last = {"type": "message", "role": role, "content": []}
                    items.append(last)
                last["content"].append({"type": kind, "text": block[1]})
                continue
            last = None
            if block[0] == "call":
                items.append(
                    {"type": "function_call", "name": block[2], "arguments": block[3], "call_id": block[1]}
                )
            else:
                items.append({"type": "function_call_output", "call_id": block[1], "output": block[2]})
    return items


def messages_list(turns: list[tuple[str, list[tuple[str, ...]]]], cache_last: bool = False) -> list[JSON]:
    """Messages; `cache_last`: a `cache_control` on the last block, as Claude Code marks it."""
    out: list[JSON] = []
    for role, blocks in turns:
        content: list[JSON] = []
        for block in blocks:
            if block[0] == "text":
                content.append({"type": "text", "text": block[1]})
            elif block[0] == "call":
                content.append(
                    {"type": "tool_use", "id": block[1], "name": block[2], "input": orjson.loads(block[3])}
                )
            else:
                content.append({"type": "tool_result", "tool_use_id": block[1], "content": block[2]})
        out.append({"role": role, "content": content})
    if cache_last and out:
        out[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return out


def responses_body(conv: Conversation, model: str, session: str | None) -> JSON:
    """As Codex sends it (without reasoning, which the Messages body does not ask for either)."""
    body: JSON = {
        "model": model,
        "instructions": f"{IDENTITY}\n\n{conv.system}",
        "input": responses_items(conv.turns),
        "tools": [
            {"type": "function", "name": n, "description": d, "strict": False, "parameters": s}
            for n, d, s in conv.tools
        ],  # fmt: skip
        "tool_choice": "auto",
        "store": False,
        "stream": True,
        "max_output_tokens": MAX_TOKENS,
    }
    if session is not None:
        body["prompt_cache_key"] = session
    return body


def user_id(session: str) -> str:
    """Claude Code 2.1's `metadata.user_id`: a JSON object in a string."""
    ids = {"device_id": "5f1c0b1e" * 8, "account_uuid": "", "session_id": session}
    return orjson.dumps(ids).decode()


def messages_body(conv: Conversation, model: str, session: str | None) -> JSON:
    """As Claude Code sends it: the system as blocks with `cache_control`, tools with
    `input_schema`, `metadata.user_id`, `max_tokens`."""
    body: JSON = {
        "model": model,
        "messages": messages_list(conv.turns, cache_last=True),
        "system": [
            {"type": "text", "text": IDENTITY},
            {"type": "text", "text": conv.system, "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [{"name": n, "description": d, "input_schema": s} for n, d, s in conv.tools],
        "max_tokens": MAX_TOKENS,
        "stream": True,
    }
    if session is not None:
        body["metadata"] = {"user_id": user_id(session)}
    return body


def headers_for(face: str, session: str | None) -> dict[str, str]:
    if face == RESPONSES:
        return {}
    return {**CLAUDE_HEADERS, SESSION_HEADER: session} if session else dict(CLAUDE_HEADERS)


def body_for(face: str, conv: Conversation, model: str, session: str | None) -> bytes:
    make = responses_body if face == RESPONSES else messages_body
    return orjson.dumps(make(conv, model, session))


# -- many sessions, as bytes -------------------------------------------------------------------


class Sessions:
    """`count` distinct conversations of about `size` bytes, in both dialects. A request is a
    session's head bytes (its history but the last turn), then its last turn and the turns it
    had since, encoded anew (Claude Code's cache mark is on the last block), then its tail:
    making the next turn is a join and a small encode, not an encode of 50 KB. Each face counts
    its own turns, so both meet the same requests; `renamed` gives the same conversations
    under session ids no request used yet (new sessions, for a burst)."""

    def __init__(self, count: int, size: int, prefix: str = "bench-session") -> None:
        self.parts: dict[str, list[tuple[bytes, bytes]]] = {face: [] for face in FACES}
        self.last: list[tuple[str, list[tuple[str, ...]]]] = []
        self.ids: list[str] = []
        for i in range(count):
            conv = conversation(1000 + i, size, session_tool(i))
            session = f"{prefix}-{i:04d}-{random.Random(i).getrandbits(64):016x}"
            self.ids.append(session)
            self.last.append(conv.turns[-1])
            conv.turns[-1] = ("user", [("text", _MARKER)])
            for face in FACES:
                raw = body_for(face, conv, _MODEL, session)
                head, tail = raw.split(self._encoded(face, conv.turns[-1:]))
                self.parts[face].append((head.rstrip(b","), tail))
        self.turns = {face: [0] * count for face in FACES}

    @staticmethod
    def _encoded(face: str, turns: list[tuple[str, list[tuple[str, ...]]]]) -> bytes:
        made = responses_items(turns) if face == RESPONSES else messages_list(turns, cache_last=True)
        return b",".join(orjson.dumps(x) for x in made)

    def size(self, face: str) -> int:
        """The first request's bytes on `face`."""
        return len(self.request(face, 0, 0, _MODEL)[0])

    def renamed(self, prefix: str) -> Sessions:
        """The same conversations at their first turn, under session ids no request used yet."""
        other = object.__new__(Sessions)
        other.ids = [session.replace("bench-session", prefix, 1) for session in self.ids]
        other.parts = {
            face: [
                (h.replace(o.encode(), n.encode()), t.replace(o.encode(), n.encode()))
                for (h, t), o, n in zip(parts, self.ids, other.ids, strict=True)
            ]
            for face, parts in self.parts.items()
        }
        other.last = self.last
        other.turns = {face: [0] * len(self.ids) for face in FACES}
        return other

    def request(self, face: str, i: int, turn: int, model: str) -> tuple[bytes, dict[str, str]]:
        """Session `i`'s `turn`-th request on `face` (0: its first), and the headers sent with it."""
        head, tail = self.parts[face][i]
        added = [self.last[i], *(t for n in range(1, turn + 1) for t in next_turn(n))]
        body = head + b"," + self._encoded(face, added) + tail
        return body.replace(_MODEL.encode(), model.encode(), 1), headers_for(face, self.ids[i])

    def next_request(self, face: str, i: int, model: str) -> tuple[bytes, dict[str, str]]:
        """Session `i`'s next request on `face`: its whole history again, one turn further."""
        turn = self.turns[face][i]
        self.turns[face][i] = turn + 1
        return self.request(face, i, turn, model)


def growing_session(
    model: str, count: int = 16, session: str = "bench-one-session"
) -> dict[str, list[bytes]]:
    """One session's `count` requests in each dialect, from ~45 KB to ~85 KB: each the whole
    conversation again plus one tool turn (a shell call and its output), as per_core's growing
    session is for Codex."""
    conv = conversation(2, 40_000, session_tool(0))
    rng = random.Random(3)
    out: dict[str, list[bytes]] = {face: [] for face in FACES}
    for turn in range(count):
        if turn:
            add_tool_turn(conv, rng, f"toolu_grow{turn:04d}{rng.getrandbits(48):012x}", 2600)
        for face in FACES:
            out[face].append(body_for(face, conv, model, session))
    return out
