"""The approval loop, above the queue, the actions, the runtime and the audit log.

A privileged call's path through it: ``escalation`` (the round trip shared by the
hooks, the MCP server and action calls: submit to the folder queue, wait for the
one decision, see it through) -> a human decides with ``approver`` (``sandbox
approve``/``deny``/``pending``, the web dashboard) or ``watch`` (``sandbox
watch``) -> ``executor`` runs the approved request: a command through the sandbox
runtime, a file write through ``approved_write``, an action through
``actions.execution``. ``action_request`` is an agent's action call, start to end,
through the same escalation. Every step is audited (``audit.repo``).

The direction is one way: this package uses ``queue``, ``actions``, ``runtime`` and
``audit``; none of them imports it. Importing this package is free: the hook
loads ``escalation`` only when a call escalates.
"""
