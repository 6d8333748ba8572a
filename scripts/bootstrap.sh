#!/usr/bin/env bash
# Idempotent setup of everything agent-sandbox needs on a Debian/Ubuntu machine:
# system packages (bubblewrap, socat, podman, runc, runsc, debootstrap, ...),
# the project virtualenv (.venv) with its Python dependencies, and the npm tools
# the comparison tests use (srt). Safe to run again: it only does what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

APT_PACKAGES=(bubblewrap socat ripgrep podman runc runsc debootstrap iproute2 uidmap
              python3-venv nodejs npm git ca-certificates make curl gcc libc6-dev
              openssh-server postgresql chromium golang-go cargo
              # the tools the implicit-trigger catalogue is proven with (tests/exec/test_triggers.py)
              mercurial zsh fish ksh tcsh vim neovim emacs-nox direnv ruby maven pre-commit
              bash-completion gdb tmux tcl xdg-user-dirs)

# one dpkg-query for the whole list (a query per package costs about a second on
# a loaded machine, and this runs before every `make test`)
installed=" $(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${APT_PACKAGES[@]}" 2>/dev/null \
             | awk '$1 == "ii" { printf "%s ", $2 }' || true) "
missing=()
for p in "${APT_PACKAGES[@]}"; do
  # a nodejs from another source may bundle npm (and conflict with Debian's npm)
  if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then continue; fi
  case "$installed" in *" $p "*) ;; *) missing+=("$p") ;; esac
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "bootstrap: installing ${missing[*]}"
  $SUDO apt-get update -qq
  # nodejs may come from another source that bundles npm: do not fail on npm alone.
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    rest=()
    for p in "${missing[@]}"; do [ "$p" = npm ] || rest+=("$p"); done
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${rest[@]}" >/dev/null
  fi
fi

# The base image for Molecule's and the demo's hosts and the gVisor runs takes a
# minute or two to build where it is missing: it builds in the background while
# the rest installs (build/base-image.log); the tests and the demo wait for it.
if command -v podman >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1; then
  bash scripts/base-image.sh --background
fi

if [ ! -x .venv/bin/python ]; then
  # The real interpreter (not a shim), 3.11 or newer; looked for only when the
  # virtualenv is missing (each shim costs a start of its own).
  PY=""
  for cand in python3.13 python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1; then
      real=$("$cand" -c 'import sys; print(sys.executable if sys.version_info >= (3, 11) else "")' 2>/dev/null || true)
      if [ -n "$real" ]; then PY=$real; break; fi
    fi
  done
  [ -n "$PY" ] || { echo "bootstrap: Python 3.11+ is required" >&2; exit 1; }
  echo "bootstrap: creating .venv with $PY"
  "$PY" -m venv .venv
fi
# The Python dependencies install in the background while the npm tools and the
# bootstrap.d hooks run (a fresh clone spends about 50 s in pip and 25 s in npm;
# side by side the two overlap). A hook may use .venv/bin/python and its pip, never
# the project's own dependencies: they are not there yet.
stamp=.venv/.deps-stamp
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
deps_pid=""
deps_log=""
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "bootstrap: installing Python dependencies"
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  deps_log=$(mktemp)
  .venv/bin/python -m pip install -q -e ".[dev,sql]" >"$deps_log" 2>&1 &
  deps_pid=$!
  # an interrupted bootstrap leaves no pip running and no log behind
  trap 'kill "$deps_pid" 2>/dev/null || true; rm -f "$deps_log"' EXIT
fi

# The reference sandbox (srt) for comparison tests and benchmarks.
if [ ! -x .tools/node_modules/.bin/srt ] && command -v npm >/dev/null 2>&1; then
  echo "bootstrap: installing @anthropic-ai/sandbox-runtime (reference srt)"
  mkdir -p .tools
  (cd .tools && npm install --silent --no-audit --no-fund --prefix . @anthropic-ai/sandbox-runtime >/dev/null 2>&1) \
    || echo "bootstrap: warning: could not install srt; comparison tests will report it missing" >&2
fi

hooks_ok=1
for hook in scripts/bootstrap.d/*.sh; do
  [ -e "$hook" ] || continue
  bash "$hook" || { hooks_ok=0; echo "bootstrap: $hook failed" >&2; break; }
done

if [ -n "$deps_pid" ]; then
  if ! wait "$deps_pid"; then
    cat "$deps_log" >&2
    echo "bootstrap: installing the Python dependencies failed" >&2
    exit 1
  fi
  cat "$deps_log" >&2
  echo "$want" > "$stamp"
fi
[ "$hooks_ok" = 1 ] || exit 1
echo "bootstrap: ready ($ROOT)"
