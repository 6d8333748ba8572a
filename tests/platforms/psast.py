"""PowerShell scripts read with a real parser (tree-sitter-powershell from PyPI).

``Script(source)`` parses once and exposes every command call with its
parameters and literal argument values, the functions the script defines
(with their parameters), hashtable literals, and the enclosing scopes of a
node, so tests can check each generated cmdlet call argument by argument.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import tree_sitter as ts
import tree_sitter_powershell as tsp

_PARSER = ts.Parser(ts.Language(tsp.language()))


@dataclass(frozen=True)
class Var:
    name: str


@dataclass(frozen=True)
class Block:
    text: str


@dataclass
class Call:
    name: str
    params: dict[str, list[Any]]
    positional: list[Any]
    node: Any
    order: list[str] = field(default_factory=list)


@dataclass
class Function:
    name: str
    params: dict[str, dict[str, bool]]  # name -> {"mandatory": .., "switch": ..}
    node: Any


def _text(src: bytes, n: Any) -> str:
    return src[n.start_byte:n.end_byte].decode()


class Script:
    def __init__(self, source: bytes | str, switches: dict[str, set[str]] | None = None):
        self.src = source.encode() if isinstance(source, str) else source
        self.tree = _PARSER.parse(self.src)
        self.switches = {k.lower(): {s.lower() for s in v} for k, v in (switches or {}).items()}
        self.functions = {f.name.lower(): f for f in self._functions()}
        for f in self.functions.values():
            self.switches.setdefault(f.name.lower(), {p for p, a in f.params.items()
                                                      if a["switch"]})

    # ------------------------------------------------------------------ walk

    def nodes(self, kind: str, root: Any = None) -> list[Any]:
        out = []
        stack = [root or self.tree.root_node]
        while stack:
            n = stack.pop()
            if n.type == kind:
                out.append(n)
            stack.extend(reversed(n.children))
        return out

    def errors(self) -> list[str]:
        out = []
        stack = [self.tree.root_node]
        while stack:
            n = stack.pop()
            if n.type == "ERROR" or n.is_missing:
                out.append(f"{n.start_point}: {_text(self.src, n)[:60]!r}")
            stack.extend(n.children)
        return out

    # ----------------------------------------------------------------- values

    def value(self, n: Any) -> Any:
        wrappers = ("array_literal_expression", "unary_expression")
        while n.type in wrappers and n.named_child_count == 1 and n.child_count == 1:
            n = n.named_children[0]
        t = n.type
        if t == "string_literal":
            raw = _text(self.src, n)
            if raw.startswith("'") and raw.endswith("'"):
                return raw[1:-1].replace("''", "'")
            if raw.startswith("@'"):
                body = raw[2:-2]
                return body[1:-1] if body.startswith("\n") else body
            return raw  # expandable strings stay as written
        if t == "variable":
            raw = _text(self.src, n)
            return Var(("@" if raw.startswith("@") else "") + raw.lstrip("$@").lower())
        if t == "script_block_expression":
            return Block(_text(self.src, n))
        if t == "array_expression":  # @( ... )
            inner = [c for c in self.nodes("string_literal", n)]
            return [self.value(c) for c in inner]
        if t == "array_literal_expression":
            return [self.value(c) for c in n.named_children]
        return _text(self.src, n)

    # --------------------------------------------------------------- commands

    def calls(self, name: str | None = None) -> list[Call]:
        out = []
        for n in self.nodes("command"):
            name_node = n.child_by_field_name("command_name")
            if name_node is None:
                continue
            cname = _text(self.src, name_node)
            if name is not None and cname.lower() != name.lower():
                continue
            out.append(self._call(cname, n))
        return out

    def _call(self, cname: str, n: Any) -> Call:
        params: dict[str, list[Any]] = {}
        order: list[str] = []
        positional: list[Any] = []
        current: str | None = None
        switches = self.switches.get(cname.lower(), set())
        elements = n.child_by_field_name("command_elements")
        for child in (elements.children if elements is not None else []):
            if child.type == "command_argument_sep":
                continue
            if child.type == "command_parameter":
                pname = _text(self.src, child).lstrip("-").rstrip(":").lower()
                if pname in params:
                    raise AssertionError(f"{cname}: parameter -{pname} given twice")
                params[pname] = []
                order.append(pname)
                current = None if pname in switches else pname
                continue
            val = self.value(child)
            if current is not None:
                params[current].append(val)
                current = None
            else:
                positional.append(val)
        return Call(cname, params, positional, n, order)

    # -------------------------------------------------------------- functions

    def _functions(self) -> list[Function]:
        out = []
        for fn in self.nodes("function_statement"):
            name = _text(self.src, fn.child_by_field_name("function_name")
                         or next(c for c in fn.children if c.type == "function_name"))
            params: dict[str, dict[str, bool]] = {}
            blocks = [c for c in fn.children if c.type == "script_block"]
            pblocks = [c for c in blocks[0].children if c.type == "param_block"] if blocks else []
            for sp in (self.nodes("script_parameter", pblocks[0]) if pblocks else []):
                var = next(c for c in sp.children if c.type == "variable")
                attrs = _text(self.src, sp)
                params[_text(self.src, var).lstrip("$").lower()] = {
                    "mandatory": "Mandatory = $true" in attrs,
                    "switch": "[switch]" in attrs,
                }
            out.append(Function(name, params, fn))
        return out

    def hashtables(self) -> list[dict[str, Any]]:
        out = []
        for h in self.nodes("hash_literal_expression"):
            entry: dict[str, Any] = {}
            for e in self.nodes("hash_entry", h):
                key = _text(self.src, e.child(0))
                entry[key] = _text(self.src, e.child(2))
            out.append(entry)
        return out

    def enclosing(self, n: Any) -> list[tuple[str, str]]:
        """(kind, name) of the Invoke-Change blocks and functions around a node."""
        out = []
        p = n.parent
        while p is not None:
            if p.type == "script_block_expression":
                cmd = p.parent
                while cmd is not None and cmd.type != "command":
                    cmd = cmd.parent
                if cmd is not None:
                    name = cmd.child_by_field_name("command_name")
                    out.append(("block-of", _text(self.src, name)))
            if p.type == "function_statement":
                fname = next(c for c in p.children if c.type == "function_name")
                out.append(("function", _text(self.src, fname)))
            p = p.parent
        return out
