"""srt's settings keys that change nothing under ``sandbox exec``, held to srt's
schema all the same (``sandbox-config.ts``): a file srt refuses is refused on
every backend, so a settings file never means one thing to srt and another here.

Which keys these are, and why each changes nothing, is in ``settings``' module
doc. Never loosens anything: it only refuses.
"""

from __future__ import annotations

from .failures import SettingsError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# top-level keys of srt's that change nothing here; checked for srt's types all the same
_TOP_BOOL = ("enableWeakerNestedSandbox", "enableWeakerNetworkIsolation", "allowAppleEvents",
             "allowPty")
_TOP_BINARY = ("bwrapPath", "socatPath", "javaAgentJarPath")


def check_inert_keys(data: dict[str, Any], net: dict[str, Any], fs: dict[str, Any],
              source: str) -> None:
    """The keys of srt's that change nothing here, held to srt's schema: a file
    srt refuses is refused on every backend (see the module doc)."""
    def fail(key: str, what: str) -> SettingsError:
        return SettingsError(f"{source}: {key}: {what}")

    def strings(value: Any) -> bool:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)

    for key in _TOP_BOOL:
        if data.get(key) is not None and not isinstance(data[key], bool):
            raise fail(key, "expected true or false")
    for key in _TOP_BINARY:
        v = data.get(key)
        if v is not None and (not isinstance(v, str) or not v.startswith("/")):
            raise fail(key, f"expected an absolute path, got {v!r} (a relative one would be "
                            "looked up from the working directory or PATH)")
    if fs.get("allowGitConfig") is not None and not isinstance(fs["allowGitConfig"], bool):
        raise fail("filesystem.allowGitConfig", "expected true or false")
    mach = net.get("allowMachLookup")
    if mach is not None:
        if not strings(mach):
            raise fail("network.allowMachLookup", "expected a list of strings")
        for v in mach:
            if "*" in (v[:-1] if v.endswith("*") else v):
                raise fail("network.allowMachLookup", f"{v!r}: a '*' is allowed only once, "
                                                      "at the end (com.example.* or *)")
    rg = data.get("ripgrep")
    if rg is not None and not (isinstance(rg, dict) and isinstance(rg.get("command"), str)
                               and (rg.get("args") is None or strings(rg["args"]))
                               and isinstance(rg.get("argv0", ""), str)):
        raise fail("ripgrep", "expected {command: string, args?: [string], argv0?: string}")
    sc = data.get("seccomp")
    if sc is not None and not (isinstance(sc, dict) and all(
            isinstance(sc.get(k, ""), str) for k in ("applyPath", "argv0"))):
        raise fail("seccomp", "expected {applyPath?: string, argv0?: string}")
    iv = data.get("ignoreViolations")
    if iv is not None and not (isinstance(iv, dict) and all(strings(v) for v in iv.values())):
        raise fail("ignoreViolations", "expected an object of command patterns to path lists")
    git = data.get("git")
    if git is not None and not (isinstance(git, dict) and strings(git.get("safeDirectories",
                                                                          []))):
        raise fail("git", "expected {safeDirectories?: [string]}")
    tls = net.get("tlsTerminate")
    if tls is not None:
        if not isinstance(tls, dict):
            raise fail("network.tlsTerminate", "expected an object")
        if bool(tls.get("caCertPath")) != bool(tls.get("caKeyPath")):
            raise fail("network.tlsTerminate", "caCertPath and caKeyPath go together")


# srt 0.0.83's proxy options that hold only around its ``filterRequest``, a library
# callback no settings file can carry: inert in a settings file, typed as srt types them
_FILTER_ONLY = {"allowPlaintextHeaderSet": "bool", "ambiguousRequestTarget": "target"}
# what srt 0.0.83 enforces and this proxy does not (yet): set to what asks for more than
# the default, the file is srt's alone (``Settings.srt_only``), never silently looser
_STRICTER_THERE = ("requireHostMatch", "refuseOpaqueTunnels", "stripResponseHeaders")


def srt_083_only(data: dict[str, Any], net: dict[str, Any], source: str) -> tuple[str, ...]:
    """srt 0.0.83's new keys: typed as srt's schema types them (a file srt refuses is
    refused here too), and those this backend does not enforce, when set to more
    than the default, named for ``require_enforceable``: ``allowNestedUserNamespaces:
    true`` (sandbox exec never lets the command make user namespaces: they would give
    up the write denies), ``requireHostMatch``, ``refuseOpaqueTunnels``, a non-empty
    ``stripResponseHeaders``."""
    def fail(key: str, what: str) -> SettingsError:
        return SettingsError(f"{source}: {key}: {what}")

    for key, kind in _FILTER_ONLY.items():
        v = net.get(key)
        if v is None:
            continue
        if kind == "bool" and not isinstance(v, bool):
            raise fail(f"network.{key}", "expected true or false")
        if kind == "target" and v not in ("refuse", "asSpelled", "normalize"):
            raise fail(f"network.{key}", "expected refuse, asSpelled or normalize")
    only: list[str] = []
    for key in ("requireHostMatch", "refuseOpaqueTunnels"):
        v = net.get(key)
        if v is not None and not isinstance(v, bool):
            raise fail(f"network.{key}", "expected true or false")
        if v:
            only.append(f"network.{key}")
    strip = net.get("stripResponseHeaders")
    if strip is not None:
        if not isinstance(strip, list) or not all(isinstance(h, str) and h for h in strip):
            raise fail("network.stripResponseHeaders", "expected a list of header names")
        if strip:
            only.append("network.stripResponseHeaders")
    nested = data.get("allowNestedUserNamespaces")
    if nested is not None and not isinstance(nested, bool):
        raise fail("allowNestedUserNamespaces", "expected true or false")
    if nested:
        only.append("allowNestedUserNamespaces")
    return tuple(only)
