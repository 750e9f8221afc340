"""Run the real Claude Code CLI headless (`claude -p PROMPT --output-format json`), for end-to-end
tests, and a Messages server on loopback that records what it sends.

    with run_asgi_server(recorder := MessagesRecorder([tool_use("Bash", command="echo hi")])) as url:
        run = run_claude("run echo hi", base_url=url, home=tmp_path / "home",
                         workdir=tmp_path / "work", model="qwen", allowed_tools=["Bash"])
    assert run.ok, run.describe()
    assert run.result == "Done."

`claude_binary()` finds the Claude Code installed by `scripts/install-claude.sh` (project cache,
one prefix per version, installing it on first use) and skips the test only when npm is missing.
`run_claude()` runs it with stdin closed, `HOME` a scratch folder (Claude Code writes
`~/.claude.json` and `~/.claude/` there and reads `~/.claude/settings.json`), no network beyond
the base URL (`CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1`), the tools asked for allowed by name
(`--allowedTools`: as root Claude Code refuses `--dangerously-skip-permissions`), under a hard
timeout, and parses the one JSON result it prints (docs/claude-code-wire.md).

`MessagesRecorder` is the "20-line logging server" of docs/claude-code-wire.md grown a little:
it records every request (method, path with query, headers, JSON body) and answers
`POST /v1/messages` with a minimal valid stream (`message_start`, one block, `message_delta`,
`message_stop`) for each scripted reply in turn, `POST /v1/messages/count_tokens` with a count,
anything else with Anthropic's 404 error.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from codexgate.server.asgi import Receive, Scope, Send
from tests.support.scripts import install_once

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-claude.sh"
# The version the tests pin (docs/claude-code-wire.md and tests/fixtures/claude_code/<version>/
# are written for it); scripts/install-claude.sh installs it by default.
CLAUDE_VERSION = "2.1.332"
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "claude_code" / CLAUDE_VERSION
JSON = dict[str, Any]
# Variables of the caller's environment that would steer Claude Code (tests may run inside it).
_OWN_PREFIXES = ("ANTHROPIC_", "CLAUDE", "DISABLE_", "MAX_THINKING_TOKENS", "ENABLE_TOOL_SEARCH")


@functools.cache
def claude_binary(version: str = CLAUDE_VERSION) -> Path:
    """The `claude` executable of Claude Code `version` from the project cache, installed if
    missing. `CODEXGATE_CLAUDE_BIN` points at another binary, used instead of the pinned one.
    Skips the calling test if Claude Code is not installed and npm is not available; fails it
    if the install itself fails (and every later caller of the same version, with the cause)."""
    override = os.environ.get("CODEXGATE_CLAUDE_BIN")
    if override and version == CLAUDE_VERSION:
        return Path(override)
    cache = Path(os.environ.get("CODEXGATE_CACHE") or REPO_ROOT / ".cache")
    cached = cache / "claude" / version / "node_modules" / ".bin" / "claude"
    if not cached.exists() and (shutil.which("npm") is None or shutil.which("node") is None):
        pytest.skip("Claude Code is not installed and npm/node are unavailable to install it")
    stdout = install_once(INSTALL_SCRIPT, timeout=900, args=(version,))
    return Path(stdout.strip().splitlines()[-1])


@dataclass
class ClaudeRun:
    """One `claude -p` run: exit status, raw output and the parsed JSON result."""

    argv: list[str]
    returncode: int | None  # None if killed on timeout
    stdout: str
    stderr: str
    result_json: JSON | None  # the `{"type": "result", ...}` object, None if none was printed
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        """Exited 0, in time, with a result that is not an error."""
        return (
            self.returncode == 0
            and not self.timed_out
            and self.result_json is not None
            and not self.result_json.get("is_error")
        )

    def _get(self, key: str) -> Any:
        return (self.result_json or {}).get(key)

    @property
    def result(self) -> str | None:
        """The final answer's text (or, for an error, what Claude Code says went wrong)."""
        value = self._get("result")
        return value if isinstance(value, str) else None

    @property
    def is_error(self) -> bool | None:
        return self._get("is_error")

    @property
    def usage(self) -> JSON | None:
        """`input_tokens`, `cache_creation_input_tokens`, `cache_read_input_tokens`,
        `output_tokens` (and more), summed over the run's requests."""
        return self._get("usage")

    @property
    def num_turns(self) -> int | None:
        return self._get("num_turns")

    @property
    def stop_reason(self) -> str | None:
        return self._get("stop_reason")

    @property
    def model_usage(self) -> JSON:
        """Per model name: tokens, and the `contextWindow` and `maxOutputTokens` Claude Code
        believed the model has."""
        value = self._get("modelUsage")
        return value if isinstance(value, dict) else {}

    def describe(self) -> str:
        """Everything useful for an assertion message."""
        return (
            f"argv: {self.argv}\nexit: {self.returncode} timed_out: {self.timed_out}\n"
            f"stdout:\n{self.stdout[-6000:]}\nstderr:\n{self.stderr[-4000:]}"
        )


