"""Everyday toolchains as an agent runs them: each step its own ``sandbox exec``.

One project (Python, npm, C, Rust, Go and git at once) is worked on step by
step, each step a separate sandboxed run, as an agent's tool calls are; the
same steps run unsandboxed in a twin tree, and again under srt in a third.
Every step's exit status and output must match the twin's, but for the steps
in ``DIFFERS`` (each with the host tool its refusal protects), and the trees
must match but for ``TREE_DIFFERS``. Afterwards the user's follow-ups work on
the host: the virtualenv's activate script, the editable import, ``npm
test``, ``git log``. srt's pass rate on the same steps is printed beside ours.

Nothing is fetched by the steps: the Python and npm dependencies are local
packages (a wheel built on the host, an ``npm pack`` tarball; setuptools for
the editable install's build is downloaded once on the host, as ``make setup``
installed it), the crate has no dependencies, the Go module none.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import SRT, needs_bwrap

pytestmark = [needs_bwrap]
SANDBOX = str(Path(sys.executable).parent / "sandbox")
PY = sys.executable
BASE_PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else shutil.which("python3")
CARGO = "/usr/bin/cargo" if os.path.exists("/usr/bin/cargo") else shutil.which("cargo")
GO = next((g for g in ("/usr/bin/go", "/usr/lib/go/bin/go") if os.path.exists(g)),
          shutil.which("go"))


@dataclass
class Step:
    name: str
    cmd: str
    needs: str | None = None  # a program the step needs


STEPS = [
    Step("venv", f"{BASE_PY} -m venv .venv"),
    Step("pip install", ".venv/bin/pip install -q --no-index ../wheels/greet-1.0-py3-none-any.whl"),
    Step("pip install -e", ".venv/bin/pip install -q --no-index --find-links ../wheels -e ."),
    Step("import", ".venv/bin/python -c 'import app, greet; print(app.hello(), greet.NAME)'"),
    Step("pytest", f"PYTHONPATH=src {PY} -m pytest -q -p no:cacheprovider tests_app"),
    Step("npm install", "npm install --offline --no-audit --no-fund --silent "
         "../npm/greet-js-1.0.0.tgz"),
    Step("npx", "npx --offline greet-js"),
    Step("npm test", "npm test --silent"),
    Step("git init", "git init -q && git add -A && git commit -qm init"),
    Step("git branch", "git branch feature && git branch --list"),
    Step("git stash", "echo more >> README && git stash -q && git stash list | wc -l"),
    Step("git worktree add", "git worktree add -q wt feature && cat wt/README"),
    Step("git submodule add", "git -c protocol.file.allow=always submodule add -q "
         "../subsrc sub && git status --short"),
    Step("make", "make -s && ./hello"),
    Step("cargo build", "cargo build -q --offline && ./target/debug/crab", "cargo"),
    Step("go build", "cd goapp && go build -o gohi . && ./gohi", "go"),
]

# steps whose status differs under the sandbox, with what the refusal protects
# (``git submodule add`` works here because the run made the repository: in one
# the user made, ``.gitmodules`` and ``.git/modules/`` stay refused, as what host
# git clones and enters: ``tests/exec/test_one_tree.py``)
DIFFERS: dict[str, str] = {}
# paths (relative, fnmatch) that differ between the trees, with the host tool
TREE_DIFFERS = {
    "*__pycache__*": "Python: bytecode for the user's source is not written (Python would "
                     "run it instead of the source beside it)",
}
# what no comparison can hold equal: git's object store and logs (hashes carry
# times), build caches and lock files that carry times or paths
IGNORED = (".git/objects/*", ".git/logs/*", ".git/index", ".git/ORIG_HEAD",
           "target/*", "node_modules/.package-lock.json", ".git/refs/stash", "*.egg-info*",
           ".venv/*")


def _project(base: Path) -> None:
    """The shared sources: the project's own files (in ``work``), and outside it
    the local dependencies and the submodule's source."""
    work = base / "work"
    (work / "src/app").mkdir(parents=True)
    (work / "src/app/__init__.py").write_text("def hello():\n    return 'hello'\n")
    (work / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = '
        '"setuptools.build_meta"\n[project]\nname = "app"\nversion = "0.1"\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n')
    (work / "tests_app").mkdir()
    (work / "tests_app/test_app.py").write_text(
        "import app\n\ndef test_hello():\n    assert app.hello() == 'hello'\n")
    (work / "package.json").write_text(json.dumps(
        {"name": "proj", "version": "1.0.0", "private": True,
         "scripts": {"test": "node test.js"}}))
    (work / "test.js").write_text("console.log(require('greet-js').greet());\n")
    (work / "README").write_text("readme\n")
    (work / ".gitignore").write_text(".venv/\nnode_modules/\ntarget/\nhello\ngohi\n"
                                     "*.egg-info/\n__pycache__/\n")
    (work / "hello.c").write_text('#include <stdio.h>\nint main(void){puts("hi from c");'
                                  "return 0;}\n")
    (work / "Makefile").write_text("hello: hello.c\n\tcc -o hello hello.c\n")
    (work / "Cargo.toml").write_text('[package]\nname = "crab"\nversion = "0.1.0"\n'
                                     'edition = "2018"\n')
    (work / "src/main.rs").write_text('fn main() { println!("hi from rust"); }\n')
    (work / "goapp").mkdir()
    (work / "goapp/go.mod").write_text("module example.com/gohi\n\ngo 1.19\n")
    (work / "goapp/main.go").write_text('package main\n\nimport "fmt"\n\nfunc main() '
                                  '{ fmt.Println("hi from go") }\n')


