"""Agent hooks: ``entry`` (the per-call fast path behind ``sandbox hook``),
``calls`` (each agent's tool-call JSON to the engine's ``Call``) and
``escalate`` (the approval round trip shared with the MCP server).

Importing this package must stay free: it is on every tool call's path."""
