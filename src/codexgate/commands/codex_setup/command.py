"""`codexgate codex-setup`: find the models the gateway serves and write Codex's profile and
catalog for them (the files themselves are built by commands/codex_setup/catalog.py)."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from codexgate.backends.anthropic.models import ModelFacts, model_facts
from codexgate.backends.discovery import discover, not_found_message
from codexgate.backends.embedded.factory import DEFAULT_CONTEXT_WINDOW, alias_of
from codexgate.backends.embedded.fallback import FALLBACK_NOTE, embedded_upstream
from codexgate.backends.http.target import upstream_target
from codexgate.backends.http.transport import AiohttpTransport
from codexgate.backends.model_list import list_models
from codexgate.backends.server_info import ContextWindow, probe_context_window
from codexgate.commands.codex_needs import MIN_WINDOW
from codexgate.commands.codex_setup.catalog import (
    FALLBACK_BASE_INSTRUCTIONS,
    CodexSetupError,
    ModelSpec,
    SetupResult,
    codex_base_instructions,
    write_codex_setup,
)
from codexgate.config import (
    API_KEYS_ENV,
    AnthropicUpstream,
    ConfigError,
    EmbeddedUpstream,
    HttpUpstream,
    Settings,
    UpstreamConfig,
)

_PROBE_TIMEOUT = 5.0


async def _learn(
    settings: Settings, names: list[str] | None
) -> tuple[list[str], dict[str, ContextWindow], dict[str, ModelFacts]]:
    """The single upstream's model list (when needed), the context window the server reports
    for each model asked for (vLLM /v1/models, llama.cpp /props, Ollama, LM Studio), and what
    an `anthropic` upstream says of each of its models (backends/anthropic/models.py: window,
    thinking, images). Raises ConfigError, worded by cause, when the models must come from an
    upstream that has none."""
    upstreams = {u.name: u for u in settings.all_upstreams()}
    routed = {m.name: m for m in settings.models}
    transport = AiohttpTransport()
    try:
        listed: list[str] = []
        if not names and not routed and len(upstreams) == 1:
            target = upstream_target(_reached_over_http(next(iter(upstreams.values()))), settings, os.environ)
            listing = await list_models(transport, target.base_url, target.headers, target.connect_timeout)
            problem = listing.problem()
            if problem is not None:
                raise ConfigError(f"no models to set up from the upstream: {problem}")
            listed = listing.models
        chosen = names or list(routed) or listed
        probes = {}
        claude = {}
        for name in chosen:
            route = routed.get(name)
            upstream = upstreams.get(route.upstream or "") if route else None
            upstream = upstream or (next(iter(upstreams.values())) if len(upstreams) == 1 else None)
            if upstream is None:
                continue
            target = upstream_target(_reached_over_http(upstream), settings, os.environ)
            model = (route.model if route else None) or name
            if isinstance(upstream, AnthropicUpstream):
                claude[name] = model_facts(transport, target.base_url, target.headers, model, _PROBE_TIMEOUT)
            elif route is None or not route.context_window:
                probes[name] = probe_context_window(
                    transport, target.base_url, target.headers, model, _PROBE_TIMEOUT
                )
        found = await asyncio.gather(*probes.values())
        facts = await asyncio.gather(*claude.values())
        windows = {n: w for n, w in zip(probes, found, strict=True) if w is not None}
        return chosen, windows, {n: f for n, f in zip(claude, facts, strict=True) if f is not None}
    finally:
        await transport.aclose()


def _reached_over_http(upstream: UpstreamConfig) -> HttpUpstream:
    """The upstream to ask for its models, which only one reached over HTTP answers."""
    assert isinstance(upstream, HttpUpstream), "an HTTP upstream has a base_url"
    return upstream


def model_specs(settings: Settings, names: list[str] | None, default_window: int | None) -> list[ModelSpec]:
    """Specs for the asked names, else the routed models, else the upstream's own list. A
    window given on the command line or in the config wins over the one the server reports."""
    routed = {m.name: m for m in settings.models}
    chosen, learned, claude = asyncio.run(_learn(settings, names))
    specs = []
    for name in chosen:
        route = routed.get(name)
        window = (route.context_window if route else None) or default_window
        source = "configured" if window else None
        facts = claude.get(name)
        if facts is not None and facts.window is not None and window is None:
            learned[name] = facts.window
        if window is None and name in learned:
            window, source = learned[name].tokens, learned[name].source
            if not learned[name].runtime:
                source += "; the model's trained maximum, the server may run it with less"
        specs.append(
            ModelSpec(
                slug=name,
                context_window=window,
                window_source=source,
                supports_images=bool(route and route.supports_images) or bool(facts and facts.images),
                supports_reasoning=bool(route and route.supports_reasoning)
                or bool(facts and facts.reasoning),
            )
        )
    return specs


_TOOLS_NOTE = (
    "SmolLM2-135M, codexgate's embedded model: a tiny model for trying codexgate. It answers, "
    "but does not call tools reliably; point codexgate at a real model for work."
)


def embedded_spec(upstream: EmbeddedUpstream, slug: str | None = None) -> ModelSpec:
    """Codex's catalog entry for the embedded model: its window is known without running it."""
    window = upstream.context_window or DEFAULT_CONTEXT_WINDOW
    own = bool(upstream.model_path)
    return ModelSpec(
        slug=slug or alias_of(upstream),
        context_window=window,
        window_source="the embedded model's configured context" if own else "the embedded model",
        description=None if own else _TOOLS_NOTE,
    )


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


