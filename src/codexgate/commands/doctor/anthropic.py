"""`codexgate doctor --kind anthropic`: probe an Anthropic Messages upstream (Anthropic's API, or
the `/v1/messages` of llama.cpp, vLLM, Ollama) with the key the gateway would send, and say in
plain words what is wrong: no key, a key refused, a model the server does not have, a URL that
is not a Messages API. Four probes: the key, `GET /models`, the model, one short streamed
`POST /messages`. The report and the recommended settings are commands/doctor/probe.py's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson

from codexgate.backends.anthropic.factory import ANTHROPIC_HOST
from codexgate.backends.anthropic.models import (
    ModelFacts,
    claude_facts,
    facts_of_entry,
    list_entries,
    model_facts,
    with_server_window,
)
from codexgate.backends.http.transport import HttpRequest, Transport
from codexgate.commands.doctor.probe import Check, Findings, Report
from codexgate.errors import UpstreamError
from codexgate.translate.upstream_errors import classify
from codexgate.wire.sse import SSEDecoder

__all__ = ["AnthropicDoctor"]

_SHOWN_MODELS = 8


class AnthropicDoctor:
    """Runs the probes in order; `on_step(name)` is told before each."""

    def __init__(
        self,
        transport: Transport,
        base_url: str,
        *,
        key_env: str | None,
        key: str | None,
        version: str = "2023-06-01",
        model: str | None = None,
        timeout: float = 60.0,
        on_step: Callable[[str], None] = lambda _: None,
    ) -> None:
        self.transport = transport
        self.base = base_url.rstrip("/")
        self.key_env, self.key = key_env, key
        self.headers = {"anthropic-version": version, **({"x-api-key": key} if key else {})}
        self.timeout = timeout
        self.on_step = on_step
        self.findings = Findings(base_url=self.base, model=model, server="an Anthropic Messages server")
        self.facts: ModelFacts | None = None
        self.checks: list[Check] = []

    async def run(self) -> Report:
        for name, step in (
            ("key", self._key),
            ("reachable", self._reachable),
            ("model", self._model),
            ("streaming", self._streaming),
        ):
            self.on_step(name)
            check = await step()
            self.checks.append(check)
            if check.status == "fail" and name in ("reachable", "model"):
                break  # the rest would only say it again
        return Report(self.checks, self.findings, self._recommend())

    # -- the probes

    async def _key(self) -> Check:
        if self.key_env is None:
            return Check(
                "key", "warn", "no key is sent (no --api-key-env)",
                ["Anthropic's API needs one: --api-key-env ANTHROPIC_API_KEY; a local server needs none"],
            )  # fmt: skip
        if not self.key:
            return Check(
                "key", "fail", f"no key: {self.key_env} is not set", [f"export {self.key_env}=sk-ant-..."]
            )
        return Check("key", "ok", f"sent as x-api-key, from {self.key_env}")

    async def _reachable(self) -> Check:
        f = self.findings
        started = time.perf_counter()
        status, entries, why = await list_entries(self.transport, self.base, self.headers, self.timeout)
        elapsed_ms = (time.perf_counter() - started) * 1000
        if status == 0:
            f.url_problem = f"nothing answers at {self.base}: it {why or 'did not answer'}"
            return Check("reachable", "fail", f.url_problem)
        if status in (401, 403):
            return Check("reachable", "fail", self._refused(status))
        if status == 404:
            f.url_problem = (
                f"GET {self.base}/models answered 404: this is not a Messages API base "
                "(Anthropic's is https://api.anthropic.com/v1; the gateway appends /messages)"
            )
            return Check("reachable", "fail", f.url_problem)
        if status != 200:
            return Check(
                "reachable", "warn", f"GET /models answered HTTP {status}; the model is probed anyway"
            )
        f.models = [e["id"] for e in entries]
        listed = {e["id"]: e for e in entries}
        if f.model is None and f.models:
            f.model = f.models[0]
        if f.model in listed:
            self.facts = facts_of_entry(listed[f.model])
        more = " ..." if len(f.models) > _SHOWN_MODELS else ""
        details = [f"models: {', '.join(f.models[:_SHOWN_MODELS])}{more}"] if f.models else []
        return Check("reachable", "ok", f"answered in {elapsed_ms:.0f} ms", details)

    def _refused(self, status: int) -> str:
        if status == 403:
            return "the key may not use this API (HTTP 403): check its workspace and permissions"
        if not self.key:
            where = f"{self.key_env} is not set" if self.key_env else "no key was sent"
            return f"the server wants a key (HTTP 401) and {where}"
        return f"the key was refused (HTTP 401): the key in {self.key_env} is wrong or revoked"

    async def _model(self) -> Check:
        f = self.findings
        if f.model is None:
            return Check("model", "fail", "the server lists no model: name one with --model")
        if self.facts is None:
            self.facts = await model_facts(self.transport, self.base, self.headers, f.model, self.timeout)
            if self.facts is not None and not self.facts.listed and f.models:
                listed = ", ".join(f.models[:_SHOWN_MODELS])
                return Check(
                    "model",
                    "fail",
                    f"unknown model: {f.model} is not one the server has",
                    [f"it lists: {listed}"],
                )
        facts = self.facts or claude_facts(f.model)
        if facts is None or facts.window is None:  # a local server's Messages endpoint
            facts = self.facts = await with_server_window(
                facts, self.transport, self.base, self.headers, f.model, self.timeout
            )
        f.window = facts.window if facts is not None else None
        window = (
            f"context window {f.window.tokens} ({f.window.source})" if f.window else "context window unknown"
        )
        thinks = ", thinks" if facts is not None and facts.reasoning else ""
        return Check("model", "ok", f"{f.model}: {window}{thinks}")

    async def _streaming(self) -> Check:
        f = self.findings
        body = {
            "model": f.model, "max_tokens": 16, "stream": True,
            "messages": [{"role": "user", "content": "Say ok."}],
        }  # fmt: skip
        headers = {**self.headers, "content-type": "application/json", "accept": "text/event-stream"}
        request = HttpRequest("POST", self.base + "/messages", headers, orjson.dumps(body), self.timeout)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.transport.open(request)
                try:
                    data = b"".join([chunk async for chunk in response.iter_chunks()])
                finally:
                    await response.aclose()
        except UpstreamError as exc:
            return Check("streaming", "fail", f"POST /messages failed: {exc.reason or exc.message}")
        except TimeoutError:
            return Check("streaming", "fail", f"POST /messages: no answer within {self.timeout:g} s")
        seconds = time.perf_counter() - started
        if response.status != 200:
            error = classify(response.status, data, response.headers, self.base + "/messages")
            if response.status == 404 and error.code == "model_not_found":
                return Check(
                    "streaming", "fail", f"unknown model: {f.model} (the server said: {_said(data)})"
                )
            if response.status in (401, 403):
                return Check("streaming", "fail", self._refused(response.status))
            return Check(
                "streaming", "fail", f"POST /messages answered HTTP {response.status}: {_said(data)}"
            )
        kinds = _event_types(data)
        if "message_stop" not in kinds:
            return Check("streaming", "fail", "the answer is not Anthropic's event stream (no message_stop)")
        return Check(
            "streaming", "ok", f"a streamed message in {seconds:.1f} s", [" ".join(dict.fromkeys(kinds))]
        )

    # -- what to set

    def _recommend(self) -> dict[str, Any]:
        f = self.findings
        # Anthropic's API is Claude; a local server's Messages endpoint (llama.cpp, vLLM) is not.
        name = "claude" if urlsplit(self.base).hostname == ANTHROPIC_HOST else "messages"
        upstream: dict[str, Any] = {"name": name, "kind": "anthropic", "base_url": self.base}
        if self.key_env:
            upstream["api_key_env"] = self.key_env
        recommended: dict[str, Any] = {"upstream": upstream}
        if f.model is not None:
            model: dict[str, Any] = {"name": f.model, "upstream": name}
            if f.window is not None:
                model["context_window"] = f.window.tokens
            facts = self.facts or claude_facts(f.model)
            if facts is not None and facts.reasoning:
                model["supports_reasoning"] = True
            if facts is not None and facts.images:
                model["supports_images"] = True
            recommended["model"] = model
        return recommended


def _said(data: bytes) -> str:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data[:200].decode("utf-8", "replace")
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return str(message)[:300] if message else data[:200].decode("utf-8", "replace")


def _event_types(data: bytes) -> list[str]:
    decoder = SSEDecoder()
    kinds = []
    for payload in [*decoder.feed(data), *decoder.finish()]:
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict) and isinstance(event.get("type"), str):
            kinds.append(event["type"])
    return kinds
