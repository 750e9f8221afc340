"""The real gateway (`build_app`) served on loopback in front of an upstream that is served too,
for tests over real sockets.

    async with gateway_over(FakeUpstream(script), store_path=str(tmp_path / "s.db")) as url:
        ...

`responses_chain` puts a second gateway in front: the outer one (an upstream of kind
`responses`) talks to the inner one's Responses face, which talks to the fake chat upstream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai

from codexgate.app import build_app
from codexgate.config import load_settings
from tests.support._exchange import ASGIApp
from tests.support.fake_upstream import FakeUpstream
from tests.support.servers import arun_asgi_server


@asynccontextmanager
async def gateway_over(
    upstream: ASGIApp, environ: Mapping[str, str] | None = None, **flags: Any
) -> AsyncIterator[str]:
    """`upstream` (a chat upstream) and the gateway in front of it, built from `flags` and
    `environ`, both served (the gateway with its lifespan); yields the gateway's URL."""
    environ = dict(environ or {})
    async with arun_asgi_server(upstream) as upstream_url:
        settings = load_settings(
            {"upstream": upstream_url + "/v1", "discover": False, **flags}, environ=environ
        )
        async with arun_asgi_server(build_app(settings, environ=environ), lifespan="on") as url:
            yield url


@asynccontextmanager
async def responses_chain(
    tmp_path: Path, fake: FakeUpstream, *, outer_config: str = "", **inner_flags: Any
) -> AsyncIterator[openai.AsyncOpenAI]:
    """An SDK client of the outer gateway, whose upstream `oa` (kind `responses`) is the inner
    gateway (`inner_flags`) over `fake`. `outer_config` goes ahead of the outer gateway's
    `[[upstreams]]` in its config file."""
    async with gateway_over(fake, **inner_flags) as inner_url:
        config = tmp_path / "codexgate.toml"
        config.write_text(
            outer_config + f'[[upstreams]]\nname = "oa"\nkind = "responses"\nbase_url = "{inner_url}/v1"\n'
        )
        outer = build_app(load_settings({"discover": False}, config, environ={}), environ={})
        async with arun_asgi_server(outer, lifespan="on") as outer_url:
            client = openai.AsyncOpenAI(api_key="unused", base_url=outer_url + "/v1", max_retries=0)
            async with client:
                yield client
