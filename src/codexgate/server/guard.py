"""Who may use the gateway: the checks every HTTP request and WebSocket upgrade passes first.

In order (docs/threat-model.md says what each one stops):

1. `Host` must be an IP address, `localhost`, the address the connection came in on, or a name
   in `allowed_hosts`: a DNS-rebinding page has its own domain name in `Host` (421).
2. Without API keys, only loopback clients are served unless `allow_unauthenticated` (403).
3. A request carrying an `Origin` (a browser) must come from one of `cors_origins`, which is
   empty by default: this refuses CORS preflights and cross-site WebSocket upgrades, which
   browsers do not restrict themselves (403). Allowed origins get CORS headers.
4. With API keys configured, every route needs one (`Authorization: Bearer` or `x-api-key`),
   the WebSocket upgrade and `/v1/models` included; `/healthz` without a key answers liveness
   only, no details; `GET /ui`, the live view's page, is served without a key: it is a
   static file holding no data, a browser navigating to it cannot send a key, and the page
   sends the key the user types with each request for data (401 `invalid_api_key`, as OpenAI
   answers a bad key).
5. A POST body must be `application/json`: a browser can send `text/plain` cross-site without
   a preflight, never JSON (415).

Refusals close the connection, so an unread body is never parsed further.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from codexgate.config import ApiKeyConfig, ConfigError, Settings, read_api_key_configs
from codexgate.errors import InvalidRequest
from codexgate.redact import Redactor
from codexgate.server.asgi import Scope, Send
from codexgate.server.auth import KeyRing, presented_key, resolve_api_keys
from codexgate.server.http_errors import ErrorShape, openai_shape

log = logging.getLogger("codexgate.guard")


# Set on the scope by the guard: False when the request may see liveness only (no key given).
SHOW_DETAILS = "codexgate.show_details"
API_KEY_NAME = "codexgate.api_key_name"  # scope key: the name of the inbound key the request used

_RELOAD_CHECK_SECONDS = 1.0
_HEALTH_PATHS = frozenset(("/health", "/healthz", "/v1/health", "/v1/healthz"))
_PAGE_PATH = "/ui"  # the live view's page (observability/live_view.py): static, no data in it
_CORS_METHODS = b"GET, POST, OPTIONS"
_CORS_DEFAULT_HEADERS = b"authorization, content-type, x-api-key"
_WANTED = frozenset(
    (b"host", b"origin", b"content-type", b"access-control-request-method", b"access-control-request-headers")
)


class Refusal(InvalidRequest):
    """A request the guard turns away before any route sees it."""

    def __init__(
        self, message: str, *, code: str, status: int, headers: tuple[tuple[bytes, bytes], ...] = ()
    ):
        super().__init__(message, code=code, status=status)
        self.headers = headers


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    allow_unauthenticated: bool = False
    allowed_hosts: tuple[str, ...] = ()
    cors_origins: tuple[str, ...] = ()


class Guard:
    """The access checks, with the key ring they use and the way to reload it.

    `reload()` (what SIGHUP calls) re-reads `[[api_keys]]` from the config file and the keys
    from the environment; requests also notice a changed config file by its mtime, at most
    once a second, so a key removed from the file stops working without a restart."""

    def __init__(
        self,
        keys: KeyRing,
        policy: AccessPolicy,
        *,
        redactor: Redactor | None = None,
        config_file: Path | None = None,
        settings: Settings | None = None,
        environ: Mapping[str, str] | None = None,
        reload_check_seconds: float = _RELOAD_CHECK_SECONDS,
    ) -> None:
        self.keys = keys
        self.policy = policy
        self._redactor = redactor
        self._config_file = config_file
        self._settings = settings  # what is served: the routes a reloaded key's `models` must name
        self._environ = os.environ if environ is None else environ
        self._hosts = frozenset(_normalise_host(h) for h in policy.allowed_hosts)
        self._any_host = "*" in policy.allowed_hosts
        self._origins = frozenset(o.lower().rstrip("/") for o in policy.cors_origins)
        self._any_origin = "*" in policy.cors_origins
        self._mtime = self._config_mtime()
        self._check_every = reload_check_seconds
        self._next_check = time.monotonic() + reload_check_seconds
        # Told the `[[api_keys]]` read on each reload (their limits: server/keys/admission.py).
        self.on_reload: list[Callable[[Sequence[ApiKeyConfig]], None]] = []
        # How the clients of a path read a refusal (the app sets its faces' shapes).
        self.shape_for: Callable[[str], ErrorShape] = lambda path: openai_shape

    # -- reload

    def reload(self) -> None:
        """Re-read the key set from the config file and the environment. A file that cannot be
        read, or whose keys a start would refuse, keeps the current keys and their limits
        (logged as an error, in the words of a start); a key whose variable is now unset is
        dropped."""
        self._mtime = self._config_mtime()
        try:
            configs = read_api_key_configs(self._config_file, self._settings) if self._config_file else []
            missing: list[str] = []
            keys = resolve_api_keys(configs, self._environ, missing=missing)
        except ConfigError as exc:
            log.error("API keys not reloaded, the previous keys stay in force: %s", exc)
            return
        if self._redactor is not None:
            self._redactor.add(keys.values())
        before = set(self.keys.names)
        self.keys.replace(keys)
        for told in self.on_reload:
            told(configs)
        removed = sorted(before - set(keys))
        log.info(
            "API keys reloaded: %d in force%s%s",
            len(keys),
            f"; revoked: {', '.join(removed)}" if removed else "",
            f"; variable unset for: {', '.join(missing)}" if missing else "",
        )

    def _config_mtime(self) -> int | None:
        if self._config_file is None:
            return None
        try:
            return self._config_file.stat().st_mtime_ns
        except OSError:
            return None

    def _maybe_reload(self) -> None:
        if self._config_file is None:
            return
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + self._check_every
        if self._config_mtime() != self._mtime:
            self.reload()

    # -- ASGI entry points

    async def http(self, scope: Scope, send: Send) -> Send | None:
        """Check an HTTP request. Returns the `send` the route must use (with CORS headers for
        an allowed origin), or None when the guard already answered (refusal or preflight)."""
        self._maybe_reload()
        wanted = _headers(scope)
        origin = wanted.get(b"origin")
        cors = _cors_headers(origin) if origin is not None and self._origin_allowed(origin) else ()
        try:
            self._check_connection(scope, wanted, origin)
            if (
                scope["method"] == "OPTIONS"
                and origin is not None
                and b"access-control-request-method" in wanted
            ):
                requested = wanted.get(b"access-control-request-headers") or _CORS_DEFAULT_HEADERS
                headers = [
                    *cors,
                    (b"access-control-allow-methods", _CORS_METHODS),
                    (b"access-control-allow-headers", requested),
                    (b"access-control-max-age", b"600"),
                ]
                await send({"type": "http.response.start", "status": 204, "headers": headers})
                await send({"type": "http.response.body", "body": b""})
                return None
            self._authenticate(scope)
            if scope["method"] == "POST":
                _check_json(wanted.get(b"content-type"))
        except Refusal as refusal:
            log.debug("refused %s %s from %s: %s", scope["method"], scope["path"], _peer(scope), refusal.code)
            status, body = self.shape_for(scope["path"])(refusal)
            headers = [(b"content-type", b"application/json"), (b"connection", b"close")]
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [
                        *headers,
                        *refusal.headers,
                        *cors,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": orjson.dumps(body)})
            return None
        return _with_headers(send, cors) if cors else send

    async def websocket(self, scope: Scope, send: Send) -> bool:
        """Check a WebSocket upgrade; False when it was refused (already answered)."""
        self._maybe_reload()
        wanted = _headers(scope)
        try:
            self._check_connection(scope, wanted, wanted.get(b"origin"))
            self._authenticate(scope)
        except Refusal as refusal:
            log.debug("refused WebSocket %s from %s: %s", scope["path"], _peer(scope), refusal.code)
            if "websocket.http.response" in scope.get("extensions", {}):
                headers = [(b"content-type", b"application/json"), *refusal.headers]
                await send(
                    {"type": "websocket.http.response.start", "status": refusal.status, "headers": headers}
                )
                await send({"type": "websocket.http.response.body", "body": orjson.dumps(refusal.to_body())})
            else:
                await send({"type": "websocket.close", "code": 1008})  # policy violation
            return False
        return True

    # -- the checks

    def _check_connection(self, scope: Scope, wanted: dict[bytes, bytes], origin: bytes | None) -> None:
        host = wanted.get(b"host")
        if host is not None and not self._host_allowed(host, scope):
            shown = host.decode("latin-1")[:200]
            raise Refusal(
                f"Host {shown!r} is not served here (a DNS-rebinding guard). If clients reach the "
                "gateway by this name, add it to allowed_hosts.",
                code="host_not_allowed",
                status=421,
            )
        if not self.keys and not self.policy.allow_unauthenticated and not _is_loopback_peer(scope):
            raise Refusal(
                "This gateway has no API keys configured, so it serves clients on this machine "
                "only. Configure api_keys (or set allow_unauthenticated).",
                code="remote_client_not_allowed",
                status=403,
            )
        if origin is not None and not self._origin_allowed(origin):
            raise Refusal(
                f"Browser origin {origin.decode('latin-1')[:200]!r} is not allowed; add it to "
                "cors_origins to serve it.",
                code="origin_not_allowed",
                status=403,
            )

    def _authenticate(self, scope: Scope) -> None:
        if not self.keys:
            return
        key = presented_key(scope["headers"])
        if key is None:
            if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in _HEALTH_PATHS:
                scope[SHOW_DETAILS] = False  # liveness for probes without a key, nothing more
                return
            if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] == _PAGE_PATH:
                return  # exactly the page; /ui/state and /ui/events need the key
            raise Refusal(
                "You didn't provide an API key. Send it as `Authorization: Bearer <key>` "
                "or `x-api-key: <key>`.",
                code="invalid_api_key",
                status=401,
                headers=((b"www-authenticate", b'Bearer realm="codexgate"'),),
            )
        name = self.keys.match(key)
        if name is None:
            raise Refusal(
                "Incorrect API key provided.",
                code="invalid_api_key",
                status=401,
                headers=((b"www-authenticate", b'Bearer realm="codexgate", error="invalid_token"'),),
            )
        scope[API_KEY_NAME] = name

    def _host_allowed(self, raw: bytes, scope: Scope) -> bool:
        if self._any_host:
            return True
        name = _normalise_host(raw.decode("latin-1"))
        if name == "localhost" or name in self._hosts:
            return True
        server = scope.get("server")
        if server and name == _normalise_host(str(server[0])):
            return True
        try:
            ipaddress.ip_address(name)  # an IP literal cannot be rebound to another address
        except ValueError:
            return False
        return True

    def _origin_allowed(self, origin: bytes) -> bool:
        return self._any_origin or origin.decode("latin-1").lower().rstrip("/") in self._origins


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {name: value for name, value in scope["headers"] if name in _WANTED}


def _normalise_host(host: str) -> str:
    """The host name of a `Host` value or an allowed_hosts entry: lower case, no port, no
    brackets, no trailing dot. Ports are not compared: port forwarding and container port
    mapping change them, and a rebinding attack is told apart by its name."""
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _is_loopback_peer(scope: Scope) -> bool:
    client = scope.get("client")
    if not client:
        return True  # a Unix socket: this machine
    return _is_loopback(client[0])


@functools.lru_cache(maxsize=256)
def _is_loopback(address: str) -> bool:
    """Parsing an address costs more than the rest of the guard; a client's is asked again
    on each of its requests."""
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "local"


def _check_json(content_type: bytes | None) -> None:
    media = (content_type or b"").split(b";", 1)[0].strip().lower()
    if media != b"application/json":
        shown = (content_type or b"none").decode("latin-1")[:100]
        raise Refusal(
            f"POST bodies must be sent as Content-Type: application/json (got {shown}).",
            code="unsupported_media_type",
            status=415,
        )


def _cors_headers(origin: bytes) -> tuple[tuple[bytes, bytes], ...]:
    return (
        (b"access-control-allow-origin", origin),
        (b"access-control-expose-headers", b"retry-after"),
        (b"vary", b"origin"),
    )


def _with_headers(send: Send, extra: tuple[tuple[bytes, bytes], ...]) -> Send:
    async def send_with_headers(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return send_with_headers
