#!/usr/bin/env bash
# strace: the differential containment suite (tests/approval/test_differential.py)
# runs every command the policy engine allows under `strace -f` and judges what
# the kernel was asked to do. Debian's package; idempotent (nothing to do when
# strace is already on PATH).
set -euo pipefail
if command -v strace >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "bootstrap: strace is missing; install Debian's strace package (the containment suite skips without it)" >&2
  exit 0
fi
echo "bootstrap: installing strace"
apt-get install -y --no-install-recommends strace >/dev/null
