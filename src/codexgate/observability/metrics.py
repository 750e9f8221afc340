"""Prometheus metrics, as text on `GET /metrics` (behind the same API keys as every route).

Two sources, so that the hot path pays little:
- an observer (server/observe.py) that counts each exchange when it starts and when it ends:
  requests by face, backend, model and outcome; streams open; time to first token and
  duration; tokens; tool calls. Nothing per batch of events, and what it counts is tallied in
  plain dicts and added to the metrics when they are read (`_Tally`).
- a collector that reads, at scrape time only, what is tallied anyway: each backend's
  `counts` (repairs, text tool-call recoveries, grammar checks, loop-guard stops, upstream
  errors and retries...), the WebSocket connections open, the store's writes and, cached for a
  few seconds, its size.

Each app has its own registry (several apps live in one test process, and nothing here is a
module global). Label values a client chooses (model names) are cut and their number capped,
so a client cannot grow the gateway's memory or the scraper's series without bound.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from codexgate.routing.health import HealthBoard
from codexgate.server.exchange import Exchange
from codexgate.server.observe import Observer
from codexgate.server.state import ResponseState
from codexgate.store.base import StoreStats

if TYPE_CHECKING:
    from codexgate.server.app import GatewayApp
    from codexgate.server.asgi import Receive, Scope, Send

__all__ = ["OTHER", "BoundedLabel", "Metrics"]

log = logging.getLogger("codexgate.metrics")

# Seconds, 10 ms to 10 min: a first token from a warm local model to a long agent turn.
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
OTHER = "other"  # the label value of what is past a cap
_MAX_LABEL_CHARS = 80
_MAX_MODELS = 200
_MAX_VALUES = 100  # outcomes, tool-call kinds: gateway-defined, capped all the same
_STORE_STATS_SECONDS = 10.0  # a COUNT over the store per scrape at most this often
_STORE_STATS_TIMEOUT = 2.0

_OBSERVED_MAX = 1024  # a histogram's values held between scrapes, at most (then added at once)

_C = TypeVar("_C")


class BoundedLabel:
    """Label values from outside the gateway: cut to 80 characters, and past `limit` distinct
    values, `other`."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        if value is None:
            return ""
        if value in self._seen:
            return value
        text = value[:_MAX_LABEL_CHARS]
        if text in self._seen:
            return text
        if len(self._seen) >= self._limit:
            return OTHER
        self._seen.add(text)
        return text


