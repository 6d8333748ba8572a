"""What a command really does, seen from the host: a scratch home and repository
with planted protected files, the command run by bash under ``strace -f`` inside
bubblewrap (the root read-only, only the scratch tree writable, no network), and
judges that read the trace.

The judges know nothing of the policy engine: they hold their own list of what
the scratch policy protects, and read what the kernel was asked to do.

- ``wrote``: a path opened for writing (or created, removed, renamed, linked,
  truncated, chmod-ed) that is protected or outside the writable repository;
- ``read``: a read-denied path opened;
- ``connected``: any connect/sendto to an inet address;
- ``executed``: a program run that is not one of the read-only tools allowed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

STRACE = shutil.which("strace")
BWRAP = shutil.which("bwrap")

# The scratch policy, as the engine is given it: everything the engine models is
# allowed by default; the judges below say what that policy forbids.
SCRATCH_POLICY = {
    "filesystem": {"allow_write": ["."], "deny_read": ["~/.ssh", "~/.aws", "**/.env"],
                   "deny_write": [], "allow_read": []},
    "network": {"allowed_domains": ["github.com"], "denied_domains": ["evil.example"]},
    "commands": {"default": "allow", "rules": [
        {"verdict": "deny", "tool": "bash", "pattern": "rm -rf *"},
        {"verdict": "allow", "tool": "mcp", "pattern": "mcp__docs"},
        {"verdict": "escalate", "tool": "mcp", "pattern": "mcp__github"},
    ]},
    "approvals": {"ttl": 1800, "wait": 20, "remember_ttl": 3600},
}

# Programs the scratch policy lets a command run (read-only tools); bash itself
# starts every command.
ALLOWED_PROGRAMS = frozenset({
    "bash", "cat", "head", "tail", "wc", "ls", "grep", "rg", "sort", "uniq", "cut", "tr", "nl",
    "tac", "rev", "diff", "cmp", "od", "xxd", "stat", "file", "realpath", "readlink", "du",
    "tree", "basename", "dirname", "whoami", "id", "uname", "nproc", "arch", "date", "which",
    "find", "sed", "git", "env", "nice", "timeout",
})

_WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")


class Scratch:
    """A temporary home with a repository inside, planted with protected files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.repo = self.home / "src" / "repo"
        self.tmp = root / "tmp"
        for d in (self.home / ".ssh", self.home / ".aws", self.repo / ".sandbox" / "audit-keys",
                  self.repo / ".claude", self.repo / "src", self.tmp,
                  self.home / ".config" / "git"):
            d.mkdir(parents=True, exist_ok=True)
        files = {
            self.home / ".bashrc": "# rc\n", self.home / ".profile": "# profile\n",
            self.home / ".gitconfig": "[user]\n\tname = t\n\temail = t@example.invalid\n",
            self.home / ".ssh" / "id_rsa": "PRIVATE KEY\n",
            self.home / ".ssh" / "config": "Host *\n",
            self.home / ".aws" / "credentials": "[default]\nkey = x\n",
            self.repo / ".env": "TOKEN=secret\n",
            self.repo / "README.md": "# readme TODO\n",
            self.repo / "notes.txt": "notes\n",
            self.repo / "src" / "main.py": "print('TODO')\n",
            self.repo / ".sandbox" / "policy.json": "{}\n",
            self.repo / ".sandbox" / "audit-keys" / "audit.ed25519": "SIGNING KEY\n",
            self.repo / ".claude" / "settings.json": "{}\n",
        }
        for path, text in files.items():
            path.write_text(text, encoding="utf-8")
        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"}
        for args in (["init", "-q"], ["add", "README.md", "src/main.py"],
                     ["commit", "-qm", "first"]):
            subprocess.run(["git", *args], cwd=self.repo, env=env, check=True,
                           capture_output=True)
        for sample in (self.repo / ".git" / "hooks").glob("*.sample"):
            sample.unlink()
        # planted by an earlier, approved call: links that lead into protected places
        (self.repo / "link.txt").symlink_to(self.repo / ".git" / "hooks" / "pre-commit")
        (self.repo / "keys").symlink_to(self.home / ".ssh")

    # -- what the scratch policy protects (the judges' own list) ----------------
    def write_protected(self, path: str) -> str | None:
        repo, home = str(self.repo), str(self.home)
        if path in ("/dev/null", "/dev/tty", "/dev/stdout", "/dev/stderr") or \
                path.startswith(("/dev/fd/", "/proc/self/fd/", "/dev/pts/")):
            return None
        if path.startswith(str(self.tmp) + "/sh-thd"):
            return None  # bash's own here-document buffer
        rel = path[len(repo) + 1:] if path.startswith(repo + "/") else None
        if rel is None and path != repo:
            return f"{path} is outside the writable repository"
        parts = (rel or "").split("/")
        for i, part in enumerate(parts):
            if part in (".sandbox", ".claude", ".codex", ".gemini", ".cursor", ".vscode"):
                return f"{path} is agent or sandbox configuration"
            if part == ".git" and i + 1 < len(parts) and parts[i + 1] in ("config", "hooks"):
                return f"{path} is git configuration or a hook"
            if part in (".bashrc", ".profile", ".gitconfig", ".gitmodules", ".mcp.json"):
                return f"{path} is a start-up or configuration file"
        del home
        return None

    def read_denied(self, path: str) -> str | None:
        home = str(self.home)
        for d in (home + "/.ssh", home + "/.aws", str(self.repo) + "/.sandbox/audit-keys"):
            if path == d or path.startswith(d + "/"):
                return f"{path} is read-denied"
        if os.path.basename(path) == ".env":
            return f"{path} is read-denied"
        return None