def _deps(base: Path) -> None:
    dep = base / "greet"
    dep.mkdir()
    (dep / "greet.py").write_text("NAME = 'greet'\n")
    (dep / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = '
        '"setuptools.build_meta"\n[project]\nname = "greet"\nversion = "1.0"\n'
        '[tool.setuptools]\npy-modules = ["greet"]\n')
    subprocess.run([PY, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                    "--no-build-isolation", "-w", str(base / "wheels"), str(dep)], check=True,
                   timeout=300, capture_output=True)
    # what an editable install builds with, as the project's own setup fetched it
    from importlib.metadata import version

    subprocess.run([PY, "-m", "pip", "download", "-q", "--no-deps", "-d", str(base / "wheels"),
                    f"setuptools=={version('setuptools')}"], check=True, timeout=300,
                   capture_output=True)
    js = base / "greet-js"
    js.mkdir()
    (js / "package.json").write_text(json.dumps(
        {"name": "greet-js", "version": "1.0.0", "main": "index.js",
         "bin": {"greet-js": "cli.js"}}))
    (js / "index.js").write_text("exports.greet = () => 'hi from npm';\n")
    (js / "cli.js").write_text("#!/usr/bin/env node\nconsole.log(require('./index').greet());\n")
    (base / "npm").mkdir()
    subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(base / "npm"),
                    str(js)], check=True, timeout=300, capture_output=True)
    sub = base / "subsrc"
    sub.mkdir()
    env = _git_env(base)
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "s"]):
        subprocess.run(["git", *args], cwd=sub, env=env, check=True, timeout=60)


def _git_env(base: Path) -> dict[str, str]:
    return {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(base / "home"),
            "LANG": "C.UTF-8"}


def _tree(base: Path) -> Path:
    """One copy of the project with its own home folder; the shared sources beside."""
    _project(base)
    (base / "home/tmp").mkdir(parents=True)
    return base / "work"


def _settings(base: Path, deny: list[str] | None = None) -> Path:
    path = base / "settings.json"
    path.write_text(json.dumps({
        "network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": deny or [], "denyWrite": [],
                       "allowWrite": [str(base / "work"), str(base / "home")]}}))
    return path


def _env(base: Path) -> dict[str, str]:
    env = _git_env(base)
    env.update({"GOCACHE": str(base / "home/.cache/go-build"), "GOPATH": str(base / "home/go"),
                "GOFLAGS": "-mod=mod", "CARGO_HOME": str(base / "home/.cargo"),
                "npm_config_cache": str(base / "home/.npm"), "npm_config_update_notifier": "false",
                "TMPDIR": str(base / "home/tmp")})  # as agents give their commands one
    if CARGO == "/usr/bin/cargo" and os.path.exists("/usr/bin/rustc"):
        env["RUSTC"] = "/usr/bin/rustc"  # Debian's, not a rustup proxy earlier on PATH
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _normal(text: str, base: Path) -> str:
    return re.sub(r"\d+\.\d+s\b", "Ns", text.replace(str(base), "<base>"))