class Metrics(Observer):
    """The metrics of one app; `install(app)` serves them and watches its exchanges."""

    def __init__(self, max_models: int = _MAX_MODELS) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self._tally = _Tally()
        registry.register(self._tally)  # first: the registry collects it before the metrics
        ProcessCollector(registry=registry)  # process_*: CPU, memory, open files, read at scrape time
        # Which process answered the scrape: under `serve --workers N` each worker counts its own.
        Gauge(
            "codexgate_worker", "The gateway process that answered this scrape (1 per worker).",
            ("worker", "pid"), registry=registry,
        ).labels(os.environ.get("CODEXGATE_WORKER", "1"), str(os.getpid())).set(1)  # fmt: skip
        self.requests = Counter(
            "codexgate_requests", "Requests answered, by face, backend (upstream), model and outcome.",
            ("face", "backend", "model", "outcome"), registry=registry,
        )  # fmt: skip
        self.routed = Counter(
            "codexgate_routed_requests", "Requests a pool answered, by the route that answered (the "
            "model's or a fallback's) and its upstream.",
            ("route", "backend"), registry=registry,
        )  # fmt: skip
        self.streams_open = Gauge(
            "codexgate_streams_open", "Requests being answered now, by face.", ("face",), registry=registry
        )
        self.first_token = Histogram(
            "codexgate_time_to_first_token_seconds",
            "Seconds from the request to the first output of the model.",
            ("face", "backend"), buckets=BUCKETS, registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            "codexgate_request_duration_seconds", "Seconds from the request to the end of its answer.",
            ("face", "backend"), buckets=BUCKETS, registry=registry,
        )  # fmt: skip
        self.tokens = Counter(
            "codexgate_tokens", "Tokens, from the answers' usage: input, output, cached (input read "
            "from the upstream's cache), reasoning (part of output).",
            ("backend", "model", "kind"), registry=registry,
        )  # fmt: skip
        self.key_tokens, self.key_requests = _key_counters(registry)
        self.tool_calls = Counter(
            "codexgate_tool_calls", "Tool calls in the answers, by kind (item type) and the outcome of "
            "the response that carried them.",
            ("backend", "kind", "outcome"), registry=registry,
        )  # fmt: skip
        self._model = BoundedLabel(max_models)
        self._outcome = BoundedLabel(_MAX_VALUES)
        self._kind = BoundedLabel(_MAX_VALUES)
        # Children by label values: prometheus_client's labels() checks and locks per call;
        # the values are bounded (above), so these stay small.
        self._requests: dict[tuple[str, ...], Any] = {}
        self._timings: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self._tokens: dict[tuple[str, ...], Any] = {}
        self._key_tokens: dict[tuple[str, ...], Any] = {}
        self._key_requests: dict[tuple[str, ...], Any] = {}
        self._key = BoundedLabel(_MAX_MODELS)  # names from the config: bounded all the same
        self._calls: dict[tuple[str, ...], Any] = {}
        self._faces: dict[tuple[str, ...], Any] = {}
        self._routes: dict[tuple[str, ...], Any] = {}
        # Exchanges started and not yet finished (their streams_open child), by id: an
        # exchange's `finished` always follows its `started` (both in the request's task, the
        # second in a `finally`), so an id is not reused while it is here.
        self._open: dict[int, Any] = {}
        self._store = _StoreFigures()

    def install(self, app: GatewayApp) -> None:
        """Watch `app`'s exchanges, read its backends, sockets and store at each scrape, and
        serve `GET /metrics` on it."""
        app.observers.add(self)
        self.registry.register(_GatewayCollector(app, self._store))
        app.routes["/metrics"] = {"GET": self._route_for(app)}

    # -- the observer: one call at the start and one at the end of each exchange

    def started(self, exchange: Exchange) -> None:
        gauge = _child(self._faces, self.streams_open, (exchange.face or "",))
        self._tally.add(gauge)
        self._open[id(exchange)] = gauge

    def finished(self, exchange: Exchange) -> None:
        elapsed = time.perf_counter() - exchange.started
        tally = self._tally
        gauge = self._open.pop(id(exchange), None)
        if gauge is not None:
            tally.add(gauge, -1.0)
        face, backend = exchange.face or "", exchange.upstream or ""
        model = self._model(exchange.model)
        outcome = self._outcome(exchange.outcome or "unknown")
        tally.add(_child(self._requests, self.requests, (face, backend, model, outcome)))
        if exchange.route is not None:
            tally.add(_child(self._routes, self.routed, (self._model(exchange.route), backend)))
        timing = self._timings.get((face, backend))
        if timing is None:
            timing = self._timings[face, backend] = (
                self.first_token.labels(face, backend),
                self.duration.labels(face, backend),
            )
        tally.observe(timing[1], elapsed)
        if exchange.first_output is not None:
            tally.observe(timing[0], exchange.first_output - exchange.started)
        if exchange.usage:
            self._count_tokens(exchange.usage, backend, model, exchange.caller)
        if exchange.caller is not None:
            tally.add(_child(self._key_requests, self.key_requests, (self._key(exchange.caller), outcome)))
        terminal = exchange.terminal
        if terminal is not None:
            self._count_tool_calls(terminal, backend)

    def _count_tokens(self, usage: dict[str, Any], backend: str, model: str, caller: str | None) -> None:
        input_details = usage.get("input_tokens_details") or {}
        output_details = usage.get("output_tokens_details") or {}
        tally = self._tally
        for kind, value in (
            ("input", usage.get("input_tokens")),
            ("output", usage.get("output_tokens")),
            ("cached", input_details.get("cached_tokens")),
            ("reasoning", output_details.get("reasoning_tokens")),
        ):
            if isinstance(value, int) and value > 0:
                tally.add(_child(self._tokens, self.tokens, (backend, model, kind)), value)
                if caller is not None:
                    tally.add(_child(self._key_tokens, self.key_tokens, (self._key(caller), kind)), value)

    def _count_tool_calls(self, terminal: dict[str, Any], backend: str) -> None:
        outcome = str(terminal.get("type", "")).removeprefix("response.")
        for item in (terminal.get("response") or {}).get("output") or ():
            kind = item.get("type") if isinstance(item, dict) else None
            if isinstance(kind, str) and kind.endswith("_call"):
                self._tally.add(_child(self._calls, self.tool_calls, (backend, self._kind(kind), outcome)))

    # -- GET /metrics

    def _route_for(self, app: GatewayApp) -> Any:
        async def metrics_route(scope: Scope, receive: Receive, send: Send) -> None:
            await self._store.refresh(app.state)
            accept = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"accept"), "")
            encode, content_type = choose_encoder(accept)
            body = encode(self.registry)
            headers = [(b"content-type", content_type.encode()), (b"content-length", b"%d" % len(body))]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        return metrics_route


