"""The hosts a tool call reaches: the host of a fetch tool's URL as a WHATWG
parser reads it, and every host a shell command may connect to (URLs in its
arguments, network tools, remote shells, git remotes, package registries).

Pure apart from reading a repository's ``.git/config`` for a remote's URL. It
finds more hosts than a client would, never fewer; what it cannot read exactly
is ``None``, which the engine denies.
"""

from __future__ import annotations

import os
import posixpath

from . import shell

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the hook ~9 ms to import; annotations only
    from types import ModuleType


def domains() -> ModuleType:
    """``spec.domains`` pulls in ipaddress (~5 ms): load it only for host checks."""
    from ..spec import domains

    return domains


NETWORK_TOOLS = frozenset({"curl", "wget", "http", "https", "aria2c", "lynx", "links", "w3m"})
REMOTE_SHELLS = frozenset({"ssh", "scp", "sftp", "nc", "ncat", "netcat", "telnet", "socat",
                           "ftp", "mosh"})
PACKAGE_REGISTRIES = {
    "pip": ("pypi.org", "files.pythonhosted.org"),
    "pip3": ("pypi.org", "files.pythonhosted.org"),
    "uv": ("pypi.org", "files.pythonhosted.org"),
    "npm": ("registry.npmjs.org",),
    "pnpm": ("registry.npmjs.org",),
    "yarn": ("registry.yarnpkg.com",),
    "cargo": ("crates.io", "index.crates.io", "static.crates.io"),
    "gem": ("rubygems.org",),
}
_INSTALL_WORDS = frozenset({"install", "add", "i", "update", "upgrade", "download", "fetch",
                            "sync"})
_GIT_NET = frozenset({"clone", "fetch", "pull", "push", "ls-remote", "submodule"})


def host_of(url: str) -> str | None:
    """The host of a URL-like shell argument (scheme optional), or None.

    Used to find hosts in command arguments, where it only needs to find more
    than a client would; a fetch tool's URL is read by ``url_host``.
    """
    u = url.strip()
    if "://" in u:
        u = u.split("://", 1)[1]
    elif u.startswith("//"):
        u = u[2:]
    u = u.replace("\\", "/").split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in u:
        u = u.rsplit("@", 1)[1]
    if u.startswith("["):
        end = u.find("]")
        return u[: end + 1] if end > 0 else None
    host = u.split(":", 1)[0]
    return host or None


_FORBIDDEN_HOST = frozenset(" #%/:<>?@[\\]^|")


def url_host(url: str) -> str | None:
    """The host a WHATWG URL parser (the one the agents' fetch tools use) reads
    from an http(s) URL, or None when the URL is anything else or anything the
    engine cannot read exactly.

    As the WHATWG parser does: leading and trailing C0 controls and spaces are
    dropped, tabs and newlines anywhere are removed, ``\\`` counts as ``/``, any
    run of slashes after the scheme is skipped, the authority ends at the first
    ``/``, ``\\``, ``?`` or ``#``, the user information ends at its last ``@``,
    and the host is percent-decoded.
    """
    if not isinstance(url, str):
        return None
    u = url.strip("".join(chr(i) for i in range(0x21)))
    u = u.replace("\t", "").replace("\n", "").replace("\r", "")
    scheme, colon, rest = u.partition(":")
    if not colon or scheme.lower() not in ("http", "https"):
        return None
    rest = rest.lstrip("/\\")
    end = len(rest)
    for c in "/\\?#":
        j = rest.find(c)
        if 0 <= j < end:
            end = j
    authority = rest[:end]
    if "@" in authority:
        authority = authority.rsplit("@", 1)[1]
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            return None
        host, port = authority[: close + 1], authority[close + 1 :]
        if port and not (port.startswith(":") and port[1:].isdigit()):
            return None
        return host
    host, _, port = authority.partition(":")
    if port and not port.isdigit():
        return None
    if "%" in host:
        from urllib.parse import unquote

        host = unquote(host, errors="strict") if _percent_ok(host) else ""
    if not host or any(c in _FORBIDDEN_HOST or ord(c) < 0x20 or ord(c) == 0x7F
                       for c in host):
        return None
    return host


