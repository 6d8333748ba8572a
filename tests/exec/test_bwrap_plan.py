"""The bwrap argv builder as a pure function over a fake filesystem: no processes."""

from __future__ import annotations

import os
import posixpath

import pytest

from agent_sandbox.runtime.bwrap import argv as bwargv
from agent_sandbox.runtime.bwrap import fsview, globs
from agent_sandbox.runtime.bwrap import plan as bw
from agent_sandbox.runtime.settings import parse


class FakeFs:
    """``FsView`` over a dict {path: 'd'|'f'} plus symlinks {path: target}."""

    def __init__(self, entries: dict[str, str], links: dict[str, str] | None = None) -> None:
        self.entries = dict(entries)
        self.links = links or {}
        self.contents: dict[str, bytes] = {}
        for p in list(self.entries):
            while p != "/":
                p = posixpath.dirname(p)
                self.entries.setdefault(p, "d")

    def realpath(self, path: str) -> str:
        parts = path.strip("/").split("/")
        cur = "/"
        for part in parts:
            cur = posixpath.join(cur, part)
            for _ in range(40):  # a chain of links, followed to its end
                if cur not in self.links:
                    break
                cur = self.links[cur]
        return cur

    def kind(self, path: str) -> str | None:
        return self.entries.get(self.realpath(path))

    def lkind(self, path: str) -> str | None:
        if path in self.links:
            return "l"
        return self.entries.get(path)

    def walk(self, root: str) -> list[tuple[str, str]]:
        return sorted((p, self.entries[p]) for p in self.entries if p.startswith(root + "/"))

    def read(self, path: str, limit: int) -> bytes | None:
        return self.contents.get(path)

    def nlink(self, path: str) -> int:
        return 1

    def readlink(self, path: str) -> str | None:
        return self.links.get(path)

    def listdir(self, path: str) -> list[str] | None:
        if self.entries.get(path) != "d":
            return None
        return sorted(posixpath.basename(p) for p in self.entries
                      if p != "/" and posixpath.dirname(p) == path)


def _ancestors(p: str) -> list[str]:
    out = []
    while p != "/":
        p = posixpath.dirname(p)
        out.append(p)
    return out


HOME = "/home/u"
CWD = "/home/u/proj"
BASE = {
    "/home/u/proj/src/main.py": "f",
    "/home/u/proj/.env": "f",
    "/home/u/proj/sub/.env": "f",
    "/home/u/.ssh/id_ed25519": "f",
    "/home/u/.ssh/config": "f",
    "/home/u/.bashrc": "f",
    "/etc/passwd": "f",
}


def plan_for(settings: dict, entries: dict[str, str] | None = None,
             links: dict[str, str] | None = None) -> bw.Plan:
    fs = FakeFs({**BASE, **(entries or {})}, links)
    return bw.plan(parse(settings), home=HOME, cwd=CWD, fs=fs)


def ops(p: bw.Plan) -> list[tuple[str, str]]:
    return [(m.op, m.path) for m in p.mounts]


def test_read_only_root_and_namespaces() -> None:
    p = plan_for({})
    argv = bwargv.build_argv(p, ["true"], cwd=CWD)
    assert argv[:8] == ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for flag in ("--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-net",
                 "--die-with-parent", "--new-session", "--unshare-ipc"):
        assert flag in argv
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[-4:] == ["--chdir", CWD, "--", "true"]
    assert "--bind" not in argv  # nothing writable unless allowWrite says so


def test_deny_read_dir_is_empty_readonly_tmpfs_and_file_is_dev_null() -> None:
    p = plan_for({"filesystem": {"denyRead": ["~/.ssh", "/etc/passwd"]}})
    argv = bwargv.build_argv(p, ["true"], cwd=CWD)
    i = argv.index("/home/u/.ssh")
    assert argv[i - 1] == "--tmpfs"
    assert argv[argv.index("--remount-ro") + 1] == "/home/u/.ssh"
    j = argv.index("/etc/passwd")
    assert argv[j - 2:j] == ["--ro-bind", "/dev/null"]


