"""One shell command line judged for a ``Policy``, segment by segment: each
command's rules, its redirections, environment assignments, paths in its
arguments, the hosts it reaches, ``cd`` and the working directories that follow,
and whether the command is one ``modelled`` knows exactly.

Every segment must pass; anything decided at run time (a command name, a glob in
an unknown directory, a redirection target) escalates. It only ever tightens the
``Decision`` it is given, and never answers allow for a part it cannot read.
"""

from __future__ import annotations

import os

from ..repo_layout import SANDBOX
from ..spec import paths
from ..spec.rules import Verdict, command_matches, compound_pattern, normalise_command
from . import modelled, shell
from .decision import raise_risk
from .reached_hosts import NETWORK_TOOLS, hosts_in

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms to import; annotations only
    from typing import Protocol

    from .decision import Decision
    from .document import RuleEntry

    class Policy(Protocol):
        """What a command line is judged against: the checks of ``engine.Policy``
        (which calls in here), declared so that this module needs no engine."""

        rules: list[RuleEntry]
        default: Verdict
        home: str
        allow_write: list[str]

        def places(self, path: str, cwd: str) -> list[str]: ...
        def read_ok(self, abspath: str) -> bool: ...
        def is_protected(self, abspath: str) -> bool: ...
        def apply_rules(self, d: Decision, kind: str, subject: str, argv: list[str] | None,
                        default: Verdict | None) -> bool: ...
        def check_host(self, d: Decision, host: str, what: str) -> None: ...
        def check_read(self, d: Decision, path: str, cwd: str, *,
                       explicit: bool = True) -> None: ...
        def check_write(self, d: Decision, path: str, cwd: str) -> None: ...
        def check_tree(self, d: Decision, root: str, budget: int = 20000) -> None: ...

ALLOW, ESCALATE, DENY = Verdict.ALLOW, Verdict.ESCALATE, Verdict.DENY

DECODERS = {("base64", "-d"), ("base64", "--decode"), ("base64", "-D"), ("xxd", "-r"),
            ("openssl", "enc"), ("openssl", "base64"), ("gzip", "-d"), ("gunzip", ""),
            ("zcat", ""), ("uudecode", ""), ("rev", ""), ("tr", "")}
MUTATORS = frozenset({
    "rm", "mv", "cp", "tee", "chmod", "chown", "chgrp", "ln", "truncate", "touch", "mkdir",
    "rmdir", "install", "dd", "rsync", "unlink", "shred", "patch", "sed", "perl", "tar", "unzip",
    "git", "curl", "wget", "python", "python3", "node", "setfacl", "chattr", "sponge", "ed",
    "ex", "vi", "vim", "nano", "emacs",
})
# Shell builtins that change nothing outside the shell itself: allowed when no
# rule names them (their redirects and substitutions are still judged).
INERT = frozenset({"true", "false", "exit", ":", "cd", "pwd", "test", "[", "return",
                   "shift", "wait", "break", "continue"})
DESTRUCTIVE = frozenset({"rm", "dd", "mkfs", "shred", "wipefs", "fdisk", "parted", "sudo", "su",
                         "doas", "chown", "kill", "pkill", "killall", "reboot", "shutdown"})
RISKY_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "BASH_ENV", "ENV",
                       "PROMPT_COMMAND", "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "PYTHONPATH",
                       "NODE_OPTIONS", "GIT_EXTERNAL_DIFF", "GIT_CONFIG_COUNT", "CDPATH",
                       "PAGER", "EDITOR", "VISUAL", "PERL5OPT", "RUBYOPT", "PYTHONSTARTUP"})
_GIT_PLACE_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CONFIG",
                  "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_CONFIG_COUNT")
APPROVER_COMMANDS = frozenset({"approve", "deny", "watch", "init", "uninstall", "pending"})


def _versioned(name: str) -> bool:
    return name.startswith(("python3.", "python2.", "perl5", "ruby", "node"))


def _is_decoder(argv: list[str]) -> bool:
    if not argv:
        return False
    n = argv[0].rsplit("/", 1)[-1]
    for tool, flag in DECODERS:
        if n == tool and (flag == "" or flag in argv[1:] or any(
                a.startswith("-") and not a.startswith("--") and flag[1:] in a[1:]
                for a in argv[1:] if flag.startswith("-") and len(flag) == 2)):
            return True
    return False


