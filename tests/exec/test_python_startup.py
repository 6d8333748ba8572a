"""Python's start-up and bytecode in a writable root, judged from the host.

Each attack is the first step of a two-step escape: a hostile command, run
through ``sandbox exec``, prepares something that a host-side Python runs
later (an import, an interpreter start, ``source .venv/bin/activate``). The
judge is that later step, run on the host; the attacker code writes a marker
file outside every writable root. Each attack has a control: the same command
run without the sandbox makes the judge fire, so a pass is not a judge that
cannot see.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

PY = sys.executable
BASE = getattr(sys, "_base_executable", PY)
PYVER = f"python{sys.version_info[0]}.{sys.version_info[1]}"
SANDBOX = [PY, "-m", "agent_sandbox"]

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap missing")

# Python code that writes the marker (``{marker}`` is filled in).
PAYLOAD = "open({marker!r}, 'w').write('ran')"

# The same, for code run before ``open`` exists (the first module imported).
EARLY = "import posix; posix.close(posix.open({marker!r}, 0o101))"

# Writes bytecode for ``src`` (a file relative to the folder it runs in) whose
# header matches the source (so Python trusts it), to ``dest``: in place over an
# existing file (same inode), or new. argv: src dest marker [inplace]
PYC_WRITER = """
import importlib._bootstrap_external as be, os, sys
src, dest, marker = sys.argv[1:4]
code = compile("open(%r, 'w').write('ran')\\n" % marker + open(src).read(), src, "exec")
st = os.stat(src)
data = be._code_to_timestamp_pyc(code, st.st_mtime, st.st_size)
with open(dest, "r+b" if len(sys.argv) > 4 else "wb") as fh:
    fh.write(data)
    fh.truncate()
"""


def _env() -> dict[str, str]:
    """The host's environment without PYTHON* variables (bytecode writes on)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