def test_allow_read_reopens_inside_deny_and_is_applied_after_it() -> None:
    p = plan_for({"filesystem": {"denyRead": ["~/.ssh"], "allowRead": ["~/.ssh/config"]}})
    assert ops(p).index(("hide", "/home/u/.ssh")) < ops(p).index(("show", "/home/u/.ssh/config"))


def test_glob_deny_read_matches_at_any_depth() -> None:
    p = plan_for({"filesystem": {"denyRead": ["**/.env"]}})
    hidden = {path for op, path in ops(p) if op == "hide"}
    assert {"/home/u/proj/.env", "/home/u/proj/sub/.env"} <= hidden


def test_deny_write_beats_allow_write_and_comes_after() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."], "denyWrite": ["src"]}})
    o = ops(p)
    assert ("rw", CWD) in o and ("ro", CWD + "/src") in o
    assert o.index(("rw", CWD)) < o.index(("ro", CWD + "/src"))


def test_tilde_and_relative_paths_expand() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["~/proj", "src"]}})
    assert ("rw", CWD) in ops(p) and ("rw", CWD + "/src") in ops(p)


def test_missing_paths_are_skipped_not_created() -> None:
    p = plan_for({"filesystem": {"denyRead": ["/nope"], "allowWrite": ["/also-nope"]}})
    assert not any(path.startswith(("/nope", "/also-nope")) for _, path in ops(p))


def test_mandatory_set_in_writable_root_gets_placeholders() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."]}})
    ph = dict(p.absent)
    assert CWD + "/.git" not in ph  # git init works inside; the sweep judges a new .git
    for name, kind in (("/.claude", "f"), ("/.devcontainer", "f"), ("/.ripgreprc", "f"),
                       ("/.bash_aliases", "f"), ("/.bashrc", "f"),
                       ("/.mcp.json", "f"), ("/.gitmodules", "f"), ("/.sandbox", "f"),
                       ("/.vscode", "f"), ("/.idea", "f"), ("/.codex", "f"),
                       ("/.cursor", "f"), ("/.gemini", "f"), ("/.gitconfig", "f"),
                       ("/.agents", "f")):
        assert ph[CWD + name] == kind
        assert ("ro", CWD + name) in ops(p)


def test_mandatory_set_cannot_be_turned_off_by_settings() -> None:
    # allowWrite naming a protected path directly still leaves it read-only
    p = plan_for({"filesystem": {"allowWrite": [".", ".claude"]}},
                 {CWD + "/.claude/settings.json": "f"})
    o = ops(p)
    assert ("rw", CWD + "/.claude") not in o and ("ro", CWD + "/.claude") in o


def test_existing_repo_pins_git_and_protects_hooks_and_config() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."]}},
                 {CWD + "/.git/config": "f", CWD + "/.git/HEAD": "f"})
    o = ops(p)
    assert ("ro", CWD + "/.git/config") in o
    assert ("ro", CWD + "/.git/hooks") in o
    assert (CWD + "/.git/hooks", "f") in p.absent  # a file holds the name too
    assert ("rw", CWD + "/.git") in o  # a mount point: renaming .git away fails


def test_parents_of_deep_protected_paths_are_pinned() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."]}}, {CWD + "/a/b/.vscode/x.json": "f"})
    o = ops(p)
    assert ("ro", CWD + "/a/b/.vscode") in o
    assert ("rw", CWD + "/a") in o and ("rw", CWD + "/a/b") in o


def test_pins_never_reopen_a_denied_read() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."], "denyRead": ["secret"]}},
                 {CWD + "/secret/.claude/x": "f"})
    assert ("rw", CWD + "/secret") not in ops(p)


