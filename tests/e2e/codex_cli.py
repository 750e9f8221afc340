"""Run the real Codex CLI (`codex exec --json`) against a gateway, for end-to-end tests.

    run = run_codex_exec("create hello.txt", base_url=gateway_url, model="qwen",
                         workdir=tmp_path / "work", codex_home=tmp_path / "codex-home")
    assert run.ok, run.describe()
    assert run.final_message == "Done."

`codex_binary()` finds the Codex CLI installed by `scripts/install-codex.sh` (project cache,
one prefix per version, installing it on first use) and skips the test only when npm is missing.
The suite runs on `CODEX_VERSION`, the current release; a representative subset also runs on each
of `OLDER_CODEX_VERSIONS`, through the `codex_versions` parametrization (a `codex_version`
argument to pass on; docs/codex-versions.md says which tests and why). `run_codex_exec()`
writes the catalog and profile with `codexgate.commands.codex_setup.catalog.write_codex_setup` into `codex_home`,
runs Codex non-interactively (stdin closed, approval `never`, a sandbox that lets commands and
`apply_patch` write inside `workdir`) under a hard timeout, and parses the JSONL events
(codex-contract.md §9).

Sandbox: `-s workspace-write` (Codex's Linux sandbox; network off for commands) when it works
here, checked once per process with `codex sandbox`; otherwise
`--dangerously-bypass-approvals-and-sandbox`. `CODEXGATE_E2E_SANDBOX=workspace-write|bypass`
forces one.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from codexgate.app import build_app
from codexgate.commands.codex_setup.catalog import (
    CodexSetupError,
    ModelSpec,
    SetupResult,
    codex_base_instructions,
    write_codex_setup,
)
from codexgate.config import load_settings
from codexgate.server.asgi import Message, Receive, Scope, Send
from tests.support._exchange import ASGIApp
from tests.support.fake_upstream import FakeUpstream
from tests.support.scripts import install_once
from tests.support.servers import run_asgi_server

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-codex.sh"
# The current release (what `npm install @openai/codex` gets): every e2e test runs on it.
CODEX_VERSION = "0.171.0"
# Earlier releases still covered by a subset (a tool turn over HTTP, one over WebSockets, one
# turn through `codex app-server`): `codex_versions` runs a test on each.
OLDER_CODEX_VERSIONS = ("0.169.0",)
CODEX_VERSIONS = (CODEX_VERSION, *OLDER_CODEX_VERSIONS)
SANDBOX_FLAGS = {
    "workspace-write": ("-s", "workspace-write"),
    "bypass": ("--dangerously-bypass-approvals-and-sandbox",),
}
JSON = dict[str, Any]


codex_versions = pytest.mark.parametrize(
    "codex_version", CODEX_VERSIONS, ids=[f"codex-{version}" for version in CODEX_VERSIONS]
)
"""Run a test on the current Codex release and on each older one it still covers."""


@functools.cache
def codex_binary(version: str = CODEX_VERSION) -> Path:
    """The `codex` executable of Codex CLI `version` from the project cache, installed if missing.

    `CODEXGATE_CODEX_BIN` points at another binary, used instead of the current release (older
    versions are still installed in the cache). Skips the calling test if Codex is not installed
    and npm is not available; fails it if the install itself fails (and every later caller of
    the same version at once, with the same cause).
    """
    override = os.environ.get("CODEXGATE_CODEX_BIN")
    if override and version == CODEX_VERSION:
        return Path(override)
    cache = Path(os.environ.get("CODEXGATE_CACHE") or REPO_ROOT / ".cache")
    cached = cache / "codex" / version / "node_modules" / ".bin" / "codex"
    if not cached.exists() and (shutil.which("npm") is None or shutil.which("node") is None):
        pytest.skip("Codex CLI is not installed and npm/node are unavailable to install it")
    stdout = install_once(INSTALL_SCRIPT, timeout=900, args=(version,))
    return Path(stdout.strip().splitlines()[-1])


@functools.cache
def codex_prompt(version: str = CODEX_VERSION) -> str:
    """Codex's own base prompt, read from the installed binary (see codex_setup)."""
    try:
        return codex_base_instructions(codex_binary(version))
    except CodexSetupError as exc:
        pytest.fail(str(exc))


