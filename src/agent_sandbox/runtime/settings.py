"""srt-format sandbox settings: parse, validate and expand them.

The runtime's input is the JSON document srt reads (camelCase keys)::

    {"network": {"allowedDomains": [...], "deniedDomains": [...],
                 "allowLocalBinding": false, "allowUnixSockets": [...],
                 "allowAllUnixSockets": false, "httpProxyPort": 3128, "socksProxyPort": 1080},
     "filesystem": {"denyRead": [...], "allowRead": [...],
                    "allowWrite": [...], "denyWrite": [...]}}

On Linux ``allowLocalBinding`` changes nothing: the sandbox has its own network
namespace, so a port bound inside is invisible to the host either way.
``httpProxyPort``/``socksProxyPort`` mean what they mean to srt: an external
proxy already runs on that port of the host's loopback and does the domain
filtering; srt, and ``sandbox exec``'s own proxy (``runtime/proxy/server.py``),
pass that protocol's connections to it instead of deciding them.

A file srt refuses is refused here too, whatever the backend (srt's schema,
``sandbox-config.ts``, is the yardstick; ``tests/exec/test_settings_conformance.py``
feeds the same cases to both): in a file (``load``) the ``network`` and
``filesystem`` objects and their lists ``allowedDomains``, ``deniedDomains``,
``denyRead``, ``allowWrite`` and ``denyWrite`` are required (``[]`` for none);
an IPv6 literal is written in
brackets (``[::1]``, ``[2001:db8::1]:443``); ``bwrapPath``, ``socatPath`` and
``javaAgentJarPath`` are absolute; ``allowMachLookup`` patterns have at most
one ``*``, at the end; a ``mask`` credential needs ``network.tlsTerminate`` (or
``credentials.allowPlaintextInject``); a rooted deny glob may not end in ``/``;
and the other keys srt knows have srt's types.

Semantics are srt's: reads are allowed unless ``denyRead`` covers the path (an
``allowRead`` entry re-opens a more specific part); writes are allowed only under
``allowWrite`` and never under ``denyWrite`` (deny wins); ``~`` is the user's home;
``**/.env``-style globs match at any depth; a domain entry may end in ``:PORT``
(that port only; ``*`` and ``*:PORT`` deny everything, or everything on a port).

The rest of srt's format, key by key (a user's srt file works unchanged, and is
never enforced more loosely than srt would):

- ``network.deniedResolvedAddresses`` (and IP literals in ``deniedDomains``):
  an allowed name that resolves into one is refused, unless that address
  (and port) is itself in ``allowedDomains``;
- ``network.deniedDomainReasons``: the reason is sent with the 403;
- ``credentials.files`` / ``credentials.envVars``: the file is hidden and the
  variable unset inside the sandbox, for ``mask`` as for ``deny`` (masking
  swaps in a stand-in value that srt's proxy replaces on the way out; without
  that, the stricter reading is the safe one);
- ``mandatoryDenySearchDepth``: protected names are searched at least that deep;
- ``network.parentProxy`` (else the proxy's own ``HTTP_PROXY``/``HTTPS_PROXY``/
  ``NO_PROXY``, as srt does) and ``network.mitmProxy``: allowed connections go
  on through that proxy (see ``runtime/upstream.py``);
- ``network.tlsTerminate`` and ``filesystem.disabled: true`` need what only srt
  implements (its TLS-terminating proxy; no filesystem policy at all): the bwrap
  and gVisor backends refuse such a file (``srt_only``), the srt backend passes
  it on; so do srt 0.0.83's ``network.requireHostMatch``,
  ``network.refuseOpaqueTunnels``, a non-empty ``network.stripResponseHeaders``
  and ``allowNestedUserNamespaces: true`` (``srt_keys.srt_083_only``), while its
  ``allowPlaintextHeaderSet`` and ``ambiguousRequestTarget`` hold only around a
  library callback no settings file carries, and change nothing;
- keys that only loosen srt or configure its own tools (``ignoreViolations``,
  ``enableWeakerNestedSandbox``, ``allowGitConfig``, ``strictAllowlist``,
  ``allowPty``, ``bwrapPath``, ...) are accepted and change nothing here: the
  protections they would relax stay on.

Wrong *types* are refused everywhere.

The parser is stdlib-only on purpose: ``sandbox exec`` must start in a few
milliseconds, and importing pydantic would cost more than the sandbox itself.
It never returns settings that are looser than the file says: any malformed
value raises ``SettingsError`` naming the key and what to write instead.
"""