def _percent_ok(text: str) -> bool:
    i = text.find("%")
    while i >= 0:
        if len(text) < i + 3 or not all(c in "0123456789abcdefABCDEF" for c in text[i + 1:i + 3]):
            return False
        i = text.find("%", i + 1)
    return True


def hosts_in(seg: shell.Segment, cwd: str) -> list[tuple[str, str]]:
    argv = seg.argv
    name = seg.name
    out: list[tuple[str, str]] = []
    for a in argv[1:]:
        if "://" in a:
            scheme = a.split("://", 1)[0].lower()
            if scheme in ("http", "https", "ftp", "ftps", "ssh", "git", "ws", "wss", "sftp",
                          "rsync", "s3", "gs"):
                h = host_of(a)
                if h:
                    out.append((h, name))
    if name in NETWORK_TOOLS:
        for a in argv[1:]:
            # any bare argument may be a host: localhost, 2130706433, 0x7f.1, [::1]
            if not a.startswith("-") and "://" not in a:
                h = host_of(a)
                if h and _looks_like_host(h):
                    out.append((h, name))
    if name in REMOTE_SHELLS:
        for a in argv[1:]:
            if a.startswith("-"):
                continue
            h = a.split(":", 1)[0]
            if "@" in h:
                h = h.rsplit("@", 1)[1]
            if _looks_like_host(h):
                out.append((h, name))
                if name in ("ssh", "nc", "ncat", "netcat", "telnet", "mosh"):
                    break
    if name == "rsync":
        for a in argv[1:]:
            if ":" in a and not a.startswith("-") and "://" not in a:
                h = a.split(":", 1)[0].rsplit("@", 1)[-1]
                if _looks_like_host(h):
                    out.append((h, "rsync"))
    if name == "git":
        sub = [a for a in argv[1:] if not a.startswith("-")]
        if sub and sub[0] in _GIT_NET:
            remotes = [a for a in sub[1:] if "://" not in a]
            urls = [a for a in sub[1:] if "://" in a or (":" in a and "@" in a)]
            for u in urls:
                if u.lower().startswith("file:"):  # a local repository: no host
                    out.append(("", f"git {sub[0]} (the local repository {u})"))
                elif "://" not in u:
                    h = u.split(":", 1)[0].rsplit("@", 1)[-1]
                    out.append((h, "git"))
            if not urls and sub[0] != "clone":
                name_ = remotes[0] if remotes else "origin"
                url = _git_remote_url(cwd, name_)
                if url and (url.startswith(("/", ".", "~", "file:")) or ":" not in url):
                    # a path remote: no host to check, but it leaves the repository
                    out.append(("", f"git {sub[0]} {name_} (the local repository {url})"))
                elif url:
                    h = host_of(url) if "://" in url else url.split(":", 1)[0].rsplit("@", 1)[-1]
                    if h:
                        out.append((h, f"git {sub[0]} {name_}"))
    if name in PACKAGE_REGISTRIES and len(argv) > 1 and argv[1] in _INSTALL_WORDS:
        for h in PACKAGE_REGISTRIES[name]:
            out.append((h, f"{name} {argv[1]}"))
    return out


def _looks_like_host(h: str) -> bool:
    if not h or h.startswith(("/", ".", "~")) or "=" in h:
        return False
    if domains().parse_ip_literal(h) is not None and any(c.isdigit() for c in h):
        return True
    return ("." in h and all(p and (p.replace("-", "").replace("_", "").isalnum())
                             for p in h.split("."))) or h == "localhost"


def _git_remote_url(cwd: str, remote: str) -> str | None:
    d = cwd
    for _ in range(64):
        cfg = os.path.join(d, ".git", "config")
        if os.path.isfile(cfg):
            try:
                with open(cfg, encoding="utf-8", errors="replace") as fh:
                    text = fh.read(1_000_000)
            except OSError:
                return None
            section = None
            for line in text.splitlines():
                s = line.strip()
                if s.startswith("["):
                    section = s
                    continue
                if section == f'[remote "{remote}"]' and s.startswith("url") and "=" in s:
                    return s.split("=", 1)[1].strip()
            return None
        parent = posixpath.dirname(d)
        if parent == d:
            return None
        d = parent
    return None
