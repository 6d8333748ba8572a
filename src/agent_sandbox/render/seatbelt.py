"""macOS Seatbelt (SBPL) profiles for ``sandbox-exec``, with srt's semantics.


For every user on a macOS host ``seatbelt_profile`` renders:

- deny by default;
- reads allowed except ``deny_read`` (with ``allow_read`` carve-outs): rules are
  emitted in increasing specificity, and since SBPL lets the *last* matching rule
  win, the most specific rule decides (a tie goes to the allow); then every glob
  deny again, after all allows, minus only the carve-outs the glob itself covers,
  so a longer ``allow_read`` (the repository) never re-opens ``repo/.env``;
- writes only under ``allow_write``, then every ``deny_write`` entry and the
  protected set (``agent_sandbox.protected``) emitted after the allows, so a deny
  always beats an allow. A deny covers its name too (``x/**`` covers ``x``);
- no create, unlink or rename of a write-denied path or protected name, of any
  folder above one, of the writable roots, the working directory or the home: a
  name that does not exist yet cannot be planted as a symlink (or a git file),
  and a rename cannot carry a rule away. No unlink or rename of what may not be
  read, minus its carve-outs (rm and mv work in a re-allowed repository);
- every deny matches letters in either case (macOS volumes are case-insensitive);
- literal denied paths are listed per user (``denied_paths``); the role resolves
  them on the host and appends ``resolved_denies`` for those that are links;
- sysctl reads from an allowlist (nothing about other processes), pseudo-terminals
  only with ``platforms.macos.allow_pty``, AF_UNIX sockets only when a unix
  socket is allowed, POSIX IPC under multiprocessing's names only;
- network only to the proxy port(s) on localhost;
- a mach-lookup allowlist sufficient for common tools. ``com.apple.trustd.agent``
  is on it by default (``platforms.macos.allow_mach_lookup``) because Go, and
  anything else verifying TLS through Security.framework, fails without it. The
  trade-off: trustd runs outside the sandbox and may fetch OCSP/CRL data on the
  sandboxed program's behalf, a narrow channel that bypasses the proxy. Remove it
  from the list where that matters more than Go tooling.

``tests/platforms/test_macos_vs_srt.py`` holds the result against srt's own
generator: no probe may be allowed here and denied there.

Seatbelt matches resolved paths, so ``/tmp``, ``/var`` and ``/etc`` become
``/private/...``. Globs become SBPL regexes. A relative rule is relative to the
working directory, given to ``sandbox-exec`` as ``-D CWD=...``; a relative *glob*
cannot be anchored there, so a relative deny glob matches at any depth (denies
more) and a relative allow glob is dropped (allows less): both fail closed. A
relative literal deny matches at the working directory and at any depth too: the
folders above the working directory are unknown when the profile is rendered, so
renaming one must not carry the denied path out of its rule.
Pure: (spec, home) -> profile text. Never writes files or starts processes.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Iterable
from typing import Any

from ..spec import paths
from ..spec.models import Spec
from . import RenderError
from .templating import environment

# Mach services that common command-line tools need. trustd is not here: it is
# in the spec's allow_mach_lookup default so it can be removed (see above).
# Preferences go through ``user-preference-read``, not the cfprefsd daemons, and
# the diagnostics and analytics daemons are left out: both carry data out of the
# sandbox and nothing a command-line tool needs depends on them.
BASE_MACH_LOOKUP: tuple[str, ...] = (
    "com.apple.bsd.dirhelper",
    "com.apple.coreservices.launchservicesd",
    "com.apple.lsd.mapdb",
    "com.apple.logd",
    "com.apple.system.logger",
    "com.apple.system.notification_center",
    "com.apple.system.opendirectoryd.libinfo",
    "com.apple.system.opendirectoryd.membership",
    "com.apple.SecurityServer",
    "com.apple.securityd.xpc",
)

# sysctls a sandboxed tool may read: hardware and OS identity that runtimes
# (Python, Node, Go, the JVM) query at start. Nothing that describes other
# processes (kern.procargs2 holds their arguments and environment,
# kern.proc.all lists them) and nothing about the host's boot or identity.
SYSCTL_READ_NAMES: tuple[str, ...] = (
    "hw.activecpu", "hw.byteorder", "hw.cachelinesize", "hw.cpufamily", "hw.cpufrequency",
    "hw.cputype", "hw.l1dcachesize", "hw.l1icachesize", "hw.l2cachesize", "hw.l3cachesize",
    "hw.logicalcpu", "hw.logicalcpu_max", "hw.machine", "hw.memsize", "hw.model", "hw.ncpu",
    "hw.nperflevels", "hw.packages", "hw.pagesize", "hw.physicalcpu", "hw.physicalcpu_max",
    "hw.tbfrequency", "hw.vectorunit", "kern.argmax", "kern.hostname", "kern.maxfiles",
    "kern.maxfilesperproc", "kern.maxproc", "kern.ngroups", "kern.osproductversion",
    "kern.osrelease", "kern.ostype", "kern.osversion", "kern.secure_kernel",
    "kern.usrstack64", "kern.version", "machdep.ptrauth_enabled", "sysctl.proc_cputype",
    "vm.loadavg",
)
SYSCTL_READ_PREFIXES: tuple[str, ...] = (
    "hw.optional.", "hw.perflevel", "machdep.cpu.",
    "kern.proc.pid.",  # a process's own kinfo_proc (getppid, ps of itself); not its arguments
)

# POSIX semaphore and shared-memory names Python's multiprocessing creates
# (``/mp-...`` semaphores, ``/psm_...`` shared_memory). The names are one
# namespace for the whole machine, so only these are opened, not those of
# every other program.
IPC_POSIX_NAME_REGEX = "^/(mp-|psm_)"

# Seatbelt sees the resolved path: these top-level links point into /private.
_PRIVATE_LINKS = ("/tmp", "/var", "/etc")


def protected_rules(home: str) -> tuple[str, ...]:
    """The project's protected set (``agent_sandbox.protected``) as path rules for
    one home: never writable, never plantable, at any depth below a writable root."""
    from .. import protected

    return (*protected.any_depth_rules(), *protected.home_rules(home))


# --------------------------------------------------------------------------- SBPL


def _private(path: str) -> str:
    for link in _PRIVATE_LINKS:
        if path == link or path.startswith(link + "/"):
            return "/private" + path
    return path


def _quote(text: str) -> str:
    if '"' in text or "\n" in text or "\x00" in text:
        raise RenderError(f"path {text!r} cannot be written into a Seatbelt profile "
                          "(it contains a double quote, newline or NUL)")
    return '"' + text.replace("\\", "\\\\") + '"'


_ERE_SPECIAL = set(".^$+?()[]{}|\\*")
# Characters outside ASCII that Unicode case folding (which case-insensitive
# APFS applies) turns into an ASCII letter: KELVIN SIGN is k, LONG S is s, so
# ".\u017fandbox" (long s) is the same name as ".sandbox" there.
_FOLDS_TO = {"k": ("\u212a",), "s": ("\u017f",)}
# ... and the characters that fold into two or three ASCII letters (ligatures, sharp s).
_FOLDS_TO_MANY = {"ss": ("\u00df", "\u1e9e"), "ff": ("\ufb00",), "fi": ("\ufb01",),
                  "fl": ("\ufb02",), "ffi": ("\ufb03",), "ffl": ("\ufb04",),
                  "st": ("\ufb05", "\ufb06")}


def _spellings(word: str) -> list[str]:
    """Every spelling that folds to ``word`` (lower-case ASCII letters)."""
    if not word:
        return [""]
    out: list[str] = []
    for n in (1, 2, 3):
        head, rest = word[:n], word[n:]
        if len(head) < n:
            break
        if n == 1:
            heads: tuple[str, ...] = (head, head.upper(), *_FOLDS_TO.get(head, ()))
        else:
            heads = _FOLDS_TO_MANY.get(head, ())
        out += [h + tail for h in heads for tail in _spellings(rest)]
    return out
_ERE_TOKENS = {"dirs": "(.*/)?", "any": ".*", "star": "[^/]*", "one": "[^/]"}


# sandbox-exec refuses a string literal longer than about 1 KiB ("Error reading
# string"), and one such string invalidates the whole profile.
SBPL_STRING_MAX = 900


@functools.lru_cache(maxsize=4096)
def glob_to_ere(pattern: str, fold: bool = False) -> str:
    """A path glob (``paths`` semantics) as a POSIX extended regex for SBPL.

    Covers what ``paths.covers`` covers: the match itself and everything below.
    A pattern not anchored at ``/`` matches at any depth. ``fold`` matches
    letters in either case: macOS volumes are case-insensitive by default, so
    ``.Claude`` created in the sandbox is the ``.claude`` an agent on the host
    opens. Deny rules fold (they deny more); allow rules never do. Where folding
    the whole path would make the regex too long for sandbox-exec, only its
    last components are folded (those are the ones that may not exist yet).
    """
    tokens = paths.glob_tokens(pattern)
    head = "^" if pattern.startswith(("/", "**")) else "^(.*/)?"
    cuts = [0] + [i + 1 for i, t in enumerate(tokens) if t == ("lit", "/")] if fold else []
    for start in cuts or [len(tokens)]:
        ere = head + _ere_body(tokens, start) + "(/.*)?$"
        if len(ere) <= SBPL_STRING_MAX:
            return ere
    return head + _ere_body(tokens, len(tokens)) + "(/.*)?$"


def _ere_body(tokens: list[tuple[str, str]], fold_from: int) -> str:
    out: list[str] = []
    skip = 0
    for i, (kind, text) in enumerate(tokens):
        if skip:
            skip -= 1
            continue
        if kind == "lit" and i >= fold_from:
            window = ""
            for n in (3, 2):
                run = tokens[i:i + n]
                if len(run) == n and all(k == "lit" for k, _ in run):
                    cand = "".join(t for _, t in run).lower()
                    if cand in _FOLDS_TO_MANY:
                        window = cand
                        break
            if window:
                out.append("(" + "|".join(_spellings(window)) + ")")
                skip = len(window) - 1
                continue
        if kind == "class":
            out.append("[" + text + "]")
        elif kind == "lit":
            if i >= fold_from and text.lower() in _FOLDS_TO:
                out.append("(" + "|".join((text.lower(), text.upper(),
                                           *_FOLDS_TO[text.lower()])) + ")")
            elif i >= fold_from and text.lower() != text.upper():
                out.append("[" + text.lower() + text.upper() + "]")
            else:
                out.append("\\" + text if text in _ERE_SPECIAL else text)
        else:
            out.append(_ERE_TOKENS[kind])
    return "".join(out)


def _regex(pattern: str, fold: bool = False, exact: bool = False) -> str:
    """A ``regex`` filter for a glob (or a literal path read as one); ``exact``
    matches the path itself only, not what is below it."""
    ere = glob_to_ere(pattern, fold)
    if exact:
        ere = ere[: -len("(/.*)?$")] + "$"
    if '"' in ere or "\n" in ere:
        raise RenderError(f"path {pattern!r} cannot be written into a Seatbelt profile "
                          "(it contains a double quote or newline)")
    if len(ere.encode()) > SBPL_STRING_MAX:
        raise RenderError(f"path {pattern!r} is too long for a Seatbelt profile")
    return f'(regex #"{ere}")'


def _expand(rule: str, home: str) -> str:
    """``~`` expanded; absolute and ``**/`` rules as they are; relative kept relative."""
    if rule == "~":
        return posixpath.normpath(home)
    if rule.startswith("~/"):
        return posixpath.normpath(posixpath.join(home, rule[2:]))
    if rule.startswith("/"):
        return posixpath.normpath(rule)
    return rule


def _filters(rule: str, home: str, *, deny: bool) -> tuple[str, ...]:
    """SBPL filters covering an (unexpanded) rule; ``()`` when it must be dropped."""
    return _filters_for(rule, home if rule.startswith("~") else "", deny)


@functools.lru_cache(maxsize=16384)
def _filters_for(rule: str, home: str, deny: bool) -> tuple[str, ...]:
    exp = _expand(rule, home)
    glob = paths.is_glob(exp)
    if exp.startswith("/"):
        real = _private(exp)
        if glob or deny:
            _quote(real)
            return (_regex(real, fold=deny),)
        return (f"(subpath {_quote(real)})",)
    if exp.startswith("**"):
        return (_regex(exp, fold=deny),)
    # relative to the working directory
    rel = posixpath.normpath(exp)
    if glob:
        return (_regex(rel, fold=True),) if deny else ()
    if rel == ".":
        return ('(subpath (param "CWD"))',)
    anchored = f'(subpath (string-append (param "CWD") {_quote("/" + rel)}))'
    if deny and not rel.startswith(".."):
        # also at any depth: renaming a folder above the working folder (which
        # the profile cannot name) must not carry the denied path out of its rule
        return (anchored, _regex(rel, fold=True))
    return (anchored,)


def _ancestors(rule: str, home: str) -> tuple[str, ...]:
    return _ancestors_for(rule, home if rule.startswith("~") else "")


@functools.lru_cache(maxsize=16384)
def _ancestors_for(rule: str, home: str) -> tuple[str, ...]:
    """SBPL filters for the directories above a denied path, root excluded.

    An anchored rule yields its literal ancestors (for a glob: the fixed
    directory before the first glob and everything above it). A rule that
    matches at any depth (``**/.git/hooks/**``) yields exact regexes for each
    directory on the way (``.git``), wherever it is.
    """
    exp = _expand(rule, home)
    if exp.startswith("/"):
        if paths.is_glob(exp):
            cut = min(exp.index(c) for c in paths.GLOB_CHARS if c in exp)
            cur = exp[:cut].rsplit("/", 1)[0]
        else:
            cur = posixpath.dirname(exp)
        chain: list[str] = []
        while cur and cur != "/":
            chain.append(_private(cur))
            cur = posixpath.dirname(cur)
        return tuple(_regex(p, fold=True, exact=True) for p in chain)
    body = exp
    while body.startswith("**/"):
        body = body[3:]
    parts = [p for p in body.split("/") if p]
    out: list[str] = []
    for i in range(1, len(parts)):
        prefix = parts[:i]
        if any(paths.is_glob(p) for p in prefix):
            break
        out.append(_regex("/".join(prefix), fold=True, exact=True))
    return tuple(out)


def _self_and_ancestors(rule: str, home: str) -> tuple[str, ...]:
    """Filters for an anchored literal rule's own path and every directory above it."""
    exp = _expand(rule, home)
    if not exp.startswith("/") or exp == "/":
        return ()
    return (_regex(_private(exp), fold=True, exact=True), *_ancestors(rule, home))


def _proxy_ports(spec: Spec) -> list[int]:
    ports = {spec.platforms.macos.proxy_port}
    if spec.network.socks_proxy_port:
        ports.add(spec.network.socks_proxy_port)
    if spec.network.http_proxy_port:
        ports.add(spec.network.http_proxy_port)
    return sorted(ports)


def _name_rule(rule: str) -> str:
    """A deny rule that covers the name itself, not only what is below it.

    ``**/.claude/**`` leaves ``.claude`` free to be created as a symlink to a
    writable folder; ``**/.claude`` covers the name and everything below it.
    """
    while rule.endswith("/**"):
        rule = rule[:-3]
    return rule


def _sample(rule: str) -> str:
    """A concrete path of the shape a rule matches (glob parts replaced)."""
    return re.sub(r"\*\*/|\[[^\]]*\]|[*?]+", "x", rule)


def _read_rules(spec: Spec, home: str) -> list[tuple[str, str]]:
    """(action, filter) for file-read*, in emission order (the last match wins).

    Denies and carve-outs in increasing specificity (a tie goes to the allow);
    then every glob deny again, after all allows, minus the carve-outs the glob
    itself covers: a leaf glob (``**/.env``) covers no directory allow, so a
    longer ``allow_read`` (the repository) cannot re-open ``repo/.env``; a
    region glob (``~/**``) keeps its own carve-outs.
    """
    fs = spec.filesystem
    ordered: list[tuple[int, int, str, str]] = []
    deny_read = [_name_rule(r) for r in fs.deny_read]
    for rule in deny_read:
        n = paths.specificity(_expand(rule, home))
        ordered += [(n, 0, "deny", f) for f in _filters(rule, home, deny=True)]
    for rule in fs.allow_read:
        n = paths.specificity(_expand(rule, home))
        ordered += [(n, 1, "allow", f) for f in _filters(rule, home, deny=False)]
    ordered.sort(key=lambda r: (r[0], r[1], r[3]))
    out = [(action, f) for _, _, action, f in ordered]
    for rule in deny_read:
        exp = _expand(rule, home)
        if not paths.is_glob(exp):
            continue
        carve = [f for a in fs.allow_read for f in _filters(a, home, deny=False)
                 if paths.covers(exp, _sample(_expand(a, home)))]
        out += [("deny", _minus(f, carve)) for f in _filters(rule, home, deny=True)]
    return out


def _minus(filt: str, carve: list[str]) -> str:
    if not carve:
        return filt
    return "(require-all " + filt + "".join(f" (require-not {c})" for c in carve) + ")"


def _read_denied(rules: list[tuple[str, str]]) -> list[str]:
    """Filters matching exactly the paths the read rules deny.

    With the last match winning, a path is denied when some deny matches it and
    no allow emitted after that deny does: each deny minus the later allows.
    """
    out = []
    for i, (action, f) in enumerate(rules):
        if action == "deny":
            later = _dedupe([g for a, g in rules[i + 1:] if a == "allow"])
            out.append(_minus(f, later))
    return out


def seatbelt_profile(spec: Spec, home: str) -> str:
    """The SBPL profile text for one user's home."""
    fs, net, mac = spec.filesystem, spec.network, spec.platforms.macos
    for name in mac.allow_mach_lookup:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            raise RenderError(f"platforms.macos.allow_mach_lookup: {name!r} is not a mach "
                              "service name")

    read_rules = _read_rules(spec, home)
    write_allow = [f for r in fs.allow_write for f in _filters(r, home, deny=False)]
    deny_write = [_name_rule(r) for r in fs.deny_write]
    deny_read = [_name_rule(r) for r in fs.deny_read]
    write_deny = [f for r in deny_write for f in _filters(r, home, deny=True)]
    protected = list(dict.fromkeys(_name_rule(r) for r in protected_rules(home)))
    mandatory = [f for r in protected for f in _filters(r, home, deny=True)]

    # Never created, removed or renamed: what may not be written (the name
    # itself, so nothing can be planted there as a symlink or a git file) and
    # every directory above it (so a missing parent cannot be planted either).
    write_guarded = [*deny_write, *protected]
    plant_guard = [f for r in write_guarded for f in _filters(r, home, deny=True)]
    # (Python's start-up patterns excepted: a folder named bin, Scripts or
    # site-packages must stay creatable, and their names are never written)
    from .. import protected as _protected

    startup = {_name_rule(r) for r in _protected.python_rules()}
    plant_guard += [a for r in write_guarded if r not in startup for a in _ancestors(r, home)]
    # ... nor the roots themselves, the working directory (relative rules are
    # anchored there) or the home folder, nor any directory above them: a
    # rename there would carry every rule anchored below away from its path.
    roots = [r for r in fs.allow_write if r.startswith(("/", "~")) and not paths.is_glob(r)]
    plant_guard += ['(literal (param "CWD"))']
    plant_guard += [a for r in [*roots, "~"] for a in _self_and_ancestors(r, home)]
    # Never removed or renamed: what may not be read, minus its carve-outs (so
    # rm and mv inside a re-allowed repository still work), and the literal
    # directories above a denied path (a rename there carries it away). A
    # literal denied path is not created either (a symlink planted there would
    # catch what the host later writes to it).
    read_literal = [r for r in deny_read if not paths.is_glob(r)]
    move_guard = _read_denied(read_rules)
    move_guard += [a for r in deny_read for a in _ancestors(r, home)]
    read_plant_guard = [_regex(_private(exp), fold=True, exact=True) for exp in
                        (_expand(r, home) for r in read_literal) if exp.startswith("/")]

    def lines(fmt: str, items: Iterable[str]) -> str:
        return "".join(fmt.format(x) + "\n" for x in items)

    services = sorted(set(BASE_MACH_LOOKUP) | set(mac.allow_mach_lookup))
    unix_any = net.allow_all_unix_sockets or bool(net.allow_unix_sockets)
    text: str = _template().render(
        home=home,
        mach_services=lines('  (global-name "{}")', services),
        sysctl_names=lines('  (sysctl-name "{}")', SYSCTL_READ_NAMES),
        sysctl_prefixes=lines('  (sysctl-name-prefix "{}")', SYSCTL_READ_PREFIXES),
        ipc_regex=IPC_POSIX_NAME_REGEX,
        allow_pty=mac.allow_pty,
        read_rules="".join(f"({action} file-read* {f})\n" for action, f in read_rules),
        any_read_deny=bool(fs.deny_read),
        write_allow=lines("(allow file-write* {})", _dedupe(write_allow)),
        write_deny=lines("(deny file-write* {})", _dedupe(write_deny)),
        mandatory=lines("(deny file-write* {})", _dedupe(mandatory)),
        plant_guard=lines("(deny file-write-create file-write-unlink {})",
                          _dedupe(plant_guard + read_plant_guard)),
        move_guard=lines("(deny file-write-unlink {})", _dedupe(move_guard)),
        proxy_ports=lines('(allow network-outbound (remote ip "localhost:{}"))',
                          map(str, _proxy_ports(spec))),
        allow_local_binding=net.allow_local_binding,
        unix_socket_domain=unix_any,
        unix_sockets="".join(
            f"(allow network-outbound (remote unix-socket (path-literal {q})))\n"
            f"(allow network-bind (local unix-socket (path-literal {q})))\n"
            for q in (_quote(_private(p)) for p in net.allow_unix_sockets)),
        allow_all_unix_sockets=net.allow_all_unix_sockets,
    )
    return text


# ------------------------------------------------------ links resolved on the host


def denied_paths(spec: Spec, home: str) -> dict[str, list[str]]:
    """The anchored literal paths the profile denies, as Seatbelt spells them.

    Seatbelt matches the resolved path, and the renderer cannot see the host: if
    ``~/.ssh`` is a symbolic link, a rule for ``~/.ssh`` never matches. The role
    resolves these paths on the host and appends ``resolved_denies`` for the
    ones that differ (``roles/sandbox_macos``).
    """
    def literal(rules: list[str]) -> list[str]:
        out = []
        for rule in rules:
            exp = _expand(_name_rule(rule), home)
            if exp.startswith("/") and not paths.is_glob(exp):
                out.append(_private(exp))
        return sorted(set(out))

    fs = spec.filesystem
    return {"read": literal(fs.deny_read), "write": literal(fs.deny_write)}


def resolved_denies(denied: dict[str, list[str]], resolved: dict[str, str]) -> str:
    """Deny rules for the resolved form of each denied path that resolves elsewhere.

    Appended at the end of the profile: denies only, so they can only tighten it.
    """
    out: list[str] = []
    for kind in ("read", "write"):
        for path in denied.get(kind, []):
            real = resolved.get(path)
            if not real or real == path:
                continue
            if not real.startswith("/"):
                raise RenderError(f"resolved form of {path!r} is not absolute: {real!r}")
            real = posixpath.normpath(real)
            op = "file-read*" if kind == "read" else "file-write*"
            out.append(f";; {path} resolves to {real} on this host")
            out.append(f"(deny {op} {_regex(real, fold=True)})")
            guard = [_regex(real, fold=True), *_ancestors(real, "")]
            out += [f"(deny file-write-create file-write-unlink {g})" for g in guard]
    return "".join(line + "\n" for line in out)


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    return environment().get_template("macos/sandbox.sb.j2")


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    return [x for x in items if not (x in seen or seen.add(x))]  # type: ignore[func-returns-value]
