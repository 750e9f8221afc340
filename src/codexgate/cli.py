"""Command line: parse, build settings, call the app. Every `serve` flag is also a
`CODEXGATE_*` environment variable and a key of the TOML file."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeAlias

from codexgate import __version__
from codexgate.config import ENV_PREFIX, ConfigError, Settings, load_settings, resolve_config_file
from codexgate.config.flags import SETUP_SETTINGS, add_config_flag, add_setting_flags
from codexgate.server.workers import check_address, usable_cores

log = logging.getLogger("codexgate")


def _settings_from(args: argparse.Namespace) -> Settings:
    fields = [name for name in Settings.model_fields if name in vars(args)]
    cli: dict[str, Any] = {name: getattr(args, name) for name in fields}
    return load_settings(cli, args.config)


def _serve(args: argparse.Namespace) -> int:
    from codexgate.app import build_app
    from codexgate.server import serve
    from codexgate.server.auth import resolve_api_keys
    from codexgate.server.logs import configure_logging

    settings = _settings_from(args)
    # Refusals come first, each one line, before anything starts or logs.
    serve.check_exposure(settings, bool(resolve_api_keys(settings.api_keys, os.environ)))
    check_address(settings.host, settings.port)
    configure_logging(settings.log_level, settings.log_format)
    config_file = resolve_config_file(args.config, os.environ)
    count = settings.workers or usable_cores()
    if count > 1:
        return serve_workers(settings, count, config_file)
    if usable_cores() > 1:
        log.info(
            "serving with 1 worker of the %d cores here: --workers N runs N processes on this port "
            "(the history cache, /metrics and /ui are then per worker)",
            usable_cores(),
        )
    app = build_app(settings, config_file=config_file)
    stopped_by = serve.run(settings, app)
    return 130 if stopped_by == signal.SIGINT else 0  # 130: interrupted, as shells report it


def serve_workers(settings: Settings, count: int, config_file: Path | None) -> int:
    """`serve --workers N`: the supervisor (server/workers.py); each worker builds its own app
    and serves the shared socket, with its share of max_connections."""
    from codexgate.app import build_app
    from codexgate.server import serve
    from codexgate.server.workers import Supervisor, listen

    # Refusals were checked once, before any worker starts (_serve): one line, not N.
    per_worker = settings.model_copy(update={"max_connections": max(1, settings.max_connections // count)})
    sock = listen(settings)
    host, port = sock.getsockname()[:2]
    log.info("%d workers on %s:%d (supervisor pid %d)", count, host, port, os.getpid())

    def work(shared: socket.socket) -> int:
        app = build_app(per_worker, config_file=config_file)
        stopped_by = serve.run(per_worker, app, sockets=[shared])
        return 130 if stopped_by == signal.SIGINT else 0

    return Supervisor(count, work, sock).run()


def _codex_setup(args: argparse.Namespace) -> int:
    from codexgate.commands.codex_setup.command import run_codex_setup

    settings = _settings_from(args)
    return run_codex_setup(settings, args)


def _claude_setup(args: argparse.Namespace) -> int:
    from codexgate.commands.claude_setup.command import run_claude_setup

    return run_claude_setup(_settings_from(args), args)


def _doctor(args: argparse.Namespace) -> int:
    from codexgate.commands.doctor.command import run_doctor

    # doctor shares serve's variables for the upstream and its key
    args.upstream = args.upstream or os.environ.get(ENV_PREFIX + "UPSTREAM") or None
    args.api_key_env = args.api_key_env or os.environ.get(ENV_PREFIX + "UPSTREAM_API_KEY_ENV") or None
    return run_doctor(args)


def _usage(args: argparse.Namespace) -> int:
    from codexgate.commands.usage.command import run_usage

    return run_usage(_settings_from(args), args)


def _replay(args: argparse.Namespace) -> int:
    from codexgate.commands.replay.command import main as replay

    return replay(args.file, upstream_only=args.upstream_only, port=args.port, write_test_to=args.write_test)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codexgate", description="Run Codex CLI on any Chat Completions model."
    )
    parser.add_argument("--version", action="version", version=f"codexgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    _add_serve(commands)
    _add_codex_setup(commands)
    _add_claude_setup(commands)
    _add_doctor(commands)
    _add_replay(commands)
    _add_usage(commands)
    return parser


Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _add_serve(commands: Commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="run the gateway",
        description=(
            "Serve the OpenAI Responses API (/v1/responses, over HTTP and WebSocket), Chat Completions "
            "(/v1/chat/completions) and the model list (/v1/models) over Chat Completions servers, "
            "Responses servers or Codex itself. Every flag is also an environment variable and a key "
            "of the --config file; flags win over the environment, which wins over the file."
        ),
    )
    add_config_flag(serve)
    add_setting_flags(serve)
    serve.set_defaults(run=_serve)


def _add_codex_setup(commands: Commands) -> None:
    setup = commands.add_parser(
        "codex-setup",
        help="write the Codex profile and model catalog for the gateway",
        description=(
            "Write a Codex profile and model catalog (model_catalog_json) into the Codex home, so that "
            "Codex reaches the gateway and knows each model's tools and context window; prints the "
            "command that runs Codex through it. Reads the gateway's address and upstreams as `serve` "
            "does (these flags, their variables, the --config file); with no upstream it looks for a "
            "local model server like `serve`."
        ),
    )
    add_config_flag(setup)
    add_setting_flags(setup, SETUP_SETTINGS)
    setup.add_argument(
        "--gateway-url",
        metavar="URL",
        help="the gateway's URL as Codex reaches it (default http://HOST:PORT from --host/--port)",
    )
    setup.add_argument(
        "--model",
        action="append",
        dest="setup_models",
        metavar="NAME",
        help="model to set up (repeatable; default: the routed models, else the upstream's)",
    )
    setup.add_argument(
        "--context-window",
        type=int,
        metavar="TOKENS",
        help="context window for models with none configured (default: what the server reports)",
    )
    setup.add_argument(
        "--codex-home",
        type=Path,
        metavar="DIR",
        help="Codex home to write into (default $CODEX_HOME, else ~/.codex)",
    )
    setup.add_argument("--profile", default="codexgate", help="Codex profile name (default codexgate)")
    _add_codex_choices(setup)
    setup.set_defaults(run=_codex_setup)


def _add_codex_choices(setup: argparse.ArgumentParser) -> None:
    setup.add_argument(
        "--no-websockets",
        dest="websockets",
        action="store_false",
        help="make Codex use HTTP only (default: a WebSocket, so that each request within a turn "
        "sends only the new items instead of the whole history)",
    )
    setup.add_argument(
        "--remote-compaction",
        action="store_true",
        help='name the provider "OpenAI", the only name for which Codex compacts remotely: the '
        "gateway then writes the summary with the upstream model (default: Codex compacts "
        "locally with an ordinary summarising request)",
    )
    setup.add_argument(
        "--env-key",
        metavar="VAR",
        help="variable Codex sends as its bearer token (default, when the gateway has API keys: the "
        "first key's key_env, or CODEXGATE_API_KEY for keys from CODEXGATE_API_KEYS)",
    )


def _add_claude_setup(commands: Commands) -> None:
    setup = commands.add_parser(
        "claude-setup",
        help="point Claude Code at the gateway (its settings.json env block)",
        description=(
            "Merge into Claude Code's ~/.claude/settings.json the env block that sends it to the gateway "
            "with the routes named here, its key, and the context window and output budget of those "
            "routes (other settings are kept; the previous file is copied beside it). Reads the gateway's "
            "address, routes and keys as `serve` does (these flags, their variables, the --config file)."
        ),
    )
    add_config_flag(setup)
    add_setting_flags(setup, SETUP_SETTINGS)
    setup.add_argument(
        "--gateway-url",
        metavar="URL",
        help="the gateway's URL as Claude Code reaches it (default http://HOST:PORT from --host/--port)",
    )
    setup.add_argument(
        "--model", dest="main_model", required=True, metavar="ROUTE", help="the main model's route"
    )
    models = (
        ("--small-model", "small_model", "the small fast model's (side requests, the haiku alias)"),
        ("--subagent-model", "subagent_model", "the sub-agents'"),
        ("--opus-model", "opus_model", "the opus alias's"),
        ("--sonnet-model", "sonnet_model", "the sonnet alias's"),
    )
    for flag, dest, whose in models:
        setup.add_argument(flag, dest=dest, metavar="ROUTE", help=f"{whose} route (default: the main route)")
    setup.add_argument(
        "--context-window",
        type=int,
        metavar="TOKENS",
        help="context window for routes with none configured (default: what the server reports)",
    )
    setup.add_argument(
        "--key-env",
        metavar="VAR",
        help="variable holding the key Claude Code sends (default: the gateway's first configured key "
        "set here, or CODEXGATE_API_KEY for keys from CODEXGATE_API_KEYS)",
    )
    setup.add_argument("--show-key", action="store_true", help="print the key itself (never by default)")
    setup.add_argument(
        "--print",
        dest="print_as",
        nargs="?",
        const="shell",
        choices=("shell", "json"),
        help="print export lines (or the settings file's JSON) instead of writing",
    )
    setup.add_argument(
        "--settings",
        dest="settings_path",
        type=Path,
        metavar="PATH",
        help="the settings file to write (default ~/.claude/settings.json)",
    )
    setup.set_defaults(run=_claude_setup)


def _add_doctor(commands: Commands) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="probe an upstream and recommend settings for it",
        description=(
            "Probe a Chat Completions server as Codex will use it: models, streaming, usage, "
            "tool calls, reasoning, context window, errors. Exits 1 when a probe failed or found "
            "something that would break Codex."
        ),
    )
    doctor.add_argument(
        "--upstream",
        metavar="URL",
        help=(
            "base URL, e.g. http://127.0.0.1:8080/v1 "
            f"(default: look for a local server; env {ENV_PREFIX}UPSTREAM)"
        ),
    )
    doctor.add_argument(
        "--no-discover",
        dest="discover",
        action="store_false",
        help="do not look for a local model server when no upstream is given",
    )
    doctor.add_argument(
        "--kind",
        choices=("chat", "anthropic"),
        default="chat",
        help="what the upstream speaks: chat (Chat Completions, the default) or anthropic (the Messages "
        "API: the key, the models, the model and one streamed message are probed; with no --upstream, "
        "Anthropic's API)",
    )
    doctor.add_argument("--model", help="model to probe (default: the first the server lists)")
    doctor.add_argument(
        "--api-key-env",
        metavar="VAR",
        help=f"environment variable holding the upstream's API key (env {ENV_PREFIX}UPSTREAM_API_KEY_ENV)",
    )
    doctor.add_argument("--timeout", type=float, default=120.0, help="seconds per probe (default 120)")
    doctor.add_argument(
        "--write",
        type=Path,
        metavar="CONFIG",
        help="merge the recommended settings into this TOML file (never for a URL found wrong, or a "
        "server that answered no chat request)",
    )
    doctor.set_defaults(run=_doctor)


def _add_replay(commands: Commands) -> None:
    replay = commands.add_parser(
        "replay",
        help="run a recorded turn again and compare its events",
        description=(
            "Run a turn recorded with --record-dir again: the gateway, built with the recorded "
            "upstream's settings, answers the recorded request while a fixture upstream answers with "
            "the recorded bytes; the events are compared with the recorded ones (ids and timestamps "
            "aside). Exits 0 when they are the same, 1 when they differ, 2 when the file cannot be "
            "replayed."
        ),
    )
    replay.add_argument("file", type=Path, metavar="FILE", help="a recording (turn-*.json)")
    replay.add_argument(
        "--upstream-only",
        action="store_true",
        help="only serve the recorded upstream answer over HTTP (for a gateway or client of your own), "
        "until interrupted",
    )
    replay.add_argument(
        "--port", type=int, default=0, help="port of --upstream-only on 127.0.0.1 (default: any free one)"
    )
    replay.add_argument(
        "--write-test",
        type=Path,
        metavar="PATH",
        help="also write a pytest file replaying the recording (copied to tests/fixtures/recordings/)",
    )
    replay.set_defaults(run=_replay)


def _add_usage(commands: Commands) -> None:
    usage = commands.add_parser(
        "usage",
        help="print each key's usage from the store",
        description=(
            "Print the usage ledger the gateway keeps in its store: per API key, UTC day, route and "
            "upstream, the requests answered and their tokens (input, cached, output, reasoning), with a "
            "total. Reads the store as `serve` does (--config, --store, --store-path, --store-url)."
        ),
    )
    add_config_flag(usage)
    add_setting_flags(usage, ("store", "store_path", "store_url"))
    usage.add_argument("--key", metavar="NAME", help="one key's rows (default: every key's)")
    usage.add_argument(
        "--start-date", metavar="YYYY-MM-DD", help="the first day, UTC (default: 29 days before the end)"
    )
    usage.add_argument("--end-date", metavar="YYYY-MM-DD", help="the last day, UTC (default: today)")
    usage.add_argument("--json", action="store_true", help="the rows as JSON, as GET /v1/usage answers")
    usage.set_defaults(run=_usage)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"codexgate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C before the server took over the signals (server/serve.py)
        print("stopping...", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
