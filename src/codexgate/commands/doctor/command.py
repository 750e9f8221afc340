"""`codexgate doctor`: run the probes with a progress display, print the report and the
recommended settings, and write them into a codexgate config file when asked."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit
from rich.console import Console
from rich.markup import escape
from rich.status import Status

from codexgate.backends import discovery
from codexgate.backends.discovery import discover as discover_server
from codexgate.backends.discovery import not_found_message
from codexgate.backends.embedded.runtime import find_runtime, llama_root
from codexgate.backends.http.transport import AiohttpTransport
from codexgate.commands.doctor.anthropic import AnthropicDoctor
from codexgate.commands.doctor.probe import Doctor, Report
from codexgate.config import ConfigError, check_upstream_url, load_settings

_MARKS = {"ok": "[green]✓[/]", "warn": "[yellow]![/]", "fail": "[red]✗[/]", "skip": "[dim]-[/]"}


async def find_upstream(transport: AiohttpTransport, given: str | None, discover: bool) -> str:
    """The upstream to probe: the one given (checked), else the local server `serve` would find.
    Raises ConfigError with the fix."""
    if given:
        try:
            return check_upstream_url(given)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    found = await discover_server(transport) if discover else None
    if found is None:
        raise ConfigError(nothing_found(discover))
    name, url = found
    print(f"found {name} at {url}")
    return url


ANTHROPIC_API = "https://api.anthropic.com/v1"  # probed by --kind anthropic with no --upstream


async def _run_anthropic(args: argparse.Namespace, console: Console) -> Report:
    """The probes of an Anthropic Messages upstream (commands/doctor/anthropic.py)."""
    upstream = check_upstream_url(args.upstream) if args.upstream else ANTHROPIC_API
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    transport = AiohttpTransport()
    try:
        doctor = AnthropicDoctor(
            transport, upstream, key_env=args.api_key_env, key=key or None, model=args.model,
            timeout=args.timeout, on_step=lambda name: console.print(f"probing {name} ...", style="dim"),
        )  # fmt: skip
        return await doctor.run()
    finally:
        await transport.aclose()


def nothing_found(discover: bool, environ: Mapping[str, str] | None = None) -> str:
    """What to say when there is no server to probe: and that `serve` would answer with the
    embedded model instead (unless the environment or its config file turns it off), how big
    it is and whether it is fetched yet."""
    environ = os.environ if environ is None else environ
    try:
        settings = load_settings({"discover": discover}, environ=environ)
    except ConfigError:  # serve would say what is wrong; here, what it would do by default
        embedded, llama_dir = True, None
    else:
        embedded, llama_dir = settings.embedded, settings.llama_dir
    if not discover or not embedded:
        return not_found_message(discover)
    root = llama_root(environ, llama_dir)
    fetched = (
        f"already fetched, in {root}"
        if find_runtime(root) is not None
        else f"fetched once per user when serve first starts it, about 130 MB, into {root}"
    )
    looked = ", ".join(f"{name} {url}" for name, url in discovery.LOCAL_SERVERS)
    return (
        f"no upstream given and no local model server found (looked at {looked}). `codexgate serve` "
        "would answer with its embedded model instead: SmolLM2-135M (98 MB), a tiny model for trying "
        f"codexgate that does not call tools reliably, run by llama.cpp's server ({fetched}). doctor "
        "probes model servers: start one (Ollama, llama.cpp, vLLM, LM Studio...) or pass --upstream URL"
    )


async def _run(args: argparse.Namespace, console: Console) -> Report:
    if getattr(args, "kind", "chat") == "anthropic":
        try:
            return await _run_anthropic(args, console)
        except ValueError as exc:  # a URL that is not one
            raise ConfigError(str(exc)) from None
    headers: dict[str, str] = {}
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if key:
            headers["authorization"] = f"Bearer {key}"
        else:
            console.print(f"[yellow]{args.api_key_env} is not set; probing without a key[/]")
    transport = AiohttpTransport()
    try:
        upstream = await find_upstream(transport, args.upstream, args.discover)
    except ConfigError:
        await transport.aclose()
        raise
    status: Status | None = None
    if console.is_terminal:
        status = console.status("starting")
        status.start()

    def on_step(name: str) -> None:
        if status is not None:
            status.update(f"probing {name} ...")
        else:
            console.print(f"probing {name} ...", style="dim")

    try:
        doctor = Doctor(
            transport, upstream, headers=headers, model=args.model, timeout=args.timeout, on_step=on_step
        )
        return await doctor.run()
    finally:
        if status is not None:
            status.stop()
        await transport.aclose()


def render(report: Report, console: Console) -> None:
    console.print(f"\n[bold]codexgate doctor[/] {escape(report.findings.base_url)}")
    for check in report.checks:
        console.print(
            f" {_MARKS[check.status]} [bold]{check.name}[/]: {escape(check.summary)}", soft_wrap=True
        )
        for line in check.details:
            console.print(
                f"     {escape(line)}", style="dim" if check.status == "ok" else None, soft_wrap=True
            )
    refused = report.unwritable
    if refused is not None:
        console.print(f"\n[bold]No settings recommended[/]: {escape(refused)}", soft_wrap=True)
        return
    console.print("\n[bold]Recommended settings[/] (codexgate config, TOML):")
    console.print(escape(settings_toml(report.recommended)), highlight=False, soft_wrap=True)
    if "sampling_source" in report.recommended:
        console.print(f"sampling from {escape(report.recommended['sampling_source'])}", style="dim")


def settings_toml(recommended: dict[str, Any]) -> str:
    doc = tomlkit.document()
    merge_settings(doc, recommended)
    return tomlkit.dumps(doc)


def merge_settings(doc: tomlkit.TOMLDocument, recommended: dict[str, Any]) -> None:
    """Put the recommended upstream and model into `doc`, replacing entries of the same name
    and keeping everything else (comments included)."""
    _replace_entry(doc, "upstreams", recommended["upstream"])
    if "model" in recommended:
        _replace_entry(doc, "models", recommended["model"])


def _replace_entry(doc: tomlkit.TOMLDocument, key: str, entry: dict[str, Any]) -> None:
    tables = doc.get(key)
    if tables is None:
        tables = tomlkit.aot()
        doc.append(key, tables)
    table = tomlkit.table()
    for name, value in entry.items():
        if isinstance(value, dict):
            inline = tomlkit.inline_table()
            inline.update(value)
            table.append(name, inline)
        else:
            table.append(name, value)
    for i, existing in enumerate(tables):
        if existing.get("name") == entry["name"]:
            tables[i] = table
            return
    tables.append(table)


def write_settings(path: Path, recommended: dict[str, Any]) -> None:
    doc = tomlkit.parse(path.read_text()) if path.exists() else tomlkit.document()
    merge_settings(doc, recommended)
    path.write_text(tomlkit.dumps(doc))


def run_doctor(args: argparse.Namespace) -> int:
    console = Console(highlight=False)
    report = asyncio.run(_run(args, console))
    render(report, console)
    if args.write and report.unwritable is not None:
        written = escape(str(args.write))
        console.print(f"\n[red]nothing written to {written}[/]; fix the above and run doctor again")
    elif args.write:
        write_settings(args.write, report.recommended)
        console.print(f"\nwrote the settings into {args.write}; run the gateway with --config {args.write}")
    return 0 if report.ok else 1
