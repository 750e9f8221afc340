"""`codexgate claude-setup`: point Claude Code at the gateway for the routes the user names, by
merging an `env` block into `~/.claude/settings.json` (or printing it); what each variable does
is in settings.py and docs/operations.md "Claude Code"."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from codexgate.commands.claude_setup.settings import (
    CLAUDE_FIRST_REQUEST_TOKENS,
    ClaudeRoutes,
    ClaudeSetupError,
    claude_env,
    compact_threshold,
    looks_like_claude_model,
    max_output_tokens,
    render_exports,
    render_json,
    write_settings,
)
from codexgate.commands.claude_setup.windows import RouteWindow, learn_windows
from codexgate.config import API_KEYS_ENV, ConfigError, Settings
from codexgate.server.auth import resolve_api_keys

# The variable each person keeps their own key in when the gateway's keys come from
# CODEXGATE_API_KEYS (codex-setup's default too).
DEFAULT_KEY_VARIABLE = "CODEXGATE_API_KEY"
# Sent when the gateway takes no key: Claude Code will not start without a credential.
NO_KEY_TOKEN = "codexgate-no-key"


@dataclass(frozen=True)
class Key:
    value: str
    variable: str | None  # where it was read; None: the placeholder of a gateway without keys


def gateway_key(settings: Settings, asked: str | None, environ: Mapping[str, str]) -> Key:
    """The key Claude Code should send: `--key-env`'s variable; else the first configured key
    whose variable is set here; else, for keys from CODEXGATE_API_KEYS, $CODEXGATE_API_KEY or the
    only key listed; else (a gateway without keys) a placeholder. Raises ConfigError when the
    gateway takes keys and none can be read here."""
    if asked:
        if not environ.get(asked):
            raise ConfigError(f"--key-env {asked}: the variable is not set")
        return Key(environ[asked], asked)
    for config in settings.api_keys:
        if environ.get(config.key_env):
            return Key(environ[config.key_env], config.key_env)
    listed = list(resolve_api_keys([], {API_KEYS_ENV: environ.get(API_KEYS_ENV, "")}).values())
    if listed and environ.get(DEFAULT_KEY_VARIABLE):
        return Key(environ[DEFAULT_KEY_VARIABLE], DEFAULT_KEY_VARIABLE)
    if len(listed) == 1:
        return Key(listed[0], API_KEYS_ENV)
    if settings.api_keys or listed:
        wanted = ", ".join(c.key_env for c in settings.api_keys) or DEFAULT_KEY_VARIABLE
        raise ConfigError(
            f"the gateway takes API keys, and none is set here ({wanted}); set yours, or pass --key-env VAR"
        )
    return Key(NO_KEY_TOKEN, None)


def run_claude_setup(settings: Settings, args: argparse.Namespace) -> int:
    routes = ClaudeRoutes.of(
        args.main_model,
        small=args.small_model,
        subagent=args.subagent_model,
        opus=args.opus_model,
        sonnet=args.sonnet_model,
    )
    key = gateway_key(settings, args.key_env, os.environ)
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    gateway_url: str = args.gateway_url or f"http://{host}:{settings.port}"
    names = list(dict.fromkeys([*routes.conversations(), routes.small]))
    windows = learn_windows(settings, names, args.context_window)
    known = [t for n in routes.conversations() if (t := windows[n].tokens) is not None]
    # One window for every conversation: Claude Code takes one CLAUDE_CODE_MAX_CONTEXT_TOKENS.
    window = min(known) if len(known) == len(routes.conversations()) else None
    env = claude_env(gateway_url, key.value, routes, window)
    if args.print_as is not None:
        # A key read from a variable is printed as that variable (the shell expands it), so
        # the output holds no secret; --show-key prints it, and a placeholder is no secret.
        hidden = not args.show_key and key.variable is not None
        if args.print_as == "json":
            sys.stdout.write(render_json(env, f"<the value of ${key.variable}>" if hidden else None))
        else:
            sys.stdout.write(render_exports(env, f'"${key.variable}"' if hidden else None))
        _report_windows(routes, windows, window, out=sys.stderr)
        return 0
    path = (
        Path(args.settings_path).expanduser()
        if args.settings_path
        else Path.home() / ".claude" / "settings.json"
    )
    try:
        written = write_settings(path, env)
    except (ClaudeSetupError, OSError) as exc:
        print(f"codexgate: {exc}", file=sys.stderr)
        return 2
    _report_windows(routes, windows, window, out=sys.stdout)
    print(f"wrote the env block of {written.path} (mode 600: it holds the key)")
    if written.backup is not None:
        print(f"the previous file is kept as {written.backup}")
    if written.removed:
        print(f"removed {', '.join(written.removed)}: no window known this time")
    where = f"${key.variable}" if key.variable else "a placeholder (the gateway takes no key)"
    print(
        f"Claude Code sends {where} as its bearer token (ANTHROPIC_AUTH_TOKEN) to {env['ANTHROPIC_BASE_URL']}"
    )
    if args.show_key:
        print(f"  ANTHROPIC_AUTH_TOKEN={key.value}")
    print("Run Claude Code as usual: `claude` (or `claude -p PROMPT`) now uses the gateway.")
    return 0


def _report_windows(
    routes: ClaudeRoutes, windows: Mapping[str, RouteWindow], window: int | None, *, out: TextIO
) -> None:
    """Each route's window and where it was read; what the window settings became; a warning
    for a window too small for Claude Code or a route name whose window Claude Code decides."""
    for name, learned in windows.items():
        size = f"context window {learned.tokens}" if learned.tokens else "context window unknown"
        print(f"route {name}: {size} ({learned.source})", file=out)
    if window is None:
        print(
            "codexgate: a route's window is unknown, so no window is written: Claude Code assumes "
            "1,000,000 tokens for a model it does not know and will not compact in time; pass "
            "--context-window TOKENS",
            file=sys.stderr,
        )
        return
    output = max_output_tokens(window)
    threshold = compact_threshold(window, output)
    print(
        f"CLAUDE_CODE_MAX_CONTEXT_TOKENS={window}, CLAUDE_CODE_MAX_OUTPUT_TOKENS={output}: "
        f"Claude Code compacts past {max(threshold, 0)} tokens",
        file=out,
    )
    if threshold < CLAUDE_FIRST_REQUEST_TOKENS:
        print(
            f"codexgate: a {window}-token window is too small for Claude Code: its first request "
            f"alone is ~{CLAUDE_FIRST_REQUEST_TOKENS} tokens, so it would compact on every turn",
            file=sys.stderr,
        )
    for name in routes.conversations():
        if looks_like_claude_model(name):
            print(
                f"codexgate: Claude Code takes the route name {name!r} for one of Claude's own models "
                "and uses that model's window, not CLAUDE_CODE_MAX_CONTEXT_TOKENS; give the route "
                "another name (or an alias) to have its real window used",
                file=sys.stderr,
            )
