"""Install rendered files on a host: the one implementation the Ansible roles
(``plugins/modules/agent_sandbox_files.py``, through ``plugins/module_utils``)
and the pyinfra deploy (which uploads this file and runs it) share.

It runs on the host's own Python 3 before agent-sandbox is installed there, so it
imports nothing but the standard library and stays a single file.

Many targets sit in folders a user owns (``~/.codex``, a repository's
``.claude``). Root must not be steered by what that user made there: every folder
is opened from ``/`` one name at a time without following links, a link is
followed only when root made it in a root-owned folder (macOS's ``/etc``), only
folders this run creates are given an owner, and a file lands by ``rename`` over
whatever had its name (a link is replaced, never written through). Everything is
compared before anything is written: a JSON file that does not parse, content
that does not match its SHA-256, an unknown owner or a refused folder fails and
changes nothing. Only files whose bytes, mode or ownership differ are written.

Command line (the pyinfra deploy)::

    python3 -I rendered_files.py SPEC.json [--check] [--diff]

``SPEC.json`` holds the parameters of ``install`` (``files`` as the renderer's
filter lists them, and optionally ``root``, ``owner``, ``group``,
``home_user_owns_files``, ``folder_mode``); the result is printed as JSON followed by a
line ``changed`` or ``unchanged``, and the exit status is 1 when it failed.
"""

from __future__ import annotations

import base64
import errno
import grp
import hashlib
import json
import os
import pwd
import secrets
import stat
import subprocess
import sys
from typing import Any

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40
READ_CAP = 16 << 20  # a larger file on the host is rewritten without being read


class Refused(Exception):
    """A target that cannot be installed safely or as asked."""


class Written(Exception):
    """A failure after some files were written (listed)."""

    def __init__(self, msg: str, written: list[str]) -> None:
        super().__init__(msg)
        self.written = written


class Walk:
    """Folders opened from ``/`` without following links a user could have made."""

    def __init__(self) -> None:
        self.created: list[str] = []

    def open(self, path: str, uid: int, gid: int, mode: int, create: bool) -> int | None:
        """A descriptor of folder ``path``, its missing folders made when ``create``
        (owned by ``uid``:``gid``, ``mode``); None when missing and not ``create``."""
        parts = [p for p in path.split("/") if p]
        walked: list[str] = []
        fd = os.open("/", DIR_FLAGS)
        links = 0
        try:
            while parts:
                name = parts.pop(0)
                if name in (".", ".."):
                    raise Refused(f"{path}: '{name}' in a path")
                try:
                    nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        return None
                    nfd = self._make(fd, name, uid, gid, mode, "/" + "/".join([*walked, name]))
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = self._link(fd, name, path)
                    links += 1
                    if links > MAX_LINKS:
                        raise Refused(f"{path}: too many links") from None
                    here = "/" + "/".join(walked)
                    resolved = os.path.normpath(os.path.join(here, target))
                    parts = [p for p in resolved.split("/") if p] + parts
                    walked = []
                    os.close(fd)
                    fd = os.open("/", DIR_FLAGS)
                    continue
                os.close(fd)
                fd = nfd
                walked.append(name)
            out, fd = fd, -1
            return out
        finally:
            if fd >= 0:
                os.close(fd)

    def _make(self, fd: int, name: str, uid: int, gid: int, mode: int, shown: str) -> int:
        try:
            os.mkdir(name, 0o700, dir_fd=fd)
        except FileExistsError:
            return os.open(name, DIR_FLAGS, dir_fd=fd)
        nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
        os.fchown(nfd, uid, gid)
        os.fchmod(nfd, mode)
        self.created.append(shown)
        return nfd

    @staticmethod
    def _link(fd: int, name: str, path: str) -> str:
        """The target of link ``name`` in folder ``fd``, if root made it there."""
        st = os.lstat(name, dir_fd=fd)
        if not stat.S_ISLNK(st.st_mode):
            raise Refused(f"{path}: '{name}' is not a folder")
        if st.st_uid != 0 or os.fstat(fd).st_uid != 0:
            raise Refused(f"{path}: '{name}' is a link a user could have made; "
                          "refusing to follow it as root")
        return os.readlink(name, dir_fd=fd)


