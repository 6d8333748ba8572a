"""An approval runs exactly the code the human saw (``queue/content.py``,
``runtime/broker/pinned.py``), attacked between the request and the approval,
between the approval and the run, and through a remembered approval.

Each case drives the real hook (Claude Code's PreToolUse JSON on stdin), a
human's real ``sandbox approve`` / ``deny``, and the real sandboxed run; the
agent's changes are made on the host, as its Write tool makes them. Judged from
the host: what the run left in ``ran.txt`` (the approved code writes
``approved``, the swapped code ``EVIL``) and the audit records, never the
command's exit status. Every swap has its control: the same run without the
swap writes its marker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import claude_pre, make_repo
from .watch_pty import ENV

# what the command names, and the file the agent swaps (relative to the repository)
SWAPS = {
    "named script": ("bash ./deploy.sh", {"deploy.sh": "echo {m} > ran.txt\n"}, "deploy.sh"),
    "Makefile": ("make -s deploy", {"Makefile": "deploy:\n\techo {m} > ran.txt\n"}, "Makefile"),
    "imported module": ("python3 tool.py", {
        "tool.py": "import helper\nhelper.run()\n",
        "helper.py": "def run():\n    open('ran.txt', 'w').write('{m}')\n"}, "helper.py"),
    "config file the script reads": ("bash ./deploy.sh", {
        "deploy.sh": "read -r word < conf/target.cfg; echo \"$word\" > ran.txt\n",
        "conf/target.cfg": "{m}\n"}, "conf/target.cfg"),
    "node_modules/.bin": ("./node_modules/.bin/deploy", {
        "node_modules/.bin/deploy": "#!/bin/sh\necho {m} > ran.txt\n"},
        "node_modules/.bin/deploy"),
}


def _write(repo: Path, files: dict[str, str], marker: str) -> None:
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.replace("{m}", marker))
        if "/.bin/" in rel:
            path.chmod(0o755)


def _hook(repo: Path, command: str) -> subprocess.Popen[bytes]:
    p = subprocess.Popen([sys.executable, "-I", "-m", "agent_sandbox", "hook", "claude",
                          "pre-tool-use"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=ENV)
    assert p.stdin
    p.stdin.write(json.dumps(claude_pre(command, repo)).encode())
    p.stdin.close()
    p.stdin = None
    return p


def _pending(repo: Path, besides: set[str] = frozenset(), timeout: float = 30) -> str:  # type: ignore[assignment]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for f in sorted((repo / ".sandbox/escalations/pending").glob("*.json")):
            if f.stem not in besides:
                return f.stem
        time.sleep(0.02)
    raise AssertionError("no pending request appeared")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-I", "-m", "agent_sandbox", *args],
                          capture_output=True, text=True, env=ENV, timeout=120)


def _request(repo: Path, rid: str) -> dict[str, object]:
    for state in ("pending", "claimed"):
        path = repo / f".sandbox/escalations/{state}/{rid}.json"
        if path.exists():
            return json.loads(path.read_text())
    return json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())["request"]


def _audit(repo: Path) -> list[dict[str, object]]:
    out = []
    for f in sorted((repo / ".sandbox/audit").glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


@pytest.mark.parametrize("how", SWAPS)
def test_a_swap_between_request_and_approval_never_runs(tmp_path: Path, how: str) -> None:
    command, files, swapped = SWAPS[how]
    # control: approved as asked, the code runs and leaves its marker
    control = make_repo(tmp_path / "control")
    _write(control, files, "approved")
    hook = _hook(control, command)
    assert _cli("approve", str(control), _pending(control)).returncode == 0
    hook.communicate(timeout=120)
    assert (control / "ran.txt").read_text().strip() == "approved", how

    repo = make_repo(tmp_path / "repo")
    _write(repo, files, "approved")
    hook = _hook(repo, command)
    rid = _pending(repo)
    req = _request(repo, rid)
    content = req["content"]
    assert isinstance(content, dict) and content["digest"]
    # the agent rewrites the file after the request, before the human's look
    _write(repo, {swapped: files[swapped]}, "EVIL")
    assert _cli("approve", str(repo), rid).returncode == 0
    again = _pending(repo, besides={rid})
    shown = _request(repo, again)
    assert any(f"changed {repo / swapped}" == c for c in shown["changed"]), shown["changed"]
    assert shown["requeued_from"] == rid
    assert _cli("deny", str(repo), again, "--reason", "not what I approved").returncode == 0
    out, _ = hook.communicate(timeout=120)
    assert not (repo / "ran.txt").exists(), how  # nothing ran: neither version
    reason = json.loads(out)["hookSpecificOutput"]["permissionDecisionReason"]
    assert "changed after the request" in reason and again in reason, reason
    done = json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())
    assert done["status"] == "refused" and done["requeued_as"] == again


def test_the_views_show_the_named_script_and_what_changed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    _write(repo, SWAPS["named script"][1], "approved")
    hook = _hook(repo, "bash ./deploy.sh")
    rid = _pending(repo)
    shown = _cli("pending", str(repo), "--json")
    assert shown.returncode == 0, shown.stderr
    assert "echo approved > ran.txt" in shown.stdout and str(repo / "deploy.sh") in shown.stdout
    assert json.loads(shown.stdout)[0]["changed_since"] == []
    _write(repo, {"deploy.sh": SWAPS["named script"][1]["deploy.sh"]}, "EVIL")
    text = _cli("pending", str(repo))
    assert f"CHANGED since the request (1): changed {repo / 'deploy.sh'}" in text.stdout, \
        text.stdout
    _cli("deny", str(repo), rid)
    hook.communicate(timeout=60)


def test_a_swap_while_the_approved_run_runs_is_never_read(tmp_path: Path) -> None:
    """The approved run sleeps, the agent rewrites the library it sources next;
    the run gets no byte of the new text."""
    repo = make_repo(tmp_path / "repo")
    lib = "echo {m} > ran.txt\n"
    _write(repo, {"slow.sh": "touch started\nwhile [ ! -e go ]; do sleep 0.05; done\n. ./lib.sh\n",
                  "lib.sh": lib}, "approved")
    hook = _hook(repo, "bash ./slow.sh")
    rid = _pending(repo)
    assert _cli("approve", str(repo), rid).returncode == 0
    end = time.monotonic() + 60
    while not (repo / "started").exists():
        assert time.monotonic() < end, "the approved run never started"
        time.sleep(0.02)
    _write(repo, {"lib.sh": lib}, "EVIL")
    (repo / "go").touch()
    hook.communicate(timeout=120)
    assert not (repo / "ran.txt").exists() or (repo / "ran.txt").read_text() != "EVIL\n"
    assert not (repo / "ran.txt").exists()
    done = json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())
    assert any("lib.sh changed after this command was approved" in r
               for r in done.get("refused_reads", [])), done
    started = [r for r in _audit(repo) if r.get("event") == "sandbox_started"
               and r.get("request_id") == rid]
    assert started and started[0].get("content_digest") == _request(repo, rid)["content"][
        "digest"]  # type: ignore[index]


def test_the_approved_run_reads_back_what_it_writes(tmp_path: Path) -> None:
    """Pinning costs an approved build nothing: files it creates or rewrites are its own."""
    repo = make_repo(tmp_path / "repo")
    (repo / "notes.txt").write_text("one\n")
    hook = _hook(repo, "echo two >> notes.txt && sed -i s/one/uno/ notes.txt && "
                       "mkdir -p out && echo built > out/a && cat out/a notes.txt > ran.txt")
    assert _cli("approve", str(repo), _pending(repo)).returncode == 0
    hook.communicate(timeout=120)
    assert (repo / "ran.txt").read_text() == "built\nuno\ntwo\n"


def test_a_remembered_approval_holds_only_for_the_content_it_saw(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    _write(repo, SWAPS["named script"][1], "approved")
    hook = _hook(repo, "bash ./deploy.sh")
    rid = _pending(repo)
    assert _cli("approve", str(repo), rid, "--always").returncode == 0
    hook.communicate(timeout=120)
    assert (repo / "ran.txt").read_text() == "approved\n"
    (repo / "ran.txt").write_text("")  # a file added since: not what the approval saw
    ran_before = set((repo / ".sandbox/escalations/done").glob("*.json"))
    # nothing the approval saw changed: runs without a human, pinned to what it saw
    hook = _hook(repo, "bash ./deploy.sh")
    out, _ = hook.communicate(timeout=120)
    assert (repo / "ran.txt").read_text() == "approved\n", out
    assert len(set((repo / ".sandbox/escalations/done").glob("*.json")) - ran_before) == 1
    (repo / "ran.txt").unlink()
    # rewritten by the agent: a human must look again, and nothing runs meanwhile
    _write(repo, {"deploy.sh": SWAPS["named script"][1]["deploy.sh"]}, "EVIL")
    hook = _hook(repo, "bash ./deploy.sh")
    rid3 = _pending(repo, besides={rid})
    time.sleep(1)
    assert not (repo / "ran.txt").exists()
    assert "EVIL" in json.dumps(_request(repo, rid3)["content"])
    _cli("deny", str(repo), rid3)
    hook.communicate(timeout=60)
    assert not (repo / "ran.txt").exists()


def test_a_file_added_after_the_request_is_never_read(tmp_path: Path) -> None:
    """The approved script runs every plugin it finds; the agent adds one after the
    request. The approval still runs (nothing it saw changed), and the added plugin
    is refused: the approved code runs, the unseen code does not."""
    repo = make_repo(tmp_path / "repo")
    _write(repo, {"run.sh": "for p in plugins/*.sh; do . \"$p\"; done; echo done >> ran.txt\n",
                  "plugins/a.sh": "echo a >> ran.txt\n"}, "approved")
    hook = _hook(repo, "bash ./run.sh")
    rid = _pending(repo)
    _write(repo, {"plugins/b.sh": "echo EVIL >> ran.txt\n"}, "EVIL")
    assert _cli("approve", str(repo), rid).returncode == 0
    hook.communicate(timeout=120)
    assert (repo / "ran.txt").read_text() == "a\ndone\n"
    done = json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())
    assert any("plugins/b.sh was not in the tree approved" in r
               for r in done.get("refused_reads", [])), done


def test_a_script_rewritten_through_a_mapping_never_runs(tmp_path: Path) -> None:
    """The agent holds ``deploy.sh`` mapped shared and dirtied before it asks; after
    the request it rewrites the text through the mapping, which moves none of the
    file's times. The named script is checked by its bytes: nothing runs, and the
    request waits again, showing the change."""
    import mmap

    repo = make_repo(tmp_path / "repo")
    _write(repo, {"deploy.sh": "echo approved > ran.txt\n"}, "approved")
    fd = os.open(repo / "deploy.sh", os.O_RDWR)
    view = mmap.mmap(fd, 0)
    view[0:4] = b"echo"  # the page dirtied (the times moved) before the request
    before = os.stat(repo / "deploy.sh")
    hook = _hook(repo, "bash ./deploy.sh")
    rid = _pending(repo)
    view[5:13] = b"EVILEVIL"  # the same size, through the mapping
    assert os.stat(repo / "deploy.sh").st_mtime_ns == before.st_mtime_ns  # unseen by times
    assert _cli("approve", str(repo), rid).returncode == 0
    again = _pending(repo, besides={rid})
    assert any(str(repo / "deploy.sh") in c for c in _request(repo, again)["changed"])
    assert _cli("deny", str(repo), again).returncode == 0
    hook.communicate(timeout=120)
    view.close()
    os.close(fd)
    assert not (repo / "ran.txt").exists()


def test_a_file_it_reads_unnamed_rewritten_through_a_mapping_never_runs(tmp_path: Path) -> None:
    """The same with a file the command does not name: ``deploy.sh`` sources
    ``lib/steps.sh``, which the agent holds mapped shared and dirtied before it asks.
    A file mapped so when the request is made is recorded by its bytes: the rewrite
    is seen, nothing runs, and the request waits again."""
    import mmap

    repo = make_repo(tmp_path / "repo")
    _write(repo, {"deploy.sh": ". lib/steps.sh\n", "lib/steps.sh": "echo approved > ran.txt\n"},
           "approved")
    fd = os.open(repo / "lib/steps.sh", os.O_RDWR)
    view = mmap.mmap(fd, 0)
    view[0:4] = b"echo"  # dirtied before the request
    before = os.stat(repo / "lib/steps.sh")
    hook = _hook(repo, "bash ./deploy.sh")
    rid = _pending(repo)
    assert str(repo / "lib/steps.sh") in _request(repo, rid)["content"]["mapped"]
    view[5:13] = b"EVILEVIL"
    assert os.stat(repo / "lib/steps.sh").st_mtime_ns == before.st_mtime_ns
    assert _cli("approve", str(repo), rid).returncode == 0
    again = _pending(repo, besides={rid})
    assert any(str(repo / "lib/steps.sh") in c for c in _request(repo, again)["changed"])
    assert _cli("deny", str(repo), again).returncode == 0
    hook.communicate(timeout=120)
    view.close()
    os.close(fd)
    assert not (repo / "ran.txt").exists()


def test_a_program_added_after_the_request_is_never_run(tmp_path: Path) -> None:
    """The approved script runs every step it finds; after the request the agent adds
    one whose whole payload is its ``#!`` line (the kernel reads it, no interpreter
    opens the file) and a copy of a binary. Neither runs: every program an
    approved command starts is judged against the approved tree."""
    repo = make_repo(tmp_path / "repo")
    _write(repo, {"run.sh": "for s in steps/*; do \"./$s\"; done; echo done >> ran.txt\n",
                  "steps/a": "#!/bin/sh\necho a >> ran.txt\n"}, "approved")
    (repo / "steps/a").chmod(0o755)
    hook = _hook(repo, "bash ./run.sh")
    rid = _pending(repo)
    (repo / "steps/b").write_text('#!/usr/bin/env -S sh -c "echo EVIL >> ran.txt"\n')
    (repo / "steps/b").chmod(0o755)
    assert _cli("approve", str(repo), rid).returncode == 0
    hook.communicate(timeout=120)
    assert (repo / "ran.txt").read_text() == "a\ndone\n"
    done = json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())
    assert any("steps/b" in r for r in done.get("refused_reads", [])), done


@pytest.mark.parametrize("added", ["link", "pipe"])
def test_a_link_or_pipe_added_after_the_request_is_never_read(tmp_path: Path,
                                                               added: str) -> None:
    """The approved script sources every plugin it finds; after the request the agent
    adds one that is a link to a file the approval recorded (a fixture with other
    text), or a pipe it would feed while the run runs. Neither is read: the recorded
    link and file are the approved code, a new link or a pipe is not."""
    repo = make_repo(tmp_path / "repo")
    _write(repo, {"run.sh": "for p in plugins/*.sh; do . \"$p\"; done; echo done >> ran.txt\n",
                  "plugins/a.sh": "echo a >> ran.txt\n",
                  "fixtures/evil.txt": "echo EVIL >> ran.txt\n"}, "approved")
    hook = _hook(repo, "bash ./run.sh")
    rid = _pending(repo)
    if added == "link":
        (repo / "plugins/b.sh").symlink_to("../fixtures/evil.txt")
    else:
        os.mkfifo(repo / "plugins/b.sh")
    assert _cli("approve", str(repo), rid).returncode == 0
    hook.communicate(timeout=120)
    assert "EVIL" not in (repo / "ran.txt").read_text()
    done = json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())
    assert any("plugins/b.sh" in r for r in done.get("refused_reads", [])), done


def test_mcp_run_privileged_waits_on_content_too(tmp_path: Path) -> None:
    """``run_privileged`` over a real MCP stdio session: a request can wait without
    end there, the easiest place to swap the script. Nothing unseen runs."""
    from .test_mcp_server import Session

    repo = make_repo(tmp_path / "repo")
    _write(repo, SWAPS["named script"][1], "approved")
    s = Session(repo)
    try:
        s.start()
        _, text = s.call("run_privileged", {"command": "bash ./deploy.sh",
                                                 "wait_seconds": 0})
        rid = _pending(repo)
        assert rid in text, text
        _write(repo, {"deploy.sh": SWAPS["named script"][1]["deploy.sh"]}, "EVIL")
        assert _cli("approve", str(repo), rid).returncode == 0
        _, text = s.call("check_request", {"request_id": rid, "wait_seconds": 30})
        again = json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())[
            "requeued_as"]
        assert again in text and "changed after the request" in text, text
        assert "EVIL" in json.dumps(_request(repo, again)["content"])
        _cli("deny", str(repo), again)
    finally:
        s.close()
    assert not (repo / "ran.txt").exists()


@pytest.mark.parametrize(("command", "shown"), [
    ("bash ./deploy.sh#prod", ["deploy.sh#prod"]),
    ("bash ./deploy.sh # prod", ["deploy.sh"]),
    # the cd may fail (the shell goes on in the folder it was in): both are shown
    ("cd ops && bash ./deploy.sh", ["deploy.sh", "ops/deploy.sh"]),
    ("cd ops&&bash ./deploy.sh", ["deploy.sh", "ops/deploy.sh"]),
    ("make -C ops deploy", ["ops/Makefile"]),
    ("make --directory=ops deploy", ["ops/Makefile"]),
    ("make deploy", ["Makefile"]),
])
def test_the_view_shows_the_file_the_shell_runs(tmp_path: Path, command: str,
                                                shown: list[str]) -> None:
    """What the human is shown is the file the shell would run: ``#`` starts a
    comment only at a word's start, a ``cd`` in the command and ``make -C`` move
    where the words are read (a ``cd`` adds its folder: whether it succeeds is the
    shell's to find out)."""
    from agent_sandbox.queue.content import named, take

    for rel in ("deploy.sh", "deploy.sh#prod", "ops/deploy.sh", "Makefile", "ops/Makefile"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    got = named(command, str(tmp_path), take([str(tmp_path)]))
    assert [str(Path(str(e["path"])).relative_to(tmp_path)) for e in got] == shown


def test_a_decision_remembered_for_any_folder_runs_no_script_it_did_not_show(
        tmp_path: Path) -> None:
    """``bash ./deploy.sh`` approved ``--always --scope anywhere`` at the top; the same
    words asked in ``ops/`` name ``ops/deploy.sh``, which the human never saw: a
    human decides, and nothing runs meanwhile."""
    repo = make_repo(tmp_path / "repo")
    _write(repo, {"deploy.sh": "echo approved > ran.txt\n",
                  "ops/deploy.sh": "echo EVIL > ran.txt\n"}, "approved")
    hook = _hook(repo, "bash ./deploy.sh")
    rid = _pending(repo)
    assert _cli("approve", str(repo), rid, "--always", "--scope", "anywhere").returncode == 0
    hook.communicate(timeout=120)
    (repo / "ran.txt").unlink()
    hook = _hook(repo / "ops", "bash ./deploy.sh")
    rid2 = _pending(repo, besides={rid})
    time.sleep(1)
    assert not (repo / "ran.txt").exists() and not (repo / "ops/ran.txt").exists()
    assert str(repo / "ops/deploy.sh") in json.dumps(_request(repo, rid2)["content"])
    _cli("deny", str(repo), rid2)
    hook.communicate(timeout=60)
    assert not (repo / "ops/ran.txt").exists()


def test_a_long_script_says_what_the_view_leaves_out(tmp_path: Path) -> None:
    """The view shows a named script's first bytes; a longer one says how much more
    there is (a payload after padding is not silently out of sight)."""
    from agent_sandbox.queue.content import HEAD, named, take

    (tmp_path / "deploy.sh").write_text("#" * HEAD + "\necho payload\n")
    (tmp_path / "short.sh").write_text("echo ok\n")
    got = {Path(str(e["path"])).name: str(e["head"])
           for e in named("bash ./deploy.sh; bash ./short.sh", str(tmp_path),
                          take([str(tmp_path)]))}
    assert "more bytes, not shown here" in got["deploy.sh"]
    assert got["short.sh"] == "echo ok\n"


# what the view shows is what runs: the file the kernel reaches, in every folder the
# shell may be in, and nothing the command sees added after the request


def test_a_link_added_on_the_way_after_the_request_is_never_followed(tmp_path: Path) -> None:
    """``bash scripts/../deploy.sh`` with no ``scripts`` at the request reads
    ``./deploy.sh`` (shown); the agent then makes ``scripts`` a link into
    ``tools/ci``, so the kernel would reach ``tools/deploy.sh``. The link is on the
    way as the command gives the path, though not on the normalised one: refused."""
    repo = make_repo(tmp_path / "repo")
    _write(repo, {"deploy.sh": "echo approved > ran.txt\n",
                  "tools/deploy.sh": "echo EVIL > ran.txt\n", "tools/ci/.keep": ""}, "x")
    hook = _hook(repo, "bash scripts/../deploy.sh")
    rid = _pending(repo)
    (repo / "scripts").symlink_to("tools/ci")
    assert _cli("approve", str(repo), rid).returncode == 0
    hook.communicate(timeout=120)
    assert not (repo / "ran.txt").exists() or (repo / "ran.txt").read_text() != "EVIL\n"


def test_the_view_names_the_file_the_kernel_reaches(tmp_path: Path) -> None:
    """Through a link present at the request, in each folder a ``cd`` anywhere in the
    command may leave the shell in, and in the folder ``make --dir=`` (an
    abbreviation) or ``make -kC`` is given: each file the command may run is
    recorded with its bytes."""
    from agent_sandbox.queue import content

    repo = tmp_path / "repo"
    for rel in ("deploy.sh", "tools/deploy.sh", "sub/deploy.sh", "Makefile", "sub/Makefile"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(f"# {rel}\n")
    (repo / "tools/ci").mkdir()
    (repo / "scripts").symlink_to("tools/ci")
    entries = content.take([str(repo)])
    r = os.path.realpath(repo)

    def shown(command: str) -> set[str]:
        return {os.path.relpath(str(n["path"]), r)
                for n in content.named(command, str(repo), entries)}

    assert shown("bash scripts/../deploy.sh") == {"tools/deploy.sh"}
    assert {"deploy.sh", "sub/deploy.sh"} <= shown("cd sub extra; bash deploy.sh")
    assert {"deploy.sh", "sub/deploy.sh"} <= shown("if cd sub; then bash deploy.sh; fi")
    assert "sub/Makefile" in shown("make --dir=sub")
    assert "sub/Makefile" in shown("make -kC sub")


def test_a_named_file_swapped_for_a_link_is_never_read_for_the_view(tmp_path: Path) -> None:
    """The tree is recorded, then the agent swaps ``deploy.sh`` for a link to a file
    it may not read: the view reads a file only as recorded (no link followed, the
    same inode), so the secret is in no request."""
    from agent_sandbox.queue import content

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "deploy.sh").write_text("echo ok\n")
    secret = tmp_path / "secret"
    secret.write_text("TOPSECRET\n")
    entries = content.take([str(repo)])
    (repo / "deploy.sh").unlink()
    (repo / "deploy.sh").symlink_to(secret)
    assert "TOPSECRET" not in json.dumps(content.named("bash deploy.sh", str(repo), entries))
    (repo / "deploy.sh").unlink()
    (repo / "deploy.sh").write_text("echo ok\n")  # the same name, another inode
    assert content.named("bash deploy.sh", str(repo), entries) == []


def test_names_added_where_the_command_globs_send_it_to_a_human_again(tmp_path: Path) -> None:
    """``tar czf b.tgz *`` hands every name in the folder to tar; after the request
    the agent adds ``--checkpoint-action=exec=...``. An added name counts where the
    command lists names: nothing runs, and the request waits again naming it."""
    repo = make_repo(tmp_path / "repo")
    _write(repo, {"a.txt": "a\n"}, "x")
    hook = _hook(repo, "tar czf b.tgz * && echo approved > ran.txt")
    rid = _pending(repo)
    (repo / "--checkpoint=1").write_text("")
    (repo / "--checkpoint-action=exec=sh -c 'echo EVIL > ran.txt'").write_text("")
    assert _cli("approve", str(repo), rid).returncode == 0
    again = _pending(repo, besides={rid})
    assert any("--checkpoint" in c for c in _request(repo, again)["changed"])
    assert _cli("deny", str(repo), again).returncode == 0
    hook.communicate(timeout=120)
    assert not (repo / "ran.txt").exists()


def test_an_interpreter_added_after_the_request_is_never_run(tmp_path: Path) -> None:
    """The approved script starts with ``#!tools/t EVIL.txt``, and ``tools/t`` does
    not exist at the request; the agent adds it after: a binary (a copy of
    ``touch``), which no process opens: the kernel runs a ``#!`` program itself. It
    is judged when the script is started, and refused: no ``EVIL.txt``."""
    import shutil

    repo = make_repo(tmp_path / "repo")
    _write(repo, {"deploy.sh": "#!tools/t EVIL.txt\necho approved > ran.txt\n"}, "x")
    (repo / "deploy.sh").chmod(0o755)
    hook = _hook(repo, "./deploy.sh; echo done >> ran.txt")
    rid = _pending(repo)
    (repo / "tools").mkdir()
    shutil.copy(shutil.which("touch") or "/usr/bin/touch", repo / "tools/t")
    assert _cli("approve", str(repo), rid).returncode == 0
    hook.communicate(timeout=120)
    assert not (repo / "EVIL.txt").exists()
    assert "done" in (repo / "ran.txt").read_text()
    done = json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())
    assert any("tools/t" in r for r in done.get("refused_reads", [])), done


def test_an_mcp_tools_description_is_bound_by_a_remembered_approval() -> None:
    """A shell tool's ``description`` only describes the command; an MCP tool's may
    be what it sends (an issue's text): a remembered approval binds it."""
    from agent_sandbox.policy.remember import remembered_key

    def key(tool: str, params: dict[str, str]) -> str:
        return remembered_key(tool, params, "/w", "exact")

    assert key("Bash", {"command": "ls", "description": "a"}) == \
        key("Bash", {"command": "ls", "description": "b"})
    assert key("mcp__tracker__create_issue", {"title": "t", "description": "a"}) != \
        key("mcp__tracker__create_issue", {"title": "t", "description": "b"})


WRITER = r"""
import os, sys, time
target, payload, end = sys.argv[1], sys.argv[2].encode(), time.time() + 60
while time.time() < end:
    if os.path.exists(target):
        try:
            with open(target, "ab") as fh:
                fh.write(payload)
            print("wrote")
        except OSError as exc:
            print("refused", exc.errno)
        sys.exit(0)
    time.sleep(0.005)
"""


def test_a_file_the_approved_run_wrote_and_another_run_changed_never_runs(
        tmp_path: Path) -> None:
    """``python3 gen.py > build.sh && bash build.sh``: the view shows ``gen.py``; a
    command of the agent's left running in its own sandbox waits for ``build.sh``
    and appends to it before the approved run reads it back. The approved run's
    files are claimed while it lives: the append goes on (another run is not
    refused), the claim is taken, and the approved run refuses to run the file:
    nothing of it runs. Control: the same writer appends to a file no approved run
    wrote."""
    repo = make_repo(tmp_path / "repo")
    _write(repo, {"gen.py": "print('echo approved > ran.txt')\n"}, "x")
    settings = str(repo / ".sandbox/srt-settings.json")
    writer = subprocess.Popen(
        [sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings", settings, "--cwd",
         str(repo), "--", "python3", "-c", WRITER, "build.sh", "echo EVIL > ran.txt\n"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    hook = _hook(repo, "python3 gen.py > build.sh && sleep 1 && bash build.sh")
    rid = _pending(repo)
    assert _cli("approve", str(repo), rid).returncode == 0
    hook.communicate(timeout=120)
    said, _ = writer.communicate(timeout=90)
    assert said.decode().startswith("wrote"), said
    assert not (repo / "ran.txt").exists()
    done = json.loads((repo / f".sandbox/escalations/done/{rid}.json").read_text())
    assert any("build.sh" in r for r in done.get("refused_reads", [])), done
    # control: the writer appends where no approved run claims the file
    (repo / "other.sh").write_text("echo ok\n")
    r = subprocess.run(
        [sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings", settings, "--cwd",
         str(repo), "--", "python3", "-c", WRITER, "other.sh", "echo more\n"],
        capture_output=True, env=ENV, timeout=90)
    assert r.stdout.decode().startswith("wrote") and "more" in (repo / "other.sh").read_text()


HOLDER = r"""
import os, sys, time
fd = os.open("build.sh", os.O_WRONLY)  # held from before the request
print("holding", flush=True)
evil, end = b"echo EVIL > ran.txt; exit 0\n", time.time() + 60
while time.time() < end:
    size = os.fstat(fd).st_size
    if size and size != len(evil):
        os.pwrite(fd, evil, 0)
    time.sleep(0.002)
"""


def test_a_descriptor_held_from_before_never_reaches_what_the_approved_run_writes(
        tmp_path: Path) -> None:
    """A command of the agent's opens ``build.sh`` for writing before it asks and
    keeps the descriptor (opening changes nothing the record holds); the approved
    command writes the script whole and runs it, while the holder rewrites
    whatever it finds there. A file the approved run truncates is made anew: the
    held descriptor reaches the old one, and the approved text runs."""
    repo = make_repo(tmp_path / "repo")
    (repo / "build.sh").write_text("")
    settings = str(repo / ".sandbox/srt-settings.json")
    holder = subprocess.Popen(
        [sys.executable, "-I", "-m", "agent_sandbox", "exec", "--settings", settings, "--cwd",
         str(repo), "--", "python3", "-c", HOLDER], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=ENV)
    try:
        assert holder.stdout and holder.stdout.readline() == b"holding\n"
        hook = _hook(repo, "echo 'echo approved > ran.txt' > build.sh; sleep 1; sh build.sh")
        rid = _pending(repo)
        assert _cli("approve", str(repo), rid).returncode == 0
        hook.communicate(timeout=120)
    finally:
        holder.kill()
        holder.wait()
    assert (repo / "ran.txt").read_text() == "approved\n"
