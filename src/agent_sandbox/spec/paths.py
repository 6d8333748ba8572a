"""Filesystem path rules with srt's semantics, as pure functions.

- ``~`` expands to the user's home; relative paths are relative to the working
  directory (the repository for a repository layer).
- Globs: ``*`` within one component, ``**`` across components, ``?`` one char.
  A pattern with no ``/`` before its first glob (``**/.env``) may match at any
  depth.
- Reads: allowed unless a deny_read entry covers the path; an allow_read entry
  re-allows it, unless the deny that covers it is more specific (longer).
- Writes: allowed only under an allow_write entry, and never where a deny_write
  entry or the mandatory protected set covers the path (deny beats allow).

Nothing here touches the filesystem except ``resolve`` (which follows symlinks
on purpose, so a link cannot be used to get around a rule).
"""

from __future__ import annotations

import os
import posixpath

from agent_sandbox.errors import SandboxError
from agent_sandbox.protected import any_depth_rules

TYPE_CHECKING = False  # (not typing.TYPE_CHECKING: importing typing costs startup time)
if TYPE_CHECKING:  # ``re`` loads on the first glob: ``sandbox exec`` starts without it
    import re

GLOB_CHARS = frozenset("*?[")

# Paths that no setting makes writable for an agent (relative names match at any
# depth under a writable root): the protected set's any-depth entries
# (``agent_sandbox.protected``, the one list). The sandbox runtime and the policy
# engine both enforce it; it is re-applied on every policy load.
MANDATORY_DENY_WRITE: tuple[str, ...] = any_depth_rules()


class PathRuleError(SandboxError, ValueError):
    """A path rule is malformed."""


def validate_path_rule(rule: str) -> str:
    if not isinstance(rule, str) or not rule.strip():
        raise PathRuleError("empty path")
    if "\x00" in rule:
        raise PathRuleError("path contains a NUL byte")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in rule):
        raise PathRuleError(f"path {rule!r} contains a control character")
    if '"' in rule:
        # not expressible in every backend's policy language (Seatbelt, PowerShell)
        raise PathRuleError(f"path {rule!r} contains a double quote")
    if rule != rule.strip():
        raise PathRuleError(f"path {rule!r} has leading or trailing white space")
    if rule.startswith("~") and not (rule == "~" or rule.startswith("~/")):
        raise PathRuleError(f"path {rule!r}: only '~' and '~/...' are expanded (not ~user)")
    if is_glob(rule) and ".." in rule.split("/"):
        # ".." after "**" or "*" names a different folder for each match: no one
        # reading of it (lexical or physical) is safe to compare across layers
        raise PathRuleError(f"path {rule!r}: '..' is not allowed in a glob")
    if is_glob(rule):
        import re

        try:
            glob_regex(rule)
        except re.error as exc:  # e.g. a reversed range such as [z-a]
            raise PathRuleError(f"path {rule!r} is not a valid glob: {exc.msg}") from None
        if any(kind == "class" and any(s in body for s in ("[:", "[=", "[."))
               for kind, body in glob_tokens(rule)):
            # a POSIX regex (Seatbelt) reads [[:alpha:]] as a named class, every
            # other matcher as the characters themselves: refused, not guessed
            raise PathRuleError(f"path {rule!r}: POSIX bracket expressions such as "
                                "[[:alpha:]] are not supported in path globs")
    return rule


def is_glob(rule: str) -> bool:
    return not GLOB_CHARS.isdisjoint(rule)


def expand(rule: str, *, home: str, cwd: str) -> str:
    """Expand ``~`` and make a rule absolute (globs stay globs)."""
    if rule == "~":
        return posixpath.normpath(home)
    if rule.startswith("~/"):
        return posixpath.normpath(posixpath.join(home, rule[2:]))
    if rule.startswith("**/") or rule == "**":
        return rule  # matches at any depth, anchored nowhere
    if not rule.startswith("/"):
        return posixpath.normpath(posixpath.join(cwd, rule))
    return posixpath.normpath(rule)


