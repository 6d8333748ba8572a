"""``sandbox agent``: the client itself runs inside the boundary, so a call that
nothing stops (its hooks switched off by a user setting, the policy engine never
asked) still has no effect outside it. Judged from the host: the bytes of
protected files, a loopback listener that counts connections, what the model
was shown. Each attack also runs with the bare client, which must show the
effect (the control that proves the judges can fire).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import SECRET, World
from .model_server import ModelServer, Shell
from .test_managed_hosts import provision
from .test_real_clients import Approver, Listener


def py(code: str) -> str:
    """A shell step running Python: no pattern rule can see what it touches."""
    return "python3 -c " + json.dumps(code)


def our_hook_names(world: World) -> list[str]:
    """The names of our hooks, as anyone can read them in the system file and the
    repository's."""
    names: list[str] = []
    for f in (world.root / "etc/gemini-cli/settings.json", world.repo / ".gemini/settings.json"):
        if f.is_file():
            doc = json.loads(f.read_text())
            names += [h.get("name") or h["command"] for groups in doc.get("hooks", {}).values()
                      for g in groups for h in g["hooks"]]
    return names


def hooks_off(world: World) -> None:
    """A user setting that switches off every hook of ours Gemini CLI knows."""
    settings = world.home / ".gemini" / "settings.json"
    doc = json.loads(settings.read_text())
    doc["hooksConfig"] = {"enabled": False, "disabled": our_hook_names(world)}
    settings.write_text(json.dumps(doc))


def hookless_gemini(world: World) -> Path:
    """A program that runs Gemini CLI with the system settings minus their hooks
    (the admin policy kept): a client that runs no hook at all, which no user
    setting can make of Gemini CLI under ``sandbox agent`` (see
    ``test_gemini_hooks_a_user_switches_off_still_run_under_sandbox_agent``)."""
    from .harness import client_bin

    system = json.loads((world.root / "etc/gemini-cli/settings.json").read_text())
    system.pop("hooks", None)
    world.install_system("/etc/gemini-cli/no-hooks.json", json.dumps(system).encode())
    script = world.root / "gemini-without-hooks"
    script.write_text("#!/bin/sh\nGEMINI_CLI_SYSTEM_SETTINGS_PATH=/etc/gemini-cli/no-hooks.json "
                      f"exec {client_bin('gemini')} \"$@\"\n")
    script.chmod(0o755)
    return script


def at(path: Path) -> str:
    """A Python expression for ``path`` that no pattern over the command text
    matches (every component split in two)."""
    return " + '/' + ".join(f"{c[:1]!r} + {c[1:]!r}" for c in path.parts[1:])


def attack_steps(world: World, port: int) -> list[Shell]:
    home, repo = world.home, world.repo
    return [
        Shell("echo allowed > marker-allowed.txt"),
        Shell(py(f"open('/' + {at(home / '.bashrc')}, 'a').write('pwned')")),
        Shell(py(f"print(open('/' + {at(home / '.ssh/id_ed25519')}).read())")),
        Shell(py(f"import socket; socket.create_connection(('127.0.' + '0.1', {port}), 3)")),
        Shell(f"curl -s -m 5 http://127.0.0.1:{port}/ ; echo curl-done"),
        Shell(py(f"open('/' + {at(home / '.gemini/settings.json')}, 'w').write('{{}}')")),
        Shell(py(f"open('/' + {at(repo / '.gemini/settings.json')}, 'w').write('{{}}')")),
        Shell(py(f"open('/' + {at(repo / '.sandbox/policy.json')}, 'w').write('{{}}')")),
        Shell(py(f"open('/' + {at(home / '.gemini/.env')}, 'w').write('X=1')")),
        Shell(py(f"import os; p = '/' + {at(home / '.gemini/extensions/x')}; "
                 "os.makedirs(p); open(p + '/gemini-extension.json', 'w').write('{}')")),
    ]


PROTECTED = ("home/.gemini/settings.json", "repo/.gemini/settings.json",
             "repo/.sandbox/policy.json")


