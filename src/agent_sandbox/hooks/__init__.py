"""Agent hooks: ``tool_call`` (the per-call fast path behind ``sandbox hook``),
``calls`` (each agent's tool-call JSON to the engine's ``Call``) and ``budget``
(the hook's wall-clock budget). A call that escalates goes through
``approval.escalation`` (the approval round trip shared with the MCP server).

Importing this package must stay free: it is on every tool call's path."""