@functools.cache
def sandbox_mode() -> str:
    """`workspace-write` if Codex's sandbox can run a command that writes its cwd, else `bypass`."""
    forced = os.environ.get("CODEXGATE_E2E_SANDBOX")
    if forced:
        if forced not in SANDBOX_FLAGS:
            raise ValueError(f"CODEXGATE_E2E_SANDBOX must be one of {sorted(SANDBOX_FLAGS)}")
        return forced
    with tempfile.TemporaryDirectory(prefix="codexgate-sandbox-probe-") as tmp:
        home, work = Path(tmp, "home"), Path(tmp, "work")
        home.mkdir()
        work.mkdir()
        cmd = [str(codex_binary()), "sandbox", "-c", 'sandbox_mode="workspace-write"', "--"]
        cmd += ["sh", "-c", "echo ok > probe"]
        try:
            _run_bounded(cmd, cwd=work, env=_codex_env(home), timeout=60)
        except _Timeout:
            return "bypass"
        return "workspace-write" if (work / "probe").is_file() else "bypass"


@dataclass
class CodexRun:
    """One `codex exec --json` run: exit status, raw output and the parsed JSONL events."""

    argv: list[str]
    returncode: int | None  # None if killed on timeout
    stdout: str
    stderr: str
    events: list[JSON]
    timed_out: bool = False
    setup: SetupResult | None = None
    unparsed_lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Exited 0, in time, and no turn failed."""
        return self.returncode == 0 and not self.timed_out and not self.of_type("turn.failed")

    def of_type(self, event_type: str) -> list[JSON]:
        return [e for e in self.events if e.get("type") == event_type]

    @property
    def thread_id(self) -> str | None:
        started = self.of_type("thread.started")
        return started[0].get("thread_id") if started else None

    def items(self, item_type: str | None = None) -> list[JSON]:
        """Completed items (`item.completed`), optionally of one `item.type`."""
        items = [e.get("item") or {} for e in self.of_type("item.completed")]
        return [i for i in items if item_type is None or i.get("type") == item_type]

    @property
    def agent_messages(self) -> list[str]:
        return [str(i.get("text", "")) for i in self.items("agent_message")]

    @property
    def final_message(self) -> str | None:
        """Text of the last agent message, or None if Codex printed none."""
        messages = self.agent_messages
        return messages[-1] if messages else None

    @property
    def command_executions(self) -> list[JSON]:
        """`{command, aggregated_output, exit_code, status}` per finished command."""
        return self.items("command_execution")

    @property
    def file_changes(self) -> list[JSON]:
        """`{changes: [{path, kind}], status}` per finished apply_patch."""
        return self.items("file_change")

    @property
    def errors(self) -> list[str]:
        """Messages of error items (warnings), `error` events (retries) and failed turns."""
        found = [str(i.get("message", "")) for i in self.items("error")]
        found += [str(e.get("message", "")) for e in self.of_type("error")]
        found += [str((e.get("error") or {}).get("message", "")) for e in self.of_type("turn.failed")]
        return found

    @property
    def usage(self) -> JSON | None:
        """Token usage of the last completed turn (summed over its requests by Codex)."""
        done = self.of_type("turn.completed")
        return done[-1].get("usage") if done else None

    def describe(self) -> str:
        """Everything useful for an assertion message."""
        return (
            f"argv: {self.argv}\nexit: {self.returncode} timed_out: {self.timed_out}\n"
            f"stdout:\n{self.stdout[-6000:]}\nstderr:\n{self.stderr[-4000:]}"
        )


def run_codex_exec(
    prompt: str,
    *,
    base_url: str,
    model: str,
    workdir: Path,
    codex_home: Path,
    extra_args: Sequence[str] = (),
    timeout: float = 120,
    specs: Sequence[ModelSpec] | None = None,
    env: Mapping[str, str] | None = None,
    env_key: str | None = None,
    sandbox: str | None = None,
    websockets: bool = False,
    remote_compaction: bool = False,
    version: str = CODEX_VERSION,
) -> CodexRun:
    """Run `codex exec --json --skip-git-repo-check PROMPT` through the gateway at `base_url`.

    Writes the codexgate catalog + profile into `codex_home` (`specs` default to one spec for
    `model` with an unknown context window, and Codex's own base prompt), runs in `workdir` with
    stdin closed, and kills the whole process group after `timeout` seconds (the npm launcher
    runs the native binary as a child). `env_key` names the variable Codex sends as the bearer
    token and `env` adds variables (e.g. that key); `sandbox` is `workspace-write`, `bypass`
    or None for `sandbox_mode()`. `websockets` and `remote_compaction` go to
    `write_codex_setup`; WebSockets are off here by default (the product default is on) so
    that a test's request counts mean HTTP requests unless it asks for WebSockets. `version` is
    the Codex release to run (see `codex_versions`).
    """
    codex = codex_binary(version)
    workdir.mkdir(parents=True, exist_ok=True)
    specs = list(specs) if specs else [ModelSpec(slug=model, context_window=None)]
    setup = write_codex_setup(
        codex_home,
        base_url,
        specs,
        codex_home=codex_home,
        base_instructions=codex_prompt(version),
        env_key=env_key,
        websockets=websockets,
        remote_compaction=remote_compaction,
    )
    argv = [str(codex), "exec", "--json", "--skip-git-repo-check", *setup.args, "-m", model]
    argv += [*SANDBOX_FLAGS[sandbox or sandbox_mode()], *extra_args, "--", prompt]
    proc_env = _codex_env(codex_home, env)
    try:
        returncode, out, err = _run_bounded(argv, cwd=workdir, env=proc_env, timeout=timeout)
        timed_out = False
    except _Timeout as exc:
        returncode, out, err, timed_out = None, exc.stdout, exc.stderr, True
    events, unparsed = _parse_jsonl(out.splitlines())
    return CodexRun(argv, returncode, out, err, events, timed_out, setup, unparsed)


def run_codex_in(tmp_path: Path, prompt: str, *, home: str = "home", **options: Any) -> CodexRun:
    """`run_codex_exec` working in `tmp_path`/work, with its Codex home in `tmp_path`/`home`."""
    return run_codex_exec(prompt, workdir=tmp_path / "work", codex_home=tmp_path / home, **options)


@contextmanager
def serving_tapped(script: Any, **flags: Any) -> Iterator[tuple[str, FakeUpstream, CodexTraffic]]:
    """The gateway (settings from `flags`) over a FakeUpstream answering with `script`, both
    served on loopback, behind a tap that records what Codex sends; yields the gateway's URL."""
    fake = FakeUpstream(script)
    with run_asgi_server(fake) as upstream:
        settings = load_settings({"upstream": upstream + "/v1", "discover": False, **flags}, environ={})
        traffic = CodexTraffic(build_app(settings, environ={}))
        with run_asgi_server(traffic, lifespan="on") as gateway:
            yield gateway, fake, traffic


def run_tapped(
    tmp_path: Path, script: Any, prompt: str, **options: Any
) -> tuple[CodexRun, FakeUpstream, CodexTraffic]:
    """One Codex run (`run_codex_in`, `options`) through `serving_tapped(script)`: the run, the
    upstream and the tap, read once the servers have stopped."""
    with serving_tapped(script) as (gateway, fake, traffic):
        run = run_codex_in(tmp_path, prompt, base_url=gateway, **options)
    return run, fake, traffic


class _Timeout(Exception):
    def __init__(self, stdout: str, stderr: str) -> None:
        super().__init__("timed out")
        self.stdout, self.stderr = stdout, stderr


def _run_bounded(
    argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
) -> tuple[int, str, str]:
    """Run to completion or kill the process group at the deadline (then raise _Timeout)."""
    proc = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate(timeout=30)
        raise _Timeout(out, err) from None
    except BaseException:
        _kill_group(proc)
        proc.communicate(timeout=30)
        raise
    return proc.returncode, out, err


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _codex_env(codex_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The caller's environment without Codex's own variables (tests may run inside Codex)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODEX_")}
    env.update({"CODEX_HOME": str(codex_home), "NO_COLOR": "1"})
    env.update(extra or {})
    return env


def _parse_jsonl(lines: Iterable[str]) -> tuple[list[JSON], list[str]]:
    events: list[JSON] = []
    unparsed: list[str] = []
    for line in lines:
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            unparsed.append(line)
            continue
        if isinstance(value, dict):
            events.append(value)
        else:
            unparsed.append(line)
    return events, unparsed


class CodexTraffic:
    """ASGI middleware around the gateway that records what Codex sends to `/v1/responses`.

        traffic = CodexTraffic(build_app(settings, environ={}))
        with run_asgi_server(traffic, lifespan="on") as gateway: ...

    `requests` holds every Responses request in arrival order as `(transport, body)`:
    `("websocket", <response.create frame>)` or `("http", <POST body>)` (a body that is not JSON,
    e.g. compressed, is recorded as `{"unparsed": <first bytes>}`). `websocket_events` holds the
    event frames the gateway sent back over WebSockets. `headers` holds the request headers of
    each POST and WebSocket handshake as `(transport, {name: value})`, `response_headers` those
    the gateway answered each POST with. Lists are appended from the server's thread; read them
    after the server has stopped (or accept a snapshot).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.websocket_connections = 0
        self.http_posts = 0
        self.requests: list[tuple[str, JSON]] = []
        self.websocket_events: list[JSON] = []
        self.headers: list[tuple[str, dict[str, str]]] = []
        self.response_headers: list[dict[str, str]] = []

    def bodies(self, transport: str | None = None) -> list[JSON]:
        return [body for kind, body in self.requests if transport in (None, kind)]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        responses = str(scope.get("path", "")).rstrip("/").endswith("/responses")
        if responses and scope["type"] == "websocket":
            self.websocket_connections += 1
            self.headers.append(("websocket", _headers(scope["headers"])))
            receive, send = self._tap_frames(receive), self._tap_events(send)
        elif responses and scope["type"] == "http" and scope.get("method") == "POST":
            self.http_posts += 1
            self.headers.append(("http", _headers(scope["headers"])))
            receive, send = self._tap_body(receive), self._tap_start(send)
        await self.app(scope, receive, send)

    def _tap_start(self, send: Send) -> Send:
        async def tapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.response_headers.append(_headers(message.get("headers") or []))
            await send(message)

        return tapped

    def _tap_frames(self, receive: Receive) -> Receive:
        async def tapped() -> Message:
            message = await receive()
            if message["type"] == "websocket.receive":
                self.requests.append(("websocket", _json_or_raw(message.get("text") or message.get("bytes"))))
            return message

        return tapped

    def _tap_events(self, send: Send) -> Send:
        async def tapped(message: Message) -> None:
            if message["type"] == "websocket.send" and message.get("text"):
                self.websocket_events.append(_json_or_raw(message["text"]))
            await send(message)

        return tapped

    def _tap_body(self, receive: Receive) -> Receive:
        chunks: list[bytes] = []

        async def tapped() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    self.requests.append(("http", _json_or_raw(b"".join(chunks))))
            return message

        return tapped


def _headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in raw}


def _json_or_raw(data: str | bytes | None) -> JSON:
    try:
        value = json.loads(data or b"")
    except ValueError:
        return {"unparsed": (data or b"")[:200]}
    return value if isinstance(value, dict) else {"unparsed": str(value)[:200]}