def run_claude(
    prompt: str,
    *,
    home: Path,
    workdir: Path,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    auth_token: str | None = None,
    allowed_tools: Sequence[str] = (),
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    quiet_network: bool = True,
    timeout: float = 120,
    version: str = CLAUDE_VERSION,
) -> ClaudeRun:
    """`claude -p PROMPT --output-format json` in `workdir` with `HOME=home`.

    `base_url` becomes `ANTHROPIC_BASE_URL`, `api_key` `ANTHROPIC_API_KEY` (sent as `x-api-key`),
    `auth_token` `ANTHROPIC_AUTH_TOKEN` (sent as `Authorization: Bearer`), `model` `--model`;
    each left out is not set, so that `~/.claude/settings.json` in `home` can say it instead.
    `quiet_network` sets `CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1` (no telemetry, update
    checks or feature flags: nothing but the base URL is called). `env` adds variables last.
    The whole process group is killed after `timeout` seconds.
    """
    claude = claude_binary(version)
    home.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [str(claude), "-p", prompt, "--output-format", "json"]
    if model is not None:
        argv += ["--model", model]
    if allowed_tools:
        argv += ["--allowedTools", ",".join(allowed_tools)]
    argv += list(extra_args)
    proc_env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_PREFIXES)}
    proc_env.update({"HOME": str(home), "NO_COLOR": "1"})
    wanted = {
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": api_key,
        "ANTHROPIC_AUTH_TOKEN": auth_token,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1" if quiet_network else None,
    }
    proc_env.update({k: v for k, v in wanted.items() if v is not None})
    proc_env.update(env or {})
    proc = subprocess.Popen(
        argv,
        cwd=workdir,
        env=proc_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: a timeout kills every child it started
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate(timeout=30)
    except BaseException:
        _kill_group(proc)
        proc.communicate(timeout=30)
        raise
    return ClaudeRun(
        argv=argv,
        returncode=None if timed_out else proc.returncode,
        stdout=out,
        stderr=err,
        result_json=_result_line(out.splitlines()),
        timed_out=timed_out,
    )


def _kill_group(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _result_line(lines: Iterable[str]) -> JSON | None:
    """The last `{"type": "result"}` object printed (an unknown model name makes Claude Code
    print a `[claude-code:unrecognized_model]` line too)."""
    found = None
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("type") == "result":
            found = value
    return found


# --- the recording Messages server ----------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One scripted answer: a text block, or a tool_use block (then stop_reason `tool_use`)."""

    text: str = "Done."
    tool: str | None = None
    tool_input: JSON = field(default_factory=dict)


def text(value: str) -> Reply:
    return Reply(text=value)


def tool_use(name: str, **tool_input: Any) -> Reply:
    return Reply(tool=name, tool_input=tool_input)


@dataclass
class Recorded:
    method: str
    path: str  # with the query string, e.g. "/v1/messages?beta=true"
    headers: dict[str, str]  # names lower-cased
    body: JSON | None  # None for a request without a JSON object body


Answer = Callable[[JSON, int], Reply]


class MessagesRecorder:
    """ASGI app: records every request and answers as the Messages API would, minimally.

    `replies` is a list answered in turn (then "Done." for every later request) or a function
    `(body, index) -> Reply` of the Messages request's body and its 0-based index among them.
    `requests` is appended from the server's thread; read it after the run."""

    def __init__(self, replies: Sequence[Reply] | Answer = (), *, input_tokens: int = 10) -> None:
        self.replies = replies
        self.input_tokens = input_tokens
        self.requests: list[Recorded] = []

    def messages(self) -> list[Recorded]:
        """The `POST /v1/messages` requests, in arrival order."""
        return [r for r in self.requests if r.method == "POST" and r.path.split("?")[0] == "/v1/messages"]

    def _reply(self, body: JSON) -> Reply:
        index = len(self.messages()) - 1
        if callable(self.replies):
            return self.replies(body, index)
        return self.replies[index] if index < len(self.replies) else Reply()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        try:
            parsed = json.loads(b"".join(chunks) or b"null")
        except ValueError:
            parsed = None
        body = parsed if isinstance(parsed, dict) else None
        query = scope.get("query_string", b"").decode("latin-1")
        path = str(scope["path"]) + (f"?{query}" if query else "")
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        self.requests.append(Recorded(str(scope["method"]), path, headers, body))
        route = str(scope["path"])
        if scope["method"] == "POST" and route == "/v1/messages/count_tokens":
            await _send(send, 200, "application/json", json.dumps({"input_tokens": self.input_tokens}))
        elif scope["method"] == "POST" and route == "/v1/messages" and body is not None:
            reply = self._reply(body)
            if body.get("stream"):
                await _send(send, 200, "text/event-stream", self._stream(reply, str(body.get("model"))))
            else:
                await _send(
                    send, 200, "application/json", json.dumps(self._message(reply, str(body.get("model"))))
                )
        else:
            error = {"type": "error", "error": {"type": "not_found_error", "message": f"no route {route}"}}
            await _send(send, 404, "application/json", json.dumps(error))

    def _usage(self) -> JSON:
        return {
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1,
        }

    def _message(self, reply: Reply, model: str) -> JSON:
        block: JSON
        if reply.tool:
            block = {"type": "tool_use", "id": "toolu_01", "name": reply.tool, "input": reply.tool_input}
        else:
            block = {"type": "text", "text": reply.text}
        return {
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [block],
            "stop_reason": "tool_use" if reply.tool else "end_turn",
            "stop_sequence": None,
            "usage": {**self._usage(), "output_tokens": 5},
        }

    def _stream(self, reply: Reply, model: str) -> str:
        start = {**self._message(reply, model), "content": [], "stop_reason": None, "usage": self._usage()}
        if reply.tool:
            first = {"type": "tool_use", "id": "toolu_01", "name": reply.tool, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(reply.tool_input)}
        else:
            first = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": reply.text}
        stop = "tool_use" if reply.tool else "end_turn"
        events = [
            {"type": "message_start", "message": start},
            {"type": "content_block_start", "index": 0, "content_block": first},
            {"type": "content_block_delta", "index": 0, "delta": delta},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
            {"type": "message_stop"},
        ]
        return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


async def _send(send: Send, status: int, content_type: str, data: str) -> None:
    raw = data.encode()
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(raw)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": raw})


# --- trimmed fixtures of real requests ------------------------------------------------------

_CUT = 300  # characters kept of each long text
_KEPT_HEADERS = (
    "accept",
    "anthropic-beta",
    "anthropic-dangerous-direct-browser-access",
    "anthropic-version",
    "authorization",
    "content-type",
    "user-agent",
    "x-api-key",
    "x-app",
    "x-claude-code-session-id",
    "x-stainless-retry-count",
    "x-stainless-timeout",
)
_SESSION = "00000000-0000-4000-8000-000000000000"


def trimmed_request(recorded: Recorded, *, home: Path, workdir: Path) -> JSON:
    """One recorded request as a fixture: every key kept, each long text (system blocks,
    messages' text, tool and schema descriptions) cut to a few hundred characters, and what
    names this machine or run (the scratch paths, device and session ids, the key) replaced."""
    session = recorded.headers.get("x-claude-code-session-id", "")
    device = ""
    if recorded.body and isinstance(recorded.body.get("metadata"), dict):
        user = json.loads(recorded.body["metadata"].get("user_id") or "{}")
        device = str(user.get("device_id", ""))

    def scrub(value: str) -> str:
        value = value.replace(str(workdir), "/home/user/project").replace(str(home), "/home/user")
        value = value.replace(session, _SESSION) if session else value
        return value.replace(device, "0" * len(device)) if device else value

    def cut(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: cut(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [cut(v, key) for v in value]
        if isinstance(value, str):
            value = scrub(value)
            if key in ("text", "description", "content") and len(value) > _CUT:
                return value[:_CUT] + f"[... {len(value) - _CUT} characters cut]"
        return value

    headers = {k: scrub(v) for k, v in recorded.headers.items() if k in _KEPT_HEADERS}
    if "x-api-key" in headers:
        headers["x-api-key"] = "<the key>"
    if "authorization" in headers:
        headers["authorization"] = "Bearer <the key>"
    return {"method": recorded.method, "path": recorded.path, "headers": headers, "body": cut(recorded.body)}


def shape(value: Any) -> Any:
    """The keys of a JSON value all the way down (lists by their items' shapes, in order), with
    no values: what a fixture and a live request must share."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__
