"""The hook's wall-clock budget: the one place that says how long ``sandbox
hook`` may take, and so what timeout the renderer must give it in each agent's
settings.

A client that times a hook out lets the tool run, so the hook must always
answer before the client gives up on it: ``agent_timeout(wait)`` (what the
renderer writes) is strictly greater than ``hook_deadline(wait)`` (the most the
hook ever spends, which ``entry`` enforces with an alarm). ``wait`` is the
policy's ``approvals.wait``: how long an escalation waits for a human.

Stdlib only and free to import: it is on every tool call's path. It never
returns a budget the hook cannot keep.
"""

from __future__ import annotations

# Reading the hook input and the policy: a FIFO, a stalled pipe or a slow
# network mount blocks here, never longer.
START_BUDGET = 10.0
# How long the hook waits for an approved command's result before answering
# "approved and still running" (the command itself goes on, detached; its result
# reaches `sandbox status` and the MCP server's check_request).
RUN_WAIT = 300.0
# Writing the answer, the audit record and cancelling a request.
EXIT_SLACK = 5.0
# What the agent's timeout adds on top of the hook's own deadline: interpreter
# start-up and a loaded machine.
MARGIN = 15


def hook_deadline(wait: float) -> float:
    """The most seconds the hook spends, from its start to its answer, under a
    policy whose escalations wait ``wait`` seconds for a decision."""
    return START_BUDGET + max(0.0, float(wait)) + RUN_WAIT + EXIT_SLACK


def agent_timeout(wait: float) -> int:
    """Whole seconds to render as the hook's timeout in an agent's settings;
    always greater than ``hook_deadline(wait)``."""
    deadline = hook_deadline(wait)
    whole = int(deadline)
    return (whole if whole == deadline else whole + 1) + MARGIN
