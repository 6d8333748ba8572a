"""Remembered decisions (``sandbox approve --always``): the key an always-allow
is bound to, and the file of remembered entries.

A remembered decision only ever turns an escalation into an allow for the exact
call it was made for; it must never override a deny (the engine checks it last).
"""

from __future__ import annotations

from .decision import PolicyError

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms to import; annotations only
    from typing import Any


REMEMBER_SCOPES = ("exact", "anywhere")
# Arguments that describe a shell call without changing what it does (a client's
# shell tool: ``command`` beside them); for any other tool, an MCP tool's above all,
# a ``description`` may be what the call sends (an issue's text): bound like the rest
_COSMETIC = frozenset({"description"})


def remembered_key(tool: str, params: Any, cwd: str, scope: str) -> str:
    """The SHA-256 an always-allow is bound to: the exact tool and arguments
    (a file's content is an argument), and the working directory unless the
    scope says otherwise. Raises PolicyError for an unknown scope."""
    import hashlib
    import json

    if scope not in REMEMBER_SCOPES:
        raise PolicyError(f"unknown scope {scope!r} (one of {', '.join(REMEMBER_SCOPES)})")
    shell = isinstance(params, dict) and isinstance(params.get("command"), str) and \
        not tool.startswith("mcp")
    args = ({k: v for k, v in params.items() if k not in _COSMETIC} if shell else params)
    body = json.dumps({"tool": tool, "params": args, "cwd": cwd if scope == "exact" else None,
                       "scope": scope}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)
    return hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()


def load_remembered(path: str | None) -> list[dict[str, Any]]:
    """Remembered decisions (``.sandbox/state/remembered.json``); unreadable: none."""
    if not path:
        return []
    import json

    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read())
    except (OSError, ValueError):
        return []
    entries = data.get("entries") if isinstance(data, dict) else None
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
