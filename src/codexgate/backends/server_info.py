"""What an upstream server says about itself beyond Chat Completions: its models and each
model's context window, read from the places the common servers publish them.

The window that matters is the one the server runs with, not the model's trained maximum:
llama.cpp and Ollama default to a few thousand tokens, far less than Codex's first prompt, and
Ollama then truncates the prompt silently. So runtime values win over trained ones:

- vLLM and SGLang: `max_model_len` in `/v1/models` (runtime); OpenRouter: `context_length` there.
- llama.cpp: `/props` → `default_generation_settings.n_ctx` (runtime, per slot).
- LM Studio: `/api/v0/models/{id}` → `loaded_context_length` (runtime) or `max_context_length`.
- Ollama: `/api/ps` → `context_length` of a loaded model (runtime), else `num_ctx` among the
  model's `/api/show` parameters; `<arch>.context_length` there is only the trained maximum.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote

import orjson

from codexgate.backends.http.transport import HttpRequest, Transport, read_capped
from codexgate.errors import UpstreamError

log = logging.getLogger("codexgate.backend")

_MAX_BODY = 4 * 1024 * 1024
# Fields in which servers report a model's context window in `/v1/models`.
_MODELS_WINDOW_FIELDS = ("max_model_len", "context_length", "context_window", "max_context_length")
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.MULTILINE)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def probeable_model_name(model: str) -> bool:
    """Whether a model name may go into a probe URL. Names are quoted as one path segment,
    but `.` and `..` survive quoting and URL normalisation would turn `/api/v0/models/..`
    into `/api/v0/`, sent with the upstream's key; control characters have no place there."""
    return bool(model) and model not in (".", "..") and not _CONTROL.search(model)


@dataclass(frozen=True, slots=True)
class ContextWindow:
    tokens: int  # what a request may hold, prompt and output together
    source: str  # where it was read, for reports and logs
    runtime: bool = True  # False: only the model's trained maximum was found
    trained: int | None = None  # the model's own maximum, when the server tells


async def fetch_json(
    transport: Transport, url: str, headers: Mapping[str, str], timeout: float, body: Any = None
) -> tuple[int, Any]:
    """(status, parsed JSON or None). Status 0 when nothing answered in time."""
    status, data, _ = await fetch_json_or_why(transport, url, headers, timeout, body)
    return status, data


async def fetch_json_or_why(
    transport: Transport, url: str, headers: Mapping[str, str], timeout: float, body: Any = None
) -> tuple[int, Any, str | None]:
    """As fetch_json, and when nothing answered (status 0), what failed, in words that follow
    the server's name ("refused the connection: ...")."""
    data = None if body is None else orjson.dumps(body)
    method = "GET" if body is None else "POST"
    send_headers = {"accept": "application/json", **headers}
    if data is not None:
        send_headers["content-type"] = "application/json"
    try:
        async with asyncio.timeout(timeout):
            response = await transport.open(HttpRequest(method, url, send_headers, data, timeout))
            try:
                raw, more = await read_capped(response, _MAX_BODY)
            finally:
                await response.aclose()
    except UpstreamError as exc:
        return 0, None, exc.reason
    except TimeoutError:
        return 0, None, f"did not answer within {timeout:g} s"
    if more:  # larger than any real answer: not read further, not parsed
        return response.status, None, None
    try:
        return response.status, orjson.loads(raw), None
    except orjson.JSONDecodeError:
        return response.status, None, None


def server_root(base_url: str) -> str:
    """The server's own root, where the non-OpenAI endpoints live (`.../v1` stripped)."""
    base = base_url.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def window_from_models_entry(entry: Mapping[str, Any]) -> ContextWindow | None:
    for field in _MODELS_WINDOW_FIELDS:
        tokens = _positive_int(entry.get(field))
        if tokens:
            return ContextWindow(tokens, f"/v1/models {field}")
    meta = entry.get("meta")  # llama.cpp: only the trained size; the runtime one is in /props
    trained = _positive_int(meta.get("n_ctx_train")) if isinstance(meta, dict) else None
    if trained:
        return ContextWindow(trained, "llama.cpp n_ctx_train", runtime=False, trained=trained)
    return None


def model_entries(models_body: Any) -> list[dict[str, Any]]:
    """The model objects of a `/v1/models` body, tolerating the shapes servers use."""
    data = models_body.get("data") if isinstance(models_body, dict) else models_body
    if not isinstance(data, list):
        return []
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