def _path_candidates(arg: str) -> list[str]:
    """Arguments that name files: ``./x``, ``/x``, ``~/x``, ``a/b``, ``--opt=/x``."""
    out = []
    for part in (arg, arg.split("=", 1)[1] if "=" in arg and arg.startswith("-") else ""):
        if not part or part.startswith("-") or "://" in part or "\x00" in part:
            continue
        if part.startswith(("/", "./", "../", "~/")) or part in ("~", ".", "..") or "/" in part \
                or part.startswith("."):
            out.append(part)
    return out


def classify_command(policy: Policy, command: str, cwd: str, d: Decision) -> None:
    if not isinstance(command, str) or not command.strip():
        d.add(DENY, "empty command")
        return
    parsed = shell.parse(command)
    for problem in parsed.problems:
        d.add(ESCALATE, problem)
        raise_risk(d, "medium")
    # the working directories a command may run in: a cd that may or may not
    # happen (after && or ||, in a condition, a subshell, a pipeline) adds one;
    # None: unknown (a cd inside a loop, to a run-time place, to $OLDPWD)
    cwds: list[str] | None
    try:
        cwds = paths.places(cwd, "/")
    except paths.OpaquePath as exc:
        d.add(ESCALATE, f"the working directory {cwd!r}: {exc}")
        cwds = None
    if parsed.loops and any(seg.name in ("cd", "pushd", "popd") for seg in parsed.segments):
        cwds = None
    for seg in parsed.segments:
        cwds = _segment(policy, seg, cwds, cwd, d)
    # rules that span several commands (curl * | *sh*) judge the whole line; they
    # can only tighten (the spec refuses allow and observe ones)
    whole = normalise_command(command)
    for r in policy.rules:
        if (r.tool in ("bash", "any") and r.pattern and compound_pattern(r.pattern)
                and r.verdict.rank > ALLOW.rank and command_matches(r.pattern, whole)):
            d.add(r.verdict, r.reason or f"policy rule {r.pattern!r}")


def own_descriptor(path: str) -> bool:
    """A name the shell and its commands open as their own descriptor, the
    null device or their own terminal (``paths.special_device``, exact names)."""
    kind = paths.special_device(path)
    return kind in ("null", "stream") or path == "/dev/tty"


def _paths_in(policy: Policy, d: Decision, path: str, cwds: list[str] | None,
              opaque: Verdict = ESCALATE) -> list[str]:
    """Every place ``path`` may name (``Policy.places`` from each working
    directory; ``~`` both as $HOME and as a literal folder), or none when the
    directory is unknown or the path runs through a process's magic link (then
    ``opaque`` is added)."""
    if own_descriptor(path):
        return []
    out: list[str] = []
    try:
        if path.startswith("/"):
            return policy.places(path, "/")
        if path == "~" or path.startswith("~/"):
            out += policy.places(path, "/")
        if cwds is None:
            d.add(ESCALATE, f"{path!r} is relative to a working directory decided at run time")
            return out
        for c in cwds:
            out += paths.places(path, c)
    except paths.OpaquePath as exc:
        d.add(opaque, f"{path!r}: {exc}")
        raise_risk(d, "high" if opaque is DENY else "medium")
        return []
    return list(dict.fromkeys(out))


