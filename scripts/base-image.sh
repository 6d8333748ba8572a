#!/usr/bin/env bash
# Build the local Debian base image for demo hosts, Molecule and gVisor runs:
#   localhost/agent-sandbox-base:bookworm
# No registry is reachable, so the image is made with debootstrap and
# `podman import`. Cached: nothing happens when the image already exists with
# the same package list (label agent-sandbox.base-packages). The Debian mirror is
# read from this machine's apt configuration at run time (AGENT_SANDBOX_MIRROR
# overrides it).
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF="${CONTAINERS_CONF:-$(pwd)/containers.conf}"

IMAGE="${AGENT_SANDBOX_BASE_IMAGE:-localhost/agent-sandbox-base:bookworm}"
SUITE="${AGENT_SANDBOX_BASE_SUITE:-bookworm}"
# systemd: hosts that boot it as PID 1 run the proxy as a systemd service
# (Molecule's host and one demo host); the others run `sleep infinity`.
# postgresql-client: psql for the infrastructure actions' one-shot containers.
# git: `ansible-pull` on a host that converges itself from a repository.
PACKAGES="python3,python3-venv,python3-apt,bubblewrap,socat,iproute2,procps,ca-certificates,curl,sudo,gcc,libc6-dev,systemd,systemd-sysv,postgresql-client,git"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# build/ sits in a checkout a sandboxed command may have written: its lock and log
# are never reached through a link (this may run as root)
for f in build build/base-image.lock build/base-image.log; do
  if [ -L "$f" ]; then echo "base-image: $f is a symbolic link; refusing" >&2; exit 1; fi
done
mkdir -p build

present() {
  [ "$(podman image inspect --format '{{ index .Labels "agent-sandbox.base-packages" }}' \
        "$IMAGE" 2>/dev/null || true)" = "$PACKAGES" ]
}

# --background (bootstrap): start the build and return at once; its output goes to
# build/base-image.log. Whoever needs the image runs this script, which waits for
# a build under way (the lock below) and then finds the image there.
if [ "${1:-}" = "--background" ]; then
  present && exit 0
  # detached from the terminal, sudo cannot ask for a password: then the build is
  # left to the first foreground run (make demo, the tests)
  if [ -n "$SUDO" ] && ! setsid -w sudo -n true </dev/null >/dev/null 2>&1; then exit 0; fi
  # a build under way holds the lock: nothing to start
  flock -n build/base-image.lock true || exit 0
  # the log is a new file, opened, then renamed over whatever build/ held there
  log=$(mktemp build/base-image.log.XXXXXX)
  exec 8>>"$log"
  mv -f "$log" build/base-image.log
  setsid bash "$0" </dev/null >&8 2>&1 8>&- &
  exec 8>&-
  echo "base-image: building $IMAGE in the background (build/base-image.log)"
  exit 0
fi

# One build at a time: a second run waits here for the first. The commands below
# do not get the lock's descriptor, so nothing they leave running can hold it.
exec 9>>build/base-image.lock
flock 9

if [ "${1:-}" = "--force" ]; then
  podman image rm -f "$IMAGE" >/dev/null 2>&1 || true
fi

if present; then
  echo "base-image: $IMAGE is present"
  exit 0
fi

# The first Debian archive URI in apt's sources that serves $SUITE (deb822 or
# one-line format); deb.debian.org when none is configured.
mirror_from_apt() {
  local f uri=""
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    uri=$(awk -v s="$SUITE" '$1=="deb" { for (i=2;i<=NF;i++) if ($i !~ /^\[/ && $i ~ /^[a-z]+:\/\//) { if ($(i+1)==s) { print $i; exit } } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    uri=$(awk -v s="$SUITE" '
      BEGIN { RS=""; FS="\n" }
      { u=""; ok=0; deb=0
        for (i=1;i<=NF;i++) {
          if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, a, /[ \t]+/); u=a[1] }
          if ($i ~ /^Suites:/) { n=split($i, b, /[ \t]+/); for (j=2;j<=n;j++) if (b[j]==s) ok=1 }
          if ($i ~ /^Types:.*deb( |$)/) deb=1
        }
        if (ok && deb && u != "") { print u; exit } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  echo "http://deb.debian.org/debian"
}

MIRROR="${AGENT_SANDBOX_MIRROR:-$(mirror_from_apt)}"
work=$(mktemp -d /var/tmp/agent-sandbox-base.XXXXXX)
cleanup() { $SUDO rm -rf "$work"; }
trap cleanup EXIT

echo "base-image: debootstrap $SUITE from $MIRROR (about a minute)"
$SUDO debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$work/root" "$MIRROR" \
  > "$work/debootstrap.log" 2>&1 9>&- || { tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
# Keep the image small and the apt state clean.
$SUDO rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
$SUDO tar -C "$work/root" --numeric-owner -c . 9>&- \
  | podman import \
      --change 'CMD ["/bin/sleep", "infinity"]' \
      --change "LABEL agent-sandbox.base-packages=$PACKAGES" \
      - "$IMAGE" >/dev/null 9>&-
echo "base-image: built $IMAGE"
