"""``denyRead`` globs judged at open (``runtime/broker/reads.py``), attacked.

With ``**/`` globs in ``denyRead`` (or in the credential files), nothing is
walked before the run: every open of the command is handed to the broker,
which judges the path named and the path reached. Each case is judged from the
host by whether the secret's bytes reached the command's output (or a file the
host reads afterwards), with an unsandboxed control where the bytes do come
out; attacks that need two steps prepare in one run and fire in the next.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import needs_bwrap

pytestmark = [needs_bwrap]
SANDBOX = str(Path(sys.executable).parent / "sandbox")
SECRET = "TOP-SECRET-7d1f"
GLOBS = ["**/*.pem", "**/.env", "**/secrets/**"]


class Tree:
    def __init__(self, base: Path, deny: list[str] | None = None) -> None:
        self.root = base / "w"
        (self.root / "src").mkdir(parents=True)
        (self.root / "secrets").mkdir()
        (self.root / "src/key.pem").write_text(SECRET)
        (self.root / "secrets/token").write_text(SECRET)
        (self.root / ".env").write_text(SECRET)
        (self.root / "src/ok.txt").write_text("fine")
        self.settings = base / "settings.json"
        self.settings.write_text(json.dumps({
            "network": {"allowedDomains": [], "deniedDomains": []},
            "filesystem": {"denyRead": GLOBS if deny is None else deny, "denyWrite": [],
                           "allowWrite": [str(self.root)]}}))

    def run(self, script: str, *, sandboxed: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = ["sh", "-c", script]
        if sandboxed:
            argv = [SANDBOX, "exec", "--settings", str(self.settings), "--", *argv]
        return subprocess.run(argv, cwd=self.root, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def leaked(self, script: str, *, sandboxed: bool = True) -> bool:
        r = self.run(script, sandboxed=sandboxed)
        return SECRET in r.stdout or SECRET in r.stderr


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    return Tree(tmp_path)


READS = {
    "by name": "cat src/key.pem",
    "dotenv": "cat .env",
    "inside a denied folder": "cat secrets/token",
    "absolute": "cat $PWD/src/key.pem",
    "through .. and .": "cat src/../src/./key.pem",
    "through the caller's root link": "cat /proc/self/root$PWD/src/key.pem",
    "through the caller's working folder link": "cat /proc/self/cwd/.env",
    "through an open folder": "exec 3<src; cat /proc/self/fd/3/key.pem",
    "through a descriptor the shell opened": "cat /dev/fd/3 3<src/key.pem",
    "a symlink made now": "ln -s src/key.pem l && cat l",
    "a symlink to the folder": "ln -s secrets s && cat s/token",
    "python open": "python3 -c \"print(open('src/key.pem').read())\"",
    "O_PATH then reopen": "python3 -c \"import os; fd = os.open('src/key.pem', os.O_PATH); "
                          "print(open(f'/proc/self/fd/{fd}').read())\"",
    "openat2": "python3 -c \"import ctypes, os; print(os.read(ctypes.CDLL(None).syscall(437, "
               "-100, b'src/key.pem', (ctypes.c_uint64 * 3)(0, 0, 0), 24), 100))\"",
    "mmap": "python3 -c \"import mmap, os; f = open('src/key.pem', 'rb'); "
            "print(mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)[:])\"",
    "copy by the kernel": "python3 -c \"import os; fd = os.open('src/key.pem', 0); "
                          "os.sendfile(1, fd, 0, 100)\"",
}


@pytest.mark.parametrize("how", READS)
def test_a_denied_file_is_not_read(tree: Tree, how: str) -> None:
    script = READS[how]
    assert tree.leaked(script, sandboxed=False), f"control did not read it: {script}"
    assert not tree.leaked(script), script


def test_what_is_not_denied_reads_as_usual(tree: Tree) -> None:
    r = tree.run("cat src/ok.txt; ls secrets; head -1 /proc/self/status; "
                 "head -c 1 /etc/mtab >/dev/null && echo mtab; cat < src/ok.txt; "
                 "python3 -c \"print(open('/proc/self/exe', 'rb').read(4))\"; "
                 "mkfifo f; (echo through > f &); cat f")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("finetoken\n"), r.stdout
    assert "mtab" in r.stdout and "\\x7fELF" in r.stdout and "through" in r.stdout


def test_a_file_that_appears_during_the_run_is_denied(tree: Tree) -> None:
    """Nothing is listed at the start: a denied file the user writes mid-run is
    denied as soon as it exists."""
    go = tree.root / "go"
    proc = subprocess.Popen(
        [SANDBOX, "exec", "--settings", str(tree.settings), "--", "sh", "-c",
         f"while [ ! -e {go} ]; do sleep 0.02; done; cat late/new.pem; cat late/.env"],
        cwd=tree.root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    (tree.root / "late").mkdir()
    (tree.root / "late/new.pem").write_text(SECRET)
    (tree.root / "late/.env").write_text(SECRET)
    go.touch()
    out, _ = proc.communicate(timeout=60)
    assert SECRET not in out, out
    assert out.count("Permission denied") == 2, out


TWO_STEPS = {
    # prepared in one run, fired in the next
    "rename to a name no rule covers": ("mv src/key.pem src/key.txt", "cat src/key.txt"),
    "hard link under another name": ("ln src/key.pem src/k", "cat src/k"),
    "rename the denied folder": ("mv secrets open", "cat open/token"),
    "move a file out of the denied folder": ("mv secrets/token tok", "cat tok"),
    "exchange with a harmless name": (
        "echo x > src/plain && python3 -c \"import ctypes; ctypes.CDLL(None).renameat2("
        "-100, b'src/key.pem', -100, b'src/plain', 2)\"", "cat src/plain"),
    "symlink then swap": ("ln -s ok.txt src/l", "rm src/l && ln -s key.pem src/l && cat src/l"),
}


@pytest.mark.parametrize("how", TWO_STEPS)
def test_two_steps_never_give_a_denied_file_a_readable_name(tree: Tree, how: str) -> None:
    prepare, fire = TWO_STEPS[how]
    control = Tree(tree.root.parent / "control")
    control.run(prepare, sandboxed=False)
    assert control.leaked(fire, sandboxed=False), f"control did not read it: {how}"
    tree.run(prepare)
    assert not tree.leaked(fire), how
    # and the secret is still where the user left it, unchanged
    assert (tree.root / "src/key.pem").read_text() == SECRET
    assert (tree.root / "secrets/token").read_text() == SECRET


def test_moving_a_folder_keeps_its_denied_files_denied(tree: Tree) -> None:
    """Everyday renames still work: a folder holding a denied file moves, and the
    file stays denied under the new path (its own name is what the rule names)."""
    r = tree.run("mv src lib && cat lib/ok.txt && cat lib/key.pem")
    assert "fine" in r.stdout, r.stderr
    assert SECRET not in r.stdout + r.stderr
    assert (tree.root / "lib/key.pem").read_text() == SECRET


def test_a_thread_flipping_the_path_never_reads_the_secret(tree: Tree) -> None:
    """The path is read from the caller's memory once: a second thread that
    rewrites it between the broker's look and the kernel's would open the
    secret if the kernel read it again."""
    script = (
        "import ctypes, os, threading\n"
        "buf = ctypes.create_string_buffer(64)\n"
        "good, bad = b'src/ok.txt\\0', b'src/key.pem\\0'\n"
        "stop = False\n"
        "def flip():\n"
        "    while not stop:\n"
        "        ctypes.memmove(buf, bad, len(bad)); ctypes.memmove(buf, good, len(good))\n"
        "threading.Thread(target=flip, daemon=True).start()\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "got = set()\n"
        "for _ in range(3000):\n"
        "    fd = libc.open(buf, 0)\n"
        "    if fd >= 0:\n"
        "        got.add(os.read(fd, 64)); os.close(fd)\n"
        "stop = True\n"
        "print(got)\n")
    (tree.root / "flip.py").write_text(script)
    r = tree.run("python3 flip.py", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "fine" in r.stdout and SECRET not in r.stdout, r.stdout


def test_a_run_without_globs_hands_no_read_to_the_broker(tmp_path: Path) -> None:
    """Without a glob to judge, reading stays the kernel's: a FIFO opened for
    reading by one process and for writing by another meet as usual, and a
    denied literal path is hidden by the plan's mount as before."""
    tree = Tree(tmp_path, deny=[str(tmp_path / "w/src/key.pem")])
    r = tree.run("cat src/key.pem; cat .env")
    assert r.stdout.count(SECRET) == 1, r  # .env only: no glob denies it here