from __future__ import annotations

from agent_sandbox.spec import domains
from agent_sandbox.spec.paths import glob_regex, is_glob

from .failures import SettingsError as SettingsError  # its error, defined with the others

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

USER_SETTINGS = "~/.srt-settings.json"

_NETWORK_BOOL = ("allowLocalBinding", "allowAllUnixSockets", "strictAllowlist")
_NETWORK_LIST = ("allowedDomains", "deniedDomains", "allowUnixSockets")
_NETWORK_PORT = ("httpProxyPort", "socksProxyPort")
_FS_LIST = ("denyRead", "allowRead", "allowWrite", "denyWrite")
# Lists srt's schema requires (an empty list says "none"; a missing one is an error).
_NETWORK_REQUIRED = ("allowedDomains", "deniedDomains")
_FS_REQUIRED = ("denyRead", "allowWrite", "denyWrite")
# What the bwrap and gVisor backends cannot do as srt does (see the module doc).
_SRT_ONLY_NETWORK = ("tlsTerminate",)
_CREDENTIAL_KEYS = frozenset({"files", "envVars", "allowPlaintextInject", "awsPairs", "sigv4"})


def loads(text: str | bytes) -> Any:
    """A settings document's JSON (``json.loads``, refusing ``NaN`` and ``Infinity``)
    without importing ``json`` on the cold start (``quickjson``). Raises ValueError."""
    from agent_sandbox.quickjson import loads as _loads

    return _loads(text, strict=True)


