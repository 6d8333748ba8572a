"""What a call reaches besides the name it gives, judged as that name is.

The broker judges a call by the place it names (``files.Files._check``); a call
can also reach a file another way, and each of those ways is judged here as a
write of what it reaches:

- a link followed at the last name: writing through ``.git/hooks/pre-commit``
  to the script it links to writes the hook, so the link's own name is judged
  too (``_reach``);
- a descriptor of the caller's opened again for writing (``/proc/self/fd/N``)
  or changed through (``fchmod``): judged as the file it leads to, by name
  (``_existing``);
- a folder that becomes a git folder (renamed to ``.git``, or a mark such as
  ``HEAD`` made in it): its configuration republished as judged copies, so a
  descriptor opened before, when it was an ordinary file, writes a file no git
  reads (``_republish``);
- a name inside a virtualenv no sandboxed run made (its ``pyvenv.cfg``, not its
  folders, says who made it: ``python3 -m venv`` keeps the folders a run made
  there before): everything in it is what its interpreter, ``pip`` and
  ``activate`` run, not only its start-up (``_venv``);
  and a site folder's start-up, or a program in the ``bin/`` of a folder named as
  virtualenvs are, made before its virtualenv is: ``python3 -m venv`` made there
  later keeps what the folder holds (``_site_outside_venv``, ``_bin_before_venv``);
- a folder moved or removed: what it holds right inside (a repository's ``.git``,
  a virtualenv of the user's under a name virtualenvs are given) would be taken
  for the user's if made again in its place (``_project_root``).

And Python's start-up (``_python``): decided by who made the folder that decides
it, but for a module Python imports from the folder it is run in (the standard
library's names, ``readline``, ``venv``), which no folder's maker makes safe:
refused but inside a package or a site folder, where no one runs Python.

``Files`` inherits these; the decisions they call are its own.
"""

from __future__ import annotations

import errno
import os
import stat

from agent_sandbox import protected

from . import gitfolders, gitwrites
from .at_calls import holds
from .made import marked_file
from .refused import Refused
from .target import Place, Target, locate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .judge import Judge

# the names ``python3 -m venv`` is given (its documentation's and the tutorials')
VENV_NAMES = frozenset({".venv", "venv", "env", "virtualenv", ".virtualenv"})
# the folders of a virtualenv (below its root) that hold what it runs
_VENV_SUBS = frozenset({"bin", "Scripts", "lib", "lib64", "Lib", "include", "Include"})


def venv_like(name: str) -> bool:
    """A folder name virtualenvs are given (``VENV_NAMES``, any with ``venv`` in it or
    ending in ``env``: ``.venv-3.11``, ``myenv``), or direnv's layout's
    (``python-3.11.7``)."""
    low = name.lower()
    return low in VENV_NAMES or "venv" in low or low.endswith("env") or \
        (low.startswith(("python-", "pypy-")) and low[-1:].isdigit())


