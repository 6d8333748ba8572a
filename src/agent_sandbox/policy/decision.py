"""The types of one classification: a ``Call`` in, a ``Decision`` out.

``Call`` is one tool call in agent-neutral form (the hooks build it from each
agent's JSON); ``Decision`` collects the verdict of every part of the call and
only ever tightens (``add`` keeps the strictest verdict). ``PolicyError`` is a
malformed policy document. Stdlib only: the hook imports this on every call.

Nothing here decides anything; it must never loosen a verdict once added.
"""

from __future__ import annotations

from ..errors import SandboxError
from ..spec.rules import Verdict

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms to import; annotations only
    from typing import Any

ALLOW, ESCALATE = Verdict.ALLOW, Verdict.ESCALATE


class PolicyError(SandboxError, ValueError):
    """The policy document is malformed; the message says where."""



class Call:
    """One tool call in agent-neutral form.

    kind: bash | read | write | fetch | mcp | search | internal
    """

    __slots__ = ("command", "cwd", "kind", "mcp_name", "params", "paths", "tool", "urls")

    def __init__(self, kind: str, tool: str, params: dict[str, Any], cwd: str, *,
                 command: str = "", paths: tuple[str, ...] = (), urls: tuple[str, ...] = (),
                 mcp_name: str = "") -> None:
        self.kind, self.tool, self.params, self.cwd = kind, tool, params, cwd
        self.command, self.paths, self.urls, self.mcp_name = command, paths, urls, mcp_name

    def __repr__(self) -> str:
        return f"Call({self.kind!r}, {self.tool!r}, {summary_of(self)!r})"



class Decision:
    __slots__ = ("kind", "reasons", "remembered", "remembered_content", "risk", "summary",
                 "verdict")

    def __init__(self, verdict: Verdict, *, kind: str = "", summary: str = "") -> None:
        self.verdict = verdict
        self.reasons: list[str] = []
        self.risk = "low"
        self.kind = kind
        self.summary = summary
        self.remembered = False
        # a command remembered with ``approve --always`` stays an escalation, approved
        # without a human only while the tree the remembered approval saw is unchanged
        # (``queue.content``): that approval's entry (its request id and content)
        self.remembered_content: dict[str, Any] | None = None

    def __repr__(self) -> str:
        return f"Decision({self.verdict.value}, {self.reasons!r})"

    def add(self, verdict: Verdict, reason: str) -> None:
        if verdict.rank > self.verdict.rank:
            self.verdict = verdict
        if reason and verdict is not ALLOW:
            self.reasons.append(f"{verdict.value}: {reason}")

    def reason_text(self) -> str:
        strongest = [r for r in self.reasons if r.startswith(self.verdict.value + ":")]
        return "; ".join(strongest or self.reasons) or self.verdict.value


def raise_risk(d: Decision, level: str) -> None:
    order = {"low": 0, "medium": 1, "high": 2}
    if order[level] > order.get(d.risk, 0):
        d.risk = level


def finish_risk(d: Decision) -> None:
    if d.verdict is ESCALATE and d.risk == "low":
        d.risk = "medium"


def summary_of(call: Call) -> str:
    """The exact thing a human approves: the command, the path or the URL."""
    if call.kind == "bash":
        return call.command
    if call.kind in ("read", "write", "search"):
        return ", ".join(call.paths) or call.tool
    if call.kind == "fetch":
        return ", ".join(call.urls) or call.tool
    if call.kind == "mcp":
        return call.mcp_name
    return call.tool
