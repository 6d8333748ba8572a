"""The content an escalated command is approved with: what it may read from the
places the agent can write, pinned when the request is made.

A request names words (``bash ./deploy.sh``); what runs is whatever the files
behind them hold when it runs. So when a command is queued, every entry below
the writable roots it will run with is recorded (``take``: path, inode, size,
modification and change times, mode; the change time is the kernel's and no
process can set it back), with a digest over the record, and the files the
command names (``named``: the script, the Makefile ``make`` reads) are read
for the views to show. The human approves that digest. Before the approved
run, the tree is taken again and compared (``changes``); anything added,
removed or changed refuses the run, and the request is queued anew with what
changed (``approval.executor``; a file added since does not count: the run may not
read it). While it runs, the broker hands the command each file of
the tree only if it is still the one recorded, as a copy taken then
(``runtime/broker/pinned.py``): a file changed after the approval is never
read.
"""

from __future__ import annotations

import hashlib
import os
import stat

from agent_sandbox.errors import SandboxError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

    from .folder import FolderQueue

# a tree larger than this cannot be pinned: the request is refused, saying so
MAX_ENTRIES = 2_000_000
NAMED_MAX = 64  # files of the command checked by their bytes
NAMED_SHOWN = 8  # of them, shown in the views with their first lines
HEAD = 4000  # characters of each shown
# programs whose input file is implied, not named: what they read first
IMPLIED = {"make": ("GNUmakefile", "makefile", "Makefile"), "npm": ("package.json",),
           "pnpm": ("package.json",), "yarn": ("package.json",), "just": ("justfile",),
           "rake": ("Rakefile",), "cargo": ("Cargo.toml", "build.rs"),
           "tox": ("tox.ini",), "nox": ("noxfile.py",)}

Entry = tuple[int, int, int, int, int]  # inode, size, mtime_ns, ctime_ns, mode


class TooLarge(SandboxError):
    """The writable roots hold more entries than can be pinned."""


def take(roots: Iterable[str], skip: Iterable[str] = ()) -> dict[str, Entry]:
    """Every entry at or below ``roots`` (absolute paths; links not followed), but
    the folders ``skip`` (the runtime's own state, which no command may write)."""
    out: dict[str, Entry] = {}
    todo = [r for r in dict.fromkeys(os.path.realpath(r) for r in roots) if os.path.isdir(r)]
    seen_roots = set(todo) | {os.path.realpath(x) for x in skip}
    while todo:
        folder = todo.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # gone or unreadable: what the run cannot read either
        for e in entries:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if e.path in seen_roots and e.path not in todo and stat.S_ISDIR(st.st_mode):
                continue  # skipped, or a root met again below another
            out[e.path] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)
            if len(out) > MAX_ENTRIES:
                raise TooLarge(f"the writable roots hold more than {MAX_ENTRIES} entries")
            if stat.S_ISDIR(st.st_mode) and e.path not in seen_roots:
                todo.append(e.path)
    return out


def digest(entries: dict[str, Entry]) -> str:
    """Over every entry, a folder by its inode and mode only (its times move with
    what it holds, which has entries of its own): equal digests, equal trees by
    ``changes``."""
    h = hashlib.sha256()
    for path in sorted(entries):
        e = entries[path]
        h.update(_line(path, (e[0], 0, 0, 0, e[4]) if stat.S_ISDIR(e[4]) else e))
    return h.hexdigest()


def _line(path: str, e: Entry) -> bytes:
    return b"%d %d %d %d %o %s\n" % (*e, os.fsencode(path))