def _with_local_server(settings: Settings) -> Settings:
    """With no upstream configured, the local model server `serve` would find, else the
    embedded model `serve` would run. Raises ConfigError when there is neither."""
    if settings.all_upstreams() or not settings.discover:
        return settings

    async def find() -> tuple[str, str] | None:
        transport = AiohttpTransport()
        try:
            return await discover(transport)
        finally:
            await transport.aclose()

    found = asyncio.run(find())
    if found is None and settings.embedded:
        print(FALLBACK_NOTE.replace("serving", "`serve` runs", 1))
        return settings.model_copy(update={"upstreams": [embedded_upstream()]})
    if found is None:
        raise ConfigError(not_found_message(True))
    name, url = found
    print(f"found {name} at {url}")
    return settings.model_copy(update={"upstream": url})


# The variable Codex reads the key from when the gateway's keys come from CODEXGATE_API_KEYS
# (which holds several keys, one per person: each sets their own in this variable).
DEFAULT_KEY_VARIABLE = "CODEXGATE_API_KEY"


def key_variable(settings: Settings, asked: str | None, environ: Mapping[str, str]) -> str | None:
    """The environment variable Codex should send as its bearer token (`env_key`), or None
    when the gateway takes no keys. `--env-key` wins; else the first configured key's own
    variable (on a team member's machine, the same name holds their key)."""
    if asked:
        return asked
    if settings.api_keys:
        return settings.api_keys[0].key_env
    if environ.get(API_KEYS_ENV, "").strip():
        return DEFAULT_KEY_VARIABLE
    return None


def run_codex_setup(settings: Settings, args: argparse.Namespace) -> int:
    settings = _with_local_server(settings)
    upstreams = settings.all_upstreams()
    alone = upstreams[0] if len(upstreams) == 1 and not settings.models else None
    embedded = alone if isinstance(alone, EmbeddedUpstream) else None
    if embedded is not None:
        # Its window is the one it runs with: known without starting it.
        specs = [embedded_spec(embedded, name) for name in args.setup_models or [None]]
    else:
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
    env_key = key_variable(settings, getattr(args, "env_key", None), os.environ)
    try:
        result = write_codex_setup(
            home,
            gateway_url,
            specs,
            profile=args.profile,
            codex_home=home,
            base_instructions=_base_instructions(),
            websockets=args.websockets,
            remote_compaction=args.remote_compaction,
            env_key=env_key,
        )
    except CodexSetupError as exc:
        print(f"codexgate: {exc}", file=sys.stderr)
        return 2
    _report_windows(specs, embedded is not None)
    _report_written(result, args, env_key)
    return 0


def _report_windows(specs: list[ModelSpec], embedded: bool) -> None:
    """Each model's context window and where it was read, and a warning for one too small."""
    raise_window = (
        "it is for trying codexgate: point codexgate at a real model with --upstream URL"
        if embedded is not None
        else "`codexgate doctor` says how to raise it"
    )
    for spec in specs:
        if spec.context_window:
            print(f"model {spec.slug}: context window {spec.context_window} ({spec.window_source})")
            if spec.context_window < MIN_WINDOW:
                print(
                    f"codexgate: {spec.slug}'s window is too small for Codex (its prompt passes "
                    f"{MIN_WINDOW} tokens within a few turns); {raise_window}",
                    file=sys.stderr,
                )
        else:
            print(f"model {spec.slug}: context window unknown (default used; pass --context-window)")


def _report_written(result: SetupResult, args: argparse.Namespace, env_key: str | None) -> None:
    """The files written, what the choices made mean, and the command that runs Codex."""
    print(f"wrote {result.catalog_path}")
    print(f"wrote {result.config_path}")
    if not args.websockets:
        print("WebSockets off: Codex sends the whole history with every request, over HTTP")
    if args.remote_compaction:
        print(
            'remote compaction: the provider is named "OpenAI", the only name for which Codex '
            "compacts remotely, so the gateway writes the summary with the upstream model "
            "(without the flag Codex compacts locally with an ordinary request, which also works)"
        )
    if env_key:
        print(
            f"the gateway requires an API key: Codex sends ${env_key} as its bearer token, so set "
            f"{env_key} to your codexgate key before running Codex (Codex refuses to start without it)"
        )
    print("Run Codex through the gateway with:")
    print(f"  {result.command}")
