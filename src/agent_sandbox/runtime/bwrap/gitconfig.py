"""Git's configuration syntax, read the way git reads it.

One reader for every git config file the runtime looks at (a repository's
``config`` and ``config.worktree``, included files, the user's ``.gitconfig``).
It follows git's own reader rule for rule, so that what it reports is what git
will act on:

- only ``\\n`` ends a line (``\\r\\n`` counts as one); a lone ``\\r``, ``\\x0b``,
  ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028``... are ordinary bytes,
  and the blanks git skips are space, tab and ``\\r`` only;
- a UTF-8 byte order mark is skipped at the start, a partial one is an error;
- ``#`` and ``;`` start a comment, outside quotes, to the end of the line;
- ``[section]`` and ``[section.sub]`` are lowercased whole; ``[section "sub"]``
  keeps the subsection as written, with ``\\`` escaping the next byte; a header
  may be followed by a key on the same line;
- a key starts with a letter, goes on with letters, digits and ``-``, and is
  lowercased; without ``=`` it has no value (a boolean true);
- a value drops leading and trailing blanks, keeps inner ones (git 2.45 and
  later as written; before, each one unquoted became a space: ``old_blanks``,
  for readers that must see what either would); ``"`` toggles
  quoting (blanks and comment characters kept inside); the escapes are ``\\\\``,
  ``\\"``, ``\\n``, ``\\t``, ``\\b``, and ``\\`` at the end of a line continues the
  value on the next; any other escape, or a quote left open at the end of a
  line, is an error;
- a name or value holding a NUL byte ends there, as git's C strings do.

Where git stops with "bad config line", ``read`` raises ``ConfigSyntaxError``
carrying the entries read before it (git has seen exactly those, then dies
before it runs anything). ``unreadable`` adds what a judge of a file made by a
sandboxed command refuses although git would read it: control bytes other than
tab and newline (a lone ``\\r`` among them), NUL, and a file too large to read
whole.

Stdlib only, no I/O.
"""

from __future__ import annotations

from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_BOM = b"\xef\xbb\xbf"
_SPACE = frozenset(b" \t\r\n")
_ALPHA = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_KEYCHAR = _ALPHA | frozenset(b"0123456789-")
_SECTIONCHAR = _KEYCHAR | {0x2E}
_ESCAPES = {ord("t"): 9, ord("n"): 10, ord("b"): 8, ord("\\"): 92, ord('"'): 34}
# bytes a judge refuses in a file it must read exactly: controls but tab and LF
_CONTROL = frozenset(range(0x20)) - {0x09, 0x0A} | {0x7F}

Entry = tuple[str, "str | None"]


class ConfigSyntaxError(SandboxError, ValueError):
    """Where git refuses the file ("bad config line"); ``entries`` holds what came
    before, which git has read."""

    def __init__(self, why: str, line: int, entries: list[Entry]) -> None:
        super().__init__(f"line {line}: {why}")
        self.line = line
        self.entries = entries


def _text(raw: bytes | bytearray) -> str:
    """A name or value as git hands it on: cut at a NUL (a C string)."""
    return bytes(raw).split(b"\0", 1)[0].decode("utf-8", "surrogateescape")


def _end(chars: frozenset[int], data: bytes, i: int) -> int:
    """Where the run of ``chars`` starting at ``i`` ends."""
    n = len(data)
    while i < n and data[i] in chars:
        i += 1
    return i