def _key_counters(registry: CollectorRegistry) -> tuple[Counter, Counter]:
    """Tokens and requests by API key name (server/keys/admission.py limits what each key spends)."""
    tokens = Counter(
        "codexgate_key_tokens", "Tokens by API key name, from the answers' usage (kinds as "
        "codexgate_tokens).", ("key", "kind"), registry=registry,
    )  # fmt: skip
    requests = Counter(
        "codexgate_key_requests", "Requests by API key name and outcome (rate_limit_exceeded, "
        "insufficient_quota, model_not_allowed: refused by the key's limits).",
        ("key", "outcome"), registry=registry,
    )  # fmt: skip
    return tokens, requests


def _child(cache: dict[tuple[str, ...], _C], metric: Any, labels: tuple[str, ...]) -> _C:
    child = cache.get(labels)
    if child is None:
        child = cache[labels] = metric.labels(*labels)
    return child


class _Tally(Collector):
    """What the observer counted since the metrics were last read, added to them when they are
    read: registered before them, so the registry collects it first. A request then costs the
    observer a few dict updates instead of prometheus_client's checked and locked increments
    (~1 us each, nine a request; measured: the observer cost 30-40 us a request before)."""

    def __init__(self) -> None:
        self._added: dict[Any, float] = {}  # a counter's or gauge's child -> what to add
        self._observed: dict[Any, list[float]] = {}  # a histogram's child -> its new values

    def add(self, child: Any, amount: float = 1.0) -> None:
        added = self._added
        added[child] = added.get(child, 0.0) + amount

    def observe(self, child: Any, value: float) -> None:
        values = self._observed.get(child)
        if values is None:
            values = self._observed[child] = []
        values.append(value)
        if len(values) >= _OBSERVED_MAX:  # nobody reads the metrics: keep the memory bounded
            del self._observed[child]
            for held in values:
                child.observe(held)

    def collect(self) -> Iterator[Metric]:
        added, self._added = self._added, {}
        for child, amount in added.items():
            if amount:
                child.inc(amount)
        observed, self._observed = self._observed, {}
        for child, values in observed.items():
            for value in values:
                child.observe(value)
        return iter(())


class _StoreFigures:
    """The store's size, read at most every few seconds (a count over the whole store)."""

    def __init__(self) -> None:
        self.stats: StoreStats | None = None
        self.up: bool | None = None  # None: not asked yet
        self._next = 0.0

    async def refresh(self, state: ResponseState) -> None:
        if state.store is None or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + _STORE_STATS_SECONDS
        try:
            async with asyncio.timeout(_STORE_STATS_TIMEOUT):
                await state.ready()  # opens it when the app runs without its lifespan
                self.stats = await state.store.stats()
            self.up = True
        except Exception as exc:  # down or slow: said by codexgate_store_up, not by a 500
            log.debug("store stats for /metrics failed: %s", exc)
            self.up = False


# A backend's `counts` keys (tallied by translate/ and backends/) as metrics: the first pattern
# that matches the whole key names the metric; its groups are the labels after `backend`.
_COUNT_METRICS: tuple[tuple[str, str, str], ...] = (  # (pattern of the keys, metric, its help)
    (r"arguments\.repaired\.(?P<kind>.+)", "codexgate_argument_repairs",
     "Tool-call arguments repaired, by repair."),
    (r"arguments\.(?P<outcome>[^.]+)", "codexgate_tool_arguments",
     "Tool-call arguments checked against their tool's schema, by outcome."),
    (r"patch\.repaired\.(?P<kind>.+)", "codexgate_patch_repairs",
     "Custom tool inputs (apply_patch) repaired to the client's grammar, by repair."),
    (r"patch\.(?P<outcome>[^.]+)", "codexgate_grammar_checks",
     "Custom tool inputs checked against the client's grammar, by outcome (invalid: rejected)."),
    (r"textcalls\.(?P<format>[^.]+)\.(?P<outcome>.+)", "codexgate_text_tool_calls",
     "Tool calls a model wrote as text, by format and outcome (parsed: recovered as tool calls)."),
    (r"think\.(?P<outcome>.+)", "codexgate_think_blocks",
     "Answers read for think tags, by outcome."),
    (r"loops\.stopped", "codexgate_loop_guard_stops",
     "Generations stopped for repeating the same text."),
    (r"upstream\.malformed_chunks", "codexgate_upstream_malformed_chunks",
     "Upstream stream events skipped as unreadable."),
    (r"upstream\.retry", "codexgate_upstream_retries",
     "Upstream requests retried before their first byte."),
    (r"upstream\.error\.(?P<code>.+)", "codexgate_upstream_errors",
     "Upstream failures by error code: each failed attempt, and failures after the first byte."),
    (r"request\.(?P<kind>.+)_left_out", "codexgate_request_items_left_out",
     "Input items not sent to the upstream (it cannot take them), by kind."),
)  # fmt: skip
_COUNTS = tuple((re.compile(pattern), name, help_text) for pattern, name, help_text in _COUNT_METRICS)
_OTHER_COUNTS = ("codexgate_backend_events", "Other events a backend tallied, by key.")


