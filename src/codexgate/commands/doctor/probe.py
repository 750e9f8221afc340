"""`codexgate doctor`: probe a Chat Completions upstream the way Codex will use it and say what
to set. This module does the probing and the reasoning; commands/doctor/command.py shows and writes.

Each probe is one small request. What it learns goes into `Findings`; `recommend()` turns
findings into codexgate settings, and `checks` say in words what was seen and what to fix.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from codexgate.backends.http.transport import HttpRequest, Transport
from codexgate.backends.model_list import list_models
from codexgate.backends.server_info import (
    ContextWindow,
    fetch_json,
    probe_context_window,
    server_root,
)
from codexgate.commands.codex_needs import CODEX_FIRST_REQUEST_TOKENS, MIN_WINDOW, RECOMMENDED_WINDOW
from codexgate.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout, UpstreamWrongURL
from codexgate.translate.open_models.content import ContentStage
from codexgate.translate.open_models.sampling import recommended_sampling, turn_token_cap
from codexgate.translate.open_models.textcalls import CallPiece
from codexgate.translate.upstream_errors import classify
from codexgate.wire.sse import SSEDecoder

# Servers known to cut an oversized prompt down without an error.
TRUNCATING_SERVERS = {"Ollama", "LM Studio"}
# Servers that refuse an oversized prompt before running it (so probing that costs nothing).
REJECTING_SERVERS = {"llama.cpp", "vLLM"}

Status = Literal["ok", "warn", "fail", "skip"]

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "exec_command",
        "description": "Runs a shell command and returns its output.",
        "parameters": {
            "type": "object",
            "properties": {"cmd": {"type": "string", "description": "the command line"}},
            "required": ["cmd"],
        },
    },
}
_NO_SUCH_MODEL = "codexgate-doctor-no-such-model"


@dataclass
class Check:
    name: str
    status: Status
    summary: str
    details: list[str] = field(default_factory=list)


@dataclass
class Findings:
    base_url: str
    server: str | None = None  # llama.cpp, Ollama, LM Studio, vLLM, or None
    models: list[str] = field(default_factory=list)
    model: str | None = None
    streams: bool = False
    usage_in_stream: bool = False
    stream_options_rejected: bool = False
    reasoning_field: str | None = None  # reasoning_content | reasoning
    think_tags: bool = False
    tool_calls: str | None = None  # structured | <text format> | prose | rejected
    window: ContextWindow | None = None
    overflow: str | None = None  # rejected | truncated | None (not probed)
    # What made the URL itself wrong (nothing answers there, or not the API): settings with
    # this URL are never written.
    url_problem: str | None = None


@dataclass
class ChatProbe:
    """What one streamed chat request showed."""

    status: int = 0
    error: UpstreamError | None = None
    event_stream: bool = False
    chunks: int = 0
    text: str = ""
    reasoning: dict[str, str] = field(default_factory=dict)  # field name -> text
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    first_token_s: float | None = None
    seconds: float = 0.0


@dataclass
class Report:
    checks: list[Check]
    findings: Findings
    recommended: dict[str, Any]

    @property
    def ok(self) -> bool:
        """No probe failed (a request that got no answer fails its check too)."""
        return not any(c.status == "fail" for c in self.checks)

    @property
    def unwritable(self) -> str | None:
        """Why the recommended settings must not be written (their URL is wrong, or no chat
        request succeeded, so nothing in them was seen to work); None: they may be."""
        if self.findings.url_problem:
            return f"the upstream URL is wrong: {self.findings.url_problem}"
        for check in self.checks:
            if check.name in ("reachable", "streaming") and check.status == "fail":
                return f"no chat request succeeded ({check.name}: {check.summary})"
        return None


class Doctor:
    """Runs the probes in order; `on_step(name)` is told before each (for a progress display)."""

    def __init__(
        self,
        transport: Transport,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        on_step: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.transport = transport
        self.base = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.on_step = on_step
        self.findings = Findings(base_url=self.base, model=model)
        self.checks: list[Check] = []
        self._answered = False  # a chat request got a 200

    async def run(self) -> Report:
        steps = (
            ("reachable", self._reachable),
            ("streaming", self._streaming),
            ("tool calls", self._tool_calls),
            ("context window", self._context_window),
            ("errors", self._errors),
        )
        for name, step in steps:
            self.on_step(name)
            check = await step()
            self.checks.append(check)
            if check.status == "fail" and (name == "reachable" or self.findings.url_problem):
                break  # nothing answers there, or not the API: the other probes would only repeat it
        return Report(self.checks, self.findings, recommend(self.findings))

    # -- the probes

    async def _reachable(self) -> Check:
        f = self.findings
        started = time.perf_counter()
        listing = await list_models(self.transport, self.base, self.headers, self.timeout)
        elapsed_ms = (time.perf_counter() - started) * 1000
        cause = listing.cause
        if cause in ("unreachable", "refused", "wrong_path"):
            if cause != "refused":  # refused: the right place, wanting a key
                f.url_problem = listing.problem()
            return Check("reachable", "fail", listing.problem() or "")
        f.models = listing.models
        f.server = await self._identify_server()
        server = f.server or "an OpenAI-compatible server"
        if not f.models:
            if f.model is None:
                return Check("reachable", "fail", f"{server}: {listing.problem()} (--model)")
            details = [f"GET /models answered {listing.status}"]
            return Check("reachable", "warn", f"{server}; no model list, using {f.model}", details)
        if f.model is None:
            f.model = f.models[0]
        details = [f"models: {', '.join(f.models[:8])}" + (" ..." if len(f.models) > 8 else "")]
        if f.model not in f.models:
            details.append(f"{f.model} is not in the list; the server may still route it")
        return Check("reachable", "ok", f"{server} in {elapsed_ms:.0f} ms; model {f.model}", details)

    async def _identify_server(self) -> str | None:
        root = server_root(self.base)
        probes = {
            "llama.cpp": root + "/props",
            "Ollama": root + "/api/version",
            "LM Studio": root + "/api/v0/models",
            "vLLM": root + "/version",
        }
        answers = await asyncio.gather(
            *(
                fetch_json(self.transport, url, self.headers, min(self.timeout, 5.0))
                for url in probes.values()
            )
        )
        for (name, _), (status, body) in zip(probes.items(), answers, strict=True):
            if status != 200 or not isinstance(body, dict):
                continue
            if name == "llama.cpp" and "default_generation_settings" in body:
                return name
            if name == "Ollama" and "version" in body and "data" not in body:
                return name
            if name == "LM Studio" and isinstance(body.get("data"), list):
                return name
            if name == "vLLM" and "version" in body:
                return name
        return None

    async def _streaming(self) -> Check:
        f = self.findings
        body = self._body("Answer in one short sentence: what is the capital of France?", max_tokens=48)
        probe = await self.chat(body)
        if probe.error is not None and probe.status == 400 and "stream_options" in probe.error.message:
            f.stream_options_rejected = True
            body.pop("stream_options")
            probe = await self.chat(body)
        if probe.error is not None:
            return Check("streaming", "fail", f"{probe.status}: {probe.error.message}")
        f.streams = probe.event_stream and probe.chunks > 1
        f.usage_in_stream = probe.usage is not None
        f.reasoning_field = next(iter(probe.reasoning), None)
        think = ContentStage({}, think="auto", text_calls="off")
        pieces = think.feed(probe.text) + think.finish()
        f.think_tags = any(isinstance(p, tuple) and p[0] == "reasoning" for p in pieces)
        details = [f"answer: {probe.text.strip()[:120]!r}"]
        if probe.first_token_s is not None:
            details.append(
                f"first token after {probe.first_token_s * 1000:.0f} ms, whole answer {probe.seconds:.2f} s"
            )
        if f.usage_in_stream and probe.usage:
            details.append(
                f"usage in stream: {probe.usage.get('prompt_tokens')} prompt + "
                f"{probe.usage.get('completion_tokens')} completion tokens"
            )
        else:
            details.append("no usage in the stream: codexgate will estimate it")
        if f.reasoning_field:
            details.append(f"reasoning arrives in `{f.reasoning_field}`")
        elif f.think_tags:
            details.append("reasoning arrives as <think> text in the answer: codexgate splits it out")
        if not f.streams:
            return Check("streaming", "warn", "the answer came in one piece, not streamed", details)
        status: Status = "ok" if f.usage_in_stream else "warn"
        return Check("streaming", status, f"streams ({probe.chunks} chunks)", details)

    async def _tool_calls(self) -> Check:
        f = self.findings
        body = self._body(
            "Use the exec_command tool to run `ls -la` in the current directory. Call the tool; "
            "do not describe it.",
            # a reasoning model thinks first: leave it room to reach the call
            max_tokens=2048 if f.reasoning_field or f.think_tags else 256,
        )
        body["tools"] = [_PROBE_TOOL]
        probe = await self.chat(body)
        if probe.error is not None:
            f.tool_calls = "rejected"
            return Check(
                "tool calls",
                "fail",
                f"requests with tools fail: {probe.status} {probe.error.message[:160]}",
                [
                    "Codex always sends tools; start the server with its tool-calling template "
                    "(llama.cpp: --jinja; vLLM: --enable-auto-tool-choice --tool-call-parser ...)"
                ],
            )
        if probe.tool_calls:
            f.tool_calls = "structured"
            names = ", ".join(str(c.get("function", {}).get("name")) for c in probe.tool_calls)
            return Check("tool calls", "ok", f"structured tool_calls ({names})")
        counts: Counter[str] = Counter()
        stage = ContentStage({"exec_command": _PROBE_TOOL["function"]["parameters"]}, counts=counts)  # type: ignore[index]
        pieces = stage.feed(probe.text) + stage.finish()
        formats = sorted(
            {k.split(".")[1] for k in counts if k.startswith("textcalls.") and k.endswith(".parsed")}
        )
        if any(isinstance(p, CallPiece) for p in pieces) and formats:
            f.tool_calls = formats[0]
            return Check(
                "tool calls",
                "warn",
                f"the model writes calls as text ({formats[0]} format); codexgate turns them into calls",
                ["a server-side tool parser is more reliable where the server has one"],
            )
        f.tool_calls = "prose"
        return Check(
            "tool calls",
            "warn",
            "the model answered in prose instead of calling the tool",
            [
                f"answer: {probe.text.strip()[:160]!r}",
                "small or untuned models may not be able to drive Codex",
            ],
        )

    async def _context_window(self) -> Check:
        f = self.findings
        if f.model is None:
            return Check("context window", "skip", "no model to ask about")
        window = await probe_context_window(
            self.transport, self.base, self.headers, f.model, min(self.timeout, 5.0)
        )
        f.window = window
        if window is None:
            return Check(
                "context window",
                "warn",
                "the server does not say; set context_window for the model",
                [f"Codex's first request alone is about {CODEX_FIRST_REQUEST_TOKENS} tokens"],
            )
        said = f"{window.tokens} tokens ({window.source})"
        details = (
            [f"trained maximum {window.trained}"]
            if window.trained and window.trained != window.tokens
            else []
        )
        if not window.runtime:
            details.append("this is the model's maximum; the server's own default may be much lower")
            return Check("context window", "warn", said, details + self._window_fixes())
        if window.tokens < MIN_WINDOW:
            verdict = "truncates it silently" if f.server in TRUNCATING_SERVERS else "rejects it"
            fits = "does not fit" if window.tokens < CODEX_FIRST_REQUEST_TOKENS else "barely fits"
            details.append(
                f"Codex's first request (~{CODEX_FIRST_REQUEST_TOKENS} tokens) {fits}, and its prompt grows "
                f"past the window within a few turns: the server {verdict}"
            )
            return Check("context window", "fail", said, details + self._window_fixes())
        if window.tokens < RECOMMENDED_WINDOW:
            details.append(f"workable, but Codex will compact often; {RECOMMENDED_WINDOW}+ works better")
            return Check("context window", "warn", said, details + self._window_fixes())
        return Check("context window", "ok", said, details)

    def _window_fixes(self) -> list[str]:
        server = self.findings.server
        want = RECOMMENDED_WINDOW
        window = self.findings.window
        if window is not None and window.trained and window.trained < want:
            return [
                f"the model itself was trained for {window.trained} tokens: a larger window needs RoPE "
                "scaling or a model made for long contexts"
            ]
        if server == "Ollama":
            return [
                f"fix: OLLAMA_CONTEXT_LENGTH={want} ollama serve (or PARAMETER num_ctx {want} in a Modelfile)"
            ]
        if server == "llama.cpp":
            return [f"fix: start llama-server with -c {want} (per slot: -c divided by --parallel)"]
        if server == "LM Studio":
            return [f"fix: load the model with a context length of {want} or more"]
        if server == "vLLM":
            return [f"fix: start vLLM with --max-model-len {want}"]
        return []

    async def _errors(self) -> Check:
        f = self.findings
        details: list[str] = []
        status: Status = "ok"
        unknown = await self.chat({**self._body("hi", max_tokens=1), "model": _NO_SUCH_MODEL})
        if unknown.error is not None and unknown.status == 0:
            status = "fail"  # no answer at all: a probe that failed, not a way of failing
            details.append(f"unknown model: no answer: {unknown.error.message}")
        elif unknown.error is not None:
            details.append(f"unknown model: {unknown.status} → codexgate sends {unknown.error.code}")
        else:
            details.append("unknown model: answered anyway (the server ignores the model name)")
        window = f.window
        # Only servers known to reject an oversized prompt before running it get one: elsewhere
        # it could be truncated and run, or billed.
        if (
            window is not None
            and window.runtime
            and f.server in REJECTING_SERVERS
            and window.tokens <= 262_144
        ):
            over = window.tokens + max(256, window.tokens // 10)
            big = self._body("hello " * over, max_tokens=1)
            probe = await self.chat(big)
            if probe.error is not None:
                f.overflow = "rejected"
                details.append(f"prompt over the window: {probe.status} → codexgate sends {probe.error.code}")
                if probe.error.code != "context_length_exceeded":
                    status = "warn"
                    details.append("this error is not recognised as a context overflow; please report it")
            else:
                f.overflow = "truncated"
                status = "fail"
                seen = (probe.usage or {}).get("prompt_tokens")
                details.append(
                    f"prompt over the window ({over} words) was accepted"
                    + (f" as {seen} tokens" if seen else "")
                    + ": the server truncates silently; codexgate refuses such requests itself"
                )
        elif f.server in TRUNCATING_SERVERS:
            details.append(
                f"{f.server} truncates prompts over its window silently; codexgate refuses them itself"
            )
        else:
            details.append("prompt over the window: not probed on this server (it could run or bill it)")
        return Check("errors", status, "how failures look", details)

    # -- one chat request

    def _body(self, prompt: str, *, max_tokens: int) -> dict[str, Any]:
        return {
            "model": self.findings.model,
            "messages": [
                {"role": "system", "content": "You are a concise assistant."},
                {"role": "user", "content": prompt},
            ],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "temperature": 0,
        }

    async def chat(self, body: dict[str, Any]) -> ChatProbe:
        """One streamed request, read to the end; failures are classified, never raised. A
        connection that breaks before the answer starts (a pooled connection the server had
        closed) is tried once more, as the gateway itself does."""
        probe = await self._chat_once(body)
        if isinstance(probe.error, UpstreamConnectError) and probe.chunks == 0:
            probe = await self._chat_once(body)
        self._note_url(probe)
        return probe

    def _note_url(self, probe: ChatProbe) -> None:
        """A chat request that shows the URL itself is wrong: a 404 for the API path, or, before
        any request was answered, no answer at all (a server that breaks on one request later
        is not at a wrong URL)."""
        self._answered = self._answered or probe.status == 200
        unanswered = probe.status == 0 and isinstance(probe.error, (UpstreamConnectError, UpstreamTimeout))
        wrong = isinstance(probe.error, UpstreamWrongURL) or (unanswered and not self._answered)
        if wrong and probe.error is not None and self.findings.url_problem is None:
            self.findings.url_problem = probe.error.message

    async def _chat_once(self, body: dict[str, Any]) -> ChatProbe:
        probe = ChatProbe()
        started = time.perf_counter()
        headers = {"content-type": "application/json", "accept": "text/event-stream", **self.headers}
        try:
            async with asyncio.timeout(self.timeout):
                url = self.base + "/chat/completions"
                request = HttpRequest("POST", url, headers, orjson.dumps(body), self.timeout)
                response = await self.transport.open(request)
                try:
                    probe.status = response.status
                    if response.status != 200:
                        probe.error = classify(response.status, await response.read(), response.headers)
                        return probe
                    probe.event_stream = "text/event-stream" in response.headers.get("content-type", "")
                    decoder = SSEDecoder()
                    async for raw in response.iter_chunks():
                        for data in decoder.feed(raw):
                            self._take(probe, data, started)
                    for data in decoder.finish():
                        self._take(probe, data, started)
                finally:
                    await response.aclose()
        except UpstreamError as exc:
            probe.error = exc
        except TimeoutError:
            probe.error = UpstreamError(f"no complete answer within {self.timeout:g} s")
        probe.seconds = time.perf_counter() - started
        return probe

    @staticmethod
    def _take(probe: ChatProbe, data: bytes, started: float) -> None:
        if data == b"[DONE]":
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(chunk, dict):
            return
        if not probe.event_stream:  # a plain JSON body: one chat.completion
            chunk = _completion_as_chunk(chunk)
        probe.chunks += 1
        if isinstance(chunk.get("error"), dict):
            probe.error = classify(500, orjson.dumps(chunk), {})
            return
        if isinstance(chunk.get("usage"), dict):
            probe.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if choice.get("finish_reason"):
                probe.finish_reason = choice["finish_reason"]
            for name in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(name), str) and delta[name]:
                    probe.reasoning[name] = probe.reasoning.get(name, "") + delta[name]
            if isinstance(delta.get("content"), str) and delta["content"]:
                if probe.first_token_s is None:
                    probe.first_token_s = time.perf_counter() - started
                probe.text += delta["content"]
            for call in delta.get("tool_calls") or ():
                if isinstance(call, dict) and call.get("function", {}).get("name"):
                    probe.tool_calls.append(call)


def _completion_as_chunk(body: dict[str, Any]) -> dict[str, Any]:
    choices = [{**c, "delta": c.get("message") or {}} for c in body.get("choices") or ()]
    return {**body, "choices": choices}


def recommend(f: Findings) -> dict[str, Any]:
    """codexgate settings for what was found: one upstream table and one model table."""
    name = (f.server or "upstream").lower().replace(" ", "-").replace(".", "")
    upstream: dict[str, Any] = {"name": name, "base_url": f.base_url}
    if f.tool_calls == "structured":
        upstream["text_tool_calls"] = "off"  # calls come structured; never parse prose
    elif f.tool_calls not in (None, "prose", "rejected"):
        upstream["text_tool_calls"] = f.tool_calls
    if f.reasoning_field == "reasoning":
        upstream["reasoning_replay"] = "reasoning"
    if f.stream_options_rejected:
        upstream["include_usage"] = False
    result: dict[str, Any] = {"upstream": upstream}
    if f.model:
        window = f.window.tokens if f.window is not None and f.window.runtime else None
        sampling = recommended_sampling(f.model, f.server)
        model: dict[str, Any] = {"name": f.model, "upstream": name}
        if window:
            model["context_window"] = window
        model["extra_body"] = {**sampling.values, "max_tokens": turn_token_cap(window)}
        result["model"] = model
        result["sampling_source"] = f"{sampling.family}: {sampling.source}"
    return result