def _ids(owner: str, group: str) -> tuple[int, int]:
    try:
        pw = pwd.getpwnam(owner)
    except KeyError:
        raise Refused(f"no user '{owner}' on this host") from None
    if not group:
        return pw.pw_uid, pw.pw_gid
    try:
        return pw.pw_uid, grp.getgrnam(group).gr_gid
    except KeyError:
        raise Refused(f"no group '{group}' on this host") from None


def _current(dfd: int, name: str) -> tuple[bytes | None, int, int, int] | None:
    """(bytes or None when too large, mode, uid, gid) of a regular file; None when
    missing or anything else (a link, a FIFO: replaced). A folder is refused."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise Refused(f"'{name}' is a folder")
        if not stat.S_ISREG(st.st_mode):
            return None
        data = None
        if st.st_size <= READ_CAP:
            chunks = []
            while True:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
            data = b"".join(chunks)
        return data, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    finally:
        os.close(fd)


def _write(dfd: int, name: str, data: bytes, mode: int, uid: int, gid: int) -> None:
    tmp = f".{name}.agent-sandbox-{secrets.token_hex(6)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise


def _text(data: bytes | None) -> str:
    if data is None:
        return "(too large to show)\n"
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "(binary)\n"


def under_root(root: str, path: str) -> str:
    """``path`` below the stand-in root (itself when the root is ``/``)."""
    return (root.rstrip("/") + path) if root else path


class Plan:
    """What one file should be, checked before anything is written."""

    def __init__(self, item: dict[str, Any], root: str, owner: str, group: str,
                 home_user_owns_files: bool) -> None:
        target = item["target"]
        if not target.startswith("/") or os.path.normpath(target) != target:
            raise Refused(f"{target}: not a normalised absolute path")
        self.target = target
        self.path = under_root(root, target)
        try:
            self.data = base64.b64decode(item["content_b64"], validate=True)
        except ValueError:
            raise Refused(f"{target}: content_b64 is not base64") from None
        if item.get("sha256") and hashlib.sha256(self.data).hexdigest() != item["sha256"]:
            raise Refused(f"{target}: content does not match its sha256")
        if target.endswith(".json"):
            try:
                json.loads(self.data)
            except ValueError as exc:
                raise Refused(f"{target}: not valid JSON ({exc})") from None
        try:
            self.mode = int(item["mode"], 8)
        except ValueError:
            raise Refused(f"{target}: mode {item['mode']!r} is not octal") from None
        if not 0 <= self.mode <= 0o7777:
            raise Refused(f"{target}: mode {item['mode']!r} out of range")
        home_user = item.get("owner") or None
        self.folder_uid, self.folder_gid = _ids(home_user or owner, "")
        if home_user and home_user_owns_files:
            self.uid, self.gid = self.folder_uid, self.folder_gid
        else:
            self.uid, self.gid = _ids(owner, group)


def install(params: dict[str, Any], check: bool, diff: bool) -> dict[str, Any]:
    """Compare every file first (nothing is written if one is refused), then write
    the ones that differ (none in check mode)."""
    folder_mode = int(params["folder_mode"], 8)
    plans = [Plan(item, params["root"], params["owner"], params["group"],
                  params["home_user_owns_files"]) for item in params["files"]]
    walk = Walk()
    stale: list[Plan] = []
    changes: list[dict[str, str]] = []
    diffs: list[dict[str, str]] = []
    for p in plans:
        dfd = walk.open(os.path.dirname(p.path), 0, 0, folder_mode, create=False)
        try:
            now = _current(dfd, os.path.basename(p.path)) if dfd is not None else None
        except Refused as exc:
            raise Refused(f"{p.target}: {exc}") from None
        finally:
            if dfd is not None:
                os.close(dfd)
        if now is not None and now[0] == p.data and now[1:] == (p.mode, p.uid, p.gid):
            continue
        stale.append(p)
        what = "created" if now is None else ("updated" if now[0] != p.data else "mode/owner")
        changes.append({"target": p.target, "change": what})
        if diff and (now is None or now[0] != p.data):
            diffs.append({"before_header": p.target, "after_header": p.target,
                          "before": "" if now is None else _text(now[0]),
                          "after": _text(p.data)})
    written: list[str] = []
    for p in stale if not check else []:
        try:
            dfd = walk.open(os.path.dirname(p.path), p.folder_uid, p.folder_gid, folder_mode,
                            create=True)
            if dfd is None:
                raise Refused("its folder could not be made")
            try:
                _write(dfd, os.path.basename(p.path), p.data, p.mode, p.uid, p.gid)
            finally:
                os.close(dfd)
        except (Refused, OSError) as exc:  # changed under us since the comparison
            raise Written(f"{p.target}: {exc}", written) from None
        written.append(p.target)
    out: dict[str, Any] = {"changed": bool(changes), "changes": changes,
                           "folders_created": walk.created}
    if diff:
        out["diff"] = diffs
    return out


class StepFailed(Refused):
    """A host step (``sandbox install ...``) or a runtime command that exited non-zero."""


def _folders(items: list[dict[str, Any]], root: str, check: bool) -> list[dict[str, str]]:
    """Make each folder with its mode and owner (fixing them where they differ)."""
    walk, changes = Walk(), []
    for item in items:
        path = _absolute(item["path"])
        uid, gid = _ids(item.get("owner") or "root", item.get("group") or "")
        mode = int(item.get("mode") or "0755", 8)
        full = under_root(root, path)
        fd = walk.open(full, uid, gid, mode, create=not check)
        if fd is None:
            changes.append({"target": path, "change": "folder created"})
            continue
        try:
            st = os.fstat(fd)
            if walk.created and walk.created[-1] == full:
                changes.append({"target": path, "change": "folder created"})
            elif (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) != (mode, uid, gid):
                changes.append({"target": path, "change": "folder mode/owner"})
                if not check:
                    os.fchown(fd, uid, gid)
                    os.fchmod(fd, mode)
        finally:
            os.close(fd)
    return changes


def _absolute(path: str) -> str:
    if not path.startswith("/") or os.path.normpath(path) != path:
        raise Refused(f"{path}: not a normalised absolute path")
    return path


def _links(items: list[dict[str, Any]], root: str, check: bool) -> list[dict[str, str]]:
    """Point each link at its target (a link is replaced by rename, never followed)."""
    changes = []
    for item in items:
        path, want = _absolute(item["path"]), item["target"]
        full = under_root(root, path)
        dfd = Walk().open(os.path.dirname(full), 0, 0, 0o755, create=not check)
        if dfd is None:
            changes.append({"target": path, "change": "link created"})
            continue
        try:
            name = os.path.basename(full)
            try:
                if os.readlink(name, dir_fd=dfd) == want:
                    continue
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                if stat.S_ISDIR(os.lstat(name, dir_fd=dfd).st_mode):
                    raise Refused(f"{path}: a folder is in the way of the link") from None
            changes.append({"target": path, "change": "link"})
            if not check:
                tmp = f".{name}.agent-sandbox-{secrets.token_hex(6)}"
                os.symlink(want, tmp, dir_fd=dfd)
                os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        finally:
            os.close(dfd)
    return changes


def sha256_file(path: str) -> str | None:
    """A file's SHA-256, read in chunks; None when it is missing."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


