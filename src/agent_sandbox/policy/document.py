"""The policy document checked as it loads: every section, rule and number of
the effective policy JSON has the right shape, or a ``PolicyError`` says where.

A rule of the wrong shape fails when the policy loads, never at match time.
Stdlib only (the hook loads a policy on every call); never guesses a value.
"""

from __future__ import annotations

from ..spec.rules import ToolKind, Verdict
from .decision import PolicyError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms to import; annotations only
    from typing import Any


class RuleEntry:
    __slots__ = ("pattern", "prefix", "reason", "tool", "verdict")

    def __init__(self, verdict: Verdict, tool: str, pattern: str | None,
                 prefix: list[Any] | None, reason: str) -> None:
        self.verdict, self.tool, self.pattern = verdict, tool, pattern
        self.prefix, self.reason = prefix, reason


def parse_verdict(value: Any, where: str) -> Verdict:
    try:
        return Verdict(value)
    except ValueError:
        raise PolicyError(f"{where}: unknown verdict {value!r}") from None


RULE_TOOLS = frozenset(k.value for k in ToolKind)


def rule_shape(r: dict[str, Any], where: str) -> tuple[str | None, list[Any] | None, str]:
    """(pattern, prefix, tool) of one rule, checked when the policy loads: a
    rule of the wrong shape is a PolicyError, never a surprise at match time."""
    pattern, prefix, tool = r.get("pattern"), r.get("prefix"), r.get("tool", "bash")
    if pattern is None and prefix is None:
        raise PolicyError(f"{where} has neither pattern nor prefix")
    if pattern is not None and (not isinstance(pattern, str) or not pattern.strip()):
        raise PolicyError(f"{where}.pattern must be a non-empty string, not {pattern!r}")
    if prefix is not None and not (
            isinstance(prefix, list) and prefix
            and all(isinstance(p, str) or (isinstance(p, list) and p
                                           and all(isinstance(q, str) for q in p))
                    for p in prefix)):
        raise PolicyError(f"{where}.prefix must be a non-empty list of words (or lists of "
                          f"alternative words), not {prefix!r}")
    if not isinstance(tool, str) or tool not in RULE_TOOLS:
        raise PolicyError(f"{where}.tool must be one of {', '.join(sorted(RULE_TOOLS))}, "
                          f"not {tool!r}")
    if r.get("reason") is not None and not isinstance(r.get("reason"), str):
        raise PolicyError(f"{where}.reason must be a string")
    return pattern, prefix, tool


def section(doc: dict[str, Any], key: str) -> dict[str, Any]:
    v = doc.get(key, {})
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise PolicyError(f"{key} must be an object")
    return v


def string_list(obj: dict[str, Any], key: str, where: str) -> list[str]:
    v = obj.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise PolicyError(f"{where}.{key} must be a list of strings")
    return v


def seconds(obj: dict[str, Any], key: str, default: float) -> float:
    v = obj.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        raise PolicyError(f"approvals.{key} must be a finite number of seconds")
    return float(v)
