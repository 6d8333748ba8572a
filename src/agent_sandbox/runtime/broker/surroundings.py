"""What a written path's surroundings make of it, read from the tree when the call is made.

A name alone does not say everything a host tool will run. These rules look at
the folders around the path, as they are at the moment of the call (never a
walk of the tree, never a list taken before the run), so a repository or a
virtualenv that appears while a run runs is judged at once:

- ``git_dir_entry``: a folder git takes for a git directory whatever its name
  (a bare repository, a submodule's or worktree's git directory moved out, a
  ``.git`` file's target): its ``config``, ``config.worktree``, ``commondir``
  and ``hooks/``, as ``judge.git_container`` decides for those below ``.git``;
- ``named_by_git``: a path the configuration of a repository around it names
  (``core.hooksPath``, ``core.fsmonitor``, ``include.path``: ``gitmeta``),
  found by looking up from the path for ``.git`` entries;
- ``imported_at_start``: a module a ``.pth`` file of its site folder imports at
  every start (setuptools' ``distutils-precedence.pth`` imports
  ``_distutils_hack``): the site folder, whose maker decides.

The git rules answer the reason to refuse, or None. What a configuration or a site
folder says is read once per identity of the files it comes from (a cache the
next change of those files misses).
"""

from __future__ import annotations

import os
import posixpath

from agent_sandbox import protected

from ..bwrap import gitmeta
from ..bwrap.fsview import RealFs
from ..bwrap.globs import under
from .hook_scripts import HookScripts, identity, matches

_EXEC = frozenset(name for name, _, _ in protected.GIT_EXECUTABLE)
_HOOKS = "hooks"


def looks_like_git_dir(folder: int) -> bool:
    """Whether git may take the folder open at ``folder`` for a git directory."""
    for mark in gitmeta.GIT_DIR_MARKS:
        try:
            os.stat(mark, dir_fd=folder, follow_symlinks=False)
            return True
        except OSError:
            continue
    return False


