"""The embedded model's process: llama.cpp's own HTTP server (`xllamacpp.Server`, compiled into
a Python extension) run with the `llama-server` flags the supervisor and the tests use, until
SIGTERM. Run by the supervisor as

    python -m codexgate.backends.embedded.child -m MODEL.gguf --alias NAME --port N -c 8192

with the runtime's directory first on PYTHONPATH (runtime.py). It serves what llama-server
serves: `/health`, `/v1/models`, `/v1/chat/completions` (streamed, jinja chat templates),
`/props`, `/slots`, `/metrics` with `--metrics`. Standard library and xllamacpp only: nothing
of the gateway is imported, so it starts in about a second.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the gateway that started it dies, however it dies."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="codexgate-llama-server", description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("-a", "--alias", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("-c", "--ctx-size", type=int, default=4096)
    parser.add_argument("-np", "--parallel", type=int, default=1)
    parser.add_argument("-b", "--batch-size", type=int, default=None)
    parser.add_argument("-t", "--threads", type=int, default=None)
    parser.add_argument("--jinja", action="store_true", help="accepted; chat templates are always jinja")
    parser.add_argument("--no-webui", action="store_true")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--metrics", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    _die_with_parent()
    # Busy-waiting OpenMP threads take the cores the gateway needs: on 2 busy cores decoding
    # fell to 1-3 tokens/s with the default policy, ~35 with PASSIVE. Read when libgomp loads.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    import xllamacpp  # type: ignore[import-not-found]  # the runtime's directory is on PYTHONPATH

    params = xllamacpp.CommonParams()
    params.model.path = args.model
    if args.alias:
        params.model_alias = {args.alias}
    params.hostnames = [args.host]
    params.port = args.port
    params.n_ctx = args.ctx_size
    params.n_parallel = args.parallel
    if args.batch_size:
        params.n_batch = args.batch_size
    if args.threads:
        params.cpuparams.n_threads = args.threads
        params.cpuparams_batch.n_threads = args.threads
    params.ui = not args.no_webui
    params.warmup = not args.no_warmup
    params.endpoint_metrics = args.metrics
    server = xllamacpp.Server(params)  # loads the model, then serves in its own threads
    print(f"codexgate-llama-server: listening at {server.listening_address}", file=sys.stderr, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    # The server's threads are the extension's own: leave without waiting for them.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