def _segment(policy: Policy, seg: shell.Segment, cwds: list[str] | None, base: str,
             d: Decision) -> list[str] | None:
    here = cwds[0] if cwds else base
    for op, target in seg.redirects:
        _redirect(policy, d, op, target, cwds)
    for a in seg.assignments:
        name = a.split("=", 1)[0].rstrip("+")
        if name in RISKY_ENV or name.endswith(("_proxy", "_PROXY")) or name.startswith(
                ("GIT_", "LD_", "BASH_FUNC_")) or name in ("CDPATH", "IFS", "SHELLOPTS"):
            d.add(ESCALATE, f"sets {name}, which changes what runs")
            raise_risk(d, "high")
        elif not modelled.safe_assignment(a):
            d.add(ESCALATE, f"sets {name}, an environment variable the policy engine does "
                            "not model (it may make a program load code or configuration)")
    if not seg.argv:
        return cwds
    argv = seg.argv
    name = seg.name
    if seg.dynamic and seg.dynamic[0]:
        d.add(ESCALATE, f"command name decided at run time ({argv[0]!r})")
        raise_risk(d, "high")
    # the segment itself, against the rules
    text = normalise_command(" ".join(argv))
    inert = name in INERT and not any(seg.dynamic)
    policy.apply_rules(d, "bash", text, argv, None if inert else policy.default)
    if name in DESTRUCTIVE:
        raise_risk(d, "high")
    # code from a pipe or a here-document into a shell or interpreter
    if name in shell.SHELLS or name in shell.INTERPRETERS or _versioned(name):
        opaque = seg.stdin_from_pipe and (len(argv) == 1
                                          or argv[1] in ("-", "-s", "/dev/stdin"))
        if opaque:
            decoded = [src for src in seg.pipe_sources if _is_decoder(src)]
            if decoded:
                d.add(DENY, f"decoded data ({' '.join(decoded[0])}) is piped into {name}")
                d.risk = "high"
            else:
                d.add(ESCALATE, f"{name} runs code read from a pipe")
                raise_risk(d, "high")
        if any(src and src[0].rsplit("/", 1)[-1] in NETWORK_TOOLS for src in seg.pipe_sources):
            d.add(ESCALATE, f"downloaded content is piped into {name}")
            raise_risk(d, "high")
    if name == "eval" and any(seg.dynamic[1:]):
        d.add(ESCALATE, "eval of text decided at run time")
        raise_risk(d, "high")
    if (name == "sandbox" and len(argv) > 1 and argv[1] in APPROVER_COMMANDS) or (
            "agent_sandbox" in argv[1:6] and any(a in APPROVER_COMMANDS for a in argv)):
        d.add(DENY, "approvals are out of band: an agent cannot run the approver or "
                    "change the connector")
        d.risk = "high"
    if name == "source" or name == ".":
        d.add(ESCALATE, "sources a script into the shell")
    # paths in arguments of commands that are not modelled: protected reads and
    # writes found by shape (a modelled command's arguments are judged exactly below)
    mutating = name in MUTATORS
    for a, dyn in zip(argv[1:], seg.dynamic[1:], strict=False):
        if dyn and mutating and (SANDBOX in a or a.startswith("$")):
            d.add(ESCALATE, f"{name} on a path decided at run time ({a!r})")
        for cand in _path_candidates(a):
            for full in _paths_in(policy, d, cand, cwds or [here],
                                  DENY if mutating else ESCALATE):
                if not policy.read_ok(full):
                    d.add(DENY, f"{name} touches {full}, which filesystem.deny_read "
                                "protects")
                    d.risk = "high"
                if mutating and policy.is_protected(full):
                    d.add(DENY, f"{name} may modify {full}, which is protected")
                    d.risk = "high"
        if mutating and SANDBOX in a.split("/") and a not in ("--",):
            d.add(DENY, f"{name} names the sandbox state directory ({a!r})")
            d.risk = "high"
    # network
    for host, what in hosts_in(seg, here):
        policy.check_host(d, host, what)
    if name == "cd":
        return _cd(policy, seg, cwds, d)
    _modelled(policy, seg, cwds, d)
    return cwds


def _redirect(policy: Policy, d: Decision, op: str, target: str, cwds: list[str] | None) -> None:
    bare = op.lstrip("0123456789")
    if bare in (">&", "<&") and (target == "-" or target.rstrip("-").isdigit()):
        return  # duplicates or closes a descriptor
    if target.startswith("\x00dynamic:"):
        d.add(ESCALATE, f"redirection target decided at run time ({target[9:]})")
        return
    if target.startswith(("/dev/tcp/", "/dev/udp/")) or target in ("/dev/tcp", "/dev/udp"):
        parts = target.split("/")
        if len(parts) > 3 and parts[3]:
            policy.check_host(d, parts[3], "a /dev/tcp redirection")
        d.add(ESCALATE, f"{target} opens a network connection from the shell")
        raise_risk(d, "high")
        return
    if own_descriptor(target):
        return
    reading = bare in ("<", "<&", "<>")  # <> opens for reading and writing
    writing = bare not in ("<", "<&")
    for full in _paths_in(policy, d, target, cwds, ESCALATE if reading else DENY):
        if reading:
            policy.check_read(d, full, "/", explicit=False)
        if writing:
            policy.check_write(d, full, "/")


