"""What `codexgate claude-setup` writes: the `env` block of Claude Code's `settings.json` that
points it at the gateway, merged into the user's file, or printed.

Claude Code applies each settings file's `env` to its own process environment at start, over
the shell's (docs/claude-code-wire.md, "The settings file"), so one block in
`~/.claude/settings.json` serves interactive and headless use alike. What each variable does
there, as read in and measured with Claude Code 2.1.332:

- `ANTHROPIC_BASE_URL`: the gateway without `/v1`; Claude Code appends `/v1/messages?beta=true`.
- `ANTHROPIC_AUTH_TOKEN`: sent as `Authorization: Bearer`. An `ANTHROPIC_API_KEY` (sent as
  `x-api-key`) makes interactive Claude Code ask once whether to use that key and remember the
  answer in `~/.claude.json`; a token is used without asking. `ANTHROPIC_API_KEY` is written
  empty: one from the shell would otherwise be sent beside the token (a real Anthropic key would
  reach the gateway).
- `ANTHROPIC_MODEL` (the main loop), `ANTHROPIC_DEFAULT_OPUS_MODEL` / `_SONNET_MODEL` /
  `_HAIKU_MODEL` (what the aliases `opus`, `sonnet`, `haiku` of `--model` and `/model` mean),
  `ANTHROPIC_SMALL_FAST_MODEL` (read before the haiku one for side requests: WebFetch's
  summary and such), `CLAUDE_CODE_SUBAGENT_MODEL` (every sub-agent the Agent tool starts).
- `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`: no telemetry, error reports, update checks or
  feature flags; with it nothing but the gateway is called.
- `CLAUDE_CODE_MAX_CONTEXT_TOKENS`: the window Claude Code assumes for a model name it does not
  know (without it: 1,000,000 tokens, so it would never compact before the upstream refuses).
  Ignored for names it takes for Claude's own (`sonnet`, `claude-sonnet-4-5`, ...).
- `CLAUDE_CODE_MAX_OUTPUT_TOKENS`: the `max_tokens` it asks for (default 32,000). Claude Code
  compacts at window - min(max output, 20,000) - 13,000 tokens, so on a small window the
  default would leave no room at all: an eighth of the window is asked for instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "CLAUDE_FIRST_REQUEST_TOKENS",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "MANAGED",
    "ClaudeRoutes",
    "ClaudeSetupError",
    "Written",
    "base_url_for_claude",
    "claude_env",
    "compact_threshold",
    "looks_like_claude_model",
    "max_output_tokens",
    "merge_settings",
    "render_exports",
    "render_json",
    "write_settings",
]

DEFAULT_MAX_OUTPUT_TOKENS = 32_000  # Claude Code's own max_tokens
MIN_OUTPUT_TOKENS = 4_096  # below this a Write of one file does not fit
# Claude Code 2.1.332 compacts once the context passes window - min(max output, 20,000) - 13,000.
_SUMMARY_OUTPUT_CAP = 20_000
_COMPACT_RESERVE = 13_000
# Its first request (system prompt, the 12 tools it lists, the environment): ~49 KB, ~12.5k
# tokens at 4 bytes a token. A window whose compaction threshold is below it compacts at once.
CLAUDE_FIRST_REQUEST_TOKENS = 12_500
# What `claude-setup` manages in the env block: removed when not written again (a window no
# longer known), never touched otherwise.
MANAGED = (
    "ANTHROPIC_BASE_URL",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "CLAUDE_CODE_MAX_CONTEXT_TOKENS",
    "CLAUDE_CODE_MAX_OUTPUT_TOKENS",
)
TOKEN_VARIABLE = "ANTHROPIC_AUTH_TOKEN"
# Model names Claude Code resolves to one of Claude's own, whose window it knows (and for which
# it ignores CLAUDE_CODE_MAX_CONTEXT_TOKENS): its aliases, and ids naming a Claude family.
_CLAUDE_ALIAS = re.compile(r"^(opus|sonnet|haiku|fable|best|default|opusplan)(\[1m\])?$", re.IGNORECASE)
_CLAUDE_ID = re.compile(r"claude-(3|opus|sonnet|haiku|fable|mythos)([-.]|$)", re.IGNORECASE)


class ClaudeSetupError(Exception):
    """The settings cannot be written as asked (an unreadable settings file, a bad value)."""


@dataclass(frozen=True)
class ClaudeRoutes:
    """The gateway's routes for each model Claude Code asks for."""

    main: str
    small: str
    subagent: str
    opus: str
    sonnet: str

    @classmethod
    def of(
        cls,
        main: str,
        *,
        small: str | None = None,
        subagent: str | None = None,
        opus: str | None = None,
        sonnet: str | None = None,
    ) -> ClaudeRoutes:
        """Each one left out is the main route (what Claude Code itself falls back to for the
        small fast model through a gateway)."""
        return cls(main, small or main, subagent or main, opus or main, sonnet or main)

    def conversations(self) -> list[str]:
        """The routes that hold whole conversations (the small one answers short side requests)."""
        return list(dict.fromkeys((self.main, self.subagent, self.opus, self.sonnet)))


