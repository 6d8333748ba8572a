"""What a brokered write may change: pure decisions on paths, nothing executed.

A path is judged by its name, when the call is made, in every run at once: a
protected name is refused wherever and whenever it appears, however the tree
was rearranged meanwhile (by this run, another run or the user), and nothing
has to exist beforehand (no placeholder) or be walked.

- ``protected(path)``: the protected set's names at any depth of a writable
  root (``agent_sandbox.protected.ANY_DEPTH``: shells, editors, agents, tools
  that run their configuration), the home folder's own entries
  (``HOME_ONLY``) and the settings' ``denyWrite`` rules.
- ``python_start(path)``: whether ``path`` is Python start-up (``.pth`` files,
  ``sitecustomize``, ``pyvenv.cfg``, a virtualenv's interpreters and activate
  scripts, bytecode) or a folder on the way to it (a site folder,
  ``__pycache__``, ``lib/python3.12``, a virtualenv's ``lib`` and ``bin``), and
  which folder decides: it may be written only where a sandboxed run made that
  folder (``files.Files``), so that a virtualenv made in a run stays the
  command's to build on, and one the user made stays the user's.
- ``git_container(path)``: for git metadata that decides what git runs
  (``GIT_EXECUTABLE`` in every git directory, and ``.git`` files), the folder
  it belongs to. A run may build a repository of its own (every folder it made
  is recorded by the broker; the sweep judges the repository after the run),
  and may never create, change, move or remove that metadata in any other:
  the user's, another run's, one made while it runs.
- ``carries(path)``: whether a folder renamed to or from ``path`` would bring
  content under a protected name without writing it there (a folder renamed to
  ``.git`` or to the first part of a protected entry, ``.config`` for
  ``.config/fish``).
"""

from __future__ import annotations

import posixpath

from agent_sandbox import protected

from ..bwrap.globs import covers, under

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

_GIT = protected.GIT_DIR
_META = {name for name, _, _ in protected.GIT_EXECUTABLE}
_GIT_DIRS_INSIDE = ("modules", "worktrees")
_LIB = ("lib", "lib64", "Lib")
# a virtualenv root's own folders (decided by that root when it holds pyvenv.cfg)
_VENV_PARTS = frozenset((*_LIB, "bin", "Scripts"))
PYCACHE = "__pycache__"