@dataclass
class Box:
    tmp: Path
    work: Path
    home: Path
    marker: Path

    def venv(self) -> Path:
        """A virtualenv in the writable root; its site-packages."""
        subprocess.run([BASE, "-m", "venv", "--without-pip", str(self.work / ".venv")],
                       check=True, timeout=120, env=_env())
        return self.site()

    def site(self) -> Path:
        return self.work / ".venv" / "lib" / PYVER / "site-packages"

    def run(self, *argv: str, cwd: Path | None = None, home: bool = False) -> None:
        """The host's later step; a program the sweep quarantined does not start."""
        env = _env()
        if home:
            env["HOME"] = str(self.home)
        try:
            subprocess.run(list(argv), cwd=cwd or self.work, env=env, capture_output=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        except FileNotFoundError:
            pass

    def fmt(self, text: str) -> str:
        return text.format(work=self.work, home=self.home, marker=self.marker, py=PY,
                           site=self.site(), pyver=PYVER, writer=self.tmp / "writer.py",
                           payload=PAYLOAD.format(marker=str(self.marker)),
                           early=EARLY.format(marker=str(self.marker)))


@dataclass
class Attack:
    setup: Callable[[Box], None]
    cmd: str  # shell, formatted by Box.fmt, run in the writable root
    judge: Callable[[Box], None]  # the host's later step
    home_writable: bool = False


def venv_starts(b: Box) -> None:
    b.run(str(b.work / ".venv/bin/python"), "-c", "pass")


def imports_run(b: Box) -> None:
    b.run(PY, "run.py")


def _plain_venv(b: Box) -> None:
    b.venv()


def _nested_venv(b: Box) -> None:
    """A virtualenv the user made in a nested project."""
    (b.work / "sub").mkdir()
    subprocess.run([BASE, "-m", "venv", "--without-pip", str(b.work / "sub/.venv")],
                   check=True, timeout=120, env=_env())


def _ns_package(b: Box) -> None:
    (b.work / "ns").mkdir()
    (b.work / "ns/mod.py").write_text("X = 1\n")
    (b.work / "run.py").write_text("import ns.mod\n")
    (b.work / ".gitignore").write_text("*.pyc\n")


def _venv_package(b: Box) -> None:
    site = b.venv()
    (site / "pkgx").mkdir()
    (site / "pkgx/__init__.py").write_text("X = 1\n")
    subprocess.run([str(b.work / ".venv/bin/python"), "-c", "import pkgx"], check=True,
                   env=_env())  # its __pycache__
    assert list((site / "pkgx/__pycache__").iterdir())


def _venv_pth_module(b: Box) -> None:
    """A .pth that imports a module at every start, as setuptools' does."""
    site = b.venv()
    (site / "hook.pth").write_text("import hookmod\n")
    (site / "hookmod.py").write_text("X = 1\n")


def _legacy_pyc(b: Box) -> None:
    (b.work / "helper.py").write_text("X = 1\n")
    (b.work / "run.py").write_text("import helper\n")
    subprocess.run([BASE, "-c", "import py_compile; py_compile.compile('helper.py', "
                    "cfile='helper.pyc')"], cwd=b.work, check=True)
    (b.work / "helper.py").unlink()  # a sourceless module, as some packages ship them


def _user_site(b: Box) -> None:
    (b.home / ".local/lib" / PYVER / "site-packages").mkdir(parents=True)


def _fake_stdlib() -> str:
    """Shell making {work}/evil a prefix whose standard library starts with the
    payload (encodings is the first module an interpreter imports from it)."""
    return ("mkdir -p {work}/evil/bin {work}/evil/lib/{pyver}/encodings && "
            "touch {work}/evil/lib/{pyver}/os.py && "
            "echo \"{early}\" > {work}/evil/lib/{pyver}/encodings/__init__.py && ")


ATTACKS: dict[str, Attack] = {
    # bytecode
    "sourceless_init_pyc_in_namespace_package": Attack(
        _ns_package, "{py} {writer} ns/mod.py ns/__init__.pyc {marker}", imports_run),
    "venv_package_pycache_rewritten_in_place": Attack(
        _venv_package,
        "cd {site}/pkgx && {py} {writer} __init__.py "
        "__pycache__/__init__.cpython-" + f"{sys.version_info[0]}{sys.version_info[1]}"
        + ".pyc {marker} inplace",
        lambda b: b.run(str(b.work / ".venv/bin/python"), "-c", "import pkgx")),
    "sourceless_pyc_rewritten_in_place": Attack(
        _legacy_pyc,
        "echo 'X = 1' > src.py && {py} {writer} src.py helper.pyc {marker} inplace && "
        "rm src.py", imports_run),
    # start-up files of a virtualenv in the writable root
    "venv_sitecustomize": Attack(
        _plain_venv, "echo \"{payload}\" > {site}/sitecustomize.py",
        venv_starts),
    "venv_sitecustomize_package": Attack(
        _plain_venv,
        "mkdir {site}/sitecustomize && echo \"{payload}\" > {site}/sitecustomize/__init__.py",
        venv_starts),
    "venv_pth_as_symlink": Attack(
        _plain_venv,
        "echo \"import os; {payload}\" > {work}/notes.txt && ln -s {work}/notes.txt "
        "{site}/zz.pth", venv_starts),
    "venv_site_packages_swapped_for_link": Attack(
        _plain_venv,
        "mkdir {work}/elsewhere && echo \"import os; {payload}\" > {work}/elsewhere/zz.pth && "
        "mv {site} {site}.old && ln -s {work}/elsewhere {site}", venv_starts),
    "venv_pth_imported_module": Attack(
        _venv_pth_module, "echo \"{payload}\" >> {site}/hookmod.py", venv_starts),
    "venv_pyvenv_cfg_home_redirect": Attack(
        _plain_venv,
        _fake_stdlib() + "printf 'home = {work}/evil/bin\\ninclude-system-site-packages = "
        "false\\n' > {work}/.venv/pyvenv.cfg", venv_starts),
    "venv_pyvenv_cfg_replaced": Attack(
        _plain_venv,
        _fake_stdlib() + "rm -f {work}/.venv/pyvenv.cfg; printf 'home = {work}/evil/bin\\n' "
        "> {work}/.venv/pyvenv.cfg", venv_starts),
    "venv_activate_script": Attack(
        _plain_venv,
        "echo \"python3 -c \\\"{payload}\\\"\" >> {work}/.venv/bin/activate",
        lambda b: b.run("sh", "-c", ". .venv/bin/activate")),
    "venv_interpreter_replaced": Attack(
        _plain_venv,
        "rm {work}/.venv/bin/python && printf '#!/bin/sh\\ntouch {marker}\\n' > "
        "{work}/.venv/bin/python && chmod +x {work}/.venv/bin/python", venv_starts),
    # a virtualenv the user made in a nested project (one a run makes is the
    # command's: test_venv_made_in_a_run_stays_usable)
    "user_venv_pth_in_nested_project": Attack(
        _nested_venv,
        "echo \"import os; {payload}\" > sub/.venv/lib/{pyver}/site-packages/zz.pth",
        lambda b: b.run(str(b.work / "sub/.venv/bin/python"), "-c", "pass")),
    "user_venv_pyvenv_cfg_home_in_root": Attack(
        _nested_venv,
        _fake_stdlib() + "printf 'home = {work}/evil/bin\\n' > sub/.venv/pyvenv.cfg",
        lambda b: b.run(str(b.work / "sub/.venv/bin/python"), "-c", "pass")),
    "user_venv_interpreter_is_a_script": Attack(
        _nested_venv,
        "rm -f sub/.venv/bin/python; printf '#!/bin/sh\\ntouch {marker}\\n' > "
        "sub/.venv/bin/python; chmod +x sub/.venv/bin/python",
        lambda b: b.run(str(b.work / "sub/.venv/bin/python"), "-c", "pass")),
    "user_venv_site_folder_swapped": Attack(
        _nested_venv,
        "mkdir -p x && echo \"import os; {payload}\" > x/zz.pth && "
        "mv sub/.venv/lib/{pyver}/site-packages old; mv x sub/.venv/lib/{pyver}/site-packages",
        lambda b: b.run(str(b.work / "sub/.venv/bin/python"), "-c", "pass")),
    "user_venv_lib_swapped": Attack(
        _nested_venv,
        "mkdir -p x/{pyver}/site-packages && "
        "echo \"import os; {payload}\" > x/{pyver}/site-packages/zz.pth && "
        "mv sub/.venv/lib old; mv x sub/.venv/lib",
        lambda b: b.run(str(b.work / "sub/.venv/bin/python"), "-c", "pass")),
    "user_venv_replaced_whole": Attack(
        _nested_venv,
        "{py} -m venv --without-pip y && echo \"import os; {payload}\" > "
        "y/lib/{pyver}/site-packages/zz.pth && rm -rf sub/.venv; mv sub/.venv old; "
        "mv y sub/.venv",
        lambda b: b.run(str(b.work / "sub/.venv/bin/python"), "-c", "pass")),
    # the user's site-packages, the home folder writable
    "user_site_pth_in_writable_home": Attack(
        _user_site,
        "echo \"import os; {payload}\" > {home}/.local/lib/{pyver}/site-packages/zz.pth",
        lambda b: b.run(BASE, "-c", "pass", home=True), home_writable=True),
    "user_site_usercustomize_in_writable_home": Attack(
        _user_site,
        "echo \"{payload}\" > {home}/.local/lib/{pyver}/site-packages/usercustomize.py",
        lambda b: b.run(BASE, "-c", "pass", home=True), home_writable=True),
}


def _box(tmp_path: Path, attack: Attack) -> Box:
    b = Box(tmp=tmp_path, work=tmp_path / "work", home=tmp_path / "home",
            marker=tmp_path / "ran")
    b.work.mkdir()
    b.home.mkdir()
    (tmp_path / "writer.py").write_text(PYC_WRITER)
    attack.setup(b)
    return b


def _settings(b: Box, attack: Attack) -> Path:
    roots = [str(b.work), *([str(b.home)] if attack.home_writable else [])]
    data = {"network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": [], "allowWrite": roots, "denyWrite": []}}
    path = b.tmp / "settings.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_python_startup_attack_fails(tmp_path: Path, name: str) -> None:
    attack = ATTACKS[name]
    b = _box(tmp_path, attack)
    env = _env()
    env["HOME"] = str(b.home)
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(_settings(b, attack)), "--",
                        "sh", "-c", b.fmt(attack.cmd)], cwd=b.work, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 125, r.stderr
    attack.judge(b)
    assert not b.marker.exists(), f"the host ran what the command prepared ({r.stderr})"


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_python_startup_attack_control(tmp_path: Path, name: str) -> None:
    """The same command without the sandbox: the judge fires."""
    attack = ATTACKS[name]
    b = _box(tmp_path, attack)
    subprocess.run(["sh", "-c", b.fmt(attack.cmd)], cwd=b.work, check=True, timeout=120,
                   env=_env())
    attack.judge(b)
    assert b.marker.exists()


