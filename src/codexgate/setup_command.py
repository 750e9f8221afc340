"""`codexgate codex-setup`: find the models the gateway serves and write Codex's profile and
catalog for them (the files themselves are built by codex_setup.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import orjson

from codexgate.app import upstream_target
from codexgate.backends.transport import AiohttpTransport
from codexgate.codex_setup import (
    FALLBACK_BASE_INSTRUCTIONS,
    CodexSetupError,
    ModelSpec,
    codex_base_instructions,
    write_codex_setup,
)
from codexgate.config import Settings
from codexgate.errors import GatewayError

# Fields in which servers report a model's context window in `/v1/models`
# (vLLM: max_model_len; others: context_length / context_window).
_WINDOW_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length")


async def _upstream_models(settings: Settings) -> list[tuple[str, int | None]]:
    """(id, context window if the server tells) for every model of the single upstream."""
    upstreams = settings.all_upstreams()
    if len(upstreams) != 1:
        return []
    target = upstream_target(upstreams[0], settings, os.environ)
    transport = AiohttpTransport()
    try:
        response = await transport.open(
            "GET", target.base_url + "/models", dict(target.headers), None, target.connect_timeout
        )
        try:
            body = await asyncio.wait_for(response.read(), target.connect_timeout)
        finally:
            await response.aclose()
    except (GatewayError, TimeoutError):
        return []
    finally:
        await transport.aclose()
    try:
        data = orjson.loads(body) if response.status == 200 else {}
    except orjson.JSONDecodeError:
        return []
    models: list[tuple[str, int | None]] = []
    for item in data.get("data", ()) if isinstance(data, dict) else ():
        if isinstance(item, dict) and isinstance(item.get("id"), str):
            window = next((item[f] for f in _WINDOW_FIELDS if isinstance(item.get(f), int)), None)
            models.append((item["id"], window))
    return models


def model_specs(settings: Settings, names: list[str] | None, default_window: int | None) -> list[ModelSpec]:
    """Specs for the asked names, else the routed models, else the upstream's own list."""
    routed = {m.name: m for m in settings.models}
    discovered: dict[str, int | None] = {}
    if (not names and not routed) or (names and any(n not in routed for n in names)):
        discovered = dict(asyncio.run(_upstream_models(settings)))
    chosen = names or list(routed) or list(discovered)
    specs = []
    for name in chosen:
        route = routed.get(name)
        window = (route.context_window if route else None) or default_window or discovered.get(name)
        specs.append(
            ModelSpec(
                slug=name,
                context_window=window,
                supports_images=bool(route and route.supports_images),
                supports_reasoning=bool(route and route.supports_reasoning),
            )
        )
    return specs


def _base_instructions() -> str:
    codex = shutil.which("codex")
    if codex:
        try:
            return codex_base_instructions(codex)
        except CodexSetupError as exc:
            print(f"codexgate: {exc}; using codexgate's short prompt", file=sys.stderr)
    else:
        print(
            "codexgate: no `codex` on PATH to read its base prompt from; using codexgate's short prompt",
            file=sys.stderr,
        )
    return FALLBACK_BASE_INSTRUCTIONS


def run_codex_setup(settings: Settings, args: argparse.Namespace) -> int:
    specs = model_specs(settings, args.setup_models, args.context_window)
    if not specs:
        print(
            "codexgate: no models to set up: pass --model NAME, route models in --config, or give an "
            "--upstream that lists its models",
            file=sys.stderr,
        )
        return 2
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    gateway_url: str = args.gateway_url or f"http://{host}:{settings.port}"
    home_value: Any = args.codex_home or os.environ.get("CODEX_HOME") or Path.home() / ".codex"
    home = Path(home_value).expanduser()
    try:
        result = write_codex_setup(
            home,
            gateway_url,
            specs,
            profile=args.profile,
            codex_home=home,
            base_instructions=_base_instructions(),
        )
    except CodexSetupError as exc:
        print(f"codexgate: {exc}", file=sys.stderr)
        return 2
    for spec in specs:
        window = spec.context_window or "unknown (default used)"
        print(f"model {spec.slug}: context window {window}")
    print(f"wrote {result.catalog_path}")
    print(f"wrote {result.config_path}")
    print("Run Codex through the gateway with:")
    print(f"  {result.command}")
    return 0
