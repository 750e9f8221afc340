"""The gateway app under a chosen uvicorn HTTP parser and event loop, for the benchmark's
"libraries" comparison only (the main measurements run the real `codexgate serve`).

    python bench/gateway_server.py --port 18002 --upstream http://127.0.0.1:18001/v1 --http h11 --loop uvloop

Same app and same uvicorn settings as `codexgate serve` (codexgate/cli.py), except the two knobs.
"""

from __future__ import annotations

import argparse
import logging

import uvicorn

from codexgate.app import build_app
from codexgate.config import load_settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--http", choices=("httptools", "h11"), default="httptools")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args()
    settings = load_settings(
        {
            "host": args.host,
            "port": args.port,
            "upstream": args.upstream,
            "discover": False,
            "log_level": "warning",
        },
        environ={},
    )
    logging.basicConfig(level=logging.WARNING)
    uvicorn.run(
        build_app(settings),
        host=settings.host,
        port=settings.port,
        loop=args.loop,
        http=args.http,
        ws="none",
        lifespan="on",
        log_level="warning",
        timeout_keep_alive=75,
        access_log=False,
    )


if __name__ == "__main__":
    main()