def read(data: bytes, old_blanks: bool = False) -> list[Entry]:
    """Every (``section[.subsection].key``, value or None) git reads from ``data``,
    in order; section and key lowercased, a quoted subsection as written; with
    ``old_blanks`` as git before 2.45 (a tab or CR inside a value read as a space)."""
    out: list[Entry] = []
    if data[:1] == _BOM[:1]:
        if not data.startswith(_BOM):
            raise ConfigSyntaxError("a partial byte order mark", 1, out)
        data = data[3:]
    data = data.replace(b"\r\n", b"\n")
    n = len(data)
    i = 0
    var = b""  # the section header as a prefix, with its final "."

    def fail(why: str, at: int) -> ConfigSyntaxError:
        return ConfigSyntaxError(why, data.count(b"\n", 0, min(at, n)) + 1, out)

    while i < n:
        c = data[i]
        i += 1
        if c in _SPACE:
            continue
        if c in b"#;":
            j = data.find(b"\n", i)
            i = n if j < 0 else j + 1
            continue
        if c == 0x5B:  # "["
            var, i = _section(data, i, fail)
            continue
        if c not in _ALPHA:
            raise fail(f"a key cannot start with {bytes([c])!r}", i)
        j = _end(_KEYCHAR, data, i)
        key = var + bytes([c]).lower() + data[i:j].lower()
        i = j
        c = data[i] if i < n else 10
        i += 1
        while c in (0x20, 0x09):
            c = data[i] if i < n else 10
            i += 1
        if c == 10:
            out.append((_text(key), None))
            continue
        if c != 0x3D:  # "="
            raise fail(f"a key followed by {bytes([c])!r}", i)
        value, i = _value(data, i, old_blanks, fail)
        out.append((_text(key), _text(value)))
    return out


def _section(data: bytes, i: int, fail: Callable[[str, int], ConfigSyntaxError]
             ) -> tuple[bytes, int]:
    """A section header from just after its "[": (the section as a key prefix,
    with its final ".", where reading goes on)."""
    n = len(data)
    j = _end(_SECTIONCHAR, data, i)
    name = bytearray(data[i:j].lower())
    i = j
    c = data[i] if i < n else 10
    i += 1
    if i > n:
        raise fail("a section header left open at the end", i)
    if c in _SPACE:  # [section "subsection"]
        while c in _SPACE:
            if c == 10:
                raise fail("a section header left open", i)
            c = data[i] if i < n else 10
            i += 1
        if c != 0x22:
            raise fail("a section header without a quoted subsection", i)
        name.append(0x2E)
        while True:
            c = data[i] if i < n else 10
            i += 1
            if c == 10:
                raise fail("a subsection left open", i)
            if c == 0x22:
                break
            if c == 0x5C:
                c = data[i] if i < n else 10
                i += 1
                if c == 10:
                    raise fail("a subsection left open", i)
            name.append(c)
        c = data[i] if i < n else 10
        i += 1
    if c != 0x5D:  # "]"
        raise fail("a bad section header", i)
    if not name:
        raise fail("an empty section name", i)
    return bytes(name) + b".", i


def _value(data: bytes, i: int, old_blanks: bool,
           fail: Callable[[str, int], ConfigSyntaxError]) -> tuple[bytearray, int]:
    """A value from just after its "=" to the end of its (last) line: (the value,
    where reading goes on)."""
    n = len(data)
    value = bytearray()
    quote = comment = False
    trim = 0
    while True:
        c = data[i] if i < n else 10
        i += 1
        if c == 10:
            if quote:
                raise fail("a quote left open at the end of the line", i)
            if trim:
                del value[trim:]
            return value, i
        if comment:
            continue
        if c in _SPACE and not quote:
            if not trim:
                trim = len(value)
            if value:
                value.append(0x20 if old_blanks else c)
            continue
        if not quote and c in b";#":
            comment = True
            continue
        trim = 0
        if c == 0x5C:
            c = data[i] if i < n else 10
            i += 1
            if c == 10:
                continue  # the value goes on on the next line
            if c not in _ESCAPES:
                raise fail(f"an unknown escape \\{bytes([c])!r}", i)
            value.append(_ESCAPES[c])
            continue
        if c == 0x22:
            quote = not quote
            continue
        value.append(c)


def unreadable(data: bytes, limit: int | None = None) -> str | None:
    """Why ``data`` cannot be judged as git would read it (a syntax error git stops
    at, a control byte or NUL, all of ``limit`` bytes read so maybe more), or None."""
    if limit is not None and len(data) >= limit:
        return f"it is larger than {limit} bytes"
    bad = _CONTROL.intersection(data.replace(b"\r\n", b"\n"))
    if bad:
        return f"it holds the control byte {bytes([min(bad)])!r}"
    try:
        read(data)
    except ConfigSyntaxError as exc:
        return f"git cannot read it ({exc})"
    return None
