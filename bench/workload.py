"""What the benchmark sends and what the fake upstream answers. Deterministic (seeded).

The scenario of a request rides in its model name, which the gateway passes upstream unchanged
(one upstream, no routes): `bench:<kind>:<chunks>:<chars>:<delay_ms>:<first_ms>`, e.g.
`bench:text:100:4:0:0` is a text answer of 100 deltas of 4 characters sent back to back; `tool`
adds a shell call after the text; `bench:text:50:4:1:5` waits 5 ms after the role chunk
("prefill"), then sends 50 deltas 1 ms apart, as a model streaming tokens does. So the same fake
upstream serves every section, for the gateway and for direct clients alike.

Requests are shaped like Codex's: ~10 KB of base instructions, Codex's tool set (a `shell`
function, the `apply_patch` custom grammar tool, `update_plan`, `view_image`), a developer
message with the sandbox rules, the environment context, then the user's prompt; the 1 MB
history adds turns of reasoning, function_call/function_call_output pairs with big tool outputs
(file listings, test logs, source files), apply_patch calls and follow-up messages.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

JSON = dict[str, Any]

# -- scenarios -------------------------------------------------------------------------------


AT_ONCE = -1.0  # a Scenario's delay_ms for "every chunk in one write"


@dataclass(frozen=True)
class Scenario:
    kind: str  # "text" or "tool"
    chunks: int
    chars: int
    delay_ms: float  # between deltas; AT_ONCE: the whole answer in one write
    first_ms: float = 0.0  # between the role chunk and the first delta ("prefill")

    @property
    def at_once(self) -> bool:
        """The upstream writes the whole answer at once, as a fast server (a short answer, a
        cached prefix, a local model) hands a relay many chunks in one read."""
        return self.delay_ms == AT_ONCE

    @property
    def model(self) -> str:
        return f"bench:{self.kind}:{self.chunks}:{self.chars}:{self.delay_ms:g}:{self.first_ms:g}"

    @classmethod
    def parse(cls, model: str) -> Scenario:
        _, kind, chunks, chars, delay, first = model.split(":")
        return cls(kind, int(chunks), int(chars), float(delay), float(first))

    def text(self) -> str:
        return answer_text(self.chunks * self.chars)

    # What each side emits, for one streamed answer (with usage, as the gateway asks).
    def upstream_events(self) -> int:
        """SSE events the upstream sends: role, text deltas, (call header + argument pieces),
        finish, usage, [DONE]."""
        n = 1 + math.ceil(len(self.text()) / self.chars) + 3
        if self.kind == "tool":
            n += 1 + math.ceil(len(TOOL_ARGS) / 8)
        return n

    def gateway_events(self) -> int:
        """Responses events the gateway sends: created, in_progress, item added, part added,
        deltas, text done, part done, item done, (call added, args delta, args done, item
        done), completed."""
        n = 2 + 2 + self.chunks + 3 + 1
        if self.kind == "tool":
            n += 4
        return n


TOOL_ARGS = orjson.dumps(
    {
        "command": ["bash", "-lc", "uv run pytest -x -q tests/test_parser.py::test_nested_quotes"],
        "workdir": "/work/project",
        "timeout_ms": 120000,
    }
).decode()

# The answer's words. Drawn at random (seeded, so every run streams the same text) rather than
# cycled: a fixed cycle of words is a loop, and codexgate's loop guard (translate/open_models/loops.py)
# rightly stops it with response.failed (model_output_loop), so the figures would measure a
# failure. Some code, punctuation and non-ASCII keep the JSON escaping honest.
_ANSWER_WORDS = (
    "I'll look at the parser first . The failing case is `parse('a \\\"b\\\" c')` : tokenizer treats "
    "escaped quote as a terminator , so the fix belongs in `tokenize` where `quoted` flips . "
    "Next run test suite to confirm — café ✓ \n\n```python\ndef tokenize(src: str) -> list[str]:\n "
    "out buf ch if elif else return append clear join for in not and or None True False "
    "self.state = {} ; [] () -> => 42 0x1f 3.14 naïve résumé 東京 ok fails passes still"
).split(" ")
_ANSWERS: dict[int, str] = {}


def answer_text(n: int) -> str:
    """`n` characters of aperiodic text, the same for the same `n`."""
    if n not in _ANSWERS:
        rng = random.Random(n)
        words: list[str] = []
        size = 0
        while size < n:
            word = rng.choice(_ANSWER_WORDS)
            words.append(word)
            size += len(word) + 1
        _ANSWERS[n] = " ".join(words)[:n]
    return _ANSWERS[n]


def loop_in(text: str, chunk_chars: int) -> str | None:
    """The unit codexgate's loop guard would stop `text` on, streamed in `chunk_chars` pieces;
    None when it streams through (the bench checks every answer with this before it starts)."""
    from codexgate.translate.open_models.loops import RepetitionGuard

    guard = RepetitionGuard()
    for i in range(0, len(text), chunk_chars):
        found = guard.feed(text[i : i + chunk_chars])
        if found is not None:
            return found.unit
    return None


def reply_for(body: JSON) -> Any:
    """The fake upstream's script: the reply named by the request's model."""
    from tests.support.fake_upstream import text_reply, tool_calls_reply

    sc = Scenario.parse(str(body.get("model")))
    if sc.at_once:
        return _at_once_reply(sc, body)
    delay = sc.delay_ms / 1000.0
    if sc.kind == "tool":
        reply = tool_calls_reply(
            [("shell", TOOL_ARGS)], text=sc.text(), chunk_chars=sc.chars, delay_between_chunks=delay
        )
    else:
        reply = text_reply(sc.text(), chunk_chars=sc.chars, delay_between_chunks=delay)
    if sc.first_ms:
        reply.stall_after_chunks, reply.stall_seconds = 1, sc.first_ms / 1000.0
    return reply


_AT_ONCE_REPLIES: dict[str, Any] = {}


def _at_once_reply(sc: Scenario, body: JSON) -> Any:
    """The whole streamed answer as one body message. Rendered once per scenario and usage
    asked or not (the usage is that of the first such request): the fake upstream shares a
    core with the load generator, and rendering 200 chunks per request would be most of its
    work."""
    from tests.support.fake_upstream import _Completion, _usage_for, raw_reply, render_stream, text_reply

    key = f"{sc.model}/{bool((body.get('stream_options') or {}).get('include_usage'))}"
    if key not in _AT_ONCE_REPLIES:
        reply = text_reply(sc.text(), chunk_chars=sc.chars)
        completion = _Completion(
            id="chatcmpl-bench0000000a1b2c3d4e5f6", created=1700000000, model=sc.model,
            usage=_usage_for(reply, body),
        )  # fmt: skip
        _AT_ONCE_REPLIES[key] = b"".join(render_stream(reply, body, completion))
    return raw_reply([_AT_ONCE_REPLIES[key]])


# -- requests --------------------------------------------------------------------------------

_WORDS = (
    "the model should always use tool calls to inspect files before editing them and keep "
    "changes minimal focused and consistent with the existing style of the codebase when a "
    "command fails read the error carefully fix the root cause rather than the symptom and "
    "never revert changes you did not make run tests after each change report results plainly "
    "prefer rg over grep use apply_patch for edits sandbox approvals escalate only when needed"
).split()


def _prose(rng: random.Random, n_chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < n_chars:
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 22)))
        sentence = sentence[0].upper() + sentence[1:] + "."
        if rng.random() < 0.15:
            sentence = (
                "\n\n## " + " ".join(rng.choice(_WORDS) for _ in range(3)).title() + "\n\n- " + sentence
            )
        out.append(sentence)
        size += len(sentence) + 1
    return " ".join(out)


_IDENTS = ("node", "tokens", "result", "src", "path", "cfg", "buf", "state", "ctx", "item", "value")
_FUNCS = ("parse", "load_config", "tokenize", "render", "validate", "emit", "open_file", "split")


def _code(rng: random.Random, n_chars: int) -> str:
    lines: list[str] = []
    size = 0
    indent = 0
    while size < n_chars:
        r = rng.random()
        a, b, f = rng.choice(_IDENTS), rng.choice(_IDENTS), rng.choice(_FUNCS)
        if r < 0.12:
            line = f"def {f}_{rng.randint(0, 999)}({a}: str, {b}: dict[str, Any] | None = None) -> list[str]:"
            indent = 4
        elif r < 0.3:
            line = (
                " " * indent
                + f'{a} = {f}({b}, "{rng.choice(_WORDS)}\\t{rng.randint(0, 99)}")  # {rng.choice(_WORDS)}'
            )
        elif r < 0.4:
            line = " " * indent + f"if {a} is None or not {b}:"
        elif r < 0.5:
            line = " " * indent + f"    raise ValueError(f'bad {{{a}!r}}: \"{rng.choice(_WORDS)}\"')"
        elif r < 0.6:
            line = " " * indent + f"return [{a}.strip() for {a} in {b} if {a}]"
        elif r < 0.65:
            line = ""
        else:
            line = " " * indent + f"{a}.{f}({b}[{rng.randint(0, 9)}:], key=lambda x: x.{rng.choice(_IDENTS)})"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def _test_log(rng: random.Random, n_chars: int) -> str:
    lines = [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0",
        "rootdir: /work/project",
    ]
    size = sum(len(x) for x in lines)
    while size < n_chars:
        name = f"tests/test_{rng.choice(_FUNCS)}.py::test_{rng.choice(_WORDS)}_{rng.randint(0, 99)}"
        if rng.random() < 0.1:
            line = f"FAILED {name} - AssertionError: assert ['a', '\"b\"'] == ['a', 'b']"
        else:
            line = f"{name} PASSED{' ' * rng.randint(1, 20)}[{rng.randint(0, 100):3d}%]"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


# Codex's apply_patch grammar, as the tests use it.
APPLY_PATCH_GRAMMAR = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "apply_patch.lark"
).read_text()


def codex_tools() -> list[JSON]:
    return [
        {
            "type": "function",
            "name": "shell",
            "description": "Runs a shell command and returns its output.\n- The arguments to `shell` will be "
            'passed to execvp(). Most terminal commands should be prefixed with ["bash", "-lc"].\n'
            "- Always set the `workdir` param when using the shell function. Do not use `cd` unless "
            "absolutely necessary.",
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "The command to execute",
                    },
                    "workdir": {
                        "type": "string",
                        "description": "The working directory to execute the command in",
                    },
                    "timeout_ms": {
                        "type": "number",
                        "description": "The timeout for the command in milliseconds",
                    },
                    "with_escalated_permissions": {
                        "type": "boolean",
                        "description": "Whether to request escalated permissions. Set to true if command "
                        "needs "
                        "to be run without sandbox restrictions",
                    },
                    "justification": {
                        "type": "string",
                        "description": "Only set if with_escalated_permissions is true. 1-sentence "
                        "explanation "
                        "of why we want to run this command.",
                    },
                },
                "required": ["command"],
                "additionalProperties": False,
            },
        },
        {
            "type": "custom",
            "name": "apply_patch",
            "description": "Use the `apply_patch` tool to edit files. This is a FREEFORM tool, "
            "so do not wrap "
            "the patch in JSON.",
            "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR},
        },
        {
            "type": "function",
            "name": "update_plan",
            "description": "Updates the task plan.\nProvide an optional explanation and a list of "
            "plan items, "
            "each with a step and status.\nAt most one step can be in_progress at a time.",
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {
                    "explanation": {"type": "string"},
                    "plan": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "step": {"type": "string"},
                                "status": {
                                    "type": "string",
                                    "description": "One of: pending, in_progress, completed",
                                },
                            },
                            "required": ["step", "status"],
                            "additionalProperties": False,
                        },
                        "description": "The list of steps",
                    },
                },
                "required": ["plan"],
                "additionalProperties": False,
            },
        },
        {
            "type": "function",
            "name": "view_image",
            "description": "Attach a local image (by filesystem path) to the conversation context "
            "for this turn.",
            "strict": False,
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Local filesystem path to an image file"}
                },
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    ]


def _msg(role: str, text: str, kind: str = "input_text") -> JSON:
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _first_turn(rng: random.Random) -> list[JSON]:
    permissions = (
        "<permissions instructions>\nFilesystem sandboxing defines which files can be read or written. "
        "`sandbox_mode` is `workspace-write`: The sandbox permits reading files, and editing files in "
        "`cwd` and `writable_roots`.\nApprovals are your mechanism to get user consent to run shell "
        "commands without the sandbox. `approval_policy` is `on-request`.\n"
        + _prose(rng, 1200)
        + "\n</permissions instructions>"
    )
    env = (
        "<environment_context>\n  <cwd>/work/project</cwd>\n  <approval_policy>on-request</approval_policy>\n"
        "  <sandbox_mode>workspace-write</sandbox_mode>\n  <network_access>restricted</network_access>\n"
        "  <shell>bash</shell>\n</environment_context>"
    )
    return [
        _msg("developer", permissions),
        _msg("user", env),
        _msg("user", "The parser test with nested quotes fails; find out why and fix it. Run the tests."),
    ]


def codex_request(scenario: Scenario, *, history_bytes: int = 0, seed: int = 7) -> JSON:
    """A Codex-shaped /v1/responses body; with `history_bytes`, turns are added until the JSON
    is at least that large."""
    rng = random.Random(seed)
    body: JSON = {
        "model": scenario.model,
        "instructions": "You are Codex, a coding agent based on GPT-5. You and the user share the same "
        "workspace and collaborate to achieve the user's goals.\n\n" + _prose(rng, 10_000),
        "input": _first_turn(rng),
        "tools": codex_tools(),
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": False,
        "stream": True,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1f2-6b1c-7d3e-9f00-5a4b3c2d1e0f",
        "client_metadata": client_metadata(0),
    }
    if history_bytes:
        _add_history(body, rng, history_bytes)
    return body


def client_metadata(turn: int) -> JSON:
    """What Codex (0.169+) sends after everything else: ids, one of them the turn's, so that
    no two requests of a conversation end with the same bytes."""
    return {
        "x-codex-installation-id": "b4a69b38-78fd-4e1d-be7b-5fca6b4ee058",
        "session_id": "0199a1f2-6b1c-7d3e-9f00-5a4b3c2d1e0f",
        "turn_id": f"0199a1f2-{turn:04d}-7d3e-9f00-5a4b3c2d1e0f",
    }


def growing(body: bytes, turns: int) -> list[bytes]:
    """`body`, then the same conversation one turn further each time, as Codex sends it: the
    whole history again with an answer and the user's next message appended (~150 bytes a
    turn). A relay that remembers the history it has seen (codexgate's checkpoints, keyed by
    `prompt_cache_key`) then meets what it does in real use: a known prefix and a new tail."""
    data = orjson.loads(body)
    out = [body]
    for turn in range(1, turns):
        answer = _msg("assistant", f"Step {turn} is done; the tests pass.", "output_text")
        data["input"] = data["input"] + [
            {**answer, "id": f"msg_t{turn}"},
            _msg("user", f"Good. Now do step {turn + 1} of the plan."),
        ]
        data["client_metadata"] = client_metadata(turn)
        out.append(orjson.dumps(data))
    return out


def growing_session(scenario: Scenario, count: int = 16, last: int = 85_000, seed: int = 2) -> list[bytes]:
    """One Codex session's `count` requests, from its first (seed 2: 47 KB, two earlier tool
    turns) to about `last` bytes: each the whole conversation again plus one tool turn (a shell
    call, its output of a few KB, now and then the model's words and the user's next message),
    as Codex sends a working session."""
    body = codex_request(scenario, history_bytes=40_000, seed=seed)
    rng = random.Random(seed + 1)
    step = (last - len(orjson.dumps(body))) / max(1, count - 1)
    out = [orjson.dumps(body)]
    for turn in range(1, count):
        target = len(out[-1]) + step
        call_id = f"call_grow{turn:04d}{rng.getrandbits(64):016x}"
        command = orjson.dumps({"command": ["bash", "-lc", "uv run pytest -q"], "workdir": "/work/project"})
        items: list[JSON] = [
            {"type": "function_call", "id": f"fc_grow{turn:04d}", "name": "shell",
             "arguments": command.decode(), "call_id": call_id},
            {"type": "function_call_output", "call_id": call_id, "output": ""},
        ]  # fmt: skip
        if turn % 3 == 0:
            items.append({**_msg("assistant", _prose(rng, 200), "output_text"), "id": f"msg_grow{turn:04d}"})
            items.append(_msg("user", f"Good. Now do step {turn + 1} of the plan."))
        room = int(target - len(out[-1]) - sum(len(orjson.dumps(i)) + 1 for i in items))
        log = _test_log(rng, max(200, room - 60))
        items[1]["output"] = f"Exit code: 0\nWall time: 0.4 seconds\nOutput:\n{log}"
        body["input"] = body["input"] + items
        body["client_metadata"] = client_metadata(turn)
        out.append(orjson.dumps(body))
    return out


def _add_history(body: JSON, rng: random.Random, target: int) -> None:
    from codexgate.translate.reasoning import encode_reasoning

    items: list[JSON] = body["input"]
    size = len(orjson.dumps(body))
    turn = 0
    while size < target:
        turn += 1
        added: list[JSON] = []
        summary = _prose(rng, rng.randint(150, 600))
        added.append(
            {
                "type": "reasoning",
                "id": f"rs_{turn:04d}{rng.getrandbits(64):016x}",
                "summary": [{"type": "summary_text", "text": summary}],
                "content": None,
                "encrypted_content": encode_reasoning(summary),
            }
        )
        if turn % 4 == 0:
            added.append(
                {
                    **_msg("assistant", _prose(rng, rng.randint(100, 500)), "output_text"),
                    "id": f"msg_{turn:04d}",
                }
            )
        call_id = f"call_{rng.getrandbits(96):024x}"
        if turn % 5 == 0:
            patch = (
                "*** Begin Patch\n*** Update File: src/parser.py\n@@ def tokenize\n"
                + "\n".join(
                    ("-" if rng.random() < 0.4 else "+") + line
                    for line in _code(rng, rng.randint(800, 3000)).splitlines()
                )
                + "\n*** End Patch\n"
            )
            added.append(
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{turn:04d}",
                    "status": "completed",
                    "call_id": call_id,
                    "name": "apply_patch",
                    "input": patch,
                }
            )
            added.append(
                {
                    "type": "custom_tool_call_output",
                    "call_id": call_id,
                    "output": "Success. Updated the following files:\nM src/parser.py\n",
                }
            )
        else:
            what = rng.random()
            if what < 0.5:
                cmd, out = (
                    f"sed -n '1,400p' src/{rng.choice(_FUNCS)}.py",
                    _code(rng, rng.randint(4000, 30000)),
                )
            elif what < 0.8:
                cmd, out = "uv run pytest -q", _test_log(rng, rng.randint(3000, 20000))
            else:
                cmd, out = (
                    "rg -n 'tokenize' src tests",
                    "\n".join(
                        f"src/{rng.choice(_FUNCS)}.py:{rng.randint(1, 900)}:{line}"
                        for line in _code(rng, rng.randint(2000, 8000)).splitlines()
                    ),
                )
            arguments = orjson.dumps(
                {"command": ["bash", "-lc", cmd], "workdir": "/work/project", "timeout_ms": 10000}
            ).decode()
            added.append(
                {
                    "type": "function_call",
                    "id": f"fc_{turn:04d}",
                    "name": "shell",
                    "arguments": arguments,
                    "call_id": call_id,
                }
            )
            if turn % 2:
                # Older Codex: a JSON string with output and metadata (doubly escaped text).
                output = orjson.dumps(
                    {"output": out, "metadata": {"exit_code": 0, "duration_seconds": 0.4}}
                ).decode()
            else:
                output = f"Exit code: 0\nWall time: 0.4 seconds\nOutput:\n{out}"
            added.append({"type": "function_call_output", "call_id": call_id, "output": output})
        if turn % 9 == 0:
            added.append(_msg("user", "Good. Also check the tokenizer handles escaped backslashes."))
        items.extend(added)
        size += sum(len(orjson.dumps(item)) + 1 for item in added)