def glob_tokens(pattern: str) -> list[tuple[str, str]]:
    """The one reading of the path-glob grammar, for every regex dialect we emit.

    Tokens: ``("dirs", "")`` for ``**/`` (any number of whole directories),
    ``("any", "")`` for ``**``, ``("star", "")`` for ``*`` (within a component),
    ``("one", "")`` for ``?``, ``("class", body)`` for ``[...]`` (``!`` negation
    already turned into ``^``; a literal leading ``^`` moved to the end),
    ``("lit", c)`` for anything else. A ``[`` that
    opens no class (unclosed, or ``[]`` / ``[!]`` with nothing in it) is literal,
    as fnmatch reads it.
    """
    out: list[tuple[str, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append(("dirs", ""))
            i += 3
        elif pattern.startswith("**", i):
            out.append(("any", ""))
            i += 2
        elif c == "*":
            out.append(("star", ""))
            i += 1
        elif c == "?":
            out.append(("one", ""))
            i += 1
        elif c == "[" and (j := pattern.find("]", i + 1)) != -1 and j > i + 1 and (
                pattern[i + 1 : j] != "!"):
            body = pattern[i + 1 : j]
            if body.startswith("!"):
                out.append(("class", "^" + body[1:]))
            elif body.startswith("^"):
                # a literal caret (only ! negates here, as in fnmatch): moved off the
                # front, where a regex would read it as negation
                rest = body.lstrip("^")
                out.append(("class", rest + "^") if rest else ("lit", "^"))
            else:
                out.append(("class", body))
            i = j + 1
        else:
            out.append(("lit", c))
            i += 1
    return out


def _py_class(body: str) -> str:
    """A class body as a Python regex class, read item by item as a regex reads
    it (``c`` or ``c-d``) and every special character escaped, so that ``[``, ``&&``,
    ``--``, ``~~`` and ``||`` stay literal in later Pythons too (3.7+ warns that
    they may become set operations)."""
    import re

    negate = body.startswith("^")
    chars = body[1:] if negate else body
    items, j = [], 0
    while j < len(chars):
        if j + 2 < len(chars) and chars[j + 1] == "-":
            items.append(re.escape(chars[j]) + "-" + re.escape(chars[j + 2]))
            j += 3
        else:
            items.append(re.escape(chars[j]))
            j += 1
    return "[" + ("^" if negate else "") + "".join(items) + "]"


_PY_TOKENS = {"dirs": "(?:.*/)?", "any": ".*", "star": "[^/]*", "one": "[^/]"}


# Memos of two pure functions of their argument (``functools.lru_cache`` would load
# ``functools`` and ``collections`` on every cold start that imports this module).
_MEMO_SIZE = 4096
_regex_memo: dict[str, re.Pattern[str]] = {}
_literal_memo: dict[str, tuple[bool, str]] = {}


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a path glob (``**`` crosses ``/``, ``*`` does not)."""
    rx = _regex_memo.get(pattern)
    if rx is None:
        if len(_regex_memo) >= _MEMO_SIZE:
            _regex_memo.clear()
        rx = _regex_memo[pattern] = _glob_regex(pattern)
    return rx


def _glob_regex(pattern: str) -> re.Pattern[str]:
    import re

    out = []
    for kind, text in glob_tokens(pattern):
        if kind == "class":
            out.append(_py_class(text))
        elif kind == "lit":
            out.append(re.escape(text))
        else:
            out.append(_PY_TOKENS[kind])
    prefix = "(?:.*/)?" if not pattern.startswith("/") else ""
    return re.compile(prefix + "".join(out) + r"(?:/.*)?\Z", re.DOTALL)


def covers(rule: str, path: str) -> bool:
    """Whether an expanded rule covers an absolute, normalised path.

    A plain rule covers the path itself and everything below it; a glob covers
    what it matches and everything below a match.
    """
    if is_glob(rule):
        anywhere, literal = _literal_part(rule)
        if literal and (("/" + literal) not in path if anywhere
                        else not path.startswith(literal)):
            return False  # the literal part is missing: no need to compile the glob
        return glob_regex(rule).match(path) is not None
    return path == rule or path.startswith(rule.rstrip("/") + "/")


def _literal_part(rule: str) -> tuple[bool, str]:
    """(matches at any depth, the literal text before the first glob character):
    a path the glob covers always holds that text (after a ``/`` when the glob
    may match at any depth, at the start otherwise)."""
    part = _literal_memo.get(rule)
    if part is None:
        if len(_literal_memo) >= _MEMO_SIZE:
            _literal_memo.clear()
        part = _literal_memo[rule] = _literal_part_of(rule)
    return part


def _literal_part_of(rule: str) -> tuple[bool, str]:
    r = rule
    anywhere = not r.startswith("/")
    while r.startswith("**/"):
        r = r[3:]
    cut = min((i for i in (r.find("*"), r.find("?"), r.find("[")) if i >= 0), default=len(r))
    literal = r[:cut]
    if anywhere and literal.startswith("/"):
        literal = literal[1:]
    return anywhere, literal


def specificity(rule: str) -> int:
    """How specific a rule is: the length of its literal part."""
    return len(rule.replace("**/", "").replace("*", ""))


def read_allowed(path: str, deny_read: list[str], allow_read: list[str]) -> bool:
    """srt's read rule for an absolute path against expanded rules."""
    denies = [specificity(r) for r in deny_read if covers(r, path)]
    if not denies:
        return True
    allows = [specificity(r) for r in allow_read if covers(r, path)]
    return bool(allows) and max(allows) >= max(denies)


def write_allowed(
    path: str, allow_write: list[str], deny_write: list[str], *, mandatory: bool = True
) -> bool:
    """srt's write rule (deny beats allow) plus the mandatory protected set."""
    if not any(covers(r, path) for r in allow_write):
        return False
    if any(covers(r, path) for r in deny_write):
        return False
    if mandatory and any(covers(r, path) for r in MANDATORY_DENY_WRITE):
        return False
    return True


def resolve(path: str, cwd: str) -> str:
    """Absolute, normalised, symlinks resolved (the parent when it does not exist)."""
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    try:
        return os.path.realpath(full)
    except OSError:
        # a link nobody may read (/proc/1/exe): judged by its own name, below its
        # resolved parent, like any other path
        parent, name = os.path.split(full)
        return full if parent == full else os.path.join(resolve(parent, "/"), name)


class OpaquePath(SandboxError, ValueError):
    """A path whose target this process cannot know: it passes through a magic
    link of ``/proc`` (a descriptor, working directory or root of a process)."""


# Terminals by exact name: a write there reaches a person's screen.
_TERMINALS = frozenset({"/dev/tty", "/dev/console", "/dev/ptmx"})


def special_device(path: str) -> str | None:
    """What an exact device name means, before any resolution: ``"null"``
    (``/dev/null``), ``"stream"`` (``/dev/stdin``, ``/dev/stdout``,
    ``/dev/stderr``, ``/dev/fd/<digits>``: a descriptor of the process that
    opens it), ``"terminal"`` (``/dev/tty``, ``/dev/console``, ``/dev/ptmx``,
    ``/dev/pts/<digits>``, ``/dev/tty<name>``), else None.

    Exact strings only: ``/dev/fd/3/..``, ``/dev//fd/1`` or ``/dev/fd/../x`` are
    paths like any other, for ``places``. Each reader decides which kinds it
    exempts (a shell redirection its own descriptors, a file tool only
    ``/dev/null``); this is the one place that names them."""
    if not path.startswith("/dev/"):
        return None
    if path == "/dev/null":
        return "null"
    if path in ("/dev/stdin", "/dev/stdout", "/dev/stderr") or (
            path.startswith("/dev/fd/") and path[8:].isdigit() and path[8:].isascii()):
        return "stream"
    if path in _TERMINALS or (path.startswith("/dev/pts/") and path[9:].isdigit()) or (
            path.startswith("/dev/tty") and "/" not in path[5:]):
        return "terminal"
    return None


_S_IFMT, _S_IFLNK = 0o170000, 0o120000
_MAX_LINKS = 40  # the kernel's limit (ELOOP)


def _physical(full: str) -> str:
    """``full`` (absolute) resolved as the kernel walks it: component by
    component, a symlink replaced by its target before the next component, so a
    ``..`` after a link goes to the parent of the link's target. A component that
    does not exist (or cannot be looked at) is taken as written, as
    ``os.path.realpath`` does. Raises ``OpaquePath`` at a magic link of ``/proc``
    (any symlink below ``/proc/<pid>/``: ``fd/N``, ``cwd``, ``root``, ``exe``,
    ``map_files``, ``ns``, and the same under ``task/<tid>/``) or at a name
    missing there (a descriptor that process may hold and this one does not):
    its target depends on the process that opens the path, not this one, and
    the kernel follows it without reading its text."""
    todo = full.split("/")
    todo.reverse()
    out = ""
    links = 0
    while todo:
        name = todo.pop()
        if not name or name == ".":
            continue
        if name == "..":
            out = out[:out.rfind("/")]
            continue
        new = out + "/" + name
        # below /proc/<pid>/ (/proc/self and /proc/thread-self lead there)
        in_process = (new.startswith("/proc/") and new.count("/") >= 3
                      and new[6:new.index("/", 6)].isdigit())
        try:
            mode = os.lstat(new).st_mode
        except (OSError, ValueError):
            if in_process:  # another process's descriptor may exist where ours does not
                raise OpaquePath(f"{new} names a file of a process (its descriptors, "
                                 "working directory or root): where it leads cannot be "
                                 "judged") from None
            out = new
            continue
        if mode & _S_IFMT != _S_IFLNK:
            out = new
            continue
        if in_process:
            raise OpaquePath(f"{new} is a link of the process that opens the path (a "
                             "descriptor, working directory or root): where it leads "
                             "cannot be judged")
        links += 1
        if links > _MAX_LINKS:
            raise OpaquePath(f"too many symbolic links on the way to {full}")
        try:
            target = os.readlink(new)
        except OSError:
            out = new  # a link nobody may read: judged by its own name
            continue
        if target.startswith("/"):
            out = ""
        parts = target.split("/")
        parts.reverse()
        todo += parts
    return out or "/"


def places(path: str, cwd: str) -> list[str]:
    """Every file ``path`` (relative to ``cwd``) may name: the one normalisation
    of a path from a tool call, for every rule and exemption applied to it.

    First the kernel's reading (``_physical``: links followed, then ``..``),
    then, when ``path`` holds a ``..``, a tidying client's reading (``..`` folded
    first, as ``os.path.normpath`` and Node's ``path.resolve`` do, then links
    followed) if it differs. A caller judges each and keeps the strictest.
    Raises ``OpaquePath`` when either reading passes a magic link of ``/proc``
    (``/dev/fd``, ``/dev/stdin`` ... lead there): exact device names are for
    ``special_device`` to recognise first."""
    full = path if path.startswith("/") else (cwd.rstrip("/") or "") + "/" + path
    phys = _physical(full)
    if ".." not in full.split("/"):
        return [phys]
    lex = _physical(posixpath.normpath(full))
    return [phys] if lex == phys else [phys, lex]


def rule_covers_rule(upper: str, lower: str) -> bool:
    """Whether an expanded upper rule covers everything an expanded lower rule does."""
    if upper == lower:
        return True
    if not is_glob(lower):
        return covers(upper, lower)
    if not is_glob(upper):
        return lower.startswith(upper.rstrip("/") + "/")
    return False
