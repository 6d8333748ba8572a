"""How text an agent wrote is shown to a human.

A request's command, reasons, working directory and names come from the agent, and the
agent is hostile: a carriage return, a terminal escape sequence, a bidirectional override
or a zero-width character can make an approver read one command while another runs.
``printable`` is the one place that turns such text into what a terminal shows as written.
It becomes a visible escape (``\\xNN``, ``\\uNNNN``, ``\\UNNNNNNNN``; a literal backslash is
doubled, so an escape is never mistaken for typed text):

- every character Python does not call printable: controls, format characters (bidi
  overrides, zero-width joiners, tag characters), line and paragraph separators,
  unassigned and private code points, spaces other than the ASCII one;
- every combining mark (categories Mn, Me): without a base it draws on its neighbour or
  nothing at all (U+034F, the variation selectors U+FE00-FE0F and U+E0100-E01EF), and with
  one it fakes a precomposed letter (``e`` + U+0301 looks like U+00E9);
- characters that draw as blank although Python calls them printable: the Hangul fillers
  U+115F, U+1160, U+3164, U+FFA0, the braille blank U+2800, and the rest of Unicode's
  default-ignorable code points;
- compatibility forms of ASCII (fullwidth letters U+FF41-FF5A, the mathematical
  alphanumerics U+1D400-1D7FF, ligatures such as U+FB01): they read as the ASCII text
  they stand for; so does the punctuation that reads as ASCII punctuation in a command
  line (the minus sign U+2212 and the dashes, the division slash U+2215, typographic
  quotes, the one-dot leader);
- in a word that mixes scripts (a Latin ``g`` and ``t`` around the Cyrillic U+0456), every
  letter that is not ASCII: the word is shown as the mixture it is.

Used on display only, never on what is stored, hashed or run. ASCII text that needs no
escape returns at once; the rest costs a cached ``unicodedata`` lookup per distinct
character (the views import this module; the hook never does).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Any

_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r", "\\": "\\\\"}

# Drawn as nothing or as blank, yet str.isprintable() says True: the default-ignorable
# code points that are not format characters, and the braille blank.
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5\u180b\u180c\u180d\u180f")
_MARKS = frozenset(("Mn", "Me"))
# Punctuation that reads as ASCII punctuation in a command line and has no compatibility
# decomposition to it: dashes and the minus sign (``\\u2212rf`` is no flag), slashes, quotes,
# primes, dots and colons, the vertical line look-alikes.
_LOOKALIKE = frozenset(
    "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2043\ufe58\ufe63"
    "\u2215\u2044\u29f8\u29f5\u29f9\u2216"
    "\u02b9\u02ba\u02bc\u02c8\u02cb\u02cd\u02dc\u00b4\u2018\u2019\u201a\u201b"
    "\u201c\u201d\u201e\u201f\u2032\u2033"
    "\u00b7\u0387\u2027\u2219\u22c5\u0589\u05c3\u2236\u0660\u06f0\u3002"
    "\u01c0\u01c3\u2223")
_JSON_NAMED = {"\r": "\\u000d", "\t": "\\u0009"}  # a newline stays: JSON's own layout


def _escape(ch: str) -> str:
    code = ord(ch)
    return (f"\\x{code:02x}" if code < 0x100
            else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")


@lru_cache(maxsize=4096)
def _hidden(ch: str) -> bool:
    """True for a character a terminal would not show as itself (see the module doc)."""
    if not ch.isprintable() or ch in _BLANK or ch in _LOOKALIKE:
        return True
    if ch.isascii():
        return False
    if unicodedata.category(ch) in _MARKS:
        return True
    folded = unicodedata.normalize("NFKC", ch)
    return folded != ch and folded.isascii()


@lru_cache(maxsize=4096)
def _script(ch: str) -> str:
    """The script a letter belongs to, from its Unicode name (CJK scripts are one)."""
    words = unicodedata.name(ch, "?").split()
    first = words[1] if words[0] in ("FULLWIDTH", "HALFWIDTH") and len(words) > 1 else words[0]
    if first in ("CJK", "HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA", "IDEOGRAPHIC"):
        return "CJK"
    return first


def _mixed(text: str) -> set[int]:
    """Indexes of the non-ASCII letters of every word that mixes scripts."""
    out: set[int] = set()
    start = None
    for i, ch in enumerate(text + " "):
        if ch.isalnum() or ch == "_":
            if start is None:
                start = i
            continue
        if start is not None:
            word = range(start, i)
            letters = [j for j in word if text[j].isalpha()]
            if any(not text[j].isascii() for j in letters):
                scripts = {"LATIN" if text[j].isascii() else _script(text[j]) for j in letters}
                if len(scripts) > 1:
                    out.update(j for j in letters if not text[j].isascii())
            start = None
    return out


def printable(value: Any) -> str:
    """``value`` as text whose every character a terminal shows as itself."""
    text = value if isinstance(value, str) else str(value)
    if text.isascii() and text.isprintable() and "\\" not in text:
        return text
    mixed = set() if text.isascii() else _mixed(text)
    out: list[str] = []
    for i, ch in enumerate(text):
        if ch in _NAMED:
            out.append(_NAMED[ch])
        elif i in mixed or _hidden(ch):
            out.append(_escape(ch))
        else:
            out.append(ch)
    return "".join(out)


def escaped_count(text: str) -> int:
    """How many characters of ``text`` ``printable`` shows as escapes."""
    if text.isascii() and text.isprintable():
        return 0
    mixed = set() if text.isascii() else _mixed(text)
    return sum(1 for i, ch in enumerate(text)
               if ch in "\n\t\r" or i in mixed or _hidden(ch))


def json_line(line: str) -> str:
    """A JSON text as a terminal can show it: every character ``printable`` would escape
    becomes a JSON ``\\uXXXX`` escape, so the line parses to the very same value (in JSON
    written with ``ensure_ascii=False``, such as the audit log's own lines, these
    characters only ever stand inside strings, where the escape means the same thing)."""
    if line.isascii() and line.isprintable():
        return line
    mixed = set() if line.isascii() else _mixed(line)
    out: list[str] = []
    for i, ch in enumerate(line):
        if ch in _JSON_NAMED:
            out.append(_JSON_NAMED[ch])
        elif ch not in "\\\n" and (i in mixed or _hidden(ch)):
            code = ord(ch)
            if code >= 0x10000:
                code -= 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def printable_lines(text: str) -> str:
    """``text`` with its line breaks kept and every other character as ``printable``
    shows it: a message for the terminal that quotes names a command chose (a
    protected path it created, a folder the planner could not walk)."""
    return "\n".join(printable(line) for line in text.split("\n"))
