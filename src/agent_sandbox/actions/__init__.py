"""Privileged infrastructure actions: declared in the spec (``spec.actions``),
judged by the destructive-change gate, given a credential minted for that run
alone by the broker (OpenBao), run once in a gVisor container, and recorded in
one audit trail per call.

Modules: ``credential`` (what the broker hands out, redacted everywhere),
``broker`` (issue, revoke, recover leases), ``runner`` (the one-shot runsc
container), ``sql_plan``, ``terraform_plan``, ``kube_plan`` and ``gate`` (what a
plan changes and whether a human must see it first), ``params`` (parameters
against the schema, into argv) and ``execution`` (one call's two ends: prepared and
gated, then executed). A call's way between the two, through the approvals, is
``approval.action_request``; nothing here imports the approval loop.
"""