def test_symlinked_rules_resolve_to_the_target() -> None:
    p = plan_for({"filesystem": {"denyRead": ["~/link"]}}, {"/data/secret": "f"},
                 links={"/home/u/link": "/data/secret"})
    assert ("hide", "/data/secret") in ops(p)


def test_protected_file_as_writable_root_is_dropped() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["~/.bashrc"]}})
    assert ("rw", "/home/u/.bashrc") not in ops(p)


SOCKETS = {
    "/home/u/.cache/daemon.sock": "s",  # the home folder
    "/var/lib/svc/api.sock": "s",  # a service's state folder
    "/home/u/proj/run/dev.sock": "s",  # a writable root
    "/tmp/x11.sock": "s",
    "/run/ok.sock": "s",
}


def test_unix_sockets_by_path_mount_nothing_and_carry_the_places_allowed() -> None:
    """Each connect() is judged when it is made (runtime.broker.connect): the plan
    neither hides the folders of sockets nor masks any socket; it carries the
    listed places, resolved, for the broker."""
    p = plan_for({"network": {"allowUnixSockets": ["/run/ok.sock", "/var/lib/svc"]},
                  "filesystem": {"allowWrite": ["."]}}, SOCKETS)
    assert p.unix_sockets == ("/run/ok.sock", "/var/lib/svc")
    argv = bwargv.build_argv(p, ["true"], cwd=CWD)
    hidden = {argv[i + 1] for i, a in enumerate(argv) if a == "--tmpfs"}
    assert not hidden & {"/tmp", "/var/tmp", "/run", "/dev/shm"}
    assert not any(path.endswith(".sock") for _, path in ops(p))


def test_a_listed_socket_not_bound_yet_is_allowed_where_it_will_be() -> None:
    p = plan_for({"network": {"allowUnixSockets": ["/srv/later/api.sock"]}}, SOCKETS)
    assert p.unix_sockets == ("/srv/later/api.sock",)


@pytest.mark.parametrize("network", [{}, {"allowAllUnixSockets": True}])
def test_runs_without_unix_sockets_by_path_carry_no_places(network: dict) -> None:
    p = bw.plan(parse({"network": network}), home=HOME, cwd=CWD, fs=FakeFs({**BASE, **SOCKETS}))
    assert p.unix_sockets is None


def test_listed_socket_in_or_through_a_writable_root_is_dropped() -> None:
    """A listed path in a writable root, or whose resolution passes through a link
    there: the command could put any socket (or a link to one) there before the
    next run (srt's rule)."""
    links = {"/opt/app.sock": "/home/u/proj/l2", "/home/u/proj/l2": "/home/u/.cache/daemon.sock"}
    p = plan_for({"network": {"allowUnixSockets": ["/opt/app.sock", "./run/dev.sock"]},
                  "filesystem": {"allowWrite": ["."]}}, SOCKETS, links)
    assert p.unix_sockets == ()
    # the same link outside every writable root is honoured (the control)
    links = {"/opt/app.sock": "/srv/l2", "/srv/l2": "/home/u/.cache/daemon.sock"}
    p = plan_for({"network": {"allowUnixSockets": ["/opt/app.sock"]},
                  "filesystem": {"allowWrite": ["."]}}, SOCKETS, links)
    assert p.unix_sockets == ("/home/u/.cache/daemon.sock",)


@pytest.mark.parametrize("fd_flag,value", [("--seccomp", 5), ("--info-fd", 6), ("--block-fd", 7)])
def test_fds_are_passed(fd_flag: str, value: int) -> None:
    argv = bwargv.build_argv(plan_for({}), ["true"], cwd=CWD, fds=bwargv.Fds(5, 6, 7))
    assert argv[argv.index(fd_flag) + 1] == str(value)