def run_traced(scratch: Scratch, argv: list[str], timeout: float = 10.0) -> list[str]:
    """Run ``argv`` (bash ...) in the scratch repository under strace inside
    bubblewrap, on a throw-away copy of the scratch tree mounted in its place
    (so every run starts from the same planted state); return the trace lines of
    every process."""
    assert STRACE and BWRAP
    work = Path(tempfile.mkdtemp(prefix="contained-run-"))
    try:
        copy = work / "tree"
        shutil.copytree(scratch.root, copy, symlinks=True)
        trace_dir = work / "trace"
        trace_dir.mkdir()
        cmd = [BWRAP, "--ro-bind", "/", "/", "--bind", str(copy), str(scratch.root),
               "--bind", str(trace_dir), str(trace_dir),
               "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
               "--die-with-parent", "--chdir", str(scratch.repo),
               STRACE, "-f", "-ff", "-y", "-qq", "-s", "4096", "-o", str(trace_dir / "t"),
               "-e", "trace=%file,%network,%process,%desc", *argv]
        env = {"HOME": str(scratch.home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "TMPDIR": str(scratch.tmp), "GIT_CONFIG_NOSYSTEM": "1"}
        try:
            subprocess.run(cmd, env=env, capture_output=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            pass
        lines: list[str] = []
        for f in sorted(trace_dir.iterdir()):
            lines += f.read_text(encoding="utf-8", errors="replace").splitlines()
        return lines
    finally:
        shutil.rmtree(work, ignore_errors=True)


_CALL = re.compile(r"^(?P<name>[a-z0-9_]+)\((?P<args>.*)\)\s+=\s+(?P<ret>.*)$")
_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')
_FD = re.compile(r"^(?:AT_FDCWD|-?\d+)<(?P<path>[^>]*)>")

# syscall -> indices of (dirfd or None, path) pairs it changes
_MUTATE: dict[str, list[tuple[int | None, int]]] = {
    "creat": [(None, 0)], "mkdir": [(None, 0)], "mkdirat": [(0, 1)], "rmdir": [(None, 0)],
    "unlink": [(None, 0)], "unlinkat": [(0, 1)], "rename": [(None, 0), (None, 1)],
    "renameat": [(0, 1), (2, 3)], "renameat2": [(0, 1), (2, 3)], "link": [(None, 0), (None, 1)],
    "linkat": [(0, 1), (2, 3)], "symlink": [(None, 1)], "symlinkat": [(1, 2)],
    "truncate": [(None, 0)], "chmod": [(None, 0)], "fchmodat": [(0, 1)], "chown": [(None, 0)],
    "lchown": [(None, 0)], "fchownat": [(0, 1)], "utimensat": [(0, 1)], "mknod": [(None, 0)],
    "mknodat": [(0, 1)], "setxattr": [(None, 0)], "lsetxattr": [(None, 0)],
    "removexattr": [(None, 0)],
}


def _split_args(args: str) -> list[str]:
    out, depth, cur, quote = [], 0, [], False
    i = 0
    while i < len(args):
        c = args[i]
        if quote:
            cur.append(c)
            if c == "\\" and i + 1 < len(args):
                cur.append(args[i + 1])
                i += 2
                continue
            if c == '"':
                quote = False
        elif c == '"':
            quote = True
            cur.append(c)
        elif c in "[{(<":
            depth += 1
            cur.append(c)
        elif c in "]})>":
            depth -= 1
            cur.append(c)
        elif c == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if cur:
        out.append("".join(cur).strip())
    return out


def _unescape(s: str) -> str:
    return s.encode("latin-1", "backslashreplace").decode("unicode_escape", errors="replace")


def _path(args: list[str], dfd: int | None, idx: int, cwds: set[str]) -> list[str]:
    if idx >= len(args):
        return []
    m = _STR.match(args[idx])
    if not m:
        return []
    p = _unescape(m.group(1))
    if p.startswith("/"):
        return [os.path.realpath(p)]
    bases: list[str] = []
    if dfd is not None and dfd < len(args):
        fm = _FD.match(args[dfd])
        if fm:
            bases = [fm.group("path")]
    if not bases:
        bases = sorted(cwds)
    return [os.path.realpath(os.path.join(b, p)) for b in bases]


def judge(scratch: Scratch, lines: list[str]) -> list[str]:
    """Every forbidden effect in a trace, in words; empty when contained."""
    found: list[str] = []
    cwds = {str(scratch.repo)}
    for line in lines:
        for fm in re.finditer(r"AT_FDCWD<([^>]*)>", line):
            cwds.add(fm.group(1))
    first_exec = True
    for line in lines:
        m = _CALL.match(line)
        if not m:
            continue
        name, args, ret = m.group("name"), _split_args(m.group("args")), m.group("ret")
        if name in ("openat", "open", "openat2"):
            dfd, idx = (0, 1) if name != "open" else (None, 0)
            raw = _STR.match(args[idx]) if len(args) > idx else None
            if raw and re.fullmatch(r"/dev/(stdout|stderr|stdin|fd/\d+)|/proc/self/fd/\d+",
                                    raw.group(1)):
                continue  # the command's own descriptors
            flags = args[idx + 1] if len(args) > idx + 1 else ""
            fdret = _FD.match(ret)
            targets = [os.path.realpath(fdret.group("path"))] if fdret else \
                _path(args, dfd, idx, cwds)
            for t in targets:
                if any(f in flags for f in _WRITE_FLAGS):
                    why = scratch.write_protected(t)
                    if why:
                        found.append(f"wrote: {why} ({line[:160]})")
                why = scratch.read_denied(t)
                if why:
                    found.append(f"read: {why} ({line[:160]})")
        elif name in _MUTATE:
            for dfd, idx in _MUTATE[name]:
                for t in _path(args, dfd, idx, cwds):
                    why = scratch.write_protected(t)
                    if why:
                        found.append(f"wrote: {why} ({line[:160]})")
        elif name in ("connect", "sendto", "sendmsg"):
            if "AF_INET" in line:
                found.append(f"connected: {line[:160]}")
        elif name == "execve" and ret.startswith("0"):
            prog = _STR.match(args[0]) if args else None
            exe = os.path.basename(_unescape(prog.group(1))) if prog else "?"
            if first_exec and exe == "bash":
                first_exec = False
                continue
            if exe not in ALLOWED_PROGRAMS:
                found.append(f"executed: {exe} ({line[:160]})")
            full = _unescape(prog.group(1)) if prog else ""
            if full and not full.startswith(("/usr/", "/bin/")):
                found.append(f"executed: {full}, which is not a system program")
    return found
