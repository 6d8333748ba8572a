"""The rendered-file installer (``agent_sandbox.install.rendered_files``), run on
folders below a temporary root as the pyinfra deploy runs it (its own file, the
host's Python, a spec file), and once through Ansible as the roles run it
(``plugins/modules/agent_sandbox_files.py``).

- it writes only what differs, reports each change (and a diff), and writes
  nothing in check mode;
- a folder in a user's home can hold links the user made: the converge, as root,
  never follows them (the user prepares the link, the next converge fires);
  links root made in root's folders are followed (macOS's /etc);
- bad input (JSON that does not parse, content that does not match its SHA-256,
  an unknown owner, a target that is a folder) fails and writes nothing at all.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import DEMO, REPO, tool
from .conftest import run as run_tool

INSTALLER = REPO / "src" / "agent_sandbox" / "install" / "rendered_files.py"
USER = "nobody"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="installs files as root")


def item(target: str, content: bytes, mode: str = "0644", **extra: Any) -> dict[str, Any]:
    return {"target": target, "content_b64": base64.b64encode(content).decode(),
            "mode": mode, "sha256": hashlib.sha256(content).hexdigest(), **extra}


def run(tmp: Path, files: list[dict[str, Any]], *, check: bool = False, diff: bool = False,
        **params: Any) -> dict[str, Any]:
    """The installer as the pyinfra deploy runs it on a host: its file, the host's
    Python in isolated mode, a spec file."""
    spec = tmp / "spec.json"
    spec.write_text(json.dumps({"files": files, "root": str(tmp / "root"), **params}))
    flags = ["--check"] * check + ["--diff"] * diff
    proc = subprocess.run([sys.executable, "-I", str(INSTALLER), str(spec), *flags],
                          capture_output=True, text=True, timeout=60)
    out, end = json.JSONDecoder().raw_decode(proc.stdout)
    assert proc.returncode == (1 if out.get("failed") else 0), proc.stderr
    if not out.get("failed"):  # the line pyinfra's output shows
        assert proc.stdout[end:].strip() == ("changed" if out["changed"] else "unchanged")
    return dict(out)


def user_folder(path: Path) -> None:
    pw = pwd.getpwnam(USER)
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def test_writes_what_differs_and_nothing_in_check_mode(tmp_path: Path) -> None:
    root = tmp_path / "root"
    files = [item("/etc/agent-sandbox/policy.json", b'{"a": 1}\n'),
             item("/etc/agent-sandbox/exec.json", b'{"b": 2}\n', "0600")]
    dry = run(tmp_path, files, check=True, diff=True)
    assert dry["changed"] and not root.exists()
    assert [c["change"] for c in dry["changes"]] == ["created", "created"]
    assert dry["diff"][0]["after"] == '{"a": 1}\n'

    first = run(tmp_path, files)
    assert first["changed"], first
    policy = root / "etc/agent-sandbox/policy.json"
    assert policy.read_bytes() == b'{"a": 1}\n'
    assert (root / "etc/agent-sandbox/exec.json").stat().st_mode & 0o7777 == 0o600
    assert (root / "etc/agent-sandbox").stat().st_mode & 0o7777 == 0o755
    assert not [p for p in policy.parent.iterdir() if ".agent-sandbox-" in p.name]

    again = run(tmp_path, files, check=True)
    assert again["changed"] is False and again["changes"] == []
    assert run(tmp_path, files)["changed"] is False

    policy.chmod(0o666)
    (root / "etc/agent-sandbox/exec.json").write_bytes(b'{"b": 3}\n')
    fixed = run(tmp_path, files, diff=True)
    assert {c["target"]: c["change"] for c in fixed["changes"]} == {
        "/etc/agent-sandbox/policy.json": "mode/owner",
        "/etc/agent-sandbox/exec.json": "updated"}
    assert fixed["diff"] == [{"before_header": "/etc/agent-sandbox/exec.json",
                              "after_header": "/etc/agent-sandbox/exec.json",
                              "before": '{"b": 3}\n', "after": '{"b": 2}\n'}]
    assert policy.stat().st_mode & 0o7777 == 0o644


def test_folders_made_in_a_home_are_the_users(tmp_path: Path) -> None:
    root = tmp_path / "root"
    user_folder(root / "home" / "dev")
    pw = pwd.getpwnam(USER)
    target = "/home/dev/.config/Claude/claude_desktop_config.json"
    assert run(tmp_path, [item(target, b"{}\n", owner=USER)])["changed"]
    made = root / "home/dev/.config"
    assert (made.stat().st_uid, (made / "Claude").stat().st_uid) == (pw.pw_uid, pw.pw_uid)
    assert (root / target.lstrip("/")).stat().st_uid == 0  # the file stays root's
    mine = run(tmp_path, [item(target, b"{}\n", owner=USER)], home_user_owns_files=True)
    assert [c["change"] for c in mine["changes"]] == ["mode/owner"]
    assert (root / target.lstrip("/")).stat().st_uid == pw.pw_uid


def test_a_link_a_user_made_in_their_home_is_never_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    victim = root / "etc" / "cron.d"
    victim.mkdir(parents=True)
    home = root / "home" / "dev"
    user_folder(home)
    # step 1, as the user: ~/.codex is a link to a root folder
    (home / ".codex").symlink_to(victim)
    os.lchown(home / ".codex", pwd.getpwnam(USER).pw_uid, -1)
    files = [item("/etc/agent-sandbox/policy.json", b"{}\n"),
             item("/home/dev/.codex/config.toml", b"x = 1\n", owner=USER)]
    # step 2, the converge as root: refused, and nothing at all written
    out = run(tmp_path, files)
    assert out.get("failed") and "a link a user could have made" in out["msg"], out
    assert "nothing was written" in out["msg"]
    assert list(victim.iterdir()) == []
    assert victim.stat().st_uid == 0  # the roles' folder task used to chown it to the user
    assert not (root / "etc/agent-sandbox").exists()
    # the same link made by root, in a root folder, is followed (macOS's /etc)
    os.lchown(home / ".codex", 0, -1)
    os.chown(home, 0, 0)
    assert run(tmp_path, files)["changed"]
    assert (victim / "config.toml").read_bytes() == b"x = 1\n"


def test_a_link_or_fifo_at_the_target_is_replaced_not_written_through(tmp_path: Path) -> None:
    root = tmp_path / "root"
    repo = root / "home/dev/src/app/.claude"
    user_folder(repo)
    secret = root / "etc" / "shadow"
    secret.parent.mkdir(parents=True)
    secret.write_text("root:x\n")
    (repo / "settings.json").symlink_to(secret)
    os.mkfifo(repo / "hooks.json")
    files = [item("/home/dev/src/app/.claude/settings.json", b"{}\n", owner=USER),
             item("/home/dev/src/app/.claude/hooks.json", b"{}\n", owner=USER)]
    assert run(tmp_path, files)["changed"]
    assert secret.read_text() == "root:x\n"
    for name in ("settings.json", "hooks.json"):
        p = repo / name
        assert not p.is_symlink() and p.is_file() and p.read_bytes() == b"{}\n", name


@pytest.mark.parametrize("bad", ["json", "sha256", "owner", "folder", "path", "mode"])
def test_bad_input_fails_and_writes_nothing(tmp_path: Path, bad: str) -> None:
    root = tmp_path / "root"
    good = item("/etc/agent-sandbox/policy.json", b"{}\n")
    wrong = {
        "json": item("/etc/x/settings.json", b"{not json"),
        "sha256": {**item("/etc/x/a.toml", b"a"), "sha256": "0" * 64},
        "owner": item("/home/nobody-here/a.toml", b"a", owner="no-such-user-here"),
        "folder": item("/etc/x/dir", b"a"),
        "path": item("/etc/x/../shadow", b"a"),
        "mode": item("/etc/x/a.toml", b"a", mode="rw-r--r--"),
    }[bad]
    if bad == "folder":
        (root / "etc/x/dir").mkdir(parents=True)
    out = run(tmp_path, [good, wrong])
    assert out.get("failed"), out
    assert "nothing was written" in out["msg"], out["msg"]
    assert not (root / "etc/agent-sandbox").exists()
    assert not (root / "etc/shadow").exists()


def test_installs_the_renderers_filter_output_as_rendered(tmp_path: Path) -> None:
    """What the roles pass (``agent_sandbox_render | agent_sandbox_select``) lands byte
    for byte, with each artifact's mode, and a second run changes nothing."""
    from .test_plugin import filters

    rendered = filters.agent_sandbox_render(str(DEMO), "sandbox-demo-1")
    selected = filters.agent_sandbox_select(rendered, exclude=["seatbelt"])
    for home in {a["owner"] for a in selected if a["owner"]}:
        user_folder(tmp_path / "root" / "home" / home)
    selected = [{**a, "owner": USER if a["owner"] else None} for a in selected]
    assert run(tmp_path, selected)["changed"]
    for art in selected:
        path = tmp_path / "root" / art["target"].lstrip("/")
        assert path.read_bytes() == base64.b64decode(art["content_b64"]), art["target"]
        assert f"{path.stat().st_mode & 0o7777:04o}" == art["mode"], art["target"]
    assert run(tmp_path, selected)["changed"] is False


