#!/usr/bin/env bash
# Install the real Codex CLI into a project-local cache and print the path of its `codex`
# executable on stdout (everything else goes to stderr). Each version has a prefix of its own,
# so several can be installed side by side (the tests run on more than one; docs/codex-versions.md).
#
#   scripts/install-codex.sh            # -> /abs/path/.cache/codex/0.171.0/node_modules/.bin/codex
#   scripts/install-codex.sh 0.169.0    # -> /abs/path/.cache/codex/0.169.0/node_modules/.bin/codex
#
# Arguments and environment:
#   VERSION           (first argument) npm version of @openai/codex; else $CODEX_VERSION; else
#                     0.171.0, the current release
#   CODEXGATE_CACHE   cache root (default: <repo>/.cache); Codex goes to
#                     $CODEXGATE_CACHE/codex/<version>
#
# Idempotent: if the cached binary already reports the wanted version nothing is downloaded.
# Needs only Node >= 18 and npm; no global install, no sudo. Concurrent runs are serialised
# with flock(1) when it is available.
#
# The npm package is a small JS launcher; the native binary ships in a platform package that
# @openai/codex lists as an *optional* dependency under an npm alias
# (`@openai/codex-linux-x64` -> `@openai/codex@<ver>-linux-x64`). An npm configured with
# `omit=optional` (or an old lockfile) silently skips it, and the launcher then fails with
# "Missing optional dependency". We therefore pass --include=optional and, if the native binary
# is still missing, install the platform alias explicitly.
set -euo pipefail

log() { printf 'install-codex: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

script_dir="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
repo_root="$(cd -- "$script_dir/.." && pwd -P)"
version="${1:-${CODEX_VERSION:-0.171.0}}"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || die "not a release version: '$version' (e.g. 0.171.0)"
cache_root="${CODEXGATE_CACHE:-$repo_root/.cache}"
mkdir -p -- "$cache_root"
cache_root="$(cd -- "$cache_root" && pwd -P)"
prefix="$cache_root/codex/$version"
bin="$prefix/node_modules/.bin/codex"

installed_version() {
    # `codex --version` prints "codex-cli 0.171.0".
    [[ -x "$bin" ]] || return 1
    local out
    out="$(timeout 60 "$bin" --version 2>/dev/null </dev/null)" || return 1
    printf '%s\n' "${out##* }"
}

platform_alias() {
    # Mirrors PLATFORM_PACKAGE_BY_TARGET in @openai/codex's bin/codex.js.
    local os arch
    case "$(uname -s)" in
        Linux) os=linux ;;
        Darwin) os=darwin ;;
        *) return 1 ;;
    esac
    case "$(uname -m)" in
        x86_64 | amd64) arch=x64 ;;
        aarch64 | arm64) arch=arm64 ;;
        *) return 1 ;;
    esac
    printf '@openai/codex-%s-%s@npm:@openai/codex@%s-%s-%s\n' "$os" "$arch" "$version" "$os" "$arch"
}

install() {
    command -v node >/dev/null 2>&1 || die "node not found (Node >= 18 is required)"
    command -v npm >/dev/null 2>&1 || die "npm not found"
    mkdir -p -- "$prefix"
    # A package.json makes --prefix an ordinary local project, so npm never walks up to a
    # parent project or falls back to the global prefix.
    [[ -f "$prefix/package.json" ]] || printf '{"private": true}\n' >"$prefix/package.json"
    local npm_flags=(--prefix "$prefix" --include=optional --no-audit --no-fund
        --no-update-notifier --loglevel=error)
    log "installing @openai/codex@$version into $prefix"
    npm install "${npm_flags[@]}" --save-exact "@openai/codex@$version" >&2
    if [[ "$(installed_version || true)" != "$version" ]]; then
        local alias_spec
        alias_spec="$(platform_alias)" || die "unsupported platform $(uname -s)/$(uname -m)"
        log "native binary missing; installing $alias_spec explicitly"
        npm install "${npm_flags[@]}" --save-exact "$alias_spec" >&2
    fi
}

main() {
    if [[ "$(installed_version || true)" == "$version" ]]; then
        printf '%s\n' "$bin"
        return 0
    fi
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$cache_root/.codex-install.lock" # one lock for every version: npm's cache is shared
        flock -w 900 9 || die "timed out waiting for another install to finish"
        # Another process may have finished the install while we waited.
        if [[ "$(installed_version || true)" == "$version" ]]; then
            printf '%s\n' "$bin"
            return 0
        fi
    fi
    install
    local got
    got="$(installed_version || true)"
    [[ "$got" == "$version" ]] || die "installed codex reports version '${got:-<none>}', wanted $version"
    printf '%s\n' "$bin"
}

main "$@"