class Judge:
    """The decisions of one run: its writable roots, home and ``denyWrite`` rules."""

    def __init__(self, roots: Sequence[str], home: str, deny_write: Sequence[str] = (),
                 opened: Sequence[str] = (), kept: Sequence[str] = (),
                 reads: ReadRules | None = None,
                 shadows: Sequence[tuple[str, frozenset[str]]] = ()) -> None:
        self.roots = tuple(r.rstrip("/") or "/" for r in roots)
        # folders the caller opens inside the protected set (an agent client's own
        # state under ``sandbox agent``): what they hold is judged from them down
        self.opened = tuple(o.rstrip("/") or "/" for o in opened)
        self.home = home.rstrip("/") or "/"
        self.names: dict[str, str] = {}  # last component -> its entry (any depth)
        self.multi: dict[str, list[tuple[str, str]]] = {}  # last component -> (entry, kind)
        self.firsts: set[str] = set()  # first components of multi-part entries
        for entry, kind, _ in protected.ANY_DEPTH:
            parts = entry.split("/")
            self.multi.setdefault(parts[0], []).append((entry, kind))
            if len(parts) > 1:
                self.firsts.add(parts[0])
        self.home_entries = [(posixpath.join(self.home, e), k) for e, k, _ in protected.HOME_ONLY]
        # the home entries by their first name below the home folder (a quick look-up)
        self._home_by_first: dict[str, list[tuple[str, str]]] = {}
        for e, k, _ in protected.HOME_ONLY:
            self._home_by_first.setdefault(e.split("/")[0], []).append(
                (posixpath.join(self.home, e), k))
        # what marks a folder as a project's or a virtualenv's root (not to be moved)
        # (a repository, a virtualenv or a connected repository's policy made in its
        # place would be taken for it; the protected set's other names cannot be made
        # again anywhere, so a folder holding them may move)
        self.root_names = (_GIT, "pyvenv.cfg", ".sandbox")
        self.deny_write = tuple(deny_write)
        # paths the planner keeps from being created (the runtime's own, the tools on
        # PATH, what a git configuration names): each with everything below it
        self.kept = frozenset(k.rstrip("/") for k in kept)
        # what may not be read, judged at open (the settings' globs): ``reads``
        self.reads = reads if reads is not None else ReadRules(())
        # relative PATH entries and the programs a name there would shadow
        self.shadows = tuple(shadows)
        # folders of the run's own that end with it (``bwrap.private_tmp``): nothing
        # planted there is met by a host tool, so no protected name is kept there
        self.scratch: tuple[str, ...] = ()

    def in_roots(self, path: str) -> bool:
        return any(under(path, r) for r in self.roots)

    def protected(self, path: str, removing: bool = False) -> str | None:
        """Why writing ``path`` (creating, changing, moving or removing it) is refused,
        or None. The git metadata rule is ``git_container``'s. ``removing``: the
        name is removed, which plants nothing: the names the protected set keeps
        at any depth of the tree may go (``rm -rf node_modules`` with a package's
        ``.vscode`` in it); the home folder's entries, ``denyWrite`` and the
        runtime's own paths may not."""
        base = next((o for o in self.opened if under(path, o)), None)
        if under(path, self.home) and path != self.home:
            first = path[len(self.home.rstrip("/")) + 1:].split("/", 1)[0]
            for entry, kind in self._home_by_first.get(first, ()):
                if base is not None and under(base, entry):
                    continue
                if path == entry or (kind == "d" and under(path, entry)):
                    return f"{entry} is protected (the home folder's start-up and configuration)"
        for rule in self.deny_write:
            if covers(rule, path):
                return f"{path} is covered by denyWrite {rule}"
        if not self.in_roots(path):
            return None
        parts = path.strip("/").split("/")
        if removing and parts[-1] in protected.REMOVAL_GUARDED:
            return (f"{path} is protected: its settings switch something off (npm's "
                    "ignore-scripts), which removing it would switch on again")
        start = len(base.strip("/").split("/")) if base not in (None, "/") else 0
        for i, part in enumerate(() if removing else parts):
            if i < start:
                continue
            if part == "node_modules" and i < len(parts) - 2:
                # below it, a package's files (its .env, its .vscode): no tool starts
                # there, and npm fails a whole install over one name it cannot write
                break
            for entry, kind in self.multi.get(part, ()):
                want = entry.split("/")
                got = parts[i:i + len(want)]
                if got == want and (kind == "d" or len(parts) == i + len(want)):
                    return f"/{'/'.join(parts[:i + len(want)])} is protected ({entry})"
        if self.shadows and not removing:
            head, _, name = path.rpartition("/")
            for rel, names in self.shadows:
                if name in names and (rel == "." or head.endswith("/" + rel)):
                    return (f"{path} would stand for the program {name} in a shell whose "
                            f"PATH has the relative entry {rel}")
        if self.kept:
            at = path
            while at not in ("", "/"):
                if at in self.kept:
                    return f"{at} is protected (read-only in every sandbox, made or not)"
                at = posixpath.dirname(at)
        return None

    def git_container(self, path: str) -> str | None:
        """The folder whose git metadata ``path`` is (a git directory, or the folder
        a ``.git`` file sits in), or None when ``path`` is no such metadata."""
        if not self.in_roots(path):
            return None
        parts = path.strip("/").split("/")
        if parts[-1] == _GIT:
            return "/" + "/".join(parts[:-1])
        try:
            top = parts.index(_GIT)
        except ValueError:
            return None
        # below .git: the git directory is the nearest folder that holds the entry,
        # .git itself or a submodule's or worktree's folder inside it
        for i in range(len(parts) - 1, top, -1):
            if parts[i] in _META and (i == top + 1 or parts[top + 1] in _GIT_DIRS_INSIDE):
                return "/" + "/".join(parts[:i])
        return None

    def python_start(self, path: str) -> str | None:
        """How ``path`` belongs to Python's start-up, by its name: 'f' a start-up
        file or a folder on the way to one, decided by its parent folder; 'c'
        bytecode in ``__pycache__``, decided by the folder above the cache (the
        source's); 'm' a package Python imports from the working folder
        (``protected.cwd_module``), decided by the folder above it; 't' and 'u'
        a module or package named like the standard library's
        (``protected.stdlib_shadow``), start-up only at the top of a project;
        'v' one of a virtualenv root's own folders (``lib``, ``bin``), decided
        by its parent when that holds ``pyvenv.cfg``; None for any other."""
        if not self.in_roots(path):
            return None
        head, _, name = path.rstrip("/").rpartition("/")
        module = protected.cwd_module(path)
        if module is not None:
            return module
        kind = protected.python_kind(path, "f")
        if kind == "c":
            return "c"
        if kind is not None or name in protected.PYTHON_SITE_DIRS or name == PYCACHE:
            return "f"  # bytecode too: whatever its name, it is the folder's to decide
        if name.startswith(("python", "pypy")) and head.rpartition("/")[2] in _LIB:
            return "f"
        return "v" if name in _VENV_PARTS else protected.stdlib_shadow(path)

    def repository(self, path: str) -> str | None:
        """The outermost ``.git`` folder ``path`` lies in (or is), or None: whose
        maker decides whether a run may change git metadata there (a submodule's
        or worktree's git folder made inside another's ``.git`` is that other's)."""
        parts = path.strip("/").split("/")
        try:
            top = parts.index(_GIT)
        except ValueError:
            return None
        return "/" + "/".join(parts[:top + 1])

    def carries(self, path: str) -> bool:
        """A folder renamed to (or from) ``path`` would put what it holds under a
        protected name, or take it out from under one."""
        name = path.rstrip("/").rsplit("/", 1)[-1]
        if name in self.firsts or name == _GIT:
            return True
        return any(entry.startswith(path.rstrip("/") + "/") for entry, _ in self.home_entries)


