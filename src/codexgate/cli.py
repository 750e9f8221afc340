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
from typing import Any

from codexgate import __version__
from codexgate.config import ENV_PREFIX, ConfigError, Settings, load_settings, resolve_config_file
from codexgate.server.workers import usable_cores

log = logging.getLogger("codexgate")


def _setting_flag(parser: argparse.ArgumentParser, name: str, help: str, **kwargs: Any) -> None:
    """A flag for the setting `name`, its help ending with the default and the environment
    variable that sets it too. The argparse default is None so that only flags the user typed
    override the environment and the file."""
    env = ENV_PREFIX + name.upper()
    flag = kwargs.pop("flag", "--" + name.replace("_", "-"))
    if kwargs.get("action") == "store_const":  # a switch: say the value the variable takes
        suffix = f"env {env}={str(kwargs['const']).lower()}"
    else:
        default = Settings.model_fields[name].get_default(call_default_factory=True)
        suffix = f"env {env}" if default is None else f"default {default}; env {env}"
    parser.add_argument(flag, dest=name, help=f"{help} ({suffix})", **kwargs)


def _serve_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"TOML file with upstreams and model routes (env {ENV_PREFIX}CONFIG)",
    )
    _setting_flag(parser, "host", "address to listen on", metavar="ADDRESS")
    _setting_flag(parser, "port", "port to listen on", type=int, metavar="PORT")
    _setting_flag(
        parser,
        "upstream",
        "base URL of one Chat Completions server, e.g. http://127.0.0.1:11434/v1 "
        "(default: look for a local one)",
        metavar="URL",
    )
    _setting_flag(
        parser, "upstream_api_key_env", "environment variable holding the upstream's API key", metavar="VAR"
    )
    _setting_flag(
        parser,
        "idle_timeout",
        "seconds the upstream may stay silent, before its first byte (retries included) and between events",
        type=float,
        metavar="SECONDS",
    )
    _setting_flag(
        parser, "connect_timeout", "seconds to connect to an upstream", type=float, metavar="SECONDS"
    )
    _setting_flag(
        parser,
        "max_retries",
        "retries of connect errors and 5xx before the first byte",
        type=int,
        metavar="N",
    )
    _setting_flag(parser, "max_body_bytes", "largest request body accepted", type=int, metavar="BYTES")
    _setting_flag(
        parser, "history_cache_mb", "memory for each conversation's last request, reused next turn (0: off)",
        type=int, metavar="MIB",
    )  # fmt: skip
    _setting_flag(
        parser, "history_cache_min_kb", "remember only conversations whose request is at least this large",
        type=int, metavar="KIB",
    )  # fmt: skip
    _setting_flag(
        parser,
        "max_output_bytes",
        "model output per response before it ends incomplete (max_output_tokens)",
        type=int,
        metavar="BYTES",
    )
    _setting_flag(
        parser, "max_request_seconds", "total seconds one response may take", type=float, metavar="SECONDS"
    )
    _setting_flag(
        parser,
        "shutdown_grace",
        "on SIGTERM, seconds open responses may take to finish before they end with server_shutting_down",
        type=float,
        metavar="SECONDS",
    )
    _setting_flag(
        parser,
        "discover",
        "do not look for a local model server when no upstream is given",
        flag="--no-discover",
        action="store_const",
        const=False,
    )
    _setting_flag(
        parser,
        "embedded",
        "with no upstream given and none found, do not run the embedded model (SmolLM2-135M)",
        flag="--no-embedded",
        action="store_const",
        const=False,
    )
    _setting_flag(
        parser, "ui", "do not serve the live view at /ui", flag="--no-ui", action="store_const", const=False
    )
    _setting_flag(parser, "log_level", "debug, info, warning, error or critical", metavar="LEVEL")
    _setting_flag(
        parser, "workers", "gateway processes sharing the port; 0: one per core", metavar="N", type=int
    )
    _setting_flag(
        parser, "record_dir", "record each turn into this directory, secrets masked (off by default)",
        metavar="DIR",
    )  # fmt: skip
    _setting_flag(parser, "log_format", "logfmt, or json: one object per line", metavar="FORMAT")
    _setting_flag(
        parser,
        "allow_unauthenticated",
        "serve clients beyond loopback without API keys (they can spend the upstream)",
        action="store_const",
        const=True,
    )


def _settings_from(args: argparse.Namespace) -> Settings:
    fields = [name for name in Settings.model_fields if name in vars(args)]
    cli: dict[str, Any] = {name: getattr(args, name) for name in fields}
    return load_settings(cli, args.config)


def _serve(args: argparse.Namespace) -> int:
    from codexgate.app import build_app
    from codexgate.server import serve
    from codexgate.server.logs import configure_logging

    settings = _settings_from(args)
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
    from codexgate.server.auth import resolve_api_keys
    from codexgate.server.workers import Supervisor, listen

    # Checked once, before any worker starts: a refusal is one line, not N.
    keys = resolve_api_keys(settings.api_keys, os.environ)
    serve.check_exposure(settings, bool(keys))
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
    from codexgate.setup_command import run_codex_setup

    settings = _settings_from(args)
    return run_codex_setup(settings, args)


def _doctor(args: argparse.Namespace) -> int:
    from codexgate.doctor_command import run_doctor

    # doctor shares serve's variables for the upstream and its key
    args.upstream = args.upstream or os.environ.get(ENV_PREFIX + "UPSTREAM") or None
    args.api_key_env = args.api_key_env or os.environ.get(ENV_PREFIX + "UPSTREAM_API_KEY_ENV") or None
    return run_doctor(args)


def _replay(args: argparse.Namespace) -> int:
    from codexgate.replay import main as replay

    return replay(args.file, upstream_only=args.upstream_only, port=args.port, write_test_to=args.write_test)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codexgate", description="Run Codex CLI on any Chat Completions model."
    )
    parser.add_argument("--version", action="version", version=f"codexgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the gateway",
        description=(
            "Serve the OpenAI Responses API (/v1/responses, /v1/models) to Codex over a Chat "
            "Completions server. Every flag is also an environment variable and a key of the --config "
            "file; flags win over the environment, which wins over the file."
        ),
    )
    _serve_flags(serve)
    serve.set_defaults(run=_serve)

    setup = commands.add_parser(
        "codex-setup",
        help="write the Codex profile and model catalog for the gateway",
        description=(
            "Write a Codex profile and model catalog (model_catalog_json) into the Codex home, so that "
            "Codex reaches the gateway and knows each model's tools and context window; prints the "
            "command that runs Codex through it. Takes the same settings as `serve` (the gateway's "
            "address and upstream); with no upstream it looks for a local model server like `serve`."
        ),
    )
    _serve_flags(setup)
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
    setup.set_defaults(run=_codex_setup)

    doctor = commands.add_parser(
        "doctor",
        help="probe an upstream and recommend settings for it",
        description=(
            "Probe a Chat Completions server as Codex will use it: models, streaming, usage, "
            "tool calls, reasoning, context window, errors. Exits 1 when something would break Codex."
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
    doctor.add_argument("--model", help="model to probe (default: the first the server lists)")
    doctor.add_argument(
        "--api-key-env",
        metavar="VAR",
        help=f"environment variable holding the upstream's API key (env {ENV_PREFIX}UPSTREAM_API_KEY_ENV)",
    )
    doctor.add_argument("--timeout", type=float, default=120.0, help="seconds per probe (default 120)")
    doctor.add_argument(
        "--write", type=Path, metavar="CONFIG", help="merge the recommended settings into this TOML file"
    )
    doctor.set_defaults(run=_doctor)

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
    return parser


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
