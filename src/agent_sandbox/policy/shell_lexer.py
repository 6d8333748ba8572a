"""The shell lexer: a command line into words, operators and redirections, with
quoting (``'...'``, ``"..."``, ``$'...'``, backslashes), here-document bodies and
the command substitutions inside each word (``$(...)``, backticks, ``<(...)``).

Stdlib only (the hook's hot path). It never executes or expands anything; text
it cannot read exactly raises ``Unparsable``, never a guess.
"""

from __future__ import annotations

from agent_sandbox.errors import SandboxError


# Plain classes, not dataclasses: importing dataclasses costs the hook ~10 ms.
class Word:
    """One shell word: its literal text with quotes removed, and whether any
    part of it is decided only at run time (a variable, a substitution, a glob,
    a brace or tilde form other than ``~/``). ``glob`` marks a word whose only
    run-time part is an unquoted ``*`` or ``?`` (the engine may expand it)."""

    __slots__ = ("dynamic", "glob", "quoted", "text")

    def __init__(self, text: str, dynamic: bool = False, quoted: bool = False,
                 glob: bool = False) -> None:
        self.text, self.dynamic, self.quoted, self.glob = text, dynamic, quoted, glob


class Unparsable(SandboxError):
    pass


OPERATORS = ("&&", "||", ";;", "|&", "|", ";", "&", "\n", "(", ")")
REDIR_OPS = ("<<<", "<<-", "<<", "&>>", "&>", ">>", ">|", "<>", ">&", "<&", ">", "<")


class Tok:
    __slots__ = ("fd", "kind", "subs", "value", "word")

    def __init__(self, kind: str, value: str, word: Word | None = None,
                 subs: list[str] | None = None, fd: str = "") -> None:
        self.kind = kind  # "word" | "op" | "redir"
        self.value = value
        self.word = word
        self.subs = subs if subs is not None else []  # command substitutions in the word
        self.fd = fd