def test_the_roles_module_runs_the_same_installer(tmp_path: Path) -> None:
    """Through Ansible (``ansible.cfg``'s library and module_utils): check mode and
    --diff report without writing, a run writes, a refusal fails the task."""
    files = [item("/etc/agent-sandbox/policy.json", b'{"a": 1}\n')]

    def module(args: dict[str, Any], *flags: str) -> tuple[int, str]:
        proc = run_tool([tool("ansible"), "localhost", "-c", "local", "-m", "agent_sandbox_files",
                         "-a", json.dumps({"root": str(tmp_path / "root"), **args}), *flags],
                        check=False, ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"))
        return proc.returncode, proc.stdout + proc.stderr

    rc, out = module({"files": files}, "--check", "--diff")
    assert rc == 0 and "CHANGED" in out and '+{"a": 1}' in out, out
    assert not (tmp_path / "root").exists()
    rc, out = module({"files": files})
    assert rc == 0 and "CHANGED" in out, out
    assert (tmp_path / "root/etc/agent-sandbox/policy.json").read_bytes() == b'{"a": 1}\n'
    rc, out = module({"files": files})
    assert rc == 0 and "SUCCESS" in out, out
    rc, out = module({"files": [item("/etc/x/a.json", b"{not json")]})
    assert rc != 0 and "not valid JSON" in out and "nothing was written" in out, out


def step(name: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "argv": [sys.executable, "-c", code], **extra}


def test_a_bundle_makes_folders_links_and_runs_its_steps_in_order(tmp_path: Path) -> None:
    """Folders, files, early steps, late files, links, late steps: each phase sees
    the one before it; a second call changes nothing; check mode runs nothing."""
    log = tmp_path / "log"
    root = tmp_path / "root"
    seen = (f"import os, sys; open({str(log)!r}, 'a').write(sys.argv[1] + ' ' + "
            f"str(os.path.exists({str(root / 'etc/late.json')!r})) + chr(10)); "
            "print('unchanged')")
    bundle = {
        "folders": [{"path": "/opt/tool", "mode": "0750"}],
        "late_files": [item("/etc/late.json", b"{}\n")],
        "links": [{"path": "/usr/bin/tool", "target": "/opt/tool/bin/tool"}],
        "early_steps": [{**step("early", seen), "argv": [sys.executable, "-c", seen, "early"]}],
        "late_steps": [{**step("late", seen), "argv": [sys.executable, "-c", seen, "late"]}],
    }
    out = run(tmp_path, [item("/etc/first.json", b"[]\n")], check=True, **bundle)
    assert out["changed"] and out["steps"] == [] and not root.exists() and not log.exists()
    out = run(tmp_path, [item("/etc/first.json", b"[]\n")], **bundle)
    assert [c["change"] for c in out["changes"]] == ["folder created", "created", "created",
                                                     "link"], out
    assert log.read_text() == "early False\nlate True\n"
    assert f"{(root / 'opt/tool').stat().st_mode & 0o7777:o}" == "750"
    assert os.readlink(root / "usr/bin/tool") == "/opt/tool/bin/tool"
    again = run(tmp_path, [item("/etc/first.json", b"[]\n")], **bundle)
    assert again["changed"] is False and again["changes"] == [], again
    (root / "opt/tool").chmod(0o755)
    assert run(tmp_path, [], **bundle)["changes"] == [
        {"target": "/opt/tool", "change": "folder mode/owner"}]


def test_a_step_that_reports_changed_or_was_done_before(tmp_path: Path) -> None:
    done = tmp_path / "done"
    bundle = {"late_steps": [step("once", "print('changed')", unless_exist=[str(done)])]}
    out = run(tmp_path, [], **bundle)
    assert out["changed"] and out["steps"] == [{"name": "once", "changed": True}]
    done.write_text("")
    out = run(tmp_path, [], **bundle)
    assert out["changed"] is False and out["steps"] == [{"name": "once", "changed": False}]


def test_a_failing_step_fails_the_call_and_says_what_was_done(tmp_path: Path) -> None:
    bundle = {"early_steps": [step("broken", "import sys; sys.exit('no such repository')")]}
    out = run(tmp_path, [item("/etc/a.json", b"{}\n")], **bundle)
    assert out["failed"] and "broken" in out["msg"] and "no such repository" in out["msg"]
    assert out["written"] == ["/etc/a.json"], out  # the file before it landed
    out = run(tmp_path, [], **bundle)  # nothing before it: nothing was written
    assert out["failed"] and out["written"] == [] and "nothing was written" in out["msg"]


def test_the_runtime_asks_for_its_archive_and_is_kept_while_it_matches(tmp_path: Path) -> None:
    """A virtualenv installed from another archive (or none) asks for the archive,
    having made only the folders; a stamp that matches costs nothing."""
    prefix = tmp_path / "root/opt/agent-sandbox"
    runtime = {"prefix": "/opt/agent-sandbox", "sha256": "ab" * 32, "python": sys.executable}
    late = [step("late", "print('changed')")]
    folders = [{"path": "/opt/agent-sandbox", "mode": "0755"}]
    out = run(tmp_path, [item("/etc/a.json", b"{}\n")], runtime=runtime, late_steps=late,
              folders=folders)
    assert out["needs_archive"] and out["steps"] == [] and prefix.is_dir()
    assert not (tmp_path / "root/etc/a.json").exists()
    (prefix / "wheelhouse.tar").write_bytes(b"not this archive")
    assert run(tmp_path, [], runtime=runtime, folders=folders)["needs_archive"]
    (prefix / "venv/bin").mkdir(parents=True)
    (prefix / "venv/bin/sandbox").write_text("")
    (prefix / "wheelhouse.installed").write_text("ab" * 32 + "\n")
    out = run(tmp_path, [], runtime=runtime, late_steps=late, folders=folders)
    assert not out["needs_archive"] and out["steps"] == [{"name": "late", "changed": True}]
    # check mode reports the install a different archive would make, and does nothing
    out = run(tmp_path, [], check=True, runtime={**runtime, "sha256": "cd" * 32})
    assert out["changes"] == [{"target": "/opt/agent-sandbox/venv",
                               "change": "runtime installed"}]
    assert (prefix / "wheelhouse.installed").read_text() == "ab" * 32 + "\n"
    # so does an extra the installed virtualenv was not given
    out = run(tmp_path, [], check=True, runtime={**runtime, "extras": ["pull"]})
    assert out["changes"] == [{"target": "/opt/agent-sandbox/venv",
                               "change": "runtime installed"}]


def test_missing_packages_come_first_and_a_changed_file_restarts_its_unit(tmp_path: Path) -> None:
    """A package dpkg does not list stops the call before anything but the folders
    (the role's package manager runs, then the call again); a step whose files the
    call rewrote gets its after_change arguments."""
    out = run(tmp_path, [item("/etc/unit.timer", b"[Timer]\n")],
              packages=["coreutils", "agent-sandbox-no-such-package"])
    assert out["needs_packages"] == ["agent-sandbox-no-such-package"] and out["steps"] == []
    assert not (tmp_path / "root/etc/unit.timer").exists()
    log = tmp_path / "calls"
    report = (f"import sys; open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '|'); "
              "print('changed')")
    unit = step("start unit.timer", report,
                after_change={"targets": ["/etc/unit.timer"], "args": ["restart"]})
    out = run(tmp_path, [item("/etc/unit.timer", b"[Timer]\n")], late_steps=[unit],
              packages=["coreutils"])
    assert out["needs_packages"] == [] and out["steps"] == [
        {"name": "start unit.timer", "changed": True}]
    assert out["changes"] == [{"target": "/etc/unit.timer", "change": "created"}]
    run(tmp_path, [item("/etc/unit.timer", b"[Timer]\n")], late_steps=[unit])
    assert log.read_text() == "restart||"  # restarted when its file changed, not after
    # in check mode a missing package is reported, with the rest of the comparison
    out = run(tmp_path, [item("/etc/unit.timer", b"[Timer]\nX=1\n")], check=True,
              packages=["agent-sandbox-no-such-package"])
    assert {c["change"] for c in out["changes"]} == {"package installed", "updated"}