def test_proxy_env_both_cases_and_no_proxy() -> None:
    env = bwargv.proxy_env(connect_helper=["/py", "connect.py"])
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        assert env[k] == env[k.lower()]
    assert env["HTTP_PROXY"] == "http://127.0.0.1:3128"
    assert env["ALL_PROXY"] == "socks5h://127.0.0.1:1080"
    assert "127.0.0.1" in env["NO_PROXY"] and "localhost" in env["NO_PROXY"]
    assert "ProxyCommand='/py connect.py %h %p'" in env["GIT_SSH_COMMAND"]


def test_argv_is_deterministic() -> None:
    s = {"filesystem": {"allowWrite": ["."], "denyRead": ["**/.env", "~/.ssh"]}}
    first = bwargv.build_argv(plan_for(s), ["x"], cwd=CWD)
    assert first == bwargv.build_argv(plan_for(s), ["x"], cwd=CWD)


def test_new_session_unless_interactive_with_seccomp() -> None:
    p = plan_for({})
    assert "--new-session" in bwargv.build_argv(p, ["sh"], cwd=CWD)
    assert "--new-session" not in bwargv.build_argv(p, ["sh"], cwd=CWD, fds=bwargv.Fds(seccomp=3),
                                                 new_session=False)
    # without the seccomp filter (which refuses TIOCSTI) the session is always new
    assert "--new-session" in bwargv.build_argv(p, ["sh"], cwd=CWD, new_session=False)


def test_root_as_writable_is_refused() -> None:
    from agent_sandbox.runtime.settings import SettingsError

    with pytest.raises(SettingsError, match="makes '/' writable"):
        plan_for({"filesystem": {"allowWrite": ["/"]}})


def test_without_drops_placeholders_and_their_mounts() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."]}})
    q = bw.without(p, {CWD + "/.bashrc"})
    assert ("ro", CWD + "/.bashrc") not in ops(q)
    assert (CWD + "/.bashrc", "f") not in q.absent
    assert len(q.mounts) == len(p.mounts) - 1


def test_hidden_dir_is_made_read_only_after_the_mounts_inside_it() -> None:
    p = plan_for({"filesystem": {"denyRead": ["~"], "allowWrite": ["~/proj"],
                                 "allowRead": ["~/.bashrc"]}})
    argv = bwargv.build_argv(p, ["true"], cwd=CWD)
    ro = argv.index("--remount-ro")
    assert argv[ro + 1] == HOME
    assert argv.index("--tmpfs") < argv.index(CWD) < ro
    assert argv.index("/home/u/.bashrc") < ro


@pytest.mark.parametrize("allow,deny", [
    (["~/proj/sub"], ["~/proj"]),           # denyWrite on a parent of the writable root
    (["~/proj/secrets/x"], ["**/secrets/**"]),
    (["~/.claude"], []),                    # protected directory named as a root
    (["~/proj/.git/hooks"], []),
])
def test_deny_beats_allow_for_whole_writable_roots(allow: list[str], deny: list[str]) -> None:
    p = plan_for({"filesystem": {"allowWrite": allow, "denyWrite": deny}},
                 {"/home/u/proj/sub/f": "f", "/home/u/proj/secrets/x/f": "f",
                  "/home/u/.claude/settings.json": "f", "/home/u/proj/.git/hooks/h": "f"})
    assert not [m for m in p.mounts if m.op == "rw"]


@pytest.mark.parametrize("rule", ["**/.env", "**/.git/hooks/**", "**/.config/fish/**",
                                  "**/.git/config", "**/.claude/**", "**/*.pem",
                                  "/home/*/x", "**/secrets/**"])
@pytest.mark.parametrize("path", ["/a/.env", "/a/b/.env", "/.env", "/a/.envx", "/a/x.env",
                                  "/r/.git/hooks", "/r/.git/hooks/pre-commit", "/r/.git/config",
                                  "/r/.git/config/x", "/h/.config/fish", "/h/.config/fish/c",
                                  "/h/.claude", "/h/.claude/s.json", "/k/a.pem", "/home/u/x",
                                  "/s/secrets/a", "/s/secrets"])