def base_url_for_claude(gateway_url: str) -> str:
    """The gateway's URL as ANTHROPIC_BASE_URL: Claude Code appends `/v1/messages` itself."""
    return gateway_url.strip().rstrip("/").removesuffix("/v1")


def max_output_tokens(window: int) -> int:
    """An eighth of the window, at least MIN_OUTPUT_TOKENS, at most Claude Code's own 32,000."""
    return min(DEFAULT_MAX_OUTPUT_TOKENS, max(MIN_OUTPUT_TOKENS, window // 8))


def compact_threshold(window: int, max_output: int) -> int:
    """The context size at which Claude Code 2.1.332 compacts, for this window and max output."""
    return window - min(max_output, _SUMMARY_OUTPUT_CAP) - _COMPACT_RESERVE


def looks_like_claude_model(name: str) -> bool:
    return bool(_CLAUDE_ALIAS.match(name) or _CLAUDE_ID.search(name))


def claude_env(gateway_url: str, token: str, routes: ClaudeRoutes, window: int | None) -> dict[str, str]:
    """The env block, in a stable order. `window` is the smallest context window of the routes
    that hold conversations; None (unknown) writes no window settings."""
    env = {
        "ANTHROPIC_BASE_URL": base_url_for_claude(gateway_url),
        TOKEN_VARIABLE: token,
        "ANTHROPIC_API_KEY": "",
        "ANTHROPIC_MODEL": routes.main,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": routes.opus,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": routes.sonnet,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": routes.small,
        "ANTHROPIC_SMALL_FAST_MODEL": routes.small,
        "CLAUDE_CODE_SUBAGENT_MODEL": routes.subagent,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    if window is not None:
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(window)
        env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(max_output_tokens(window))
    return env


def merge_settings(existing: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """`existing` with `env` in its `env` block: every other key kept as it was, in the env
    block the variables claude-setup manages replaced (or removed when not in `env`), the
    user's own left alone."""
    merged = dict(existing)
    current = existing.get("env", {})
    if not isinstance(current, Mapping):
        raise ClaudeSetupError(f"its `env` is {type(current).__name__}, not an object")
    kept = {k: v for k, v in current.items() if k not in MANAGED}
    merged["env"] = {**kept, **env}
    return merged


@dataclass(frozen=True)
class Written:
    path: Path
    backup: Path | None  # the previous file, copied; None when there was none
    removed: tuple[str, ...]  # managed variables of the previous file not written again


def write_settings(path: Path, env: Mapping[str, str], *, now: float | None = None) -> Written:
    """Merge `env` into the settings file at `path` (created with its folder if missing),
    keeping a copy of the previous file beside it (`settings.json.<UTC time>.bak`). The file
    holds the key: it is written to a temporary file of mode 600 and renamed into place, so
    no reader ever sees half of it. Raises ClaudeSetupError for a file that is not a JSON
    object: it is never overwritten."""
    previous: dict[str, Any] = {}
    raw: bytes | None = None
    if path.exists():
        raw = path.read_bytes()
        try:
            loaded = json.loads(raw or b"{}")
        except ValueError as exc:
            raise ClaudeSetupError(f"{path} is not JSON ({exc}); fix or move it, then run again") from None
        if not isinstance(loaded, dict):
            raise ClaudeSetupError(f"{path} holds a JSON {type(loaded).__name__}, not an object")
        previous = loaded
    try:
        merged = merge_settings(previous, env)
    except ClaudeSetupError as exc:
        raise ClaudeSetupError(f"{path}: {exc}") from None
    old_env = previous.get("env") or {}
    removed = tuple(k for k in MANAGED if k in old_env and k not in env)
    path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if raw is not None:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
        backup = path.with_name(f"{path.name}.{stamp}.bak")
        _write_private(backup, raw)
    _write_private(path, (json.dumps(merged, indent=2, ensure_ascii=False) + "\n").encode())
    return Written(path, backup, removed)


def _write_private(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def render_exports(env: Mapping[str, str], token_shown_as: str | None) -> str:
    """`export NAME=value` lines for a shell. `token_shown_as` replaces the token's value (e.g.
    `"$CODEXGATE_API_KEY"`, left unquoted for the shell to expand); None shows the token."""
    lines = []
    for name, value in env.items():
        if name == TOKEN_VARIABLE and token_shown_as is not None:
            lines.append(f"export {name}={token_shown_as}")
        else:
            lines.append(f"export {name}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def render_json(env: Mapping[str, str], token_shown_as: str | None) -> str:
    """The settings file's `{"env": {...}}` as JSON, the token replaced as in render_exports."""
    shown = dict(env)
    if token_shown_as is not None and TOKEN_VARIABLE in shown:
        shown[TOKEN_VARIABLE] = token_shown_as
    return json.dumps({"env": shown}, indent=2, ensure_ascii=False) + "\n"