class _Prober:
    def __init__(self, transport: Transport, base_url: str, headers: Mapping[str, str], timeout: float):
        self.transport, self.headers, self.timeout = transport, headers, timeout
        self.base = base_url.rstrip("/")
        self.root = server_root(base_url)

    async def get(self, url: str, body: Any = None) -> Any:
        status, data = await fetch_json(self.transport, url, self.headers, self.timeout, body)
        return data if status == 200 else None

    async def from_models(self, model: str) -> ContextWindow | None:
        for entry in model_entries(await self.get(self.base + "/models")):
            if entry["id"] == model:
                return window_from_models_entry(entry)
        return None

    async def from_llama_cpp(self, model: str) -> ContextWindow | None:
        props = await self.get(f"{self.root}/props?model={quote(model, safe='')}")
        settings = props.get("default_generation_settings") if isinstance(props, dict) else None
        tokens = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
        return ContextWindow(tokens, "llama.cpp /props n_ctx") if tokens else None

    async def from_lm_studio(self, model: str) -> ContextWindow | None:
        info = await self.get(f"{self.root}/api/v0/models/{quote(model, safe='')}")
        if not isinstance(info, dict):
            return None
        trained = _positive_int(info.get("max_context_length"))
        loaded = _positive_int(info.get("loaded_context_length"))
        if loaded:
            return ContextWindow(loaded, "LM Studio loaded_context_length", trained=trained)
        if trained:
            return ContextWindow(trained, "LM Studio max_context_length", runtime=False, trained=trained)
        return None

    async def from_ollama(self, model: str) -> ContextWindow | None:
        show, running = await asyncio.gather(
            self.get(self.root + "/api/show", {"model": model}), self.get(self.root + "/api/ps")
        )
        if not isinstance(show, dict):
            return None
        trained = None
        info = show.get("model_info")
        if isinstance(info, dict):
            trained = next((_positive_int(v) for k, v in info.items() if k.endswith(".context_length")), None)
        for entry in running.get("models", ()) if isinstance(running, dict) else ():
            if isinstance(entry, dict) and model in (entry.get("name"), entry.get("model")):
                loaded = _positive_int(entry.get("context_length"))
                if loaded:
                    return ContextWindow(loaded, "Ollama /api/ps context_length", trained=trained)
        parameters = show.get("parameters")
        match = _NUM_CTX.search(parameters) if isinstance(parameters, str) else None
        if match:
            return ContextWindow(int(match.group(1)), "Ollama num_ctx parameter", trained=trained)
        if trained:
            # Ollama runs it with its own default (OLLAMA_CONTEXT_LENGTH), unknown from here.
            return ContextWindow(trained, "Ollama model_info context_length", runtime=False, trained=trained)
        return None


async def probe_context_window(
    transport: Transport,
    base_url: str,
    headers: Mapping[str, str],
    model: str,
    timeout: float = 3.0,
) -> ContextWindow | None:
    """The model's context window as the server reports it, runtime values first; None when no
    server-specific endpoint answers. The probes run at once, so a miss costs one round trip."""
    prober = _Prober(transport, base_url, headers, timeout)
    found = await asyncio.gather(
        prober.from_models(model),
        prober.from_llama_cpp(model),
        prober.from_lm_studio(model),
        prober.from_ollama(model),
    )
    windows = [w for w in found if w is not None]
    chosen = next((w for w in windows if w.runtime), windows[0] if windows else None)
    trained = next((w.trained for w in windows if w.trained), None)
    if chosen is not None and chosen.trained is None and trained is not None:
        chosen = replace(chosen, trained=trained)
    return chosen


async def window_of(windows: ContextWindows, model: str, budget: float) -> int | None:
    """The window of `model`: remembered (most requests: nothing awaited), else learned within
    `budget` seconds (a server deaf to probes may still answer; the request goes on unchecked)."""
    known, window = windows.remembered(model)
    if known:
        return window
    try:
        async with asyncio.timeout(budget):
            return await windows.get(model)
    except TimeoutError:
        return None