def test_concurrent_readers_are_all_answered(tree: Tree) -> None:
    """One broker answers every process of a run: many readers at once finish."""
    r = tree.run("for i in 1 2 3 4 5 6 7 8; do (for j in $(seq 50); do cat src/ok.txt; "
                 "done > out$i) & done; wait; cat out* | wc -c", timeout=120)
    assert r.stdout.strip() == "1600", r  # 8 x 50 x "fine"


def test_the_plan_walks_nothing_for_globs(tmp_path: Path) -> None:
    """With a broker, the plan hands the globs over (``Plan.read_rules``) and lists
    no folder for them: a view whose walk fails still plans the run."""
    from agent_sandbox.runtime.bwrap import plan as bw
    from agent_sandbox.runtime.bwrap.fsview import RealFs
    from agent_sandbox.runtime.settings import parse

    class NoWalk(RealFs):
        def walk(self, root: str) -> list[tuple[str, str]]:
            raise AssertionError(f"walked {root}")

    tree = Tree(tmp_path)
    settings = parse(json.loads(tree.settings.read_text()))
    cwd = str(tree.root)
    p = bw.plan(settings, home=str(tmp_path / "home"), cwd=cwd, fs=NoWalk(), brokered=True)
    assert p.read_rules[0] == tuple(GLOBS)
    assert cwd in p.read_rules[3]
    assert not [m for m in p.mounts if m.op == "hide" and m.path.startswith(cwd)]
    with pytest.raises(AssertionError, match="walked"):
        bw.plan(settings, home=str(tmp_path / "home"), cwd=cwd, fs=NoWalk())