class _Record:
    """A small immutable record (plain class: dataclasses cost startup time)."""

    __slots__: tuple[str, ...] = ()

    def __init__(self, **kw: Any) -> None:
        for name in self.__slots__:
            if name in kw:
                value = kw.pop(name)
            elif hasattr(type(self), "_" + name):
                value = getattr(type(self), "_" + name)
            else:
                raise TypeError(f"{type(self).__name__}: missing field {name!r}")
            object.__setattr__(self, name, value)
        if kw:
            raise TypeError(f"unknown fields {sorted(kw)}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in self.__slots__)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({fields})"


class NetworkSettings(_Record):
    __slots__ = (
        "allow_all_unix_sockets",
        "allow_local_binding",
        "allow_unix_sockets",
        "allowed_domains",
        "denied_addresses",
        "denied_domains",
        "denied_reasons",
        "http_proxy_port",
        "mitm_proxy",
        "parent_proxy",
        "socks_proxy_port",
    )
    allowed_domains: tuple[str, ...]  # canonical; an entry may end in :PORT
    denied_domains: tuple[str, ...]
    denied_addresses: tuple[str, ...]  # canonical networks (``10.0.0.0/8``)
    denied_reasons: tuple[tuple[str, str], ...]  # (canonical denied entry, reason)
    # parentProxy as (http URL, https URL, noProxy), "" where unset; None: not given
    parent_proxy: tuple[str, str, str] | None
    mitm_proxy: tuple[str, tuple[str, ...]] | None  # (socket path, canonical domains)
    allow_local_binding: bool
    allow_unix_sockets: tuple[str, ...]
    allow_all_unix_sockets: bool
    http_proxy_port: int | None
    socks_proxy_port: int | None
    _allowed_domains: tuple[str, ...] = ()
    _denied_domains: tuple[str, ...] = ()
    _denied_addresses: tuple[str, ...] = ()
    _denied_reasons: tuple[tuple[str, str], ...] = ()
    _parent_proxy = None
    _mitm_proxy = None
    _allow_local_binding = False
    _allow_unix_sockets: tuple[str, ...] = ()
    _allow_all_unix_sockets = False
    _http_proxy_port = None
    _socks_proxy_port = None


class FilesystemSettings(_Record):
    __slots__ = ("allow_read", "allow_write", "deny_read", "deny_write")
    deny_read: tuple[str, ...]
    allow_read: tuple[str, ...]
    allow_write: tuple[str, ...]
    deny_write: tuple[str, ...]
    _deny_read: tuple[str, ...] = ()
    _allow_read: tuple[str, ...] = ()
    _allow_write: tuple[str, ...] = ()
    _deny_write: tuple[str, ...] = ()


class Settings(_Record):
    """Parsed srt settings. Paths are as written (``~`` not yet expanded)."""

    __slots__ = ("credential_env", "credential_files", "filesystem", "limits", "network",
                 "passthrough", "search_depth", "source", "srt_only")
    network: NetworkSettings
    filesystem: FilesystemSettings
    source: str
    credential_files: tuple[str, ...]  # hidden inside the sandbox (as written)
    credential_env: tuple[str, ...]  # unset inside the sandbox
    search_depth: int | None  # mandatoryDenySearchDepth
    srt_only: tuple[str, ...]  # keys only the srt backend can enforce
    passthrough: str  # the document as read (JSON), for the srt backend
    # (processes, memory bytes, file size bytes), None for the default (runtime.limits):
    # not srt's, set by sandbox exec's options or the spec's platforms.linux.limits
    limits: tuple[int | None, int | None, int | None]
    _limits: tuple[int | None, int | None, int | None] = (None, None, None)
    _network = NetworkSettings()
    _filesystem = FilesystemSettings()
    _source = "<memory>"
    _credential_files: tuple[str, ...] = ()
    _credential_env: tuple[str, ...] = ()
    _search_depth = None
    _srt_only: tuple[str, ...] = ()
    _passthrough = "{}"

    def with_limits(self, limits: tuple[int | None, int | None, int | None]) -> Settings:
        return Settings(**{**{n: getattr(self, n) for n in self.__slots__}, "limits": limits})

    def to_srt(self) -> dict[str, Any]:
        """The srt JSON document for these settings (round-trips through parse): the
        document as read, with the keys parsed here in their checked form."""
        n, f = self.network, self.filesystem
        doc: dict[str, Any] = loads(self.passthrough)
        net: dict[str, Any] = dict(doc.get("network") or {})
        for key in (*_NETWORK_LIST, *_NETWORK_PORT, "allowAllUnixSockets"):
            net.pop(key, None)
        net.update({
            "allowedDomains": [_bracketed(d) for d in n.allowed_domains],
            "deniedDomains": [_bracketed(d) for d in n.denied_domains],
            "allowLocalBinding": n.allow_local_binding,
        })
        if n.allow_unix_sockets:
            net["allowUnixSockets"] = list(n.allow_unix_sockets)
        if n.allow_all_unix_sockets:
            net["allowAllUnixSockets"] = True
        if n.http_proxy_port is not None:
            net["httpProxyPort"] = n.http_proxy_port
        if n.socks_proxy_port is not None:
            net["socksProxyPort"] = n.socks_proxy_port
        fs: dict[str, Any] = dict(doc.get("filesystem") or {})
        fs.pop("allowRead", None)
        fs.update({
            "denyRead": list(f.deny_read),
            "allowWrite": list(f.allow_write),
            "denyWrite": list(f.deny_write),
        })
        if f.allow_read:
            fs["allowRead"] = list(f.allow_read)
        doc.update({"network": net, "filesystem": fs})
        return doc


def _bracketed(entry: str) -> str:
    """A canonical domain entry as srt reads it: a bare IPv6 literal in brackets."""
    return f"[{entry}]" if entry.count(":") >= 2 and not entry.startswith("[") else entry


def _required(section: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if key not in section:
            raise SettingsError(f"{where}.{key}: required (srt refuses a file without it; "
                                "write [] for none)")


def _domain_entries(items: tuple[str, ...], key: str, where: str) -> None:
    """srt's rule on the entries as written: an IPv6 literal goes in brackets
    (``2001:db8::1:443`` is itself an address: is ``:443`` a port or not?)."""
    for v in items:
        if v.count(":") >= 2 and not v.startswith("["):
            raise SettingsError(f"{where}.{key}: {v!r}: write an IPv6 address in brackets "
                                "([::1], or [2001:db8::1]:443 with a port)")


def _str_list(section: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = section.get(key, [])
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SettingsError(f"{where}.{key}: expected a list of strings, got {value!r}")
    for v in value:
        if not v.strip():
            raise SettingsError(f"{where}.{key}: empty entry")
        if "\x00" in v:
            raise SettingsError(f"{where}.{key}: entry {v!r} contains a NUL byte")
    return tuple(value)


def _path_list(section: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    items = _str_list(section, key, where)
    for v in items:
        if v.startswith("~") and not (v == "~" or v.startswith("~/")):
            raise SettingsError(f"{where}.{key}: {v!r}: only '~' and '~/...' are expanded")
        # compile now: a bad glob is a settings error, not a crash later; only a
        # bracket class can be malformed (``*``, ``**`` and ``?`` always compile),
        # so ``re`` loads only for a glob with a ``[``
        if is_glob(v) and "[" in v:
            import re

            try:
                glob_regex(v)
            except re.error as exc:
                raise SettingsError(f"{where}.{key}: {v!r} is not a valid glob: {exc.msg}"
                                    ) from None
    return items


def parse(data: Any, source: str = "<memory>", text: str | None = None, *,
          complete: bool = False) -> Settings:
    """Validate an srt settings document (already JSON-decoded from ``text``).

    ``complete``: require what srt's schema requires (``load`` does, for every
    file); a document built in memory may leave a list out, read as ``[]``
    (never looser: a missing allow list allows nothing)."""
    if not isinstance(data, dict):
        raise SettingsError(f"{source}: the settings must be a JSON object")
    for key in ("network", "filesystem"):
        if data.get(key) is None and complete:
            raise SettingsError(f"{source}: {key}: required (srt refuses a file without it)")
        if not isinstance(data.get(key, {}), dict) and data.get(key) is not None:
            raise SettingsError(f"{source}: {key}: expected an object")
    net_raw: dict[str, Any] = data.get("network") or {}
    fs_raw: dict[str, Any] = data.get("filesystem") or {}
    where = f"{source}: network"
    if complete:
        _required(net_raw, _NETWORK_REQUIRED, where)
        _required(fs_raw, _FS_REQUIRED, f"{source}: filesystem")
    from .srt_keys import check_inert_keys  # srt's schema for what changes nothing here

    check_inert_keys(data, net_raw, fs_raw, source)
    for key in _NETWORK_BOOL:
        if key in net_raw and not isinstance(net_raw[key], bool):
            raise SettingsError(f"{where}.{key}: expected true or false, got {net_raw[key]!r}")
    ports: dict[str, int | None] = {}
    for key in _NETWORK_PORT:
        v = net_raw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 65535):
            raise SettingsError(f"{where}.{key}: expected a port number 1-65535, got {v!r}")
        ports[key] = v
    allowed = _str_list(net_raw, "allowedDomains", where)
    denied = _str_list(net_raw, "deniedDomains", where)
    _domain_entries(allowed, "allowedDomains", where)
    _domain_entries(denied, "deniedDomains", where)
    try:
        allowed_c = tuple(domains.validate_port_pattern(p, allow_list=True) for p in allowed)
        denied_c = tuple(domains.validate_port_pattern(p, allow_list=False) for p in denied)
    except domains.DomainError as exc:
        raise SettingsError(f"{where}: {exc}") from None
    reasons = _denied_reasons(net_raw, dict(zip(denied, denied_c, strict=True)), where)
    unix = _path_list(net_raw, "allowUnixSockets", where)
    fwhere = f"{source}: filesystem"
    if fs_raw.get("disabled") is not True:
        for key in ("denyRead", "denyWrite"):
            _inert_deny_globs(_str_list(fs_raw, key, fwhere), f"{fwhere}.{key}")
    fs = FilesystemSettings(
        deny_read=_path_list(fs_raw, "denyRead", fwhere),
        allow_read=_path_list(fs_raw, "allowRead", fwhere),
        allow_write=_path_list(fs_raw, "allowWrite", fwhere),
        deny_write=_path_list(fs_raw, "denyWrite", fwhere),
    )
    net = NetworkSettings(
        allowed_domains=allowed_c,
        denied_domains=denied_c,
        denied_addresses=_address_ranges(net_raw, where),
        denied_reasons=reasons,
        parent_proxy=_parent_proxy(net_raw.get("parentProxy"), f"{where}.parentProxy"),
        mitm_proxy=_mitm_proxy(net_raw.get("mitmProxy"), f"{where}.mitmProxy"),
        allow_local_binding=bool(net_raw.get("allowLocalBinding", False)),
        allow_unix_sockets=unix,
        allow_all_unix_sockets=bool(net_raw.get("allowAllUnixSockets", False)),
        http_proxy_port=ports["httpProxyPort"],
        socks_proxy_port=ports["socksProxyPort"],
    )
    if "disabled" in fs_raw and not isinstance(fs_raw["disabled"], bool):
        raise SettingsError(f"{fwhere}.disabled: expected true or false")
    srt_only = tuple(f"network.{k}" for k in _SRT_ONLY_NETWORK if net_raw.get(k) is not None)
    if fs_raw.get("disabled") is True:
        srt_only += ("filesystem.disabled",)
    from .srt_keys import srt_083_only  # srt 0.0.83's keys this backend does not enforce

    srt_only += srt_083_only(data, net_raw, source)
    files, env = _credentials(data.get("credentials"), f"{source}: credentials",
                              tls=net_raw.get("tlsTerminate") is not None,
                              enforced=fs_raw.get("disabled") is not True)
    depth = data.get("mandatoryDenySearchDepth")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int)
                              or not 1 <= depth <= 10):
        raise SettingsError(f"{source}: mandatoryDenySearchDepth: expected a whole number "
                            f"1-10, got {depth!r}")
    if text is None:  # a document built in memory (a file's own text costs no import)
        import json

        text = json.dumps(data)
    return Settings(network=net, filesystem=fs, source=source, credential_files=files,
                    credential_env=env, search_depth=depth, srt_only=srt_only,
                    passthrough=text)


def require_enforceable(settings: Settings, backend: str) -> None:
    """SettingsError when the settings use what only srt implements (see the module
    doc) and ``backend`` is not srt: enforcing the rest alone would be looser."""
    if settings.srt_only and backend != "srt":
        keys = ", ".join(settings.srt_only)
        raise SettingsError(
            f"{settings.source}: {keys}: only the srt backend implements "
            f"{'this' if len(settings.srt_only) == 1 else 'these'}; run with --backend srt, "
            "or remove the key to have this backend enforce the rest"
        )


def _denied_reasons(net: dict[str, Any], canonical: dict[str, str],
                    where: str) -> tuple[tuple[str, str], ...]:
    """``deniedDomainReasons``: keyed by a ``deniedDomains`` entry as written."""
    raw = net.get("deniedDomainReasons")
    if raw is None:
        return ()
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) and v
                                            for k, v in raw.items()):
        raise SettingsError(f"{where}.deniedDomainReasons: expected an object of "
                            "deniedDomains entries to non-empty reasons")
    # an entry with no deniedDomains counterpart never fires (as in srt)
    return tuple((canonical[k], v) for k, v in raw.items() if k in canonical)


