#!/bin/sh
# Prints the path of a usable Chromium for the browser tests (test/browser/), installing
# Debian's `chromium` package with apt-get when none is found. Nothing else is downloaded:
# Playwright's own browser builds (`npx playwright install`) are never used.
#
# Order: $CHROMIUM_PATH if set, then chromium / chromium-browser on PATH, then /usr/bin/chromium.
# A candidate counts only if `<it> --version` answers. When none does and apt-get exists, it runs
# `apt-get install -y --no-install-recommends chromium` non-interactively as root (or through
# `sudo -n`), with `apt-get update` first only when the package is not known yet.
#
# stdout: the path, one line. On failure: one line "scripts/chromium.sh: <reason>" on stderr, exit 1.
# Called by .ci/run before `npm test` and by the browser tests' global setup (test/browser/global-setup.ts).
# Usage: sh scripts/chromium.sh
set -eu

say() { echo "scripts/chromium.sh: $*" >&2; }
fail() {
  say "$*"
  exit 1
}

works() {
  [ -n "$1" ] && [ -x "$1" ] && "$1" --version >/dev/null 2>&1
}

find_chromium() {
  if [ -n "${CHROMIUM_PATH:-}" ]; then
    if works "$CHROMIUM_PATH"; then
      echo "$CHROMIUM_PATH"
      return 0
    fi
    fail "CHROMIUM_PATH=$CHROMIUM_PATH is not a working Chromium ('$CHROMIUM_PATH --version' failed)"
  fi
  for name in chromium chromium-browser; do
    path=$(command -v "$name" 2>/dev/null || true)
    if works "$path"; then
      echo "$path"
      return 0
    fi
  done
  if works /usr/bin/chromium; then
    echo /usr/bin/chromium
    return 0
  fi
  return 1
}

if find_chromium; then exit 0; fi

command -v apt-get >/dev/null 2>&1 || fail "no Chromium found and no apt-get to install Debian's chromium; install Chromium and set CHROMIUM_PATH"
if [ "$(id -u)" -eq 0 ]; then
  as_root=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root="sudo -n"
else
  fail "no Chromium found; installing Debian's chromium needs root: run 'apt-get install -y chromium' as root, or set CHROMIUM_PATH"
fi

apt_install() {
  # A second installer (another test run, unattended-upgrades) holds the dpkg lock: wait for it, up to 5 minutes.
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=300 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold chromium >&2
}

say "no Chromium found; installing Debian's chromium with apt-get (once)"
if ! apt-cache show chromium >/dev/null 2>&1; then
  say "the package lists do not know chromium yet; running apt-get update"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $as_root apt-get update -q -o DPkg::Lock::Timeout=300 >&2 || fail "apt-get update failed, so Debian's chromium cannot be installed"
fi
if ! apt_install; then
  say "apt-get install failed; refreshing the package lists (apt-get update) and trying once more"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $as_root apt-get update -q -o DPkg::Lock::Timeout=300 >&2 || fail "apt-get update failed, so Debian's chromium cannot be installed"
  apt_install || fail "apt-get install -y chromium failed (see apt-get's output above)"
fi

find_chromium || fail "Debian's chromium was installed, but no working chromium is on PATH or at /usr/bin/chromium"