def test_a_users_virtualenv_takes_no_package_and_no_pth_from_a_run(tmp_path: Path) -> None:
    """Everything in a virtualenv the user made is what its interpreter, pip and
    activate run (a package pip imports, a program on PATH once activated), so a
    run installs nothing into it: a package and a .pth are each refused when
    written, nothing is left, and the user's interpreter runs as before."""
    attack = Attack(_plain_venv, "", venv_starts)
    b = _box(tmp_path, attack)
    site = b.site()
    script = (f"mkdir -p {site}/plainpkg; echo 'X = 1' > {site}/plainpkg/__init__.py; "
              f"echo \"import os; {PAYLOAD.format(marker=str(b.marker))}\" > {site}/plain.pth"
              "; true")
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(_settings(b, attack)), "--",
                        "sh", "-c", script], cwd=b.work, capture_output=True, text=True,
                       timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    assert not (site / "plainpkg").exists() and not (site / "plain.pth").exists()
    assert not any("sandbox-quarantine" in p.name for p in site.iterdir())
    assert "refused" in r.stderr and "plainpkg" in r.stderr and "plain.pth" in r.stderr
    venv_starts(b)
    assert not b.marker.exists()


def test_existing_startup_files_readonly_in_the_run(tmp_path: Path) -> None:
    """What exists is read-only inside (not only swept after): a write fails."""
    attack = Attack(_venv_pth_module, "", venv_starts)
    b = _box(tmp_path, attack)
    site = b.site()
    probe = " ; ".join(f"(echo x >> {p} 2>/dev/null && echo wrote {p.name})" for p in (
        site / "hook.pth", site / "hookmod.py", b.work / ".venv/pyvenv.cfg",
        b.work / ".venv/bin/activate"))
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(_settings(b, attack)), "--",
                        "sh", "-c", probe + f"; echo y > {site}/free.txt; echo y > free.txt "
                        "&& echo ok"],
                       cwd=b.work, capture_output=True, text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    assert "wrote" not in r.stdout, r.stdout
    assert not (site / "free.txt").exists()  # nothing in the user's virtualenv
    assert r.stdout.strip().endswith("ok")