ERRORS: dict[tuple[str, str], str] = {}


def _run_steps(base: Path, how: str, deny: list[str] | None = None
               ) -> dict[str, tuple[int, str]]:
    env, settings = _env(base), _settings(base, deny)
    out: dict[str, tuple[int, str]] = {}
    for step in STEPS:
        if (step.needs == "cargo" and CARGO is None) or (step.needs == "go" and GO is None):
            continue
        cmd = step.cmd.replace("cargo ", f"{CARGO} ", 1) if step.needs == "cargo" else step.cmd
        cmd = cmd.replace(" go build", f" {GO} build", 1) if step.needs == "go" else cmd
        argv = {"twin": ["sh", "-c", cmd],
                "sandbox": [SANDBOX, "exec", "--settings", str(settings), "--", "sh", "-c", cmd],
                "srt": [str(SRT), "-s", str(settings), "-c", cmd]}[how]
        r = subprocess.run(argv, cwd=base / "work", env=env, capture_output=True, text=True,
                           timeout=600)
        out[step.name] = (r.returncode, _normal(r.stdout, base))
        ERRORS[(how, step.name)] = r.stderr[-2000:]  # shown when a step differs
    return out


def _listing(work: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(work):
        for name in dirnames + filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), work)
            if not any(fnmatch.fnmatch(rel, p) for p in IGNORED):
                found.add(rel)
    return found


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("deps")
    _deps(base)
    return base


def _copy_deps(shared: Path, base: Path) -> None:
    for name in ("wheels", "npm", "subsrc"):
        shutil.copytree(shared / name, base / name, symlinks=True)


# ``denyRead`` globs, judged at every open of every step (``runtime/broker/reads.py``)
GLOBS = ["**/.env", "**/*.pem", "**/secrets/**"]


@pytest.mark.parametrize("deny", [None, GLOBS], ids=["no read globs", "read globs"])
def test_everyday_toolchains_step_by_step(shared: Path, tmp_path: Path,
                                          deny: list[str] | None) -> None:
    """Ours must match the twin but for ``DIFFERS``; srt's pass rate on the same
    steps, in the same run, is printed beside ours (the yardstick, no goal). With
    ``denyRead`` globs every open of every step is judged by the broker: the
    toolchains must not notice."""
    bases = {how: tmp_path / how for how in ("twin", "sandbox", "srt")}
    for base in bases.values():
        base.mkdir()
        _copy_deps(shared, base)
        _tree(base)
    want = _run_steps(bases["twin"], "twin")
    got = _run_steps(bases["sandbox"], "sandbox", deny)
    theirs = _run_steps(bases["srt"], "srt", deny) if SRT.exists() else {}
    rates = {"sandbox exec": sum(got.get(n) == want[n] for n in want),
             "srt": sum(theirs.get(n) == want[n] for n in want)}
    print(f"\nsteps as unsandboxed, of {len(want)} ({len(want) - len(DIFFERS)} expected of "
          "ours): " + ", ".join(f"{k} {v}" for k, v in rates.items()) +
          ("" if theirs else " (srt not installed)"))
    for name, (rc, text) in want.items():
        assert rc == 0, f"the twin's step {name!r} failed: {text}"
        if name in DIFFERS:
            assert got[name][0] != 0, f"{name} was expected to be refused"
            continue
        assert got[name] == want[name], (name, got[name], want[name],
                                         ERRORS.get(("sandbox", name)))
    boxed = bases["sandbox"]
    extra = _listing(boxed / "work") ^ _listing(bases["twin"] / "work")
    unexplained = sorted(p for p in extra
                         if not any(fnmatch.fnmatch(p, pat) for pat in TREE_DIFFERS))
    assert not unexplained, unexplained
    # the user's follow-ups on the host
    env = _env(boxed)
    follow = [". .venv/bin/activate && python -c 'import app, greet; print(app.hello())'",
              "npm test --silent", "git log --oneline | wc -l", "make -s && ./hello",
              "git submodule status | grep -q ' sub '"]
    for cmd in follow:
        r = subprocess.run(["bash", "-c", cmd], cwd=boxed / "work", env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (cmd, r.stdout, r.stderr)
