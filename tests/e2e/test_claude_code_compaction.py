"""The pinned Claude Code compacts a session that outgrows its route's window, through a real
`codexgate serve` to a scripted Chat Completions upstream, both ways it can:

- ahead of time, with the settings `claude-setup` writes (CLAUDE_CODE_MAX_CONTEXT_TOKENS and
  CLAUDE_CODE_MAX_OUTPUT_TOKENS): it summarises before a request would pass the window;
- after the fact, with no window given to it (it assumes 1M): the upstream refuses the prompt
  as llama.cpp does, the gateway answers Claude Code's "prompt is too long", and it summarises.

The upstream plays a model that reads its log with Bash, 18 KB a call (under the 30 KB past
which Claude Code keeps an output in a file), and reports the prompt tokens a model would (the
body's bytes / 4: Claude Code decides when to compact from the usage it is given). Asked for a
summary (Claude Code's compaction prompt), it writes one holding a marker; a conversation that
holds the marker is answered.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from codexgate.commands.claude_setup.settings import ClaudeRoutes, claude_env
from tests.e2e.test_claude_code_gateway import MODEL, access_lines, bash, claude, gateway
from tests.support.fake_upstream import Reply, Usage, error_reply, text_reply, tool_calls_reply

pytestmark = pytest.mark.e2e

JSON = dict[str, Any]
COMPACT_PROMPT = "create a detailed summary of the conversation"  # Claude Code 2.1.332's
CONTINUED = "continued from a previous conversation"  # the first message after it
SUMMARY = "SUMMARY-7F3: the log was read in four parts."
ANSWER = "The log is read; SUMMARY-7F3 holds it."
READS = 4  # Bash calls before the model is done: ~5,000 tokens each


def reading_model(
    window: int | None = None, too_long: Callable[[int, int], JSON] | None = None
) -> Callable[[JSON], Reply]:
    """The upstream's answer to each request. With `window`, a prompt past it (estimated as a
    model's usage is: bytes / 4) is refused with the error `too_long(prompt, window)`."""

    def answer(body: JSON) -> Reply:
        prompt = len(json.dumps(body)) // 4
        if window is not None and too_long is not None and prompt > window:
            return error_reply(400, too_long(prompt, window))
        usage = Usage(prompt_tokens=prompt, completion_tokens=20)
        last = str(body["messages"][-1]["content"])
        if COMPACT_PROMPT in last:
            return text_reply(
                f"<analysis>Read the log.</analysis>\n<summary>{SUMMARY}</summary>", usage=usage
            )
        if "SUMMARY-7F3" in json.dumps(body["messages"]):
            return text_reply(ANSWER, usage=usage)
        part = sum(1 for m in body["messages"] if m["role"] == "tool")
        if part >= READS:
            return text_reply("Read it all without a summary.", usage=usage)
        command = f"python3 -c \"print(('log part {part} lorem ipsum ' * 15 + chr(10)) * 50)\""
        return tool_calls_reply([("Bash", bash(command))], usage=usage)

    return answer


def llama_cpp_too_long(prompt: int, window: int) -> JSON:
    """llama.cpp's words, which Claude Code 2.1.332 also recognises itself."""
    return {
        "error": {
            "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": prompt, "n_ctx": window,
            "message": "the request exceeds the available context size, try increasing it",
        }
    }  # fmt: skip


def coded_too_long(prompt: int, window: int) -> JSON:
    """OpenAI's code with words of the upstream's own, which Claude Code does not know: only the
    gateway's "prompt is too long: N tokens > M maximum" makes it compact."""
    message = f"Input of {prompt} tokens is more than this model takes ({window})."
    return {"error": {"type": "invalid_request_error", "code": "context_length_exceeded", "message": message}}


def _compactions(bodies: list[JSON]) -> list[int]:
    return [n for n, body in enumerate(bodies) if COMPACT_PROMPT in str(body["messages"][-1]["content"])]


def test_with_claude_setups_settings_a_long_session_is_compacted_before_it_passes_the_window(
    tmp_path: Path,
) -> None:
    window = 32768
    config = f'[[models]]\nname = "{MODEL}"\ncontext_window = {window}\n'
    with gateway(tmp_path, reading_model(), config=config) as (gw, upstream):
        env = claude_env(gw.base + "/v1", "unused", ClaudeRoutes.of(MODEL), window)
        run = claude(tmp_path, gw, "read the log", allowed_tools=["Bash"], env=env)
        access = access_lines(gw)
    assert run.ok, run.describe()
    assert run.result == ANSWER
    bodies = [r.body for r in upstream.requests]
    [compaction] = _compactions(bodies)
    assert 0 < compaction < READS  # before the model had read everything
    after = json.dumps(bodies[compaction + 1]["messages"])
    assert CONTINUED in after and SUMMARY in after
    assert "log part 0" not in after  # the first output is in the summary, no longer sent
    assert all(b["max_tokens"] <= 4096 for b in bodies[:compaction])  # CLAUDE_CODE_MAX_OUTPUT_TOKENS
    # Every request fitted: nothing was refused, and no prompt came near the window.
    assert all("status=200 outcome=completed" in line for line in access), access
    assert max(len(json.dumps(b)) // 4 for b in bodies) < window


@pytest.mark.parametrize("too_long", [llama_cpp_too_long, coded_too_long], ids=["llama.cpp", "coded"])
def test_without_a_window_a_prompt_the_upstream_refuses_as_too_long_is_compacted(
    tmp_path: Path, too_long: Callable[[int, int], JSON]
) -> None:
    """Claude Code assumes 1M tokens; the model holds 24,000. Its refusal reaches Claude Code as
    Anthropic's "prompt is too long" 400, which it answers by compacting and sending again."""
    window = 24000
    with gateway(tmp_path, reading_model(window, too_long), args=("--max-retries", "0")) as (gw, upstream):
        run = claude(tmp_path, gw, "read the log", allowed_tools=["Bash"])
        access = access_lines(gw)
    assert run.ok, run.describe()
    assert run.result == ANSWER
    statuses = [line.split("status=")[1].split()[0] for line in access]
    refused = statuses.index("400")
    assert "outcome=context_length_exceeded" in access[refused], access
    bodies = [r.body for r in upstream.requests]
    [compaction] = _compactions(bodies)
    assert compaction == refused + 1  # the refused request, then its summary
    after = json.dumps(bodies[compaction + 1]["messages"])
    assert CONTINUED in after and SUMMARY in after
    assert statuses[refused + 1 :] == ["200"] * (len(statuses) - refused - 1), access