RUNTIME_STAMP = "wheelhouse.installed"  # the wheelhouse's SHA-256 (and extras) the venv holds


def _runtime_current(runtime: dict[str, Any], root: str) -> bool:
    prefix = under_root(root, runtime["prefix"])
    try:
        with open(os.path.join(prefix, RUNTIME_STAMP), encoding="ascii") as fh:
            stamp = fh.read().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return False
    return stamp == _stamp(runtime) and os.path.exists(os.path.join(prefix, "venv/bin/sandbox"))


def _stamp(runtime: dict[str, Any]) -> str:
    """What the virtualenv was installed from: the archive, and the extras asked for."""
    extras = sorted(runtime.get("extras") or [])
    return " ".join([runtime["sha256"], *(["[" + ",".join(extras) + "]"] if extras else [])])


def _runtime_install(runtime: dict[str, Any], root: str) -> None:
    """The virtualenv from the wheelhouse archive (offline), then the stamp."""
    prefix = under_root(root, runtime["prefix"])
    archive = os.path.join(prefix, "wheelhouse.tar")
    if sha256_file(archive) != runtime["sha256"]:
        raise Refused(f"{archive}: missing or not the wheelhouse asked for")
    venv, house = os.path.join(prefix, "venv"), os.path.join(prefix, "wheelhouse")
    pip = [os.path.join(venv, "bin", "python3"), "-m", "pip", "install", "-q",
           "--disable-pip-version-check", "--no-index"]
    # a virtualenv that cannot run pip (half made, or made without it) is made anew
    try:
        broken = subprocess.run([*pip[:3], "--version"], capture_output=True,
                                check=False).returncode != 0
    except OSError:
        broken = True
    if broken:
        _run([runtime.get("python") or "python3", "-m", "venv", "--clear", venv],
             "create the venv")
    _run(["rm", "-rf", house], "clear the wheelhouse")
    os.mkdir(house, 0o755)
    _run(["tar", "-xf", archive, "-C", house], "unpack the wheelhouse")
    wheels = sorted(n for n in os.listdir(house) if n.startswith("agent_sandbox-")
                    and n.endswith(".whl"))
    if not wheels:
        raise Refused(f"{archive}: no agent_sandbox wheel in it")
    extras = sorted(runtime.get("extras") or [])
    wanted = "agent-sandbox" + (f"[{','.join(extras)}]" if extras else "")
    _run([*pip, "--find-links", house, wanted], f"install {wanted}")
    _run([*pip, "--no-deps", "--force-reinstall", os.path.join(house, wheels[-1])],
         "install this agent-sandbox wheel")
    tmp = os.path.join(prefix, f".{RUNTIME_STAMP}.tmp")
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(_stamp(runtime) + "\n")
    os.rename(tmp, os.path.join(prefix, RUNTIME_STAMP))