@pytest.mark.parametrize("through_agent", [False, True], ids=["bare", "sandbox-agent"])
def test_gemini_calls_nothing_stops_are_contained(world: World, through_agent: bool) -> None:
    """No hook runs (bare: switched off by a user setting; under ``sandbox agent``,
    where no setting can do that, a client started without them): the OS
    boundary alone holds."""
    provision(world)
    for p in PROTECTED[1:]:  # a repository's own files (no ``sandbox init``: no hooks)
        (world.root / p).parent.mkdir(parents=True, exist_ok=True)
        (world.root / p).write_text("{}\n")
    listener = Listener()
    try:
        with ModelServer(attack_steps(world, listener.port)) as model:
            world.configure("gemini", model.url)
            hooks_off(world)
            before = {p: (world.root / p).read_bytes() for p in PROTECTED}
            if through_agent:
                run = world.run_agent("gemini", model.url, program=hookless_gemini(world))
            else:
                run = world.run("gemini", model.url)
            results = model.results()
    finally:
        listener.close()
    detail = "\n".join([*results, run.stdout[-1500:], run.stderr[-2500:]])
    assert len(results) == 10, detail
    assert not any("denied this call" in r for r in results), detail  # no hook ran
    # the legitimate work is done either way
    assert (world.repo / "marker-allowed.txt").read_text() == "allowed\n", detail
    effects = {
        "bashrc": (world.home / ".bashrc").exists(),
        "key": SECRET in results[2],
        "network": listener.hits > 0,
        **{p: (world.root / p).read_bytes() != before[p] for p in PROTECTED},
        "env": (world.home / ".gemini/.env").exists()
        and (world.home / ".gemini/.env").read_bytes() != b"",
        "extension": (world.home / ".gemini/extensions/x").exists(),
    }
    if through_agent:
        assert not any(effects.values()), (effects, detail)
        # the placeholders held for the run are gone again
        assert not (world.home / ".gemini/.env").exists(), detail
        assert not (world.home / ".gemini/policies").exists(), detail
    else:  # the control: the same calls, run bare, reach everything they aim at
        assert all(effects.values()), (effects, detail)


def test_escalation_through_the_hook_relay(world: World) -> None:
    """With hooks on, the hook inside the sandbox files its request on the host's
    queue and reads the human's decision; the approved push runs, the denied one
    does not, and nothing inside could have written a decision."""
    remote = world.repo / "remote.git"  # writable in the runner's sandbox
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    steps = [Shell(f"git push {remote} HEAD:refs/heads/approved"),
             Shell(f"git push {remote} HEAD:refs/heads/denied")]
    with ModelServer(steps) as model:
        world.configure("gemini", model.url)
        world.sandbox("init", str(world.repo), "--gemini", "--mcp", "--trust")
        approver = Approver(world, ["approve", "deny"])
        try:
            run = world.run_agent("gemini", model.url, options=[
                "--settings", str(world.repo / ".sandbox/srt-settings.json")])
        finally:
            approver.close()
        results = model.results()
    detail = f"{results}\n{run.stdout[-1500:]}\n{run.stderr[-2500:]}"
    assert [d for _, d in approver.answered] == ["approve", "deny"], detail
    refs = subprocess.run(["git", "--git-dir", str(remote), "for-each-ref",
                           "--format=%(refname)"], capture_output=True, text=True).stdout
    assert "refs/heads/approved" in refs and "refs/heads/denied" not in refs, (refs, detail)
    assert len(results) == 2 and "exit status: 0" in results[0], detail
    assert "not this branch" in results[1] or "denied" in results[1], detail