def save(q: FolderQueue, rid: str, entries: dict[str, Entry]) -> str:
    """The record of ``rid``'s tree in the queue (``content/<id>``), mode 0600."""
    folder = os.path.join(q.root, "content")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, rid)
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            for p in sorted(entries):
                fh.write(_line(p, entries[p]))
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load(q: FolderQueue, rid: str) -> dict[str, Entry] | None:
    """The recorded tree of ``rid``; None when there is none (a request made
    before content was pinned, or one whose record was removed)."""
    try:
        with open(os.path.join(q.root, "content", rid), "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    out: dict[str, Entry] = {}
    for line in data.split(b"\n"):
        if not line:
            continue
        ino, size, mtime, ctime, mode, path = line.split(b" ", 5)
        out[os.fsdecode(path)] = (int(ino), int(size), int(mtime), int(ctime), int(mode, 8))
    return out


def changes(old: dict[str, Entry], new: dict[str, Entry]) -> list[str]:
    """What differs, one line each (``added``, ``removed``, ``changed``), sorted."""
    out = [f"removed {p}" for p in old if p not in new]
    out += [f"added {p}" for p in new if p not in old]
    out += [f"changed {p}" for p in old if p in new and _differs(old[p], new[p])]
    return sorted(out, key=lambda line: line.split(" ", 1)[1])


def touched(old: dict[str, Entry], new: dict[str, Entry], command: str | None = None,
            cwd: str = "/") -> list[str]:
    """What of the recorded tree is no longer as recorded (``changes`` but most
    entries added since: a run pinned to ``old`` may not read those). An added
    name still counts where the command would see it: one that reads as an option
    (``--checkpoint-action=exec=...``: a glob hands it to the program as one), and
    any in a folder ``command`` expands a glob in (``listed``)."""
    globbed = listed(command, cwd) if command else []
    out = []
    for c in changes(old, new):
        if c.startswith("added "):
            path = c[6:]
            head, _, name = path.rpartition("/")
            if not (name.startswith("-") or any(
                    head == folder or (deep and head.startswith(folder.rstrip("/") + "/"))
                    for folder, deep in globbed)):
                continue
        out.append(c)
    return out


def listed(command: str, cwd: str) -> list[tuple[str, bool]]:
    """The folders a command's glob words list (``*.txt``: its folder; ``**``:
    its folder and every folder below), read in every folder the shell may be in."""
    words = _words(command)
    out: list[tuple[str, bool]] = []
    for word in words:
        if not any(ch in word for ch in "*?["):
            continue
        head = word.split("*", 1)[0].split("?", 1)[0].split("[", 1)[0]
        folder = head.rsplit("/", 1)[0] if "/" in head else ""
        for at in _folders(words, cwd):
            out.append((os.path.realpath(os.path.join(at, os.path.expanduser(folder))),
                        "**" in word or "/" in word[len(head):]))
    return out


def _differs(a: Entry, b: Entry) -> bool:
    if stat.S_ISDIR(a[4]) and stat.S_ISDIR(b[4]):
        return a[0] != b[0] or a[4] != b[4]  # a folder's times change with what it holds
    return a != b


_SEPARATORS = frozenset({"&&", ";", "||", "|", "&", "(", ")"})


def _words(command: str) -> list[str]:
    """The shell's words of ``command``, its operators apart, up to a comment."""
    import shlex

    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        words = list(lexer)
    except ValueError:
        words = command.split()
    cut = next((i for i, w in enumerate(words) if w.startswith("#")), len(words))
    return words[:cut]


def _run_in(args: list[str], cwd: str) -> str:
    """The folder ``make -C DIR`` (``-kC DIR``, ``-CDIR``, ``--directory=DIR`` and its
    abbreviations, ``--dir DIR``) or ``npm --prefix DIR`` runs in."""
    for j, a in enumerate(args):
        if a in _SEPARATORS:
            break
        name, eq, given = a.partition("=")
        value: str | None = None
        if a.startswith("--") and len(name) > 3 and ("--directory".startswith(name)
                                                      or name == "--prefix"):
            value = given if eq else (args[j + 1] if j + 1 < len(args) else None)
        elif a.startswith("-") and not a.startswith("--") and "C" in a:
            rest = a[a.index("C") + 1:]
            value = rest or (args[j + 1] if j + 1 < len(args) else None)
        if value is not None:
            cwd = os.path.normpath(os.path.join(cwd, os.path.expanduser(value)))
    return cwd


def _folders(words: list[str], cwd: str) -> list[str]:
    """Every folder a word of the command may be read in: the request's, each one a
    ``-C``/``--chdir`` option names (``env -C``, ``git -C``, ``make -C``), and each
    one a ``cd`` or ``pushd`` anywhere in it leads to, from the request's folder and
    from the one before (which of them the shell is in when a word is read depends
    on what succeeded: ``if cd sub; then ...``, ``cd sub extra``)."""
    out, at = [cwd], cwd
    for i, word in enumerate(words):
        name, eq, given = word.partition("=")
        if eq and name in ("--chdir", "--directory", "--work-tree", "--git-dir"):
            out.append(os.path.normpath(os.path.join(cwd, os.path.expanduser(given))))
        if word.startswith("-C") and len(word) > 2:  # -Cdir, as git and make take it
            out.append(os.path.normpath(os.path.join(cwd, os.path.expanduser(word[2:]))))
        if i + 1 >= len(words):
            break
        if word in ("-C", "--chdir", "--directory"):  # env -C, git -C, make -C
            out.append(os.path.normpath(os.path.join(cwd, os.path.expanduser(words[i + 1]))))
        if word in ("cd", "pushd"):
            target = next((w for w in words[i + 1:] if not w.startswith("-")), None)
            if target is None or target in _SEPARATORS:
                continue
            target = os.path.expanduser(target)
            out += [os.path.normpath(os.path.join(cwd, target)),
                    os.path.normpath(os.path.join(at, target))]
            at = out[-1]
    return list(dict.fromkeys(out))


def sha256_of(path: str) -> str | None:
    """The SHA-256 of the file at ``path`` as ``named`` takes it (its first 16 MiB),
    or None when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read(16 << 20)).hexdigest()
    except OSError:
        return None


def named(command: str, cwd: str, entries: dict[str, Entry]) -> list[dict[str, object]]:
    """The files of the tree a shell command names (and the one its program reads
    without naming it: ``make``'s Makefile), with their digests, and the first
    lines of the first ``NAMED_SHOWN``. Each word is read in every folder the shell
    may read it in (``_folders``), in the folder ``make -C`` or ``npm --prefix`` is
    given, and as the kernel reads a path (its links followed, then ``..``:
    ``scripts/../deploy.sh`` through a link ``scripts`` is another file); ``#``
    starts a comment only at the start of a word (``./deploy.sh#prod`` is one
    file). A file is read only as it was recorded (not through a link, the same
    inode and times): one swapped since is not shown, and the run refuses it."""
    want: list[str] = []
    words = _words(command)
    folders = _folders(words, cwd)
    for i, word in enumerate(words):
        first = i == 0 or words[i - 1] in _SEPARATORS or words[i - 1] == "sudo"
        if word.startswith("-") and "=" in word:
            word = word.split("=", 1)[1]
        for folder in folders:
            path = os.path.realpath(os.path.join(folder, os.path.expanduser(word)))
            if path in entries and stat.S_ISREG(entries[path][4]):
                want.append(path)
        base = os.path.basename(word)
        if base in IMPLIED and first:
            for folder in folders:
                at = os.path.realpath(_run_in(words[i + 1:], folder))
                want += [p for p in (os.path.join(at, n) for n in IMPLIED[base])
                         if p in entries]
    out: list[dict[str, object]] = []
    for path in list(dict.fromkeys(want))[:NAMED_MAX]:
        data = _recorded_bytes(path, entries[path])
        if data is None:
            continue
        head = data[:HEAD].decode("utf-8", "replace") + (
            f"\n[... {len(data) - HEAD} more bytes, not shown here: read the file; the "
            "SHA-256 above is of all of it]" if len(data) > HEAD else "")
        out.append({"path": path, "sha256": hashlib.sha256(data).hexdigest(),
                    "size": len(data), "head": head if len(out) < NAMED_SHOWN else
                    "[not shown here: read the file; its SHA-256 is above]"})
    return out


def _recorded_bytes(path: str, entry: Entry) -> bytes | None:
    """The first 16 MiB of the file at ``path`` if it is still the regular file
    ``entry`` recorded (opened without following a link), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_ino, st.st_size, st.st_mtime_ns,
                                              st.st_ctime_ns) != entry[:4]:
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read(16 << 20)
    except OSError:
        return None
    finally:
        os.close(fd)
