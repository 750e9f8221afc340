#!/usr/bin/env bash
# A newcomer's first contact, timed: clone REPO into a fresh folder, run the README's first
# command (`uv sync && uv run codexgate serve ...`) with empty caches (XDG_CACHE_HOME,
# XDG_DATA_HOME and UV_CACHE_DIR all fresh: the embedded model's runtime is fetched too), and
# ask /v1/responses until the first answer. Prints the seconds from the command to the answer.
#
#     bash bench/first_contact.sh [REPO]     # REPO: a path or URL git can clone; default: this clone
set -u
src=${1:-$(cd "$(dirname "$0")/.." && pwd)}
d=$(mktemp -d /tmp/first-contact.XXXX)
git clone -q "$src" "$d/repo"
export XDG_CACHE_HOME=$d/cache XDG_DATA_HOME=$d/data UV_CACHE_DIR=$d/uvcache
mkdir -p "$XDG_CACHE_HOME"
cd "$d/repo" || exit 1
port=$((20000 + RANDOM % 20000))
start=$(date +%s.%N)
(uv sync -q && exec uv run codexgate serve --host 127.0.0.1 --port $port) >"$d/serve.log" 2>&1 &
pid=$!
body='{"model":"smollm2-135m","input":"What is the capital of France?","max_output_tokens":30}'
status=1
while (($(echo "$(date +%s.%N) - $start < 600" | bc))); do
  out=$(curl -s -m 120 -H 'content-type: application/json' -d "$body" "http://127.0.0.1:$port/v1/responses" 2>/dev/null)
  if echo "$out" | grep -q '"output_text"'; then
    echo "first answer $(echo "$(date +%s.%N) - $start" | bc) s after the README's first command"
    status=0
    break
  fi
  sleep 0.5
done
((status)) && echo "no answer within 600 s; the gateway's log: $d/serve.log"
pkill -TERM -P $pid 2>/dev/null
kill $pid 2>/dev/null
wait $pid 2>/dev/null
((status)) || rm -rf "$d"
exit $status
