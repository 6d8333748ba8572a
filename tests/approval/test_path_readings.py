"""Every path a tool call names is judged as every reader of it reads it.

``paths.places`` is the one normalisation: the kernel's reading (links followed,
then ``..``) and a tidying client's (``..`` folded first), strictest verdict
wins; a walk through a magic link of ``/proc`` cannot be judged from the hook's
process (a write is denied, a read escalates); ``paths.special_device`` names the
exact device names, which a shell exempts as its own and a file tool does not.
The class of the ``/dev/fd/../../..`` escape, not only its one example: every
prefix, every file tool of every client, reads and patterns, and the shell.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent_sandbox.hooks.calls import BadInput, claude_call, cursor_call, gemini_call
from agent_sandbox.policy.decision import Call
from agent_sandbox.policy.engine import Policy
from agent_sandbox.spec.paths import OpaquePath, places, special_device

from .conftest import BASE_POLICY, claude_pre, decision_of, make_repo, run_hook

# prefixes the kernel (or a tidying client) reads as "/" or as nothing at all
TO_ROOT = ("/dev/fd/../../..", "/dev/fd/../../../../..", "/dev/./fd/../../..",
           "/proc/self/../..", "/proc/../dev/fd/../../..")
# prefixes whose target depends on the process that opens the path
OPAQUE = ("/dev/fd/0/../../../..", "/dev/fd/3/..", "/dev/stdin/../../../..",
          "/proc/self/root", "/proc/thread-self/root", "/proc/self/cwd/../../../..",
          "/proc/self/fd/0/..", f"/proc/{os.getpid()}/root", "/proc/1/root")


def _policy(repo: Path, home: str | None = None, shell_home: str | None = None,
            doc: dict[str, Any] | None = None) -> Policy:
    return Policy(doc or BASE_POLICY, repo=str(repo), home=home or os.path.expanduser("~"),
                  shell_home=shell_home)


def _verdict(policy: Policy, call: Call) -> str:
    return policy.classify(call).verdict.value


def _targets(repo: Path) -> list[str]:
    home = os.path.expanduser("~")
    return [f"{repo}/.sandbox/escalations/decided/20260101T000000-aaaaaaaaaaaa.json",
            f"{repo}/.sandbox/policy.json", f"{repo}/.claude/settings.json",
            f"{repo}/.git/hooks/pre-commit", f"{repo}/.git/config", f"{home}/.bashrc",
            f"{home}/.ssh/authorized_keys"]


def _write_calls(path: str, cwd: str) -> list[Call]:
    """The same write in every file tool of every client, as the hook reads it."""
    patch = f"*** Begin Patch\n*** Add File: {path}\n+x\n*** End Patch\n"
    move = f"*** Begin Patch\n*** Update File: a.txt\n*** Move to: {path}\n@@\n-a\n+b\n" \
           "*** End Patch\n"
    base = {"session_id": "s", "cwd": cwd}
    return [
        claude_call({**base, "tool_name": "Write", "tool_input": {"file_path": path,
                                                                  "content": "x"}}),
        claude_call({**base, "tool_name": "Edit", "tool_input": {
            "file_path": path, "old_string": "a", "new_string": "b"}}),
        claude_call({**base, "tool_name": "MultiEdit", "tool_input": {
            "file_path": path, "edits": []}}),
        claude_call({**base, "tool_name": "NotebookEdit", "tool_input": {
            "notebook_path": path, "new_source": "x"}}),
        claude_call({**base, "tool_name": "apply_patch", "tool_input": {"command": patch}}),
        claude_call({**base, "tool_name": "apply_patch", "tool_input": {"input": move}}),
        gemini_call({**base, "tool_name": "write_file", "tool_input": {"file_path": path,
                                                                       "content": "x"}}),
        gemini_call({**base, "tool_name": "replace", "tool_input": {
            "file_path": path, "old_string": "a", "new_string": "b"}}),
    ]


# -- the readings ------------------------------------------------------------------

def test_places_reads_a_path_as_the_kernel_and_as_a_tidying_client(tmp_path: Path) -> None:
    (tmp_path / "deep" / "inner").mkdir(parents=True)
    os.symlink(tmp_path / "deep" / "inner", tmp_path / "link")
    # the kernel: link, then its parent; a client: .. folded first
    assert places(str(tmp_path / "link" / ".." / "x"), "/") == [
        str(tmp_path / "deep" / "x"), str(tmp_path / "x")]
    assert places("link/../x", str(tmp_path)) == places(str(tmp_path / "link/../x"), "/")
    assert places(str(tmp_path / "link" / "y"), "/") == [str(tmp_path / "deep/inner/y")]
    for prefix in TO_ROOT:
        assert str(tmp_path / "x") in places(prefix + str(tmp_path / "x"), "/"), prefix
    assert places("/dev/fd/../..", "/") == ["/proc", "/"]  # two readings, both judged


def _ids(prefixes: tuple[str, ...]) -> list[str]:
    """Test ids that are the same in every process (pytest-xdist compares them)."""
    return [p.replace(str(os.getpid()), "PID") for p in prefixes]


@pytest.mark.parametrize("prefix", OPAQUE, ids=_ids(OPAQUE))
def test_places_refuses_a_walk_through_a_process_link(prefix: str) -> None:
    with pytest.raises(OpaquePath):
        places(prefix + "/etc/passwd", "/")


def test_special_device_names_only_exact_device_names() -> None:
    expect = {"/dev/null": "null", "/dev/stdout": "stream", "/dev/stderr": "stream",
              "/dev/stdin": "stream", "/dev/fd/0": "stream", "/dev/fd/12": "stream",
              "/dev/tty": "terminal", "/dev/pts/3": "terminal", "/dev/console": "terminal",
              "/dev/tty2": "terminal", "/dev/ptmx": "terminal"}
    for path, kind in expect.items():
        assert special_device(path) == kind, path
    for path in ("/dev/fd/", "/dev/fd/1/", "/dev/fd/1/..", "/dev//fd/1", "/dev/fd/../x",
                 "/dev/fd/\u0661", "/dev/null/", "/dev/./null", "/dev/pts/x", "/dev/tty/../x",
                 "dev/null", "/dev/shm/x"):
        assert special_device(path) is None, path


# -- writes ---------------------------------------------------------------------------

@pytest.mark.parametrize("prefix", TO_ROOT + OPAQUE, ids=_ids(TO_ROOT + OPAQUE))
def test_every_file_tool_write_through_a_prefix_is_denied(repo: Path, prefix: str) -> None:
    policy = _policy(repo)
    for target in _targets(repo):
        for call in _write_calls(prefix + target, str(repo)):
            assert _verdict(policy, call) == "deny", (call.tool, prefix + target)


def test_a_write_through_a_link_is_judged_where_the_kernel_writes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside" / "inner"
    outside.mkdir(parents=True)
    os.symlink(outside, repo / "link")
    policy = _policy(repo)
    # lexically repo/x (writable); the kernel writes outside/x: not allowed
    for call in _write_calls(str(repo / "link" / ".." / "x"), str(repo)):
        assert _verdict(policy, call) == "escalate", call.tool
    os.symlink(repo / ".sandbox" / "escalations", repo / "q")
    for call in _write_calls(str(repo / "q" / "decided" / ".." / "decided" / "x.json"),
                             str(repo)):
        assert _verdict(policy, call) == "deny", call.tool
    # control: a plain write in the repository is allowed
    for call in _write_calls(str(repo / "notes.txt"), str(repo)):
        assert _verdict(policy, call) == "allow", call.tool


def test_file_tools_may_not_write_terminals_or_the_agents_descriptors(repo: Path) -> None:
    policy = _policy(repo)
    for path in ("/dev/tty", "/dev/pts/0", "/dev/console", "/dev/stdout", "/dev/stderr",
                 "/dev/fd/1", "/dev/fd/2", "/proc/self/fd/1", "/dev/fd/1/../x"):
        for call in _write_calls(path, str(repo)):
            assert _verdict(policy, call) == "deny", (call.tool, path)
    for call in _write_calls("/dev/null", str(repo)):  # control
        assert _verdict(policy, call) == "allow", call.tool


def test_the_shell_exempts_only_its_own_descriptors(repo: Path) -> None:
    policy = _policy(repo)

    def bash(cmd: str) -> str:
        return _verdict(policy, Call("bash", "Bash", {"command": cmd}, str(repo), command=cmd))

    for cmd in ("echo x > /dev/null", "echo x > /dev/stderr", "echo x >&2",
                "echo x > /dev/fd/2", "echo x > /dev/tty", "echo x | cat /dev/stdin",
                "cat /dev/null", "echo x > notes.txt"):
        assert bash(cmd) == "allow", cmd
    for prefix in TO_ROOT + OPAQUE:
        for target in _targets(repo):
            for cmd in (f"echo x > {prefix}{target}", f"echo x >> {prefix}{target}",
                        f"echo x | tee {prefix}{target}"):
                assert bash(cmd) == "deny", cmd
    assert bash("echo x > /dev/pts/0") != "allow"
    assert bash("echo x | tee /dev/stderr") == "escalate"  # tee: no rule, not a denial
    # a working directory reached through a magic link or a prefix
    for cd in ("/proc/self/cwd", "/dev/fd/3/..", "/proc/self/root" + str(repo)):
        assert bash(f"cd {cd} && echo x > notes.txt") != "allow", cd
    assert bash(f"cd {TO_ROOT[0]}{repo}/.sandbox && echo x > policy.json") == "deny"


def test_a_working_directory_through_a_magic_link_is_not_allowed(repo: Path) -> None:
    policy = _policy(repo)
    for wd in ("/proc/self/cwd", "/dev/fd/3/..", "/proc/self/root/tmp"):
        call = claude_call({"cwd": str(repo), "tool_name": "exec_command",
                            "tool_input": {"command": "echo x > notes.txt", "workdir": wd}})
        assert _verdict(policy, call) != "allow", wd
    # a relative workdir is the session folder's, as the client reads it
    (repo / "sub").mkdir()
    call = claude_call({"cwd": str(repo), "tool_name": "exec_command",
                        "tool_input": {"command": "ls", "workdir": "sub"}})
    assert call.cwd == str(repo / "sub") and _verdict(policy, call) == "allow"


# -- reads and patterns -----------------------------------------------------------

def test_reads_and_patterns_through_a_prefix_are_judged_as_their_target(repo: Path) -> None:
    policy = _policy(repo)
    ssh = os.path.join(os.path.expanduser("~"), ".ssh")
    key = os.path.join(ssh, "id_ed25519")
    rel = os.path.relpath(ssh, repo)
    base = {"session_id": "s", "cwd": str(repo)}
    for prefix in ("", *TO_ROOT):
        calls = [
            claude_call({**base, "tool_name": "Read", "tool_input": {"file_path":
                                                                     prefix + key}}),
            claude_call({**base, "tool_name": "Grep", "tool_input": {"pattern": "x",
                                                                     "path": prefix + ssh}}),
            claude_call({**base, "tool_name": "Glob", "tool_input": {"pattern":
                                                                     prefix + ssh + "/*"}}),
            claude_call({**base, "tool_name": "LS", "tool_input": {"path": prefix + ssh}}),
            gemini_call({**base, "tool_name": "read_file", "tool_input": {
                "absolute_path": prefix + key}}),
            gemini_call({**base, "tool_name": "glob", "tool_input": {
                "pattern": prefix + ssh + "/**"}}),
            gemini_call({**base, "tool_name": "read_many_files", "tool_input": {
                "include": ["src/*.py", prefix + key]}}),
            gemini_call({**base, "tool_name": "list_directory", "tool_input": {
                "dir_path": prefix + ssh}}),
            cursor_call("before-read-file", {**base, "file_path": prefix + key}),
        ]
        for call in calls:
            assert _verdict(policy, call) == "deny", (call.tool, prefix)
    for pattern in (f"{rel}/*", f"{rel}/**/id_*"):  # relative, climbing out of the repo
        call = claude_call({**base, "tool_name": "Glob", "tool_input": {"pattern": pattern}})
        assert _verdict(policy, call) == "deny", pattern
    with pytest.raises(BadInput):  # a .. after a wildcard: no one folder to judge
        claude_call({**base, "tool_name": "Glob", "tool_input": {"pattern": "*/../../x"}})
    for prefix in OPAQUE:
        call = claude_call({**base, "tool_name": "Read", "tool_input": {"file_path":
                                                                        prefix + key}})
        assert _verdict(policy, call) != "allow", prefix
    # control: ordinary searches and reads stay allowed
    for ti in ({"pattern": "**/*.py"}, {"pattern": "src/*.py", "path": str(repo)}):
        call = claude_call({**base, "tool_name": "Glob", "tool_input": ti})
        assert _verdict(policy, call) == "allow", ti
    call = claude_call({**base, "tool_name": "Read", "tool_input": {
        "file_path": TO_ROOT[0] + str(repo / "README.md")}})
    assert _verdict(policy, call) == "allow"


def test_a_read_through_a_link_is_judged_where_the_kernel_reads(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    (secret / "inner").mkdir(parents=True)
    doc = json.loads(json.dumps(BASE_POLICY))
    doc["filesystem"]["deny_read"].append(str(secret))
    repo = make_repo(tmp_path / "repo", doc)
    os.symlink(secret / "inner", repo / "link")
    policy = _policy(repo, doc=doc)
    call = claude_call({"cwd": str(repo), "tool_name": "Read",
                        "tool_input": {"file_path": str(repo / "link" / ".." / "key")}})
    assert _verdict(policy, call) == "deny"
    cmd = "cat link/../key"
    assert _verdict(policy, Call("bash", "Bash", {"command": cmd}, str(repo),
                                 command=cmd)) == "deny"


# -- homes ------------------------------------------------------------------------

def test_the_protected_set_covers_both_homes(tmp_path: Path) -> None:
    account, other = tmp_path / "account", tmp_path / "other"
    doc = json.loads(json.dumps(BASE_POLICY))
    doc["filesystem"]["allow_write"] = ["~", "."]
    repo = make_repo(tmp_path / "repo", doc)
    rels = (".ssh/authorized_keys", ".local/bin/git", ".config/systemd/user/a.service",
            ".bashrc", ".config/git/config")
    for home, shell_home in ((account, other), (other, account)):
        policy = _policy(repo, str(home), str(shell_home), doc)
        for h in (account, other):
            for rel in rels:
                call = Call("write", "Write", {}, str(repo), paths=(str(h / rel),))
                assert _verdict(policy, call) == "deny", (home, h, rel)
    policy = _policy(repo, str(account), str(other), doc)  # control: ~ stays writable
    assert _verdict(policy, Call("write", "Write", {}, str(repo),
                                 paths=(str(account / "notes.txt"),))) == "allow"


def test_an_approved_write_is_refused_where_the_engine_would_deny(repo: Path) -> None:
    from agent_sandbox.approval.executor import apply_write

    for path in (f"{TO_ROOT[0]}{repo}/.sandbox/policy.json",
                 f"{OPAQUE[3]}{repo}/.sandbox/policy.json", "/dev/tty",
                 os.path.join(os.path.expanduser("~"), ".ssh", "authorized_keys")):
        before = (repo / ".sandbox" / "policy.json").read_bytes()
        res = apply_write(str(repo), {"tool": "Write", "cwd": str(repo),
                                      "params": {"file_path": path, "content": "{}"}})
        assert res["status"] == "refused", (path, res)
        assert (repo / ".sandbox" / "policy.json").read_bytes() == before
    res = apply_write(str(repo), {"tool": "Write", "cwd": str(repo),  # control
                                  "params": {"file_path": "notes.txt", "content": "x"}})
    assert res["status"] == "completed" and (repo / "notes.txt").read_text() == "x"


# -- the real hook -----------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["/dev/fd/../../..", "/proc/self/root",
                                    "/dev/stdin/../../../.."])
def test_the_hook_denies_a_prefixed_write_of_the_queue(repo: Path, prefix: str) -> None:
    target = f"{prefix}{repo}/.sandbox/escalations/decided/20260101T000000-aaaaaaaaaaaa.json"
    proc = run_hook("claude", "pre-tool-use", claude_pre(
        "", repo, tool="Write", tool_input={"file_path": target, "content": "{}"}))
    assert decision_of(proc)[0] == "deny"
    if prefix in OPAQUE:
        return  # a read there escalates (test_reads_and_patterns...): it would wait
    proc = run_hook("cursor", "before-read-file", {
        "cwd": str(repo), "file_path": prefix + os.path.expanduser("~/.ssh/id_rsa")})
    assert json.loads(proc.stdout)["permission"] == "deny"