def test_fast_covers_agrees_with_spec_paths(rule: str, path: str) -> None:
    from agent_sandbox.spec.paths import covers as reference

    assert globs.covers(rule, path) == reference(rule, path)


@pytest.mark.parametrize("rule", ["**/.env", "**/*.pem", "**/.git/hooks/**", "/a/*/c"])
@pytest.mark.parametrize("path", ["/x/.env", "/x/y.env", "/.env", "/k/a.pem", "/a/b/c",
                                  "/r/.git/hooks/h", "/r/.git/hooks"])
def test_prepared_matcher_agrees_with_covers(rule: str, path: str) -> None:
    from agent_sandbox.spec.paths import covers as reference

    assert globs._matcher(rule)(path) == reference(rule, path)


def test_real_walk_is_complete_or_refuses(tmp_path) -> None:
    """No silent budget: every match at any depth, in node_modules and .venv too; a
    tree past the limit refuses the run; a folder that cannot be listed is reported
    (the planner binds it read-only whole)."""
    deep = tmp_path / "a" / "b" / "c" / "d" / "e" / "f" / "g"
    deep.mkdir(parents=True)
    (deep / ".env").write_text("x")
    for skip in ("node_modules", ".venv", "__pycache__"):
        (tmp_path / skip / "pkg").mkdir(parents=True)
        (tmp_path / skip / "pkg" / ".env").write_text("x")
    found = globs.existing(fsview.RealFs(), "**/.env", [str(tmp_path)])
    assert sorted(found) == sorted([str(deep / ".env"),
                                   *(str(tmp_path / s / "pkg" / ".env")
                                     for s in ("node_modules", ".venv", "__pycache__"))])
    with pytest.raises(fsview.WalkError, match="too many"):
        fsview.RealFs(limit=5).walk(str(tmp_path))
    if os.geteuid() != 0:  # root lists a mode-000 folder anyway
        locked = tmp_path / "locked"
        locked.mkdir(mode=0)
        assert (str(locked), "u") in fsview.RealFs().walk(str(tmp_path))


def test_allow_read_outside_any_deny_changes_nothing() -> None:
    p = plan_for({"filesystem": {"allowWrite": ["."], "allowRead": ["src"]}})
    assert ("show", CWD + "/src") not in ops(p)  # would make a writable path read-only


PRIVATE = "/home/u/.local/state/agent-sandbox/mcp"


@pytest.mark.parametrize("settings", [
    {},
    {"network": {"allowUnixSockets": [f"{PRIVATE}/r.sock"]},
     "filesystem": {"allowRead": [PRIVATE]}},
    {"network": {"allowUnixSockets": ["/home/u/.local/state"]},
     "filesystem": {"allowWrite": ["~"]}},
], ids=["plain", "listed-and-allowed", "parent-listed-home-writable"])
def test_private_state_is_hidden_whatever_the_settings(settings: dict) -> None:
    """The resident MCP server's folder (``contract.private_paths``): an empty
    read-only folder in every plan, its socket never bound back, and mounted
    after anything that would show the folders above it."""
    fs = FakeFs({**BASE, f"{PRIVATE}/r.sock": "s"})
    p = bw.plan(parse(settings), home=HOME, cwd=CWD, fs=fs, private=[PRIVATE])
    o = ops(p)
    assert ("hide", PRIVATE) in o
    assert not any(path.startswith(PRIVATE) and op != "hide" for op, path in o), o
    argv = bwargv.build_argv(p, ["true"], cwd=CWD)
    at = max(i for i, a in enumerate(argv) if a == PRIVATE)
    later = [a for a in argv[at + 1:] if a.startswith(PRIVATE)]
    assert argv[argv.index(PRIVATE) - 1] == "--tmpfs" and not later, argv
    above = [i for i, a in enumerate(argv) if a != "/" and PRIVATE.startswith(a + "/")]
    assert all(i < argv.index(PRIVATE) for i in above), argv
