"""A small SBPL (Seatbelt profile language) reader and evaluator for tests.

``parse`` reads the s-expressions; ``Profile.decide`` answers "allow or deny?"
for one operation on one path (or service, address), with SBPL's rule: the last
matching rule wins. Only the filters the renderer emits are understood; any
other filter makes ``decide`` raise, so an unexpected construct cannot pass
silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Sym:
    name: str


@dataclass(frozen=True)
class Str:
    value: str


@dataclass(frozen=True)
class Regex:
    pattern: str


Expr = Sym | Str | Regex | int | list


class SbplSyntaxError(ValueError):
    pass


def parse(text: str) -> list[Expr]:
    """Every top-level form of a profile."""
    pos = 0
    n = len(text)

    def skip() -> None:
        nonlocal pos
        while pos < n:
            c = text[pos]
            if c in " \t\r\n":
                pos += 1
            elif c == ";":
                while pos < n and text[pos] != "\n":
                    pos += 1
            else:
                return

    def string(start: int, raw: bool) -> tuple[str, int]:
        i = start
        out = []
        while i < n:
            c = text[i]
            if c == '"':
                return "".join(out), i + 1
            if c == "\\" and not raw:
                if i + 1 >= n:
                    break
                out.append(text[i + 1])
                i += 2
                continue
            if c == "\n":
                raise SbplSyntaxError(f"newline inside a string at {i}")
            out.append(c)
            i += 1
        raise SbplSyntaxError(f"unterminated string starting at {start}")

    def expr() -> Expr:
        nonlocal pos
        skip()
        if pos >= n:
            raise SbplSyntaxError("unexpected end of input")
        c = text[pos]
        if c == "(":
            pos += 1
            items: list[Expr] = []
            while True:
                skip()
                if pos >= n:
                    raise SbplSyntaxError("unclosed '('")
                if text[pos] == ")":
                    pos += 1
                    return items
                items.append(expr())
        if c == ")":
            raise SbplSyntaxError(f"unexpected ')' at {pos}")
        if text.startswith('#"', pos):
            value, pos = string(pos + 2, raw=True)
            return Regex(value)
        if c == '"':
            value, pos = string(pos + 1, raw=False)
            return Str(value)
        m = re.compile(r"[^\s()\";]+").match(text, pos)
        if not m:
            raise SbplSyntaxError(f"bad token at {pos}")
        pos = m.end()
        tok = m.group(0)
        if re.fullmatch(r"-?\d+", tok):
            return int(tok)
        return Sym(tok)

    forms: list[Expr] = []
    while True:
        skip()
        if pos >= n:
            return forms
        forms.append(expr())


OP_FAMILIES = {
    "file-read*": ("file-read-data", "file-read-metadata", "file-read-xattr"),
    "file-write*": ("file-write-data", "file-write-create", "file-write-unlink",
                    "file-write-mode", "file-write-xattr"),
    "process-info*": ("process-info-pidinfo",),
    "network*": ("network-outbound", "network-inbound", "network-bind"),
}


def op_matches(rule_op: str, op: str) -> bool:
    if rule_op == "default" or rule_op == op:
        return True
    return op in OP_FAMILIES.get(rule_op, ())


@dataclass
class Query:
    op: str
    path: str | None = None
    name: str | None = None  # mach service / ipc name
    remote: str | None = None  # "localhost:3128"
    local: str | None = None
    unix_socket: str | None = None
    same_sandbox: bool = False


class Profile:
    def __init__(self, text: str, params: dict[str, str] | None = None):
        self.forms = parse(text)
        self.params = params or {}
        self.rules: list[tuple[str, str, list[Expr]]] = []
        for form in self.forms:
            if not isinstance(form, list) or not form or not isinstance(form[0], Sym):
                raise SbplSyntaxError(f"top-level form is not a call: {form!r}")
            head = form[0].name
            if head == "version":
                self.version = form[1]
                continue
            if head not in ("allow", "deny"):
                raise SbplSyntaxError(f"unknown top-level form {head!r}")
            op = form[1]
            if not isinstance(op, Sym):
                raise SbplSyntaxError(f"operation must be a symbol: {op!r}")
            self.rules.append((head, op.name, list(form[2:])))

    def value(self, e: Expr) -> str:
        if isinstance(e, Str):
            return e.value
        if isinstance(e, list) and e and isinstance(e[0], Sym):
            if e[0].name == "param":
                key = self.value(e[1])
                if key not in self.params:
                    raise KeyError(f"profile needs -D {key}=...")
                return self.params[key]
            if e[0].name == "string-append":
                return "".join(self.value(x) for x in e[1:])
        raise SbplSyntaxError(f"not a string expression: {e!r}")

    def filter_matches(self, f: Expr, q: Query) -> bool:
        if not isinstance(f, list) or not f or not isinstance(f[0], Sym):
            raise SbplSyntaxError(f"bad filter {f!r}")
        kind = f[0].name
        if kind in ("literal", "subpath", "regex"):
            if q.path is None:
                return False
            if kind == "literal":
                return q.path == self.value(f[1])
            if kind == "subpath":
                base = self.value(f[1]).rstrip("/")
                return q.path == base or q.path.startswith(base + "/")
            pat = f[1]
            if not isinstance(pat, Regex):
                raise SbplSyntaxError("regex filter needs #\"...\"")
            return re.search(pat.pattern, q.path) is not None
        if kind == "global-name":
            return q.name == self.value(f[1])
        if kind == "ipc-posix-name":
            return q.name == self.value(f[1])
        if kind == "target":
            return isinstance(f[1], Sym) and f[1].name == "same-sandbox" and q.same_sandbox
        if kind in ("remote", "local"):
            sub = f[1]
            if isinstance(sub, Sym) and sub.name == "ip":
                want = self.value(f[2])
                have = q.remote if kind == "remote" else q.local
                if have is None:
                    return False
                host, port = want.rsplit(":", 1)
                h_host, h_port = have.rsplit(":", 1)
                return host == h_host and port in ("*", h_port)
            if isinstance(sub, Sym) and sub.name == "unix-socket":
                if q.unix_socket is None:
                    return False
                if len(f) == 2:
                    return True
                inner = f[2]
                if isinstance(inner, list) and inner and inner[0] == Sym("path-literal"):
                    return q.unix_socket == self.value(inner[1])
            raise SbplSyntaxError(f"unsupported network filter {f!r}")
        raise SbplSyntaxError(f"unsupported filter {kind!r}")

    def decide(self, q: Query) -> str:
        verdict = None
        for action, op, filters in self.rules:
            if not op_matches(op, q.op):
                continue
            if not filters or any(self.filter_matches(f, q) for f in filters):
                verdict = action
        if verdict is None:
            raise AssertionError("no rule matched, not even (deny default)")
        return verdict