def proxy_url(text: str, where: str) -> str:
    """An upstream proxy's URL, checked and normalised (``upstream.parse_upstream``
    says what is accepted)."""
    from .upstream import parse_upstream, redact  # no credentials in messages

    try:
        return parse_upstream(text).url
    except ValueError as exc:
        raise SettingsError(f"{where}: {redact(text)!r}: {exc}") from None


def _parent_proxy(raw: Any, where: str) -> tuple[str, str, str] | None:
    """``parentProxy``: ``{http, https, noProxy}``, each optional."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected an object with http, https and noProxy")
    out = []
    for key in ("http", "https", "noProxy"):
        v = raw.get(key)
        if v is not None and not isinstance(v, str):
            raise SettingsError(f"{where}.{key}: expected a string")
        out.append(proxy_url(v, f"{where}.{key}") if v and key != "noProxy" else (v or ""))
    return out[0], out[1], out[2]


def _mitm_proxy(raw: Any, where: str) -> tuple[str, tuple[str, ...]] | None:
    """``mitmProxy``: ``{socketPath, domains}``."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected an object with socketPath and domains")
    path = raw.get("socketPath")
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        raise SettingsError(f"{where}.socketPath: expected the absolute path of a unix socket")
    listed = _str_list(raw, "domains", where)
    if not listed:
        raise SettingsError(f"{where}.domains: expected at least one domain")
    try:
        names = tuple(domains.validate_pattern(d, allow_list=True) for d in listed)
    except domains.DomainError as exc:
        raise SettingsError(f"{where}.domains: {exc}") from None
    return path, names