class Lexer:
    def __init__(self, src: str):
        self.s = src
        self.i = 0
        self.n = len(src)
        self.heredocs: list[tuple[str, bool, bool]] = []  # (delimiter, strip tabs, quoted)
        self.heredoc_bodies: list[str] = []
        self.expanding_heredoc = False  # a body with $, ` or \\ under an unquoted delimiter

    def error(self, msg: str) -> Unparsable:
        return Unparsable(msg)

    def _read_balanced(self, open_: str, close: str) -> str:
        """Read from just after ``$(`` (or ``<(``) to the matching ``)``,
        honouring quotes and nesting; returns the inner text."""
        depth = 1
        start = self.i
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise self.error("unterminated single quote")
                self.i = j + 1
                continue
            if c == '"':
                self._skip_double()
                continue
            if c == "`":
                j = self._find_backtick(self.i + 1)
                self.i = j + 1
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    inner = s[start : self.i]
                    self.i += 1
                    return inner
            self.i += 1
        raise self.error("unterminated substitution")

    def _skip_double(self) -> None:
        s, n = self.s, self.n
        self.i += 1
        while self.i < n:
            c = s[self.i]
            if c == "\\":
                self.i += 2
                continue
            if c == '"':
                self.i += 1
                return
            if c == "$" and self.i + 1 < n and s[self.i + 1] == "(":
                self.i += 2
                self._read_balanced("(", ")")
                continue
            if c == "`":
                self.i = self._find_backtick(self.i + 1) + 1
                continue
            self.i += 1
        raise self.error("unterminated double quote")

    def _find_backtick(self, j: int) -> int:
        s = self.s
        while j < self.n:
            if s[j] == "\\":
                j += 2
                continue
            if s[j] == "`":
                return j
            j += 1
        raise self.error("unterminated backtick")

    def tokens(self) -> list[Tok]:
        out: list[Tok] = []
        s, n = self.s, self.n
        while self.i < n:
            c = s[self.i]
            if c in " \t\r":
                self.i += 1
                continue
            if c == "\\" and self.i + 1 < n and s[self.i + 1] == "\n":
                self.i += 2
                continue
            if c == "#":
                # a comment only at the start of a word
                j = s.find("\n", self.i)
                self.i = n if j < 0 else j
                continue
            if c == "\n":
                out.append(Tok("op", "\n"))
                self.i += 1
                if self.heredocs:
                    self._read_heredoc_bodies()
                continue
            # redirections, with an optional fd number before them
            m = self._redir_at(self.i)
            if m is not None:
                fd, op, end = m
                self.i = end
                out.append(Tok("redir", op, fd=fd))
                if op in ("<<", "<<-"):
                    while self.i < n and s[self.i] in " \t":
                        self.i += 1
                    delim = self._word()
                    if delim.word is None or not delim.word.text or delim.subs:
                        raise self.error("here-document without a plain delimiter")
                    self.heredocs.append((delim.word.text, op == "<<-", delim.word.quoted))
                    out.append(delim)
                continue
            if not (c in "<>" and self.i + 1 < n and s[self.i + 1] == "("):
                found = next((o for o in OPERATORS if s.startswith(o, self.i)), None)
                if found is not None:
                    out.append(Tok("op", found))
                    self.i += len(found)
                    continue
            out.append(self._word())
        if self.heredocs:
            raise self.error("here-document without its body")
        return out

    def _redir_at(self, i: int) -> tuple[str, str, int] | None:
        s = self.s
        j = i
        while j < self.n and s[j].isdigit():
            j += 1
        fd = s[i:j]
        if fd and (j >= self.n or s[j] not in "<>"):
            return None
        if j < self.n and s[j] in "<>" and j + 1 < self.n and s[j + 1] == "(":
            return None
        for op in REDIR_OPS:
            if s.startswith(op, j):
                return fd, op, j + len(op)
        if fd == "" and s.startswith("&>", j):
            return "", "&>", j + 2
        return None

    def _read_heredoc_bodies(self) -> None:
        s = self.s
        for delim, strip, quoted in self.heredocs:
            lines: list[str] = []
            while True:
                if self.i >= self.n:
                    raise self.error(f"here-document ended before {delim!r}")
                j = s.find("\n", self.i)
                line = s[self.i :] if j < 0 else s[self.i : j]
                self.i = self.n if j < 0 else j + 1
                check = line.lstrip("\t") if strip else line
                if check == delim:
                    break
                lines.append(line)
            body = "\n".join(lines)
            if not quoted and any(c in body for c in "$`\\"):
                self.expanding_heredoc = True
            self.heredoc_bodies.append(body)
        self.heredocs = []

    def _word(self) -> Tok:
        s, n = self.s, self.n
        buf: list[str] = []
        dynamic = quoted = glob = quoted_glob = False
        subs: list[str] = []
        if s[self.i] == "~":
            # tilde expansion: only a bare ``~`` or ``~/...`` is modelled (as $HOME);
            # ``~user``, ``~+``, ``~-`` (=$OLDPWD) and ``~N`` are decided at run time
            j = self.i + 1
            if j < n and s[j] not in " \t\r\n;&|()<>/":
                dynamic = True
        while self.i < n:
            c = s[self.i]
            if c in " \t\r\n;&|()":
                break
            if c in "<>":
                if self.i + 1 < n and s[self.i + 1] == "(":
                    self.i += 2
                    subs.append(self._read_balanced("(", ")"))
                    dynamic = True
                    buf.append("\x00")
                    continue
                break
            if c == "\\":
                if self.i + 1 < n:
                    buf.append(s[self.i + 1])
                    quoted_glob = quoted_glob or s[self.i + 1] in "*?["
                self.i += 2
                quoted = True
                continue
            if c == "'":
                j = s.find("'", self.i + 1)
                if j < 0:
                    raise self.error("unterminated single quote")
                part = s[self.i + 1 : j]
                quoted_glob = quoted_glob or any(g in part for g in "*?[")
                buf.append(part)
                self.i = j + 1
                quoted = True
                continue
            if c == "$" and self.i + 1 < n and s[self.i + 1] == "'":
                text, self.i = _ansi_c(s, self.i + 2)
                quoted_glob = quoted_glob or any(g in text for g in "*?[")
                buf.append(text)
                quoted = True
                continue
            if c == "$" and self.i + 1 < n and s[self.i + 1] == '"':
                # $"..." is translated through the message catalogue at run time
                dynamic = True
                self.i += 1
                continue
            if c == '"':
                quoted = True
                self.i += 1
                while True:
                    if self.i >= n:
                        raise self.error("unterminated double quote")
                    d = s[self.i]
                    if d == '"':
                        self.i += 1
                        break
                    if d == "\\" and self.i + 1 < n and s[self.i + 1] in '$`"\\\n':
                        buf.append(s[self.i + 1])
                        self.i += 2
                        continue
                    if d == "$" or d == "`":
                        dyn, sub = self._dollar()
                        dynamic = dynamic or dyn
                        if sub is not None:
                            subs.append(sub)
                        buf.append("\x00")
                        continue
                    quoted_glob = quoted_glob or d in "*?["
                    buf.append(d)
                    self.i += 1
                continue
            if c == "$" or c == "`":
                dyn, sub = self._dollar()
                dynamic = dynamic or dyn
                if sub is not None:
                    subs.append(sub)
                buf.append("\x00")
                continue
            if c in "*?":
                glob = True
            elif c == "[" or (c == "{" and "}" in s[self.i : self.i + 4096]):
                # bracket classes, brace expansion ({a,b}, {a..z}) and {fd}> names
                dynamic = True
            buf.append(c)
            self.i += 1
        text = "".join(buf)
        if glob and quoted_glob:
            dynamic = True  # quoted and unquoted glob characters in one word: not expanded here
        return Tok("word", text, Word(text.replace("\x00", "$"), dynamic or glob, quoted,
                                       glob and not dynamic), subs)

    def _dollar(self) -> tuple[bool, str | None]:
        """At ``$`` or a backtick: consume the expansion. Returns (dynamic,
        command substitution text or None)."""
        s, n = self.s, self.n
        c = s[self.i]
        if c == "`":
            j = self._find_backtick(self.i + 1)
            inner = s[self.i + 1 : j].replace("\\`", "`").replace("\\\\", "\\")
            self.i = j + 1
            return True, inner
        # c == "$"
        if self.i + 1 >= n:
            self.i += 1
            return False, None  # a lone $ is literal
        d = s[self.i + 1]
        if s.startswith("$((", self.i):
            self.i += 3
            inner = self._read_balanced("(", ")")
            if self.i < n and s[self.i] == ")":
                self.i += 1
            return True, inner if "$(" in inner or "`" in inner else None
        if d == "(":
            self.i += 2
            return True, self._read_balanced("(", ")")
        if d == "{":
            j = s.find("}", self.i + 2)
            if j < 0:
                raise self.error("unterminated ${")
            body = s[self.i + 2 : j]
            self.i = j + 1
            if "$(" in body or "`" in body:
                raise self.error("command substitution inside ${...}")
            return True, None
        if d.isalnum() or d in "_@*#?-$!":
            j = self.i + 1
            if d.isalpha() or d == "_":
                while j < n and (s[j].isalnum() or s[j] == "_"):
                    j += 1
            else:
                j += 1
            self.i = j
            return True, None
        self.i += 1
        return False, None


def _ansi_c(s: str, i: int) -> tuple[str, int]:
    out: list[str] = []
    esc = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
           "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
    n = len(s)
    while i < n:
        c = s[i]
        if c == "'":
            return "".join(out), i + 1
        if c == "\\" and i + 1 < n:
            d = s[i + 1]
            if d in esc:
                out.append(esc[d])
                i += 2
                continue
            if d == "x":
                j = i + 2
                while j < n and j < i + 4 and s[j] in "0123456789abcdefABCDEF":
                    j += 1
                out.append(chr(int(s[i + 2 : j] or "0", 16)))
                i = j
                continue
            if d in "01234567":
                j = i + 1
                while j < n and j < i + 4 and s[j] in "01234567":
                    j += 1
                out.append(chr(int(s[i + 1 : j], 8) & 0xFF))
                i = j
                continue
            out.append("\\" + d)
            i += 2
            continue
        out.append(c)
        i += 1
    raise Unparsable("unterminated $'...'")
