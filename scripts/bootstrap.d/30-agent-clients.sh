#!/usr/bin/env bash
# The real agent clients the end-to-end suite drives (tests/agents): Claude Code,
# Codex CLI and Gemini CLI at pinned versions, installed from npm into
# .tools/agents (never globally). Idempotent: nothing is fetched when the pinned
# versions are already present. Codex ships its native binary as an optional
# dependency of its npm package; that is the binary the tests run.
set -euo pipefail
cd "$(dirname "$0")/../.."

CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
GEMINI_CLI_VERSION=0.61.0
DEST=.tools/agents
want="claude-code=$CLAUDE_CODE_VERSION codex=$CODEX_VERSION gemini-cli=$GEMINI_CLI_VERSION"
stamp=$DEST/.versions

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
   && [ -x "$DEST/node_modules/.bin/claude" ] && [ -x "$DEST/node_modules/.bin/codex" ] \
   && [ -x "$DEST/node_modules/.bin/gemini" ]; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "bootstrap: warning: npm missing; the real-client tests will report the clients missing" >&2
  exit 0
fi
echo "bootstrap: installing the agent clients ($want) into $DEST"
mkdir -p "$DEST"
[ -f "$DEST/package.json" ] || echo '{"name": "agent-sandbox-clients", "private": true}' > "$DEST/package.json"
if (cd "$DEST" && npm install --silent --no-audit --no-fund --save-exact --prefix . \
      "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" \
      "@openai/codex@$CODEX_VERSION" \
      "@google/gemini-cli@$GEMINI_CLI_VERSION" >/dev/null 2>&1); then
  echo "$want" > "$stamp"
else
  echo "bootstrap: warning: could not install the agent clients; the real-client tests will report them missing" >&2
fi