def test_venv_made_in_a_run_stays_usable(tmp_path: Path) -> None:
    """A virtualenv made inside a run is the command's and stays whole: its
    interpreter links, pyvenv.cfg and activate scripts; the next run may still
    install into it, a .pth included (``pip install -e``)."""
    b = _box(tmp_path, Attack(lambda b: None, "", venv_starts))
    settings = _settings(b, Attack(lambda b: None, "", venv_starts))
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", BASE, "-m",
                        "venv", "--without-pip", ".venv"], cwd=b.work, capture_output=True,
                       text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(b.work / ".venv/bin/python"), "-c", "import sys; print(sys.prefix)"],
                         capture_output=True, text=True, env=_env(), timeout=60)
    assert out.stdout.strip() == str(b.work / ".venv"), out.stderr
    assert (b.work / ".venv/pyvenv.cfg").exists()
    assert (b.work / ".venv/bin/activate").exists()
    assert "moved to" not in r.stderr and "refused" not in r.stderr, r.stderr
    site = b.site()
    (b.work / "src").mkdir()  # a path line names a folder that exists
    r = subprocess.run([*SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c",
                        f"echo {b.work}/src > {site}/__editable__.pkg.pth"], cwd=b.work,
                       capture_output=True, text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    assert (site / "__editable__.pkg.pth").read_text() == f"{b.work}/src\n"
    out = subprocess.run(["sh", "-c", ". .venv/bin/activate && python -c 'import sys; "
                          "print(sys.path[-1])'"], cwd=b.work, capture_output=True, text=True,
                         env=_env(), timeout=60)
    assert out.stdout.strip() == f"{b.work}/src", out.stderr
