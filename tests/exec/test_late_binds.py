"""The read-only binds of files made after bwrap's setup (``runtime.bwrap.late_binds``):
which ones (pure), the flags of their remount, and end to end that each is as
read-only, as fixed in place and as impossible to undo as bwrap's own binds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import PY, needs_bwrap, write_settings
from test_bwrap_plan import CWD, plan_for

from agent_sandbox.runtime.bwrap import argv as bwargv
from agent_sandbox.runtime.bwrap import late_binds


def _ro_targets(argv: list[str]) -> list[str]:
    return [argv[i + 2] for i, a in enumerate(argv) if a == "--ro-bind"]


def test_only_read_only_files_alone_at_their_path_go_late() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."], "denyWrite": ["./cfg"],
                                 "denyRead": ["./.env"]}},
                 {"/home/u/proj/cfg/a.toml": "f", "/home/u/proj/.git/config": "f",
                  "/home/u/proj/.git/HEAD": "f"})
    late = dict((t, s) for s, t in bwargv.late_binds(p))
    by_path = {m.path: m for m in p.mounts}
    assert late and all(by_path[x].op in ("ro", "hide") and by_path[x].kind == "f"
                        for x in late)
    assert late["/home/u/proj/.bashrc"] == "/home/u/proj/.bashrc"  # a placeholder
    assert late["/home/u/proj/.env"] == "/dev/null"  # a hidden file
    assert "/home/u/proj/cfg" not in late  # a folder: mounts below it come after it
    # every bind that is not late is on bwrap's command line, and the rest of the
    # command line is exactly the full one without the late ones, in the same order
    full = bwargv.build_argv(p, ["true"], cwd=CWD)
    short = bwargv.build_argv(p, ["true"], cwd=CWD, late=frozenset(late))
    kept, removed, i = [], [], 0
    while i < len(full):
        if full[i] == "--ro-bind" and full[i + 2] in late and full[i + 1] == late[full[i + 2]]:
            removed.append(full[i + 2])
            i += 3
            continue
        kept.append(full[i])
        i += 1
    assert kept == short and sorted(removed) == sorted(late)
    assert not set(late) & set(_ro_targets(short))


def test_nothing_under_an_overlay_or_sharing_a_path_goes_late() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."]}})
    every = [t for _, t in bwargv.late_binds(p)]
    assert "/home/u/proj/.bashrc" in every
    late = bwargv.late_binds(p, [("/elsewhere", "/home/u/proj", False)])
    assert late == ()  # the overlay goes on after the plan: it must stay on top
    late_t = [t for _, t in bwargv.late_binds(p, [("/x", "/home/u/proj/.bashrc", True)])]
    assert "/home/u/proj/.bashrc" not in late_t and "/home/u/proj/.zshrc" in late_t


@pytest.mark.parametrize(("st_flag", "want", "not_want"), [
    (os.ST_RELATIME, late_binds.MS_RELATIME, late_binds.MS_STRICTATIME),
    (os.ST_NOATIME | os.ST_NOEXEC, late_binds.MS_NOATIME | late_binds.MS_NOEXEC,
     late_binds.MS_RELATIME),
    (0, late_binds.MS_STRICTATIME, late_binds.MS_RELATIME | late_binds.MS_NOEXEC),
])
def test_remount_keeps_the_locked_flags(st_flag: int, want: int, not_want: int) -> None:
    flags = late_binds.remount_flags(st_flag)
    must = (late_binds.MS_BIND | late_binds.MS_REMOUNT | late_binds.MS_RDONLY
            | late_binds.MS_NOSUID | late_binds.MS_NODEV | want)
    assert flags & must == must and not flags & not_want


@needs_bwrap
def test_late_binds_are_read_only_fixed_and_cannot_be_undone(tmp_path: Path,
                                                            work: Path) -> None:
    (work / ".envrc").write_text("mine\n")  # an existing protected file, bound late too
    (work / "token").write_text("SECRET\n")  # a denied one: /dev/null over it, late
    settings = write_settings(tmp_path / "s.json", {
        "network": {"allowedDomains": []},
        "filesystem": {"allowWrite": [str(work)], "denyRead": [str(work / "token")]},
    })
    probe = (
        "cat token 2>/dev/null;"
        # .bashrc and .config/git do not exist: refused when made (no placeholder)
        "for f in .bashrc .envrc .config/git token; do"
        "  (echo x > $f) 2>/dev/null && echo WROTE $f;"
        "done;"
        "for f in .envrc token; do"
        "  rm -f $f 2>/dev/null && echo REMOVED $f;"
        "  mv $f moved 2>/dev/null && echo MOVED $f;"
        "  umount -l $f 2>/dev/null && echo UNMOUNTED $f;"
        "  mount -o remount,bind,rw $f 2>/dev/null && echo REMOUNTED $f;"
        "done;"
        "grep -c ' ro,' /proc/self/mountinfo;"
        "grep \" $PWD/.envrc \" /proc/self/mountinfo | cut -d' ' -f6;"
        "echo made > newfile && cat newfile"
    )
    r = subprocess.run([PY, "-m", "agent_sandbox", "exec", "--settings", str(settings), "--",
                        "sh", "-c", probe], cwd=work, capture_output=True, timeout=60)
    out = r.stdout.decode()
    assert r.returncode == 0, r.stderr.decode()
    assert not any(w in out for w in ("WROTE", "REMOVED", "MOVED", "UNMOUNTED", "REMOUNTED"))
    assert "ro,nosuid,nodev" in out and out.rstrip().endswith("made")
    assert "SECRET" not in out
    assert (work / ".envrc").read_text() == "mine\n"
    assert (work / "token").read_text() == "SECRET\n"
    assert not (work / ".bashrc").exists() and not (work / ".config").exists()