def _run(argv: list[str], what: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-3:]
        raise StepFailed(f"{what}: `{' '.join(argv)}` exited {proc.returncode}: "
                         + " / ".join(tail))
    return proc.stdout


def _steps(items: list[dict[str, Any]], upgraded: bool,
           changed_targets: set[str]) -> list[dict[str, Any]]:
    """Run each step; its last output line says ``changed`` or ``unchanged``. A step
    whose ``unless_exist`` paths all exist is done (not run). A step whose
    ``after_change`` targets this call changed runs with those arguments instead
    (a unit file rewritten: reload and restart). A step with ``after_upgrade``
    arguments runs again with them when the runtime was installed by this call
    and the step changed nothing (a restart onto new code)."""
    out = []
    for item in items:
        if item.get("unless_exist") and all(os.path.lexists(p) for p in item["unless_exist"]):
            out.append({"name": item["name"], "changed": False})  # done before
            continue
        argv = list(item["argv"])
        when = item.get("after_change") or {}
        if changed_targets & set(when.get("targets") or ()):
            argv += when.get("args") or []
        lines = _run(argv, item["name"]).splitlines()
        changed = bool(lines) and lines[-1] == "changed"
        if upgraded and not changed and item.get("after_upgrade"):
            _run([*argv, *item["after_upgrade"]], item["name"])
            changed = True
        out.append({"name": item["name"], "changed": changed})
    return out


def _missing_packages(names: list[str]) -> list[str]:
    """The packages dpkg does not list as installed (all of them where there is no
    dpkg: the caller's package manager decides)."""
    if not names:
        return []
    try:
        proc = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\\n",
                               *names], capture_output=True, text=True, check=False)
    except OSError:
        return list(names)
    installed = {line.split(" ", 1)[0].split(":", 1)[0] for line in proc.stdout.splitlines()
                 if line.split(" ", 1)[-1].startswith("ii")}
    return [n for n in names if n not in installed]