def test_threads_opening_at_once(tree: Tree) -> None:
    script = ("import threading\n"
              "out = []\n"
              "def read():\n"
              "    for _ in range(200):\n"
              "        out.append(open('src/ok.txt').read())\n"
              "ts = [threading.Thread(target=read) for _ in range(8)]\n"
              "[t.start() for t in ts]; [t.join() for t in ts]\n"
              "print(len(out), set(out))\n")
    (tree.root / "threads.py").write_text(script)
    r = tree.run("python3 threads.py", timeout=120)
    assert r.stdout.strip() == "1600 {'fine'}", r


def test_the_host_keeps_reading_while_a_run_reads(tree: Tree) -> None:
    """The user's own reads are the kernel's: a run that reads in a loop changes
    nothing for a host process reading the same files."""
    proc = subprocess.Popen([SANDBOX, "exec", "--settings", str(tree.settings), "--", "sh",
                             "-c", "for i in $(seq 300); do cat src/ok.txt >/dev/null; done"],
                            cwd=tree.root)
    seen: list[str] = []

    def host() -> None:
        for _ in range(200):
            seen.append((tree.root / "src/key.pem").read_text())

    t = threading.Thread(target=host)
    t.start()
    t.join()
    assert proc.wait(timeout=120) == 0
    assert set(seen) == {SECRET}