def test_gemini_hooks_a_user_switches_off_still_run_under_sandbox_agent(world: World) -> None:
    """A fleet host, no ``sandbox init``: the user's settings, the repository's own
    ``.gemini/settings.json``, a variable-expanded entry, the user's environment
    and a project ``.env`` all try to switch the system hooks off. Under
    ``sandbox agent`` none of it does: the disguised read is denied by the hook,
    and the push waits in the user's host-level queue for a human, then runs
    once. (``test_managed_hosts`` runs the same settings bare: there the key is
    read, so the attempts are real.)"""
    provision(world)
    remote = world.root / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    names = our_hook_names(world)
    off = {"hooksConfig": {"enabled": False,
                           "disabled": [*names, "${OURS}", "agent-sandbox-${EVENT:-x}"]}}
    settings = world.home / ".gemini" / "settings.json"
    steps = [Shell("cat ~/.s''sh/id_ed25519"),
             Shell(f"git push {remote} HEAD:refs/heads/approved")]
    with ModelServer(steps) as model:
        world.configure("gemini", model.url)
        settings.write_text(json.dumps({**json.loads(settings.read_text()), **off}))
        (world.repo / ".gemini").mkdir(exist_ok=True)
        (world.repo / ".gemini" / "settings.json").write_text(json.dumps(off))
        (world.repo / ".env").write_text(
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH=/etc/gemini-cli/no-hooks.json\n")
        hookless_gemini(world)  # the file the variables point at: no hooks
        approver = Approver(world, ["approve"], host_site=True)
        try:
            run = world.run_agent("gemini", model.url, env_extra={
                "OURS": names[0], "GEMINI_CLI_SYSTEM_SETTINGS_PATH":
                "/etc/gemini-cli/no-hooks.json"})
        finally:
            approver.close()
        results = model.results()
    detail = f"{results}\n{run.stdout[-1500:]}\n{run.stderr[-2500:]}"
    assert len(results) == 2, detail
    assert "denied this call" in results[0] and SECRET not in results[0], detail
    assert [d for _, d in approver.answered] == ["approve"], detail
    refs = subprocess.run(["git", "--git-dir", str(remote), "for-each-ref",
                           "--format=%(refname)"], capture_output=True, text=True).stdout
    assert refs.split() == ["refs/heads/approved"], (refs, detail)
    # the host's files are as the user left them: only the client saw the copies
    assert json.loads(settings.read_text())["hooksConfig"] == off["hooksConfig"]


# -- without a client ---------------------------------------------------------


def sandbox_cli(world: World, *args: str, env: dict[str, str] | None = None,
                stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(world.wrap([sys.executable, "-m", "agent_sandbox", *args]),
                          cwd=world.repo, env={**world.env("gemini", ""), **(env or {})},
                          input=stdin, capture_output=True, text=True, timeout=60)


def test_fails_closed_with_clear_errors(world: World) -> None:
    bad = world.root / "bad.yml"
    bad.write_text("version: 1\nfilesystem:\n  allow_write: 7\n")
    good = world.root / "good.yml"
    good.write_text("version: 1\nfilesystem:\n  allow_write: [\".\"]\n")
    marker = world.root / "ran"
    cases = [
        (["agent", "vim", "--", "-c", "q"], 2, "unknown client 'vim'"),
        (["agent", "gemini", "--program", "/bin/touch", "--", str(marker)], 125,
         "no sandbox settings"),
        (["agent", "gemini", "--spec", str(good), "--program", str(world.root / "nope"), "--",
          "x"], 125, "not an executable file"),
        (["agent", "gemini", "--spec", str(bad), "--program", "/bin/touch", "--",
          str(marker)], 125, "invalid spec"),
        (["agent", "gemini", "--model-endpoint", "http://127.0.0.1", "--", "x"], 2,
         "needs an explicit port"),
        (["agent", "gemini", "--model-endpoint", "http://127.0.0.2:80", "--", "x"], 2,
         "only 127.0.0.1 and localhost"),
        (["agent", "gemini", "--bogus", "--", "x"], 2, "unknown option '--bogus'"),
        (["agent", "gemini", "--model-endpoint", "http://127.0.0.1:3129", "--", "x"], 2,
         "the sandbox's own"),
    ]
    for args, code, text in cases:
        r = sandbox_cli(world, *args)
        assert r.returncode == code and text in r.stderr, (args, r.returncode, r.stderr)
    assert not marker.exists()
    # no client on PATH (the wrapper, which is skipped, is the only `gemini` there)
    bindir = world.root / "bin"
    bindir.mkdir()
    wrapper = bindir / "gemini"
    wrapper.write_text("#!/bin/sh\n# agent-sandbox wrapper: runs the client through "
                       "`sandbox agent`\nexec sandbox agent gemini -- \"$@\"\n")
    wrapper.chmod(0o755)
    r = sandbox_cli(world, "agent", "gemini", "--spec", str(good), "--", "-p", "x",
                    env={"PATH": f"{bindir}:/usr/bin:/bin"})
    assert r.returncode == 125 and "gemini program was not found" in r.stderr, r.stderr


class FakeRelay:
    """A listener that answers every hook with 'allow' (what an attacker would run)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.sock.settimeout(10)
        self.hits = 0

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])


def test_hook_relay_is_refused_outside_a_sandbox(world: World) -> None:
    """A client's settings can set environment variables for its hooks: the relay
    variable alone must not hand the decision to whoever listens on that port."""
    fake = FakeRelay()
    call = json.dumps({"hook_event_name": "BeforeTool", "tool_name": "run_shell_command",
                       "tool_input": {"command": "cat ~/.ssh/id_ed25519"},
                       "cwd": str(world.repo), "session_id": "s"})
    try:
        r = sandbox_cli(world, "hook", "gemini", "before-tool", stdin=call,
                        env={"AGENT_SANDBOX_HOOK_RELAY": str(fake.port)})
    finally:
        fake.sock.close()
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "outside a `sandbox agent` sandbox" in r.stderr
    assert json.loads(r.stdout).get("decision") in ("deny", "block"), r.stdout


def test_host_side_relay_refuses_a_folder_outside_the_run(tmp_path: Path) -> None:
    from agent_sandbox.agent.run import HookRelay

    inside = tmp_path / "repo"
    inside.mkdir()
    relay = HookRelay(str(inside), dict(os.environ))
    for data in ({"cwd": "/"}, {"cwd": str(tmp_path)}, {"cwd": str(inside) + "/../x"},
                 {"cwd": "relative"}):
        out = relay.answer({"argv": ["gemini", "before-tool"], "stdin": json.dumps(data)})
        assert out["rc"] == 2 and "hook relay" in out["stderr"], (data, out)
    for bad in ({"argv": ["gemini", "before-tool;rm"], "stdin": "{}"},
                {"argv": ["gemini"], "stdin": "{}"}, {"argv": ["a", "b"], "stdin": 3}, []):
        out = relay.answer(bad)
        assert out["rc"] == 2 and ("malformed" in out["stderr"] or "expected" in out["stderr"])


def test_agent_settings_never_loosen_a_deny() -> None:
    from agent_sandbox.agent.profiles import agent_settings, parse_endpoint
    from agent_sandbox.runtime.settings import parse

    base = parse({"network": {"allowedDomains": [], "deniedDomains": [
        "generativelanguage.googleapis.com", "127.0.0.1"]},
        "filesystem": {"denyRead": ["~/.ssh"], "allowWrite": ["."], "denyWrite": []}})
    s = agent_settings(base, "gemini", "/home/u", parse_endpoint("http://127.0.0.1:8080"))
    assert "generativelanguage.googleapis.com" in s.network.denied_domains
    assert "127.0.0.1" in s.network.denied_domains
    assert not any(d.startswith("127.") for d in s.network.allowed_domains)  # forwarded
    assert "/home/u/.gemini/settings.json" in s.filesystem.deny_write
    assert "/home/u/.gemini/trustedFolders.json" in s.filesystem.deny_write
    assert s.filesystem.deny_read == ("~/.ssh",)
    remote = agent_settings(base, "codex", "/home/u", parse_endpoint("https://llm.corp:8443/v1"))
    assert "llm.corp:8443" in remote.network.allowed_domains


def test_wrapper_on_path_contains_gemini_and_verify_sees_which_runs(world: World) -> None:
    """The rendered wrapper, first on PATH, runs ``gemini`` through ``sandbox
    agent`` (the base-URL variable the client reads names the endpoint); the
    client checks report a PATH where ``gemini`` is the client itself, and stop
    once the wrapper comes first. Control: the same attack by the same name with
    the client itself first on PATH reads the key."""
    from agent_sandbox.inventory import HostFacts, User
    from agent_sandbox.render.agents import agent_wrapper

    from .harness import BIN, PROMPT
    from .test_managed_hosts import loosen

    provision(world)
    world.configure("gemini", "http://127.0.0.1:9")
    world.sandbox("init", str(world.repo), "--gemini", "--trust")  # for `sandbox status`
    wrappers = world.root / "wrappers"
    wrappers.mkdir()
    facts = HostFacts(name="fleet-host", os="linux", python=sys.executable,
                      users=(User("root", str(world.home)),))
    (wrappers / "gemini").write_bytes(agent_wrapper(facts, "gemini"))
    (wrappers / "gemini").chmod(0o755)
    bare_path = f"{BIN}:{Path(sys.executable).parent}:/usr/bin:/bin"
    wrapped_path = f"{wrappers}:{bare_path}"

    def boundary(path: str) -> list[dict[str, str]]:
        r = sandbox_cli(world, "status", str(world.repo), "--json", env={"PATH": path})
        return [f for f in json.loads(r.stdout)["clients"]
                if f["client"] == "gemini" and f["problem"] == "outside-boundary"]

    assert boundary(bare_path), "a bare gemini first on PATH is reported"
    assert not boundary(wrapped_path), "the wrapper first on PATH is not"
    leaked = {}
    for name, path in (("bare", bare_path), ("wrapped", wrapped_path)):
        with ModelServer([Shell("cat ~/.s''sh/id_ed25519")]) as model:
            world.configure("gemini", model.url)
            flags = loosen(world, "gemini")
            run = subprocess.run(world.wrap(["gemini", "-p", PROMPT, "-o", "json", *flags]),
                                 cwd=world.repo, stdin=subprocess.DEVNULL, text=True,
                                 capture_output=True, timeout=240,
                                 env={**world.env("gemini", model.url), "PATH": path})
            results = model.results()
        assert len(results) == 1, (name, run.stdout[-1500:], run.stderr[-1500:])
        leaked[name] = SECRET in results[0]
    assert leaked == {"bare": True, "wrapped": False}, leaked


# Each client with every call let through by its own flags (no hook, no prompt,
# no sandbox of its own: under `sandbox agent` the outer boundary is the one).
LET_THROUGH = {"claude": ["--allowedTools", "Bash"],
               "codex": ["--sandbox", "danger-full-access"],
               "gemini": ["--yolo", "--skip-trust"]}
OWN_SETTINGS = {"claude": ".claude/settings.json", "codex": ".codex/config.toml",
                "gemini": ".gemini/settings.json"}
SPEC = """\
version: 1
filesystem:
  deny_read: ["~/.ssh"]
  allow_write: ["REPO"]
network:
  denied_domains: ["localhost", "127.0.0.1"]
"""


@pytest.mark.parametrize("through_agent", [False, True], ids=["bare", "sandbox-agent"])
@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_every_client_under_sandbox_agent(world: World, client: str,
                                          through_agent: bool) -> None:
    """On a host without managed files (where a client may run without its own
    sandbox), every call the client lets through stays inside ``sandbox agent``'s
    boundary: the start-up file, the key, the loopback listener and the client's
    own settings are out of reach; the control is the same run, bare."""
    spec = world.root / "spec.yml"
    spec.write_text(SPEC.replace("REPO", str(world.repo)))
    own = world.home / OWN_SETTINGS[client]
    listener = Listener()
    steps = [Shell("echo allowed > marker-allowed.txt"),
             Shell(py(f"open('/' + {at(world.home / '.bashrc')}, 'a').write('pwned')")),
             Shell(py(f"print(open('/' + {at(world.home / '.ssh/id_ed25519')}).read())")),
             Shell(py("import socket; socket.create_connection(('127.0.' + '0.1', "
                      f"{listener.port}), 3)")),
             Shell(py(f"open('/' + {at(own)}, 'a').write('# pwned')"))]
    try:
        with ModelServer(steps) as model:
            world.configure(client, model.url)
            own.parent.mkdir(exist_ok=True)
            if not own.exists():
                own.write_text("{}")
            before = own.read_bytes()
            if through_agent:
                run = world.run_agent(client, model.url, extra=LET_THROUGH[client],
                                      options=["--spec", str(spec)])
            else:
                run = world.run(client, model.url, extra=LET_THROUGH[client])
            results = model.results()
    finally:
        listener.close()
    detail = "\n".join([*results, run.stdout[-1500:], run.stderr[-2500:]])
    assert len(results) == len(steps), detail
    assert (world.repo / "marker-allowed.txt").read_text() == "allowed\n", detail
    effects = {"bashrc": (world.home / ".bashrc").exists(), "key": SECRET in results[2],
               "network": listener.hits > 0, "settings": own.read_bytes() != before}
    if through_agent:
        assert not any(effects.values()), (effects, detail)
    else:
        assert all(effects.values()), (effects, detail)