def _cd(policy: Policy, seg: shell.Segment, cwds: list[str] | None,
        d: Decision) -> list[str] | None:
    args = seg.argv[1:]
    dyn = seg.dynamic[1:]
    physical = False
    while args and args[0] in ("-L", "-P", "-e", "-@", "--") and not dyn[0]:
        physical = physical or args[0] == "-P"
        stop = args[0] == "--"
        args, dyn = args[1:], dyn[1:]
        if stop:
            break
    if len(args) > 1 or (args and (dyn[0] or args[0] == "-" or args[0].startswith("-"))):
        d.add(ESCALATE, "cd to a place decided at run time")
        return None
    target = args[0] if args else "~"
    if (os.environ.get("CDPATH") and not target.startswith(("/", "~"))
            and target.split("/", 1)[0] not in (".", "..")):
        d.add(ESCALATE, "cd under CDPATH may go elsewhere")
        return None
    if cwds is None:
        return None
    if target == "~" or target.startswith("~/"):
        target = policy.home + target[1:]
    new: list[str] = []
    for c in cwds:
        try:  # physical (cd -P, and the kernel), then the logical reading of ..
            found = paths.places(target, c)
        except paths.OpaquePath as exc:
            d.add(ESCALATE, f"cd {target!r}: {exc}")
            return None
        new += found[:1] if physical else found
    new = list(dict.fromkeys(new))
    certain = (seg.persist and seg.after in ("", ";", "\n") and not seg.conditional
               and len(new) == 1 and os.path.isdir(new[0]))
    out = new if certain else list(dict.fromkeys(cwds + new))
    return out if len(out) <= 8 else None


def _modelled(policy: Policy, seg: shell.Segment, cwds: list[str] | None, d: Decision) -> None:
    """At least escalate unless the command is one the engine fully models."""
    argv = list(seg.argv)
    for i, (dyn, glob) in enumerate(zip(seg.dynamic, seg.globs, strict=False)):
        if dyn and not glob:
            d.add(ESCALATE, f"{argv[i]!r} is decided at run time")
            return
    if any(seg.globs):
        if cwds is None or len(cwds) != 1:
            d.add(ESCALATE, "a glob in a working directory decided at run time")
            return
        expanded = [argv[0]]
        for word, glob in zip(argv[1:], seg.globs[1:], strict=False):
            if not glob:
                expanded.append(word)
                continue
            import glob as globmod

            pattern = policy.home + word[1:] if word.startswith("~/") else word
            found = sorted(globmod.glob(pattern, root_dir=cwds[0]))[:1001]
            if len(found) > 1000:
                d.add(ESCALATE, f"{word!r} matches too many files to judge")
                return
            if any(f.startswith("-") for f in found):
                d.add(ESCALATE, f"{word!r} matches a file name that reads as an option")
                return
            expanded += found or [word]
        argv = expanded
    problem, uses = modelled.model(argv)
    if problem:
        d.add(ESCALATE, problem)
        return
    if seg.name not in modelled.BUILTINS and not _trusted_program(policy, seg.name):
        d.add(ESCALATE, f"{seg.name} does not resolve to a program outside the writable "
                        "places")
        return
    for path, how in uses:
        for full in _paths_in(policy, d, path, cwds):
            if how == "git":
                _check_git(policy, d, full)
                continue
            policy.check_read(d, full, "/", explicit=False)
            if how == "tree" and d.verdict.rank < ESCALATE.rank:
                policy.check_tree(d, full)


def _trusted_program(policy: Policy, name: str) -> bool:
    for folder in os.environ.get("PATH", "/usr/bin:/bin").split(":"):
        if not folder.startswith("/"):
            return False  # an empty or relative PATH entry: the working directory
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            real = os.path.realpath(candidate)
            return not any(paths.covers(r, real) or paths.covers(r, folder)
                           for r in policy.allow_write)
    return False


def _check_git(policy: Policy, d: Decision, where: str) -> None:
    if any(k in os.environ for k in _GIT_PLACE_ENV):
        d.add(ESCALATE, "git's repository is chosen by the environment (GIT_DIR ...)")
        return
    cur = where
    for _ in range(256):
        dotgit = os.path.join(cur, ".git")
        if os.path.lexists(dotgit):
            if os.path.islink(dotgit) or not os.path.isdir(dotgit):
                d.add(ESCALATE, f"{dotgit} points git at another directory")
            elif os.path.lexists(os.path.join(dotgit, "commondir")):
                d.add(ESCALATE, f"{dotgit}/commondir points git at another directory")
            return
        parent = os.path.dirname(cur)
        if parent == cur:
            return
        cur = parent
    d.add(ESCALATE, "git repository too deep to find")
