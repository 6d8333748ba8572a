#!/usr/bin/env bash
# The Claude Code that `npm install @anthropic-ai/claude-code` gives on Debian 12's
# node 20 (the newest release whose engines it meets), beside the pinned one
# (30-agent-clients.sh): its tools get a deliberate verdict too
# (tests/agents/test_tool_lists.py). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v npm >/dev/null 2>&1 || exit 0

DEBIAN_CLAUDE_VERSION=2.1.197
OLDER=.tools/agents-debian-node
if [ ! -x "$OLDER/node_modules/.bin/claude" ] || [ "$(cat "$OLDER/.version" 2>/dev/null)" != "$DEBIAN_CLAUDE_VERSION" ]; then
  mkdir -p "$OLDER"
  [ -f "$OLDER/package.json" ] || echo '{"name": "agent-sandbox-clients-debian-node", "private": true}' > "$OLDER/package.json"
  if (cd "$OLDER" && npm install --silent --no-audit --no-fund --save-exact --prefix . \
        "@anthropic-ai/claude-code@$DEBIAN_CLAUDE_VERSION" >/dev/null 2>&1); then
    echo "$DEBIAN_CLAUDE_VERSION" > "$OLDER/.version"
  else
    echo "bootstrap: warning: could not install Claude Code $DEBIAN_CLAUDE_VERSION" >&2
  fi
fi
