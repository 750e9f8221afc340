#!/usr/bin/env bash
# Install the real Claude Code CLI into a project-local cache and print the path of its `claude`
# executable on stdout (everything else goes to stderr). Each version has a prefix of its own.
#
#   scripts/install-claude.sh            # -> /abs/path/.cache/claude/2.1.332/node_modules/.bin/claude
#   scripts/install-claude.sh 2.1.328    # -> /abs/path/.cache/claude/2.1.328/node_modules/.bin/claude
#
# Arguments and environment:
#   VERSION           (first argument) npm version of @anthropic-ai/claude-code; else
#                     $CLAUDE_VERSION; else 2.1.332, the version the tests pin
#                     (docs/claude-code-wire.md is written for it)
#   CODEXGATE_CACHE   cache root (default: <repo>/.cache); Claude Code goes to
#                     $CODEXGATE_CACHE/claude/<version>
#
# Idempotent: if the cached binary already reports the wanted version nothing is downloaded.
# Needs only Node >= 18 and npm; no global install, no sudo. Concurrent runs are serialised
# with flock(1) when it is available (one lock for every version: npm's cache is shared).
#
# The npm package is a launcher whose postinstall (install.cjs) puts the native binary of the
# platform package (@anthropic-ai/claude-code-linux-x64 and so on, *optional* dependencies) in
# place of bin/claude.exe. An npm configured with `omit=optional` skips that package, so we pass
# --include=optional and, if the binary still does not report the version, install the
# platform package explicitly and run the postinstall again.
set -euo pipefail

log() { printf 'install-claude: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

script_dir="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
repo_root="$(cd -- "$script_dir/.." && pwd -P)"
version="${1:-${CLAUDE_VERSION:-2.1.332}}"
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || die "not a release version: '$version' (e.g. 2.1.332)"
cache_root="${CODEXGATE_CACHE:-$repo_root/.cache}"
mkdir -p -- "$cache_root"
cache_root="$(cd -- "$cache_root" && pwd -P)"
prefix="$cache_root/claude/$version"
bin="$prefix/node_modules/.bin/claude"
package_dir="$prefix/node_modules/@anthropic-ai/claude-code"

installed_version() {
    # `claude --version` prints "2.1.332 (Claude Code)"; it needs a HOME it may write to.
    [[ -x "$bin" ]] || return 1
    local out home
    home="$(mktemp -d)"
    out="$(HOME="$home" CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 timeout 60 "$bin" --version 2>/dev/null </dev/null)" || {
        rm -rf -- "$home"
        return 1
    }
    rm -rf -- "$home"
    printf '%s\n' "${out%% *}"
}

platform_package() {
    # The names of @anthropic-ai/claude-code's optionalDependencies.
    local os arch libc=""
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
    if [[ "$os" == linux ]] && ! ldd --version 2>&1 | grep -qi -e glibc -e 'gnu libc'; then
        libc=-musl
    fi
    printf '@anthropic-ai/claude-code-%s-%s%s@%s\n' "$os" "$arch" "$libc" "$version"
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
    log "installing @anthropic-ai/claude-code@$version into $prefix"
    npm install "${npm_flags[@]}" --save-exact "@anthropic-ai/claude-code@$version" >&2
    if [[ "$(installed_version || true)" != "$version" ]]; then
        local spec
        spec="$(platform_package)" || die "unsupported platform $(uname -s)/$(uname -m)"
        log "native binary missing; installing $spec explicitly"
        npm install "${npm_flags[@]}" --save-exact "$spec" >&2
        [[ -f "$package_dir/install.cjs" ]] && (cd -- "$package_dir" && node install.cjs >&2)
    fi
}

main() {
    if [[ "$(installed_version || true)" == "$version" ]]; then
        printf '%s\n' "$bin"
        return 0
    fi
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$cache_root/.claude-install.lock"
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
    [[ "$got" == "$version" ]] || die "installed claude reports version '${got:-<none>}', wanted $version"
    printf '%s\n' "$bin"
}

main "$@"
