"""The native ``sandbox`` launcher: build it and put it in front of the Python entry point.

``python -m agent_sandbox.launcher install BINDIR`` compiles ``sandbox.c`` with
the system C compiler and installs it as ``BINDIR/sandbox``; every subcommand
except a replayable ``sandbox exec`` goes on to ``BINDIR/sandbox-py`` (the
Python entry point, installed by pip next to it). Without a compiler nothing
changes: ``sandbox`` stays the Python entry point and every run plans afresh.

``python -m agent_sandbox.launcher ensure BINDIR`` is what the deploy front ends
run (the Ansible role, the pyinfra deploy): it builds only when the source or
the entry point changed since the last build (a stamp next to ``BINDIR``) or a
reinstall put the Python script back, and says which it did: ``installed``,
``unchanged`` or ``no-compiler`` (not an error: the Python entry point stays).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("sandbox.c")
CFLAGS = ["-O2", "-Wall", "-Wextra", "-Werror", "-D_FORTIFY_SOURCE=2", "-fstack-protector-strong",
          "-fPIE", "-pie", "-Wl,-z,relro,-z,now"]


class LauncherError(RuntimeError):
    """The launcher could not be built or installed."""


def compiler() -> str | None:
    cc = os.environ.get("CC")
    if cc:
        return cc
    return shutil.which("cc") or shutil.which("gcc")


def build(out: str | os.PathLike[str], cc: str | None = None) -> Path:
    """Compile the launcher to ``out``."""
    cc = cc or compiler()
    if not cc:
        raise LauncherError("no C compiler (install gcc, or set CC)")
    r = subprocess.run([cc, *CFLAGS, "-o", os.fspath(out), str(SOURCE)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise LauncherError(f"{cc} failed:\n{r.stderr.strip()}")
    return Path(out)


def install(bindir: str | os.PathLike[str], cc: str | None = None) -> Path:
    """Build and install ``bindir/sandbox`` in front of ``bindir/sandbox-py``."""
    bindir = Path(bindir)
    if not os.access(bindir / "sandbox-py", os.X_OK):
        raise LauncherError(f"{bindir}/sandbox-py is missing: install the package first")
    tmp = bindir / f".sandbox.{os.getpid()}"
    try:
        build(tmp, cc)
        tmp.chmod(0o755)
        os.replace(tmp, bindir / "sandbox")
    finally:
        tmp.unlink(missing_ok=True)
    return bindir / "sandbox"


def ensure(bindir: str | os.PathLike[str], cc: str | None = None) -> str:
    """Install the launcher unless the one installed is current: ``installed``,
    ``unchanged`` or ``no-compiler``."""
    import hashlib

    bindir = Path(bindir)
    if not (cc or compiler()):
        return "no-compiler"
    want = hashlib.sha256(SOURCE.read_bytes() + (bindir / "sandbox-py").read_bytes()).hexdigest()
    stamp = bindir.parent / ".launcher-stamp"
    try:
        with open(bindir / "sandbox", "rb") as fh:
            native = fh.read(4) == b"\x7fELF"
        current = native and stamp.read_text().strip() == want
    except OSError:
        current = False
    if current:
        return "unchanged"
    install(bindir, cc)
    stamp.write_text(want + "\n")
    return "installed"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("install", "ensure"):
        sys.stderr.write("usage: python -m agent_sandbox.launcher install|ensure BINDIR\n")
        return 2
    try:
        if args[0] == "ensure":
            sys.stdout.write(ensure(args[1]) + "\n")
            return 0
        path = install(args[1])
    except LauncherError as exc:
        sys.stderr.write(f"launcher: {exc}; `sandbox` stays the Python entry point\n")
        return 1
    sys.stdout.write(f"installed {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