class ContextWindows:
    """The windows one upstream reports, per model, for the gateway's pre-send check.

    A model is probed on its first request; concurrent first requests share the probe. A
    runtime window is kept; a probe that found nothing, or only the trained maximum (Ollama
    before the model is loaded), is asked again a minute later, since the runtime value may
    appear once the model is loaded.

    Clients choose model names, so only models the upstream lists in `/v1/models` (read at
    most once a minute) or that are `configured` are probed, and the cache keeps the
    `MAX_MODELS` most recently used: a stream of invented names costs no probes and no
    memory. A name that is not probed is remembered as such (as many again), until the list
    is read again: its requests wait on nothing and ask nothing."""

    _RECHECK_SECONDS = 60.0
    _LIST_SECONDS = 60.0
    MAX_MODELS = 256

    def __init__(
        self,
        transport: Transport,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float,
        name: str,
        configured: Iterable[str] = (),
    ) -> None:
        self._transport, self._base_url, self._headers = transport, base_url, headers
        self._timeout, self._name = timeout, name
        self._configured = frozenset(configured)
        # model -> (tokens, valid until), least recently used first
        self._cache: OrderedDict[str, tuple[int | None, float]] = OrderedDict()
        # model -> until when it is not probed (a name no probe may carry, or one the upstream
        # did not list when its list was read), least recently used first; apart from
        # `_cache`, so that names a client invents never push a learned window out
        self._unprobed: OrderedDict[str, float] = OrderedDict()
        self._probes: dict[str, asyncio.Future[ContextWindow | None]] = {}
        self._listed: frozenset[str] = frozenset()
        self._sole: str | None = None  # the one id of `_listed`, if it holds one
        self._listed_until = float("-inf")
        self._listing: asyncio.Future[frozenset[str]] | None = None

    def _not_probed(self, model: str, until: float) -> None:
        """Note that `model` is not probed until `until` (`remembered` answers for it until
        then, so a request does not ask again)."""
        self._unprobed[model] = until
        self._unprobed.move_to_end(model)
        while len(self._unprobed) > self.MAX_MODELS:
            self._unprobed.popitem(last=False)

    async def _upstream_lists(self, model: str) -> bool:
        if time.monotonic() >= self._listed_until:
            if self._listing is None:
                self._listing = asyncio.ensure_future(self._list_models())
            listing = self._listing
            try:
                self._listed = await asyncio.shield(listing)
                self._sole = next(iter(self._listed)) if len(self._listed) == 1 else None
            finally:
                if self._listing is listing and listing.done():
                    self._listing = None
            self._listed_until = time.monotonic() + self._LIST_SECONDS
        # Ollama serves "name" as "name:latest" and lists the latter.
        return model in self._listed or f"{model}:latest" in self._listed

    async def _list_models(self) -> frozenset[str]:
        url = self._base_url.rstrip("/") + "/models"
        status, body = await fetch_json(self._transport, url, self._headers, self._timeout)
        return frozenset(m["id"] for m in model_entries(body)) if status == 200 else frozenset()

    def known(self) -> dict[str, int]:
        return {model: tokens for model, (tokens, _) in sorted(self._cache.items()) if tokens}

    def sole_model(self, model: str) -> str | None:
        """The model the upstream runs in place of `model`: the one id its list held when last
        read (`get` reads it), if `model` is not that id. llama.cpp (and LM Studio with one
        model loaded) answers any name with the model it runs, so a client that names another
        (Codex's default, Claude Code's claude-*) is answered by that one. None when the list
        was not read, names `model` or holds more than one."""
        sole = self._sole
        if sole is None or sole == model or (sole.endswith(":latest") and sole == model + ":latest"):
            return None
        return sole

    def remembered(self, model: str) -> tuple[bool, int | None]:
        """(True, the window) when it is known and fresh, without waiting: most requests."""
        cached = self._cache.get(model)
        if cached is not None and time.monotonic() < cached[1]:
            self._cache.move_to_end(model)
            return True, cached[0]
        until = self._unprobed.get(model)
        if until is not None and time.monotonic() < until:
            return True, None
        return False, None

    async def get(self, model: str) -> int | None:
        """The model's window, or None when unknown (or the model is not one to probe)."""
        fresh, tokens = self.remembered(model)
        if fresh:
            return tokens
        cached = self._cache.get(model)
        if not probeable_model_name(model):
            self._not_probed(model, float("inf"))
            return None
        if cached is None and model not in self._configured and not await self._upstream_lists(model):
            self._not_probed(model, self._listed_until)  # till the list is read again
            return None
        probe = self._probes.get(model)
        if probe is None:
            probe = self._probes[model] = asyncio.ensure_future(
                probe_context_window(self._transport, self._base_url, self._headers, model, self._timeout)
            )
            probe.add_done_callback(lambda _: self._probes.pop(model, None))
        found = await asyncio.shield(probe)
        tokens = found.tokens if found else None
        until = float("inf") if found and found.runtime else time.monotonic() + self._RECHECK_SECONDS
        if found and (cached is None or cached[0] != tokens):
            log.info("upstream %s: model %s has a %d-token context window (%s)",
                     self._name, model, found.tokens, found.source)  # fmt: skip
        self._cache[model] = (tokens, until)
        self._cache.move_to_end(model)
        while len(self._cache) > self.MAX_MODELS:
            self._cache.popitem(last=False)
        return tokens
