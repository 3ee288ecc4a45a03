#!/bin/sh
# Runs a command with Node.js >= 22.12 first on PATH.
#
# wrangler and Miniflare refuse older Node versions. When the machine's node is
# older, this installs the official Node 22 binary from the npm registry package
# `node-<platform>-<arch>` into ~/.cache/sophie-gateway/node22 (once, ~15 s; outside
# node_modules so that `npm ci` cannot delete it) and puts it first on PATH.
# Usage: sh scripts/node22.sh <command> [args...]
set -eu

need_major=22
need_minor=12

version_ok() {
  # $1 = a `node --version` string such as v22.23.3
  v=${1#v}
  major=${v%%.*}
  rest=${v#*.}
  minor=${rest%%.*}
  [ "$major" -gt "$need_major" ] 2>/dev/null && return 0
  [ "$major" -eq "$need_major" ] 2>/dev/null && [ "$minor" -ge "$need_minor" ] 2>/dev/null && return 0
  return 1
}

current=$(node --version 2>/dev/null || echo v0.0.0)
if ! version_ok "$current"; then
  prefix="${XDG_CACHE_HOME:-$HOME/.cache}/sophie-gateway/node22"
  case "$(uname -s)" in
    Linux) platform=linux ;;
    Darwin) platform=darwin ;;
    *) echo "scripts/node22.sh: install Node.js >= 22.12 yourself on $(uname -s)" >&2; exit 1 ;;
  esac
  case "$(uname -m)" in
    x86_64|amd64) arch=x64 ;;
    aarch64|arm64) arch=arm64 ;;
    *) echo "scripts/node22.sh: install Node.js >= 22.12 yourself on $(uname -m)" >&2; exit 1 ;;
  esac
  pkg="node-$platform-$arch"
  bin="$prefix/node_modules/$pkg/bin"
  if ! [ -x "$bin/node" ] || ! version_ok "$("$bin/node" --version)"; then
    echo "scripts/node22.sh: node $current is older than v$need_major.$need_minor; installing $pkg@22 into $prefix" >&2
    mkdir -p "$prefix"
    npm install --prefix "$prefix" --no-save --no-audit --no-fund --loglevel=error "$pkg@$need_major" >&2
  fi
  PATH="$bin:$PATH"
  export PATH
fi

exec "$@"
