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


def _is_modifier(f: Expr) -> bool:
    """``(with message ...)`` and the like: they change reporting, not the decision."""
    return isinstance(f, list) and bool(f) and f[0] == Sym("with")


OP_FAMILIES = {
    "file-read*": ("file-read-data", "file-read-metadata", "file-read-xattr"),
    "file-write*": ("file-write-data", "file-write-create", "file-write-unlink",
                    "file-write-mode", "file-write-xattr"),
    "process-info*": ("process-info-pidinfo",),
    "network*": ("network-outbound", "network-inbound", "network-bind"),
    "ipc-posix-shm": ("ipc-posix-shm-read-data", "ipc-posix-shm-write-data",
                      "ipc-posix-shm-write-create", "ipc-posix-shm-write-unlink",
                      "ipc-posix-shm-read-metadata"),
    "ipc-posix-sem": ("ipc-posix-sem-create", "ipc-posix-sem-open", "ipc-posix-sem-post",
                      "ipc-posix-sem-wait", "ipc-posix-sem-unlink"),
    "ipc-posix*": ("ipc-posix-shm-read-data", "ipc-posix-shm-write-data",
                   "ipc-posix-shm-write-create", "ipc-posix-shm-write-unlink",
                   "ipc-posix-shm-read-metadata", "ipc-posix-sem-create", "ipc-posix-sem-open",
                   "ipc-posix-sem-post", "ipc-posix-sem-wait", "ipc-posix-sem-unlink"),
    "sysctl*": ("sysctl-read", "sysctl-write"),
}


def op_matches(rule_op: str, op: str) -> bool:
    if rule_op == "default" or rule_op == op:
        return True
    return op in OP_FAMILIES.get(rule_op, ())


@dataclass
class Query:
    op: str
    path: str | None = None
    name: str | None = None  # mach service, ipc, sysctl or iokit class name
    remote: str | None = None  # "localhost:3128"
    local: str | None = None
    unix_socket: str | None = None
    same_sandbox: bool = False
    vnode: str = "REGULAR-FILE"  # the vnode-type of the object (DIRECTORY, SYMLINK, ...)
    domain: str | None = None  # system-socket: socket-domain (AF_UNIX, AF_INET, ...)
    protocol: int | None = None  # system-socket: socket-protocol


class Profile:
    def __init__(self, text: str, params: dict[str, str] | None = None):
        self.forms = parse(text)
        self.params = params or {}
        self.rules: list[tuple[str, str, list[Expr]]] = []
        self._by_op: dict[str, list[tuple[str, list[Expr]]]] = {}
        for form in self.forms:
            if not isinstance(form, list) or not form or not isinstance(form[0], Sym):
                raise SbplSyntaxError(f"top-level form is not a call: {form!r}")
            head = form[0].name
            if head == "version":
                self.version = form[1]
                continue
            if head not in ("allow", "deny"):
                raise SbplSyntaxError(f"unknown top-level form {head!r}")
            ops = [x for x in form[1:] if isinstance(x, Sym)]
            filters = [x for x in form[1:] if not isinstance(x, Sym)]
            if not ops or form[1:1 + len(ops)] != ops:
                raise SbplSyntaxError(f"operations must be symbols before the filters: {form!r}")
            filters = [f for f in filters if not _is_modifier(f)]
            for op in ops:
                self.rules.append((head, op.name, filters))

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

    def regex_value(self, e: Expr) -> str:
        if isinstance(e, Regex):
            return e.pattern
        if isinstance(e, Str):  # srt spells regexes as JSON strings
            return e.value
        raise SbplSyntaxError(f"not a regex: {e!r}")

    def filter_matches(self, f: Expr, q: Query) -> bool:
        if not isinstance(f, list) or not f or not isinstance(f[0], Sym):
            raise SbplSyntaxError(f"bad filter {f!r}")
        kind = f[0].name
        if kind == "require-all":
            return all(self.filter_matches(x, q) for x in f[1:])
        if kind == "require-any":
            return any(self.filter_matches(x, q) for x in f[1:])
        if kind == "require-not":
            return not self.filter_matches(f[1], q)
        if kind == "vnode-type":
            return isinstance(f[1], Sym) and q.vnode == f[1].name
        if kind == "sysctl-name":
            return q.op.startswith("sysctl") and q.name == self.value(f[1])
        if kind == "sysctl-name-prefix":
            return q.op.startswith("sysctl") and q.name is not None and \
                q.name.startswith(self.value(f[1]))
        if kind == "global-name-prefix":
            return q.name is not None and q.name.startswith(self.value(f[1]))
        if kind in ("iokit-registry-entry-class", "iokit-user-client-class"):
            return q.name == self.value(f[1])
        if kind == "socket-domain":
            return isinstance(f[1], Sym) and q.domain == f[1].name
        if kind == "socket-protocol":
            return q.protocol == f[1]
        if kind in ("literal", "subpath", "regex"):
            if q.path is None:
                return False
            if kind == "literal":
                return q.path == self.value(f[1])
            if kind == "subpath":
                base = self.value(f[1]).rstrip("/")
                return q.path == base or q.path.startswith(base + "/")
            return re.search(self.regex_value(f[1]), q.path) is not None
        if kind == "global-name":
            return q.name == self.value(f[1])
        if kind == "ipc-posix-name-regex":
            return q.name is not None and re.search(self.regex_value(f[1]), q.name) is not None
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
                return host in ("*", h_host) and port in ("*", h_port)
            if isinstance(sub, Sym) and sub.name == "unix-socket":
                if q.unix_socket is None:
                    return False
                if len(f) == 2:
                    return True
                inner = f[2]
                if isinstance(inner, list) and inner and inner[0] == Sym("path-literal"):
                    return q.unix_socket == self.value(inner[1])
                if isinstance(inner, list) and inner and inner[0] == Sym("subpath"):
                    base = self.value(inner[1]).rstrip("/")
                    return q.unix_socket == base or q.unix_socket.startswith(base + "/")
                if isinstance(inner, list) and inner and inner[0] == Sym("path-regex"):
                    return re.search(self.regex_value(inner[1]), q.unix_socket) is not None
            raise SbplSyntaxError(f"unsupported network filter {f!r}")
        raise SbplSyntaxError(f"unsupported filter {kind!r}")

    def decide(self, q: Query) -> str:
        """The action of the last rule that matches (SBPL's last match wins): the
        rules for the operation are read last first, and the first match decides."""
        rules = self._by_op.get(q.op)
        if rules is None:
            rules = self._by_op[q.op] = [(action, filters) for action, op, filters
                                         in reversed(self.rules) if op_matches(op, q.op)]
        for action, filters in rules:
            if not filters or any(self.filter_matches(f, q) for f in filters):
                return action
        raise AssertionError("no rule matched, not even (deny default)")