class Reached:
    """The routes above, for ``files.Files`` (which gives the decisions)."""

    judge: Judge

    def _check(self, t: Target, place: Place, *, moved: os.stat_result | None = None,
               leaving: bool = False, removing: bool = False) -> None:
        raise NotImplementedError

    def _sandboxed_path(self, path: str, dir_fd: int | None = None) -> bool:
        raise NotImplementedError

    def _git_meta(self, place: Place) -> bool:
        raise NotImplementedError

    def _sandboxed(self, folder: int) -> bool:
        raise NotImplementedError

    # moving a folder reaches what it holds

    def _python(self, place: Place, kind: str) -> None:
        """Refuse Python's start-up at ``place`` unless a sandboxed run made the
        folder that decides it (``Judge.python_start``)."""
        if kind == "v" and not holds(place.folder, "pyvenv.cfg"):
            return
        self._site_outside_venv(place)
        decider = place.folder
        if kind in ("c", "m", "u"):
            decider = os.open("..", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=place.folder)
        try:
            if kind in "tmu" or (kind == "f" and protected.cwd_module(place.path)):
                # imported by Python run in that folder, whoever made it; but inside a
                # package or a site folder, where no one runs Python, it is code
                if holds(decider, "__init__.py") or any(
                        part in protected.PYTHON_SITE_DIRS for part in
                        os.readlink(f"/proc/self/fd/{decider}").split("/")):
                    return
            elif self._sandboxed(decider):
                return
        finally:
            if decider != place.folder:
                os.close(decider)
        where = place.parent.rsplit("/", 1)[0] if kind in ("c", "m", "u") else place.parent
        raise Refused(f"{place.path} is Python start-up of {where or '/'}, which no sandboxed "
                      "run made (what its interpreter runs is not the sandbox's to change)")

    def _linked(self, place: Place, target: str | None = None) -> None:
        """Refuse a link, hard link or node made at ``place`` where what it stands
        for would be read unjudged: git metadata, a mark that would make its folder
        a git folder, a package Python imports from the working folder, a folder
        of a protected name, a folder of a virtualenv to be (``.venv/lib``, but a
        link to its sibling: ``target``, the link's text, ``lib64 -> lib``)."""
        why = gitfolders.by_reference(place) or gitfolders.becomes_git_dir(place)
        if why:
            raise Refused(why)
        if place.name in protected.CWD_MODULES and self.judge.in_roots(place.path):
            self._python(place, "f")  # a link to a package where Python imports it
        if place.name in self.judge.firsts and self.judge.in_roots(place.path):
            raise Refused(f"{place.path} would lead to files under a protected name "
                          f"({place.name}/...): never a link")
        if place.name in _VENV_SUBS and venv_like(place.parent.rsplit("/", 1)[-1]) and \
                target not in _VENV_SUBS and place.folder >= 0 and \
                not holds(place.folder, "pyvenv.cfg"):  # python3 -m venv's lib64 -> lib
            raise Refused(f"{place.path} would be a folder of {place.parent}, which holds no "
                          "pyvenv.cfg yet: never a link (a virtualenv made there later "
                          "would keep it)")

    def _reach(self, t: Target, path: str, *, follow: bool) -> Place:
        """``locate``, each link followed at the last name judged as a write of its
        own name: writing through ``.git/hooks/pre-commit`` to the script it links
        to writes the hook."""
        for _ in range(40):
            place = locate(t, path, follow=False)
            st = place.lstat() if follow else None
            if st is None or not stat.S_ISLNK(st.st_mode):
                return place
            try:
                self._check(t, place)
                link = os.readlink(place.name, dir_fd=place.folder)
            finally:
                place.close()
            path = link if link.startswith("/") else place.parent.rstrip("/") + "/" + link
        raise OSError(errno.ELOOP, "too many levels of symbolic links")

    def _republish(self, place: Place, *, inside: bool = False) -> None:
        """A folder just became a git folder (``place`` names its mark, or, ``inside``,
        the folder itself): its configuration republished (``gitwrites.republish``)."""
        folder = os.open(place.name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW
                         | os.O_CLOEXEC, dir_fd=place.folder) if inside else place.folder
        try:
            why = gitwrites.republish(folder, place.path if inside else place.parent)
        finally:
            if inside:
                os.close(folder)
        if why:
            raise Refused(why)

    def _top(self, path: str) -> str | None:
        """The writable root ``path`` is in (the deepest), or None."""
        return max((r for r in self.judge.roots if path.startswith(r.rstrip("/") + "/")),
                   key=len, default=None)

    def _venv(self, t: Target, place: Place) -> None:
        """Refuse changing anything inside a virtualenv (a folder holding
        ``pyvenv.cfg``) that no sandboxed run made: its programs, packages and
        settings are what its interpreter, ``pip`` and ``activate`` run."""
        path = place.path
        top = self._top(path)
        if top is None:
            return
        root = f"/proc/{t.pid}/root"
        at = path.rsplit("/", 1)[0]
        while at.startswith(top) and len(at) >= len(top):
            if os.path.lexists(f"{root}{at}/pyvenv.cfg"):
                if not marked_file(f"{root}{at}/pyvenv.cfg"):
                    raise Refused(f"{path} is inside the virtualenv {at}, which no sandboxed "
                                  "run made (what its interpreter and activate run)")
                return
            if at == top:
                return
            at = at.rsplit("/", 1)[0] or "/"

    def _project_root(self, place: Place, path: str) -> None:
        """Refuse moving or removing a folder that holds, right inside it, a protected
        name (a repository's ``.git``, ``.sandbox``, ``.vscode``) or a virtualenv's
        ``pyvenv.cfg``, unless a sandboxed run made it, or a virtualenv of the user's
        under a name virtualenvs are given (``backend/.venv``): a repository or
        virtualenv made in its place would be taken for the user's."""
        try:
            fd = os.open(place.name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=place.folder)
        except OSError:
            return
        try:
            held = next((n for n in self.judge.root_names if holds(fd, n)), None)
            if held is not None and not self._sandboxed(fd):
                raise Refused(f"{path} holds {held} and no sandboxed run made it (what is made "
                              "in its place would be taken for it)")
            venv = _users_venv(fd)
            if venv is not None:
                raise Refused(f"{path} holds the virtualenv {venv}, which no sandboxed run "
                              "made (one made in its place would be taken for it)")
        finally:
            os.close(fd)

    def _bin_before_venv(self, t: Target, place: Place, folder: bool = False) -> None:
        """Refuse a name made in a folder named as virtualenvs are (``venv_like``)
        that holds no ``pyvenv.cfg`` yet, below its ``bin/`` (``Scripts/``), or, but
        a folder, below its ``lib/`` (``Lib/``, ``lib64/``, ``include/``):
        ``python3 -m venv`` made there later keeps it; activating puts ``bin/``
        first on PATH (a ``git`` there runs for git), and its site folder's modules
        and entry points (a pytest plugin) are the user's packages. ``python3 -m
        venv`` itself makes its folders before ``pyvenv.cfg``, and its programs and
        packages after."""
        parts = place.path.strip("/").split("/")
        for i in range(len(parts) - 2):
            part = parts[i + 1]
            if not venv_like(parts[i]) or part not in _VENV_SUBS or (
                    folder and part not in ("bin", "Scripts")):
                continue
            root = "/" + "/".join(parts[:i + 1])
            if not os.path.lexists(f"/proc/{t.pid}/root{root}/pyvenv.cfg"):
                raise Refused(f"{place.path} is in {root}/{part}, which holds no pyvenv.cfg "
                              "yet (a virtualenv made there later would keep it)")

    def _venv_moved(self, src: Place, dst: Place, moved: os.stat_result) -> None:
        """Refuse a folder moved to where a virtualenv would keep what it holds: to a
        name virtualenvs are given (``mv staging .venv``) while it holds their
        folders and no ``pyvenv.cfg``, or to one of those folders of a folder so
        named that holds none (``bin_before_venv``, for a whole folder)."""
        if not stat.S_ISDIR(moved.st_mode) or dst.folder < 0:
            return
        if dst.name in _VENV_SUBS and venv_like(dst.parent.rsplit("/", 1)[-1]) \
                and not holds(dst.folder, "pyvenv.cfg"):
            raise Refused(f"{dst.path} would be a folder of {dst.parent}, which holds no "
                          "pyvenv.cfg yet (a virtualenv made there later would keep it)")
        if not venv_like(dst.name):
            return
        fd = os.open(src.name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=src.folder)
        try:
            if not holds(fd, "pyvenv.cfg") and any(holds(fd, n) for n in _VENV_SUBS):
                raise Refused(f"{src.path} holds a virtualenv's folders and no pyvenv.cfg: "
                              f"moved to {dst.path}, a virtualenv made there later would "
                              "keep them")
        finally:
            os.close(fd)

    def _existing(self, t: Target, path: str) -> None:
        """Refuse writing the file at ``path`` (reached through a descriptor of the
        caller's) unless writing it by name would be allowed."""
        place = locate(t, path, follow=False)
        try:
            self._check(t, place)
            if place.name in gitwrites.CONFIGS and self._git_meta(place):
                raise Refused(f"{place.path} is written in place: git writes its "
                              "configuration through a lock file, whose text is judged")
        finally:
            place.close()

    def _site_outside_venv(self, place: Place) -> None:
        """Refuse Python start-up in a site folder (``lib/pythonX.Y/site-packages``,
        ``Lib/site-packages``) whose virtualenv root holds no ``pyvenv.cfg`` yet,
        whatever the root is named (tox's ``.tox/py311``, any name ``python3 -m venv``
        is given): a virtualenv made there later keeps it and runs it. But in pip's
        isolated build environments (``pip-build-env-*/overlay``, a prefix with a site
        folder and no ``pyvenv.cfg``, in the temporary folder), which no one keeps."""
        parts = place.parent.rsplit("/", 5)
        if parts[-1] not in protected.PYTHON_SITE_DIRS or place.folder < 0 or \
                (len(parts) == 6 and parts[-5].startswith("pip-build-env-")):
            return
        up = "../.." if parts[-2] == "Lib" else "../../.."
        if parts[-2] != "Lib" and not (parts[-2].startswith("python") and
                                       parts[-3] in ("lib", "lib64")):
            return
        try:
            root = os.open(up, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=place.folder)
        except OSError:
            return
        try:
            if not os.path.lexists(f"/proc/self/fd/{root}/pyvenv.cfg"):
                raise Refused(f"{place.path} is Python start-up of a site folder outside any "
                              "virtualenv (one made there later would run it)")
        finally:
            os.close(root)


# how deep below a moved folder the user's virtualenvs are looked for (``app/backend/
# services/.venv``), and the folders never looked into (no virtualenv is kept there)
_VENV_DEPTH = 4
_NOT_INTO = frozenset({"node_modules", ".git", "__pycache__", "site-packages", ".tox"})


def _users_venv(fd: int) -> str | None:
    """The first virtualenv below the folder open at ``fd`` (up to ``_VENV_DEPTH``
    levels, whatever its name: ``app/py311``) that no sandboxed run made."""
    for n in sorted(VENV_NAMES):
        if holds(fd, f"{n}/pyvenv.cfg") and not marked_file(f"/proc/self/fd/{fd}/{n}/pyvenv.cfg"):
            return n
    try:
        for folder, dirs, files, _ in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            depth = folder.count("/")
            if "pyvenv.cfg" in files and depth \
                    and not marked_file(f"/proc/self/fd/{fd}/{folder}/pyvenv.cfg"):
                return folder[2:]
            if depth >= _VENV_DEPTH or "pyvenv.cfg" in files:
                dirs.clear()  # not below a virtualenv either
            else:
                dirs[:] = [d for d in dirs if d not in _NOT_INTO]
    except OSError:
        return None
    return None

