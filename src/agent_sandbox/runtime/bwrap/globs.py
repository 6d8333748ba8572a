"""How the planner matches its glob rules: ``covers`` (does a rule name a path),
and ``existing`` (the paths on disk a rule names, below given roots).

``spec.paths.covers`` is the meaning of a rule; ``covers`` here answers the
common ``**/name`` forms without compiling a regular expression (the cold start
of ``sandbox exec`` pays for ``re``) and hands every other form to it, and a
test compares the two. Read-only: it asks a ``FsView`` and decides nothing.
"""

from __future__ import annotations

from agent_sandbox.spec.paths import covers as _glob_covers
from agent_sandbox.spec.paths import is_glob

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .fsview import FsView


def under(path: str, root: str) -> bool:
    """Whether ``path`` is ``root`` or below it (both absolute and normalised)."""
    return root == "/" or path == root or path.startswith(root.rstrip("/") + "/")


_LITERALS: dict[str, tuple[tuple[str, ...], bool] | None] = {}


def _any_depth_literal(rule: str) -> tuple[tuple[str, ...], bool] | None:
    """``**/a/b`` or ``**/a/b/**`` as (components, with_subtree); None for other globs
    (remembered: the planner asks about the same rules many times per plan)."""
    try:
        return _LITERALS[rule]
    except KeyError:
        if len(_LITERALS) >= 4096:
            _LITERALS.clear()
        lit = _LITERALS[rule] = _any_depth_literal_of(rule)
        return lit


def _any_depth_literal_of(rule: str) -> tuple[tuple[str, ...], bool] | None:
    if not rule.startswith("**/"):
        return None
    body, subtree = rule[3:], False
    if body.endswith("/**"):
        body, subtree = body[:-3], True
    if not body or is_glob(body):
        return None
    return tuple(body.split("/")), subtree


def covers(rule: str, path: str) -> bool:
    """``spec.paths.covers``, answering the common ``**/name`` forms without ``re``."""
    lit = _any_depth_literal(rule)
    if lit is None:
        return _glob_covers(rule, path)
    names, subtree = lit
    parts = path.split("/")
    n = len(names)
    for i in range(1, len(parts) - n + 1):
        if tuple(parts[i:i + n]) == names:
            rest = len(parts) - (i + n)
            if rest > 0 or not subtree:
                return True
    return False


def _matcher(rule: str) -> Callable[[str], bool]:
    """``covers(rule, path)`` as a function prepared once for the paths of a walk, for
    ``existing``: it may answer False below a folder it already matched (a walk
    lists a folder before what it holds, and only the outermost match counts)."""
    lit = _any_depth_literal(rule)
    if lit is not None and len(lit[0]) == 1 and not lit[1]:
        name = "/" + lit[0][0]
        return lambda path: path.endswith(name)
    if lit is not None:
        return lambda path: covers(rule, path)
    from agent_sandbox.spec.paths import glob_regex

    rx = glob_regex(rule)
    last = rule.rsplit("/", 1)[-1]
    tail = last[1:] if last.startswith("*") else ""
    if tail and not any(c in tail for c in "*?[]{}\\"):
        # ``**/*.pem``: only a path ending so can match (most paths of a walk are not
        # tried against the expression at all)
        return lambda path: path.endswith(tail) and rx.match(path) is not None
    return lambda path: rx.match(path) is not None


def existing(fs: FsView, pattern: str, roots: Sequence[str]) -> list[str]:
    """Existing paths matching an absolute or ``**/``-anchored glob (outermost only)."""
    if pattern.startswith("/"):
        lit: list[str] = []
        for part in pattern.split("/")[1:]:
            if is_glob(part):
                break
            lit.append(part)
        base = "/" + "/".join(lit)
        search = [base] if fs.kind(base) == "d" else []
    else:
        search = list(roots)
    match = _matcher(pattern)
    out: list[str] = []
    for r in search:
        if match(r):
            out.append(r)
            continue
        matched: list[str] = []
        for p, _ in fs.walk(r):
            if match(p) and not any(under(p, m) for m in matched):
                matched.append(p)
        out += matched
    return out