def _address_ranges(net: dict[str, Any], where: str) -> tuple[str, ...]:
    """``deniedResolvedAddresses``: IP literals and CIDR ranges, canonical."""
    items = _str_list(net, "deniedResolvedAddresses", where)
    if not items:
        return ()
    import ipaddress

    out: list[str] = []
    for v in items:
        try:
            out.append(str(ipaddress.ip_network(v.strip(), strict=False)))
        except ValueError:
            raise SettingsError(
                f"{where}.deniedResolvedAddresses: {v!r} is not an IP address or CIDR range "
                "(such as 10.0.0.0/8, 192.168.1.10 or fc00::/7, IPv6 without brackets)"
            ) from None
    return tuple(dict.fromkeys(out))


def _credentials(raw: Any, where: str, tls: bool = False,
                 enforced: bool = True) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``credentials``: the files to hide and the variables to unset. ``tls``:
    the settings have ``network.tlsTerminate`` (srt masks only through it);
    ``enforced``: the filesystem policy applies (no ``filesystem.disabled``)."""
    if raw is None:
        return (), ()
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: expected an object")
    unknown = sorted(set(raw) - _CREDENTIAL_KEYS)
    if unknown:  # srt refuses these too: a misspelt key must not protect nothing
        raise SettingsError(f"{where}: unknown key {unknown[0]!r} (known: "
                            f"{', '.join(sorted(_CREDENTIAL_KEYS))})")
    plaintext = raw.get("allowPlaintextInject")
    if plaintext is not None and not isinstance(plaintext, bool):
        raise SettingsError(f"{where}.allowPlaintextInject: expected true or false")
    masked = [e for key in ("files", "envVars") for e in (raw.get(key) or [])
              if isinstance(e, dict) and e.get("mode") == "mask"]
    if masked and not tls and not plaintext:
        raise SettingsError(f"{where}: mode 'mask' needs network.tlsTerminate (srt substitutes "
                            "the real value only over a verified TLS connection); use mode "
                            "'deny', or configure tlsTerminate (srt backend)")
    files: list[str] = []
    env: list[str] = []
    for key, field, out in (("files", "path", files), ("envVars", "name", env)):
        entries = raw.get(key, [])
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise SettingsError(f"{where}.{key}: expected a list")
        for i, entry in enumerate(entries):
            at = f"{where}.{key}[{i}]"
            if not isinstance(entry, dict):
                raise SettingsError(f"{at}: expected an object with {field!r} and 'mode'")
            value, mode = entry.get(field), entry.get("mode")
            if mode not in ("deny", "mask"):
                raise SettingsError(f"{at}.mode: expected 'deny' or 'mask', got {mode!r}")
            if not isinstance(value, str) or not value.strip() or "\x00" in value:
                raise SettingsError(f"{at}.{field}: expected a non-empty string")
            if key == "files" and mode == "mask" and value.endswith("/"):
                raise SettingsError(f"{at}.path: mode 'mask' applies to a file, not a "
                                    "folder; use mode 'deny'")
            if key == "files" and mode == "deny" and enforced:
                _inert_deny_globs((value,), f"{at}.path")
            out.append(value)
    for name in env:
        if not (name[0].isalpha() or name[0] == "_") or not name.isascii() or not all(
                c.isalnum() or c == "_" for c in name):
            raise SettingsError(f"{where}.envVars: {name!r} is not a variable name (letters, "
                                "digits and '_', not starting with a digit)")
    _path_list({"files": files}, "files", where)  # the same path forms as denyRead
    return tuple(dict.fromkeys(files)), tuple(dict.fromkeys(env))


def _inert_deny_globs(items: tuple[str, ...], where: str) -> None:
    """A rooted deny glob ending in ``/`` matches no path: a deny that denies
    nothing is refused (as srt refuses it)."""
    for v in items:
        if v.endswith("/") and is_glob(v) and (v.startswith(("/", "~"))):
            raise SettingsError(f"{where}: deny glob {v!r} ends in '/', so it matches no "
                                f"path; write {v.rstrip('/')!r}, or add a '**' segment")


def load(path: str) -> Settings:
    """Read and validate a settings file."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
        data = loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SettingsError(f"{path}: not valid JSON: {exc}") from None
    return parse(data, source=path, text=text, complete=True)