class ReadRules:
    """What no command may read, judged by the path an open really reaches, when
    it is made: the glob rules of ``denyRead`` (unless an ``allowRead`` rule
    covers the path) and of the credential files (always). Nothing is walked
    before the run, and a file that appears meanwhile is judged like the rest
    (``reads.open``). Literal rules stay hidden by the plan's mounts."""

    def __init__(self, deny: Sequence[str], allow: Sequence[str] = (),
                 creds: Sequence[str] = (), roots: Sequence[str] = ("/",)) -> None:
        # a ``**/`` rule looks below these folders only (the working folder and the
        # writable roots, as srt's search does): ``**/*.pem`` names the project's
        # keys, not the system's certificates
        self.roots = tuple(roots)
        self.deny = tuple((r, _needle(r)) for r in deny)
        self.allow = tuple(allow)
        self.creds = tuple((r, _needle(r)) for r in creds)
        # a rule that names folders above the last name (``**/secrets/*``, an
        # absolute glob): renaming a folder can take a file out from under it
        self.structural = any(not _last_name_only(r) for r in (*deny, *creds))

    def __bool__(self) -> bool:
        return bool(self.deny or self.creds)

    def denied(self, path: str) -> str | None:
        """Why ``path`` may not be read, or None."""
        inside: bool | None = None
        for rules, what in ((self.creds, "is a credential file"),
                            (self.deny, "is covered by denyRead")):
            for rule, needle in rules:
                if needle not in path or not covers(rule, path):
                    continue
                if rule.startswith("**/"):
                    if inside is None:
                        inside = any(under(path, r) for r in self.roots)
                    if not inside:
                        continue
                if rules is self.deny and any(covers(a, path) for a in self.allow):
                    continue
                return f"{path} {what}: {rule}"
        return None


def _needle(rule: str) -> str:
    """The longest literal run of a glob, without its slashes: a path the rule
    covers always holds it (a quick refusal of most paths before the pattern)."""
    runs, cur = [], ""
    for c in rule:
        if c in "*?[]{}\\":
            runs.append(cur)
            cur = ""
        else:
            cur += c
    return max([*runs, cur], key=len).strip("/")


def _last_name_only(rule: str) -> bool:
    """``**/NAME-GLOB``: a rule that looks at one name only (and what lies below it)."""
    return rule.startswith("**/") and "/" not in rule[3:] and "**" not in rule[3:]