class Surroundings:
    """The rules of one run (its home folder, for ``~/`` in git's values)."""

    def __init__(self, home: str) -> None:
        self.home = home
        self._named: dict[tuple[str, str], tuple[tuple[object, ...], list[str]]] = {}
        self._imports: dict[str, tuple[tuple[object, ...], frozenset[str]]] = {}
        self._links: dict[str, tuple[tuple[object, ...] | None, list[str]]] = {}
        self.scripts = HookScripts(home)

    @staticmethod
    def git_dir_entry(name: str, folder: int, parent_name: str) -> str | None:
        """For the name ``name`` in the folder open at ``folder`` (itself named
        ``parent_name``): 'here' when it is git metadata of that folder as a git
        directory, 'above' when it is a hook of the folder above, None otherwise."""
        if name in _EXEC and looks_like_git_dir(folder):
            return "here"
        if parent_name == _HOOKS:
            try:
                up = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=folder)
            except OSError:
                return None
            try:
                return "above" if looks_like_git_dir(up) else None
            finally:
                os.close(up)
        return None

    def named_by_git(self, path: str, above: bool = False) -> str | None:
        """Why a repository's configuration makes ``path`` something git runs or
        reads, looking up from it for repositories (their ``.git``, folder or file);
        ``above``: or a folder above what it names (a folder moved there or away
        changes what is named)."""
        fs = RealFs()
        at = posixpath.dirname(path)
        while True:
            dotgit = posixpath.join(at, protected.GIT_DIR)
            kind = fs.lkind(dotgit)
            if kind is not None:
                gitdir = dotgit if kind == "d" else gitmeta.gitdir_of_file(fs, dotgit)
                if gitdir is not None:
                    why = self._named_in(fs, gitdir, at, path, above)
                    if why:
                        return why
            if at == "/":
                return None
            at = posixpath.dirname(at)

    def _named_in(self, fs: RealFs, gitdir: str, worktree: str, path: str,
                  above: bool) -> str | None:
        configs = [posixpath.join(gitdir, "config"), posixpath.join(gitdir, "config.worktree")]
        common = gitmeta.commondir_of(fs, gitdir)
        if common is not None:
            configs.append(posixpath.join(common, "config"))
        # the user's own configuration too: git takes a relative value of it (a
        # core.hooksPath of .githooks) in each repository's work tree
        configs += [posixpath.join(self.home, ".gitconfig"),
                    posixpath.join(self.home, ".config", "git", "config")]
        hook_dirs = [posixpath.join(common or gitdir, "hooks")]
        for config in configs:
            for named in self._names(fs, config, worktree):
                if under(path, named) or (above and under(named, path)):
                    return f"{path} is named by {config} (git runs or reads what is there)"
                hook_dirs.append(named)  # a core.hooksPath among them
        for hooks in hook_dirs:
            for target in self._hook_links(hooks):
                if under(path, target) or (above and under(target, path)):
                    return f"{path} is what a hook in {hooks} links to (git runs it)"
            why = self._hooks_run(hooks, worktree, path, above)
            if why:
                return why
        return None

    def _hooks_run(self, hooks: str, worktree: str, path: str, above: bool) -> str | None:
        """Why the hooks in ``hooks`` run ``path`` (``hook_scripts``): a path their
        text names, or a module at the work tree's top that Python, run there by a
        hook, imports before the installed one of its name."""
        run = self.scripts.reads(hooks, worktree)
        for pattern in run.paths:
            if matches(path, pattern, above):
                return f"{path} is run by a hook in {hooks} (its text names {pattern})"
        top = worktree.rstrip("/")
        if run.modules and (
                (posixpath.dirname(path) == top and (protected.imported_as(
                    path, run.modules) or (above and posixpath.basename(path) in run.modules)))
                or (posixpath.dirname(posixpath.dirname(path)) == top
                    and protected.imported_as(path, run.modules) == "package")):
            return f"{path} would be imported in place of an installed module when a hook " \
                f"in {hooks} runs Python at the top of {worktree}"
        for folder in run.path_dirs:
            if (posixpath.dirname(path) == folder and posixpath.basename(path) in run.programs
                    ) or (above and under(folder, path)):
                return f"{path} would stand for a program a hook in {hooks} runs (its PATH " \
                    f"puts {folder} first)"
        return None

    def _hook_links(self, hooks: str) -> list[str]:
        """Where the links in the folder ``hooks`` lead (a hook installed as a link to
        a script of the work tree runs that script), read again when the folder
        changes."""
        ident = identity(hooks)
        cached = self._links.get(hooks)
        if cached is not None and cached[0] == ident:
            return cached[1]
        targets: list[str] = []
        if ident is not None:
            try:
                with os.scandir(hooks) as entries:
                    for e in entries:
                        if e.is_symlink():
                            link = os.readlink(e.path)
                            targets.append(posixpath.normpath(posixpath.join(hooks, link)))
            except OSError:
                pass
        self._links[hooks] = (ident, targets)
        return targets

    def _names(self, fs: RealFs, config: str, worktree: str) -> list[str]:
        ident = identity(config)
        if ident is None:
            return []
        key = (config, worktree)
        cached = self._named.get(key)
        if cached is not None and cached[0] == ident:
            return cached[1]
        try:
            names = [p for p, _ in gitmeta.named_paths(fs, config, worktree, home=self.home)]
        except (gitmeta.GitMetaError, OSError, RecursionError):
            names = [worktree]  # a configuration that cannot be read: its whole tree
        self._named[key] = (ident, names)
        return names

    def imported_at_start(self, path: str) -> str | None:
        """The site folder whose ``.pth`` files import ``path`` at every start (its
        top-level name, in a folder named as a site folder), or None."""
        parts = path.split("/")
        for i in range(len(parts) - 2, 0, -1):
            if parts[i] in protected.PYTHON_SITE_DIRS:
                site = "/".join(parts[:i + 1])
                module = parts[i + 1].split(".", 1)[0]
                return site if module and module in self._modules(site) else None
        return None

    def _modules(self, site: str) -> frozenset[str]:
        try:
            names = [n for n in os.listdir(site) if n.endswith(".pth")]
        except OSError:
            return frozenset()
        idents = tuple(identity(posixpath.join(site, n)) for n in sorted(names))
        ident = (identity(site), idents)
        cached = self._imports.get(site)
        if cached is not None and cached[0] == ident:
            return cached[1]
        words: set[str] = set()
        fs = RealFs()
        for n in names:
            words.update(protected.pth_imports(fs.read(posixpath.join(site, n), 1 << 16)))
        self._imports[site] = (ident, frozenset(words))
        return self._imports[site][1]
