"""How text an agent wrote is shown to a human.

A request's command, reasons, working directory and names come from the agent, and the
agent is hostile: a carriage return, a terminal escape sequence, a bidirectional override
or a zero-width character can make an approver read one command while another runs.
``printable`` is the one place that turns such text into what a terminal shows as written:
every character Python does not call printable (controls, format characters such as bidi
overrides and zero-width joiners, line and paragraph separators, unassigned and private
code points, spaces other than the ASCII one) becomes a visible escape. It is used on
display only, never on what is stored, hashed or run.
"""

from __future__ import annotations

from typing import Any

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}


def printable(value: Any) -> str:
    """``value`` as text whose every character a terminal shows as itself."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable() and "\\" not in text:
        return text
    out: list[str] = []
    for ch in text:
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100
                       else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return "".join(out)