def install_bundle(params: dict[str, Any], check: bool, diff: bool) -> dict[str, Any]:
    """A host's whole bundle in one call, in this order: folders, the runtime (a
    virtualenv from the wheelhouse archive, when its stamp differs), ``files``,
    ``early_steps``, ``late_files`` (files a step's first run would otherwise
    overwrite: ``sandbox init`` in a repository), links, ``late_steps``. With
    ``packages`` not all installed (``needs_packages``) or a runtime whose archive
    is not on the host yet (``needs_archive``), only the folders are made and what
    is needed is returned (the caller installs the packages or sends the archive,
    then calls again). In check mode nothing runs and nothing is written. A failure after something
    changed raises ``Written`` with what did."""
    root: str = params["root"]
    runtime: dict[str, Any] = params.get("runtime") or {}
    late = {**params, "files": params.get("late_files") or []}
    for item in params["files"] + late["files"]:  # refused before anything is done
        Plan(item, root, params["owner"], params["group"], params["home_user_owns_files"])
    upgrade = bool(runtime) and not _runtime_current(runtime, root)
    changes: list[dict[str, str]] = _folders(params.get("folders") or [], root, check)
    missing = _missing_packages(params.get("packages") or [])
    if check:
        changes += [{"target": name, "change": "package installed"} for name in missing]
    needs_archive = False
    if upgrade and not check:
        prefix = under_root(root, runtime["prefix"])
        needs_archive = sha256_file(os.path.join(prefix, "wheelhouse.tar")) != runtime["sha256"]
    if (missing and not check) or needs_archive:
        return {"changed": bool(changes), "needs_archive": needs_archive,
                "needs_packages": missing, "changes": changes, "steps": []}
    steps: list[dict[str, Any]] = []

    def done() -> list[str]:
        return [] if check else ([c["target"] for c in changes]
                                 + [s["name"] for s in steps if s["changed"]])

    try:
        if upgrade:
            if not check:
                _runtime_install(runtime, root)
            changes.append({"target": runtime["prefix"] + "/venv", "change": "runtime installed"})
        files = install(params, check, diff)
        changes += files["changes"]
        if not check:
            steps += _steps(params.get("early_steps") or [], upgrade,
                            {c["target"] for c in changes})
        more = install(late, check, diff)
        changes += more["changes"]
        files["folders_created"] += more["folders_created"]
        if diff:
            files["diff"] += more["diff"]
        changes += _links(params.get("links") or [], root, check)
        if not check:
            steps += _steps(params.get("late_steps") or [], upgrade,
                            {c["target"] for c in changes})
    except Written as exc:
        raise Written(str(exc), done() + exc.written) from None
    except (Refused, OSError, StepFailed) as exc:
        if not done():
            raise
        raise Written(str(exc), done()) from None
    return {**files, "changed": bool(changes) or any(s["changed"] for s in steps),
            "changes": changes, "steps": steps, "needs_archive": False, "needs_packages": []}


DEFAULTS: dict[str, Any] = {"root": "", "owner": "root", "group": "",
                            "home_user_owns_files": False, "folder_mode": "0755"}


def main(argv: list[str]) -> int:
    flags = set(argv[1:])
    if not argv or argv[0].startswith("-") or not flags <= {"--check", "--diff"}:
        print("usage: rendered_files.py SPEC.json [--check] [--diff]", file=sys.stderr)
        return 2
    try:
        with open(argv[0], encoding="utf-8") as fh:
            params = {**DEFAULTS, **json.load(fh)}
        result = install_bundle(params, check="--check" in flags, diff="--diff" in flags)
    except (Refused, StepFailed, OSError, ValueError, KeyError, TypeError) as exc:
        result = {"failed": True, "msg": f"{exc}; nothing was written", "written": []}
    except Written as exc:
        result = {"failed": True, "msg": f"{exc}; written before it: {exc.written}",
                  "changed": bool(exc.written), "written": exc.written}
    print(json.dumps(result, indent=1, sort_keys=True))
    if not result.get("failed"):
        print("changed" if result["changed"] else "unchanged")
    return 1 if result.get("failed") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
