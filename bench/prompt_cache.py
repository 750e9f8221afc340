"""How much of a Codex session's input an `anthropic` upstream reads from its prompt cache, with
the breakpoints the gateway places (`prompt_cache = "auto"`, docs/backends.md):

    uv run python bench/prompt_cache.py            # 10 turns, a few seconds
    uv run python bench/prompt_cache.py --turns 20 --off   # longer; --off: no breakpoints

A 10-turn Codex-shaped session (Codex 0.169's tools and history shape, tests/support/codex_requests.py;
a first prompt of about 7k tokens: base instructions, the permissions and environment
messages, the tools) goes through the gateway (the real app, in process) to the scripted
Messages server of the tests (tests/support/fake_messages_upstream.py), which accounts for
caching by Anthropic's documented rules: a cache entry is the prefix up to a breakpoint (at
most four), written when it holds 1,024 tokens or more; a request reads the longest cached
prefix ending at one of its breakpoints or up to 20 blocks before one; 4 bytes a token. Each
turn the model thinks and calls `exec_command`, and the client sends the whole history back
with the command's output (1-3 KB, growing), as Codex does over HTTP; the last answer is text.

Printed per turn: the input tokens, the cache reads and writes, and the share read from the
cache. The target (issue 41): turns 2-10 read at least 85% of their input from the cache;
the exit status is 1 when a turn misses it (or, with --off, when anything was read).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import httpx  # noqa: E402
from tests.support.asgi_client import StreamingASGITransport  # noqa: E402
from tests.support.asgi_upstream import ASGIUpstreamTransport  # noqa: E402
from tests.support.codex_requests import codex_body, text_message  # noqa: E402
from tests.support.fake_messages_upstream import (  # noqa: E402
    FakeMessagesUpstream,
    MessageReply,
    Text,
    Thinking,
    ToolUse,
    message_reply,
)
from tests.support.sse import sse_events  # noqa: E402

from codexgate.app import build_app  # noqa: E402
from codexgate.config import load_settings  # noqa: E402

JSON = dict[str, Any]
MODEL = "claude-sonnet-4-5"
TARGET = 0.85

# About 24 KB of base instructions, shaped as Codex's own prompt is (sections of rules).
_SECTION = (
    "## {n}. How you work\n"
    "You are a coding agent running in the user's terminal. Read the files you need before you change "
    "them, keep edits small and focused, and run the project's tests after each change. Prefer the "
    "tools you were given over guessing; when a command fails, read its output and fix the cause. "
    "Never invent file contents, commands or results; say what you ran and what it printed. Keep the "
    "user informed with short updates, and finish with a summary of what changed and how it was "
    "checked.\n"
)
BASE_INSTRUCTIONS = "".join(_SECTION.format(n=n) for n in range(1, 53))
PERMISSIONS = (
    "<permissions instructions>Filesystem sandboxing: workspace-write. Network: restricted. Approval "
    "policy: never. Commands run inside the workspace; ask before writing elsewhere."
    "</permissions instructions>"
)
ENVIRONMENT = (
    "<environment_context><cwd>/home/dev/project</cwd><shell>bash</shell>"
    "<current_date>2026-12-01</current_date></environment_context>"
)


def first_input() -> list[JSON]:
    return [
        text_message("developer", PERMISSIONS),
        text_message("user", ENVIRONMENT),
        text_message("user", "The CI is red on main: find why and fix it, then run the whole suite."),
    ]


def command_output(turn: int) -> str:
    """What the n-th command printed: 1 KB at first, a little more each turn."""
    lines = [
        f"tests/test_module_{turn}_{i}.py::test_case_{i} PASSED [{i * 3}%]" for i in range(14 + 3 * turn)
    ]
    return "\n".join(lines) + f"\n== {len(lines)} passed in {turn + 1}.2s =="


def script(turns: int) -> list[MessageReply]:
    replies = [
        message_reply(
            Thinking(f"Step {n}: the last output says what to look at next; run the next check."),
            Text(f"Running check {n}."),
            ToolUse("exec_command", {"cmd": f"uv run pytest -q tests/part_{n}"}),
        )
        for n in range(1, turns)
    ]
    return [*replies, message_reply(Thinking("All green."), Text("Fixed: the suite passes."))]


async def session(turns: int, prompt_cache: str) -> list[JSON]:
    fake = FakeMessagesUpstream(script(turns))
    upstream = {
        "name": "claude",
        "kind": "anthropic",
        "base_url": "http://claude.test/v1",
        "prompt_cache": prompt_cache,
    }
    settings = load_settings({"discover": False, "store": "none", "upstreams": [upstream]}, environ={})
    app = build_app(settings, transport=ASGIUpstreamTransport(fake), environ={})
    items = first_input()
    async with httpx.AsyncClient(
        transport=StreamingASGITransport(app), base_url="http://gw", timeout=30
    ) as http:
        for turn in range(1, turns + 1):
            body = codex_body(items, model=MODEL, instructions=BASE_INSTRUCTIONS)
            raw = await http.post("/v1/responses", json=body)
            events = sse_events(raw.content)
            response = events[-1]["response"]
            if events[-1]["type"] != "response.completed":
                raise SystemExit(f"turn {turn}: {events[-1]['type']}: {response.get('error')}")
            output = response["output"]
            items = [*items, *output]
            for item in output:
                if item["type"] == "function_call":
                    items.append(
                        {
                            "type": "function_call_output",
                            "call_id": item["call_id"],
                            "output": command_output(turn),
                        }
                    )
    if fake.refusals:
        raise SystemExit(f"the upstream refused a request: {fake.refusals[0]}")
    return [r.usage or {} for r in fake.requests]


def report(usages: list[JSON], prompt_cache: str) -> int:
    print(f"prompt_cache = {prompt_cache!r}: a {len(usages)}-turn Codex session, tokens at 4 bytes each")
    print(f"{'turn':>4} {'input':>8} {'read':>8} {'written':>8} {'uncached':>8} {'read share':>10}")
    misses = 0
    for turn, usage in enumerate(usages, 1):
        read, written = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
        total = usage["input_tokens"] + read + written
        share = read / total if total else 0.0
        if turn > 1 and (share < TARGET if prompt_cache == "auto" else read > 0):
            misses += 1
        print(f"{turn:>4} {total:>8} {read:>8} {written:>8} {usage['input_tokens']:>8} {share:>9.1%}")
    later = usages[1:]
    read = sum(u["cache_read_input_tokens"] for u in later)
    total = sum(
        u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"] for u in later
    )
    print(
        f"turns 2-{len(usages)}: {read / total if total else 0:.1%} of {total} input tokens "
        "read from the cache"
    )
    if misses:
        print(
            f"{misses} turn(s) missed the target ({TARGET:.0%} read)"
            if prompt_cache == "auto"
            else "read with no breakpoints"
        )
    return 1 if misses else 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--off", action="store_true", help='prompt_cache = "off": no breakpoints')
    args = parser.parse_args()
    prompt_cache = "off" if args.off else "auto"
    return report(asyncio.run(session(args.turns, prompt_cache)), prompt_cache)


if __name__ == "__main__":
    raise SystemExit(main())
