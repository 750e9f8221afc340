"""Command line: parse, build settings, call the app. Every `serve` flag is also a
`CODEXGATE_*` environment variable and a key of the TOML file."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from codexgate import __version__
from codexgate.config import ConfigError, Settings, load_settings, resolve_config_file


def _serve_flags(parser: argparse.ArgumentParser) -> None:
    # Defaults are None so that only flags the user typed override env and file.
    parser.add_argument("--config", type=Path, help="TOML file with upstreams and model routes")
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port to listen on (default 8787)")
    parser.add_argument(
        "--upstream", help="base URL of one Chat Completions server, e.g. http://127.0.0.1:11434/v1"
    )
    parser.add_argument("--upstream-api-key-env", help="environment variable holding the upstream's API key")
    parser.add_argument("--idle-timeout", type=float, help="seconds without an upstream event before failing")
    parser.add_argument("--connect-timeout", type=float, help="seconds to connect to an upstream")
    parser.add_argument(
        "--max-retries", type=int, help="retries of connect errors and 5xx before the first byte"
    )
    parser.add_argument("--max-body-bytes", type=int, help="largest request body accepted")
    parser.add_argument(
        "--no-discover",
        dest="discover",
        action="store_const",
        const=False,
        help="do not look for a local model server when no upstream is given",
    )
    parser.add_argument("--log-level", help="debug, info, warning, error")
    parser.add_argument(
        "--allow-unauthenticated",
        action="store_const",
        const=True,
        help="serve clients beyond loopback without API keys (they can spend the upstream)",
    )


def _settings_from(args: argparse.Namespace) -> Settings:
    fields = (
        "host",
        "port",
        "upstream",
        "upstream_api_key_env",
        "idle_timeout",
        "connect_timeout",
        "max_retries",
        "max_body_bytes",
        "discover",
        "log_level",
        "allow_unauthenticated",
    )
    cli: dict[str, Any] = {name: getattr(args, name, None) for name in fields}
    return load_settings(cli, args.config)


def _serve(args: argparse.Namespace) -> int:
    from codexgate.app import build_app
    from codexgate.server import serve

    settings = _settings_from(args)
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = build_app(settings, config_file=resolve_config_file(args.config, os.environ))
    serve.run(settings, app)
    return 0


def _codex_setup(args: argparse.Namespace) -> int:
    from codexgate.setup_command import run_codex_setup

    settings = _settings_from(args)
    return run_codex_setup(settings, args)


def _doctor(args: argparse.Namespace) -> int:
    from codexgate.doctor_command import run_doctor

    return run_doctor(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codexgate", description="Run Codex CLI on any Chat Completions model."
    )
    parser.add_argument("--version", action="version", version=f"codexgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the gateway")
    _serve_flags(serve)
    serve.set_defaults(run=_serve)

    setup = commands.add_parser(
        "codex-setup", help="write the Codex profile and model catalog for the gateway"
    )
    _serve_flags(setup)
    setup.add_argument(
        "--gateway-url", help="the gateway's URL as Codex reaches it (default from --host/--port)"
    )
    setup.add_argument(
        "--model",
        action="append",
        dest="setup_models",
        metavar="NAME",
        help="model to set up (repeatable; default: the routed models, else the upstream's)",
    )
    setup.add_argument("--context-window", type=int, help="context window for models with none configured")
    setup.add_argument(
        "--codex-home", type=Path, help="Codex home to write into (default $CODEX_HOME or ~/.codex)"
    )
    setup.add_argument("--profile", default="codexgate", help="Codex profile name (default codexgate)")
    setup.set_defaults(run=_codex_setup)

    doctor = commands.add_parser(
        "doctor",
        help="probe an upstream and recommend settings for it",
        description=(
            "Probe a Chat Completions server as Codex will use it: models, streaming, usage, "
            "tool calls, reasoning, context window, errors. Exits 1 when something would break Codex."
        ),
    )
    doctor.add_argument("--upstream", required=True, help="base URL, e.g. http://127.0.0.1:8080/v1")
    doctor.add_argument("--model", help="model to probe (default: the first the server lists)")
    doctor.add_argument("--api-key-env", help="environment variable holding the upstream's API key")
    doctor.add_argument("--timeout", type=float, default=120.0, help="seconds per probe (default 120)")
    doctor.add_argument(
        "--write", type=Path, metavar="CONFIG", help="merge the recommended settings into this TOML file"
    )
    doctor.set_defaults(run=_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ConfigError as exc:
        print(f"codexgate: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