class _GatewayCollector(Collector):
    """What the app tallies anyway, read at scrape time."""

    def __init__(self, app: GatewayApp, store: _StoreFigures) -> None:
        self._app = app
        self._store = store

    def collect(self) -> Iterator[Metric]:
        yield from self._counts()
        yield from _routing_metrics(self._app.router.health)
        sockets = self._app.sockets
        if sockets is not None:
            yield _gauge("codexgate_websocket_connections_open", "WebSocket connections open.", sockets.open)
            yield _gauge(
                "codexgate_websocket_connections_limit", "WebSocket connections allowed at once.",
                sockets.limits.max_connections,
            )  # fmt: skip
        yield from self._store_metrics()
        admission = self._app.admission
        if admission.counting:
            up = admission.down_since is None
            yield _gauge("codexgate_limits_store_up", "Whether the store answered the last admission "
                         "(0: each key's limits are counted in this process alone).", up)  # fmt: skip

    def _counts(self) -> Iterator[Metric]:
        families: dict[str, CounterMetricFamily] = {}
        for pattern, name, help_text in _COUNTS:
            labels = ["backend", *pattern.groupindex]
            families[name] = CounterMetricFamily(name, help_text, labels=labels)
        other = families[_OTHER_COUNTS[0]] = CounterMetricFamily(*_OTHER_COUNTS, labels=["backend", "key"])
        for backend_name, backend in list(self._app.router.backends.items()):
            for key, value in list(backend.counts.items()):
                for pattern, name, _ in _COUNTS:
                    match = pattern.fullmatch(key)
                    if match is not None:
                        families[name].add_metric(_cut((backend_name, *match.groups())), value)
                        break
                else:
                    other.add_metric(_cut((backend_name, key)), value)
        yield from families.values()

    def _store_metrics(self) -> Iterator[Metric]:
        state = self._app.state
        if state.store is None:
            return
        writes = CounterMetricFamily(
            "codexgate_store_writes", "Responses written to the store, by outcome.", labels=["outcome"]
        )
        writes.add_metric(["ok"], state.writes.ok)
        writes.add_metric(["failed"], state.writes.failed)
        yield writes
        yield CounterMetricFamily(
            "codexgate_store_write_seconds", "Seconds spent writing responses to the store.",
            value=state.writes.seconds,
        )  # fmt: skip
        figures = self._store
        if figures.up is not None:
            yield _gauge("codexgate_store_up", "Whether the store answered the last size query.", figures.up)
        if figures.stats is not None:
            yield _gauge("codexgate_store_responses", "Responses kept in the store.", figures.stats.responses)
            yield _gauge(
                "codexgate_store_bytes", "Bytes of responses kept in the store.", figures.stats.bytes
            )


def _routing_metrics(board: HealthBoard) -> Iterator[Metric]:
    """What the pools did (routing/pool.py) and how their upstreams are."""
    families = (
        ("codexgate_failovers", "Requests a pool's member failed before the first byte, retried on "
         "the next member.", ("route", "from_upstream", "to_upstream"), board.failovers),
        ("codexgate_fallbacks", "Requests a route could not answer, tried on its fallback route.",
         ("route", "to_route"), board.fallbacks),
        ("codexgate_cooldowns", "Times an upstream failed and cooled down.", ("upstream",),
         {(name,): n for name, n in board.cooldowns.items()}),
        ("codexgate_sticky_yields", "Conversations sent off their member because it was far busier.",
         ("route",), {(name,): n for name, n in board.sticky_yields.items()}),
    )  # fmt: skip
    for name, help_text, labels, counts in families:
        family = CounterMetricFamily(name, help_text, labels=list(labels))
        for values, count in list(counts.items()):
            family.add_metric(_cut(values), count)
        yield family
    usable = GaugeMetricFamily("codexgate_upstream_usable", "1 while a pool's upstream takes requests, "
                               "0 while it cools down.", labels=["upstream"])  # fmt: skip
    in_flight = GaugeMetricFamily("codexgate_upstream_in_flight", "Requests on a pool's upstream now.",
                                  labels=["upstream"])  # fmt: skip
    for member in list(board.members.values()):
        usable.add_metric(_cut((member.name,)), 1.0 if member.can_take() else 0.0)
        in_flight.add_metric(_cut((member.name,)), float(member.in_flight))
    yield usable
    yield in_flight


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=float(value))


def _cut(values: Iterable[str]) -> list[str]:
    return [value[:_MAX_LABEL_CHARS] for value in values]
