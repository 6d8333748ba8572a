"""The sandbox_macos, sandbox_windows and sandbox_cluster roles and their playbooks.

- ``ansible-playbook --syntax-check`` (ansible-lint's production profile is the
  repository-wide run in tests/fleet/test_lint.py, which covers these roles and
  playbooks).
- macOS: no macOS host exists here. The role really runs (local connection) with
  ``sandbox_macos_root`` pointing into a temporary folder and the LaunchDaemon
  handler off, then again to prove idempotence, then in check mode.
- Windows: no Windows host exists here. The role runs in check mode against a
  stand-in: a local host whose ``ansible.windows`` modules are replaced, in a
  throwaway copy of the collection, by an action plugin that validates each
  task's arguments against the real module's documentation and records the call
  (tests/platforms/standin_action.py). The recorded calls are checked against the
  rendered plan.
- Cluster: no Kubernetes API server exists here. ``kubernetes.core.k8s`` is
  stood in the same way (arguments validated against the real module, each object
  checked with kubernetes-validate); the Vault part runs for real against an
  OpenBao dev server, in check mode, then applied, then applied again unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent_sandbox.fleet import FleetRenderer
from agent_sandbox.inventory import User
from agent_sandbox.render import macos, seatbelt, windows

from .conftest import EXAMPLE_FLEET, REPO, ROOT_TOKEN
from .sbpl import Profile, Query

BIN = Path(sys.executable).parent
COLLECTIONS = REPO / ".collections"
MY_ROLES = ["roles/sandbox_macos", "roles/sandbox_windows", "roles/sandbox_cluster"]
MY_PLAYBOOKS = ["playbooks/macos.yml", "playbooks/windows.yml", "playbooks/cluster.yml"]


def _need_collections() -> None:
    for c in ("ansible/windows", "kubernetes/core", "community/general"):
        if not (COLLECTIONS / "ansible_collections" / c / "MANIFEST.json").exists():
            pytest.fail(f"collection {c} is missing: run `make setup` (scripts/bootstrap.d)")


def _env(collections: list[Path], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update({
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join(str(c) for c in collections),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_PIPELINING": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCAL_TEMP": extra.pop("tmp", "/tmp"),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    })
    return env


def _playbook(args: list[str], env: dict[str, str], *, ok: bool = True) -> str:
    proc = subprocess.run([str(BIN / "ansible-playbook"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    if ok:
        assert proc.returncode == 0, out[-6000:]
    return out


def _recap(out: str, host: str) -> dict[str, int]:
    m = re.search(rf"^{re.escape(host)}\s+:\s+(.*)$", out, re.M)
    assert m, out[-3000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def _inventory(tmp: Path, hosts: dict[str, dict], groups: dict[str, list[str]] | None = None
               ) -> Path:
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    data: dict = {"all": {"hosts": {h: {**common, **v} for h, v in hosts.items()}}}
    if groups:
        data["all"]["children"] = {g: {"hosts": {h: {} for h in members}}
                                   for g, members in groups.items()}
    path = tmp / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def _standin(tmp: Path, ns: str, name: str, modules: list[str]) -> Path:
    """A copy of a real collection whose listed modules are replaced by the stand-in."""
    real = COLLECTIONS / "ansible_collections" / ns / name
    root = tmp / "standin"
    out = root / "ansible_collections" / ns / name
    out.mkdir(parents=True)
    for child in real.iterdir():
        if child.name != "plugins":
            (out / child.name).symlink_to(child)
    (out / "plugins").mkdir()
    for sub in (real / "plugins").iterdir():
        if sub.name != "action":
            (out / "plugins" / sub.name).symlink_to(sub)
    action = out / "plugins" / "action"
    action.mkdir()
    for f in (real / "plugins" / "action").iterdir():
        (action / f.name).symlink_to(f)
    source = Path(__file__).with_name("standin_action.py")
    for m in modules:
        target = action / f"{m}.py"
        if target.exists() or target.is_symlink():
            target.unlink()
        shutil.copyfile(source, target)
    return root


def _log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# ---------------------------------------------------------------- lint/syntax


def test_syntax_check(tmp_path):
    _need_collections()
    inv = _inventory(tmp_path, {"h": {}})
    for pb in MY_PLAYBOOKS:
        out = _playbook(["--syntax-check", "-i", str(inv), pb], _env([COLLECTIONS]))
        assert f"playbook: {pb}" in out


# ---------------------------------------------------------------------- macOS


MAC_KINDS = ["seatbelt", "srt-settings", "launchd", "mobileconfig", "claude-managed-settings",
             "codex-requirements"]


def test_macos_role_installs_the_rendered_bytes_idempotently(tmp_path):
    _need_collections()
    root = tmp_path / "root"
    root.mkdir()
    # erin's ~/.ssh is a link to a folder elsewhere on the host: the profile must
    # deny the folder it resolves to (Seatbelt matches resolved paths)
    (root / "Volumes" / "keys" / "ssh").mkdir(parents=True)
    (root / "Users" / "erin").mkdir(parents=True)
    (root / "Users" / "erin" / ".ssh").symlink_to(root / "Volumes" / "keys" / "ssh")
    inv = _inventory(tmp_path, {
        "dev-mac-01": {"sandbox_os": "macos"},
        "dev-linux-01": {"sandbox_os": "linux"},
        "dev-win-01": {"sandbox_os": "windows"},
    })
    extra = json.dumps({
        "ansible_become": False,
        "sandbox_macos_root": str(root),
        "sandbox_macos_group": "root",
        "sandbox_macos_launchd_enabled": False,
        "sandbox_macos_render_inventory": str(EXAMPLE_FLEET),
        "sandbox_macos_artifact_kinds": MAC_KINDS,
    })
    env = _env([COLLECTIONS], tmp=str(tmp_path / "ansible-tmp"))
    first = _playbook(["-i", str(inv), "playbooks/macos.yml", "-e", extra], env)
    assert _recap(first, "dev-mac-01")["changed"] > 0
    # only the macOS host did anything beyond sorting
    assert _recap(first, "dev-linux-01")["changed"] == 0
    assert _recap(first, "dev-win-01")["changed"] == 0

    arts = FleetRenderer.from_path(str(EXAMPLE_FLEET)).render_host("dev-mac-01")
    mine = {t: a for t, a in arts.items() if a.kind in MAC_KINDS}
    assert len(mine) >= 6
    spec = FleetRenderer.from_path(str(EXAMPLE_FLEET)).spec_for("dev-mac-01")
    erin = "/Users/erin"
    links = seatbelt.resolved_denies(seatbelt.denied_paths(spec, erin),
                                  {f"{erin}/.ssh": "/Volumes/keys/ssh"})
    assert "/Volumes/keys/ssh" in links
    for target, art in mine.items():
        installed = root / target.lstrip("/")
        want = art.content + (links.encode() if target.endswith("/erin.sb") else b"")
        assert installed.read_bytes() == want, target
        assert installed.stat().st_mode & 0o777 == art.mode, target
    installed_files = {"/" + str(p.relative_to(root)) for p in root.rglob("*")
                       if p.is_file() and not str(p.relative_to(root)).startswith("Volumes")}
    assert installed_files == set(mine)
    prof = Profile((root / macos.seatbelt_target(
        FleetRenderer.from_path(str(EXAMPLE_FLEET)).facts("dev-mac-01"),
        User("erin", erin)).lstrip("/")).read_text(), {"CWD": f"{erin}/src/app"})
    for path in ("/Volumes/keys/ssh/id_ed25519", f"{erin}/.ssh/id_ed25519"):
        assert prof.decide(Query("file-read-data", path=path)) == "deny", path
    assert prof.decide(Query("file-write-unlink", path="/Volumes/keys/ssh")) == "deny"
    assert prof.decide(Query("file-read-data", path="/Volumes/keys/other")) == "allow"

    again = _playbook(["-i", str(inv), "playbooks/macos.yml", "-e", extra], env)
    assert _recap(again, "dev-mac-01")["changed"] == 0
    check = _playbook(["-i", str(inv), "playbooks/macos.yml", "-e", extra, "--check"], env)
    assert _recap(check, "dev-mac-01")["changed"] == 0


# -------------------------------------------------------------------- Windows


def test_windows_role_in_check_mode_against_a_stand_in(tmp_path):
    _need_collections()
    modules = ["win_group", "win_powershell", "win_file", "win_copy", "win_stat", "win_acl",
               "win_regedit"]
    standin = _standin(tmp_path, "ansible", "windows", modules)
    fleet = FleetRenderer.from_path(str(EXAMPLE_FLEET))
    facts = fleet.facts("dev-win-01")
    arts = fleet.render_host("dev-win-01")
    plan = json.loads(arts[windows.plan_target(facts)].content)
    existing = [a["path"] for a in plan["acl"] if not a["if_exists"]]
    existing.append("C:\\Users\\grace\\.ssh")
    log = tmp_path / "calls.jsonl"
    inv = _inventory(tmp_path, {"dev-win-01": {"sandbox_os": "windows"},
                                "dev-mac-01": {"sandbox_os": "macos"}})
    extra = json.dumps({"sandbox_windows_render_inventory": str(EXAMPLE_FLEET)})
    env = _env([standin, COLLECTIONS], tmp=str(tmp_path / "ansible-tmp"),
               STANDIN_LOG=str(log), STANDIN_EXISTING=json.dumps(existing))

    # the stand-in refuses to pretend a real change
    out = _playbook(["-i", str(inv), "playbooks/windows.yml", "-e", extra], env, ok=False)
    assert "only runs in check mode" in out
    log.unlink(missing_ok=True)

    out = _playbook(["-i", str(inv), "playbooks/windows.yml", "-e", extra, "--check"], env)
    assert _recap(out, "dev-mac-01")["changed"] == 0
    calls = _log(log)
    by = {}
    for c in calls:
        by.setdefault(c["module"].rsplit(".", 1)[1], []).append(c["args"])
    assert by["win_group"] == [{"name": plan["group"], "state": "present",
                                "description": "Accounts that run sandboxed agent commands"}]
    script = arts[windows.script_target(facts)].content.decode()
    provision = [a for a in by["win_powershell"] if "Steps" in a["parameters"]]
    steps = [a["parameters"]["Steps"] for a in provision]
    assert steps == [["State"], ["Engine"], ["Account"], ["Firewall"], ["Fence"]]
    assert all(a["script"] == script for a in provision)
    # the scheduled jobs' tasks (render.schedules), registered from their installed XML
    tasks = {a["parameters"]["Name"]: a["parameters"]["Path"] for a in by["win_powershell"]
             if "Steps" not in a["parameters"]}
    assert tasks == {"agent-sandbox-drift": "C:/Program Files/agent-sandbox/tasks/"
                                            "agent-sandbox-drift.xml"}
    assert {a["path"] for a in by["win_stat"]} == {a["path"] for a in plan["acl"]}
    applied = {(a["path"], a["rights"], a["type"]) for a in by["win_acl"]}
    wanted = {(a["path"], a["rights"], a["type"]) for a in plan["acl"] if a["path"] in existing}
    assert applied == wanted and all(a["user"] == plan["group"] for a in by["win_acl"])
    assert all(a["state"] == "present" for a in by["win_acl"])
    (reg,) = by["win_regedit"]
    assert reg["path"] == plan["registry"]["path"] and reg["name"] == "Settings"
    assert isinstance(reg["data"], str) and reg["data"] == plan["registry"]["data"]
    # the engine: srt-win.exe from the pinned npm package on the controller
    (engine,) = [a for a in by["win_copy"] if "src" in a]
    assert engine["dest"] == plan["engine"]["exe"]
    src = Path(engine["src"]).resolve()
    assert src == (REPO / ".tools/node_modules/@anthropic-ai/sandbox-runtime/vendor/srt-win/x64/"
                   "srt-win.exe").resolve() and src.is_file()
    assert src.read_bytes()[:2] == b"MZ"  # a Windows executable
    copied = {a["dest"]: a["content"] for a in by["win_copy"] if "content" in a}
    assert set(copied) == set(arts)
    assert copied["C:/Program Files/ClaudeCode/managed-settings.json"].encode() == \
        arts["C:/Program Files/ClaudeCode/managed-settings.json"].content


def test_windows_role_uninstall_in_check_mode_against_a_stand_in(tmp_path):
    _need_collections()
    standin = _standin(tmp_path, "ansible", "windows", ["win_powershell"])
    fleet = FleetRenderer.from_path(str(EXAMPLE_FLEET))
    facts = fleet.facts("dev-win-01")
    script = fleet.render_host("dev-win-01")[windows.script_target(facts)].content.decode()
    log = tmp_path / "calls.jsonl"
    inv = _inventory(tmp_path, {"dev-win-01": {"sandbox_os": "windows"}})
    extra = json.dumps({"sandbox_windows_render_inventory": str(EXAMPLE_FLEET),
                        "sandbox_windows_state": "absent"})
    env = _env([standin, COLLECTIONS], tmp=str(tmp_path / "ansible-tmp"), STANDIN_LOG=str(log))
    _playbook(["-i", str(inv), "playbooks/windows.yml", "-e", extra, "--check"], env)
    calls = _log(log)
    assert [c["args"]["parameters"]["Steps"] for c in calls] == [["Uninstall"]]
    assert calls[0]["args"]["script"] == script


def test_stand_in_rejects_arguments_the_real_module_would(tmp_path):
    _need_collections()
    standin = _standin(tmp_path, "ansible", "windows", ["win_acl"])
    play = tmp_path / "bad.yml"
    play.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [
        {"name": "bad", "ansible.windows.win_acl": {"path": "C:\\x", "user": "u",
                                                    "rights": "Read", "type": "maybe"}}]}]))
    inv = _inventory(tmp_path, {"w": {}})
    out = _playbook(["-i", str(inv), str(play), "--check"],
                    _env([standin, COLLECTIONS], tmp=str(tmp_path / "t")), ok=False)
    assert "value of type must be one of: allow, deny" in out


# -------------------------------------------------------------------- cluster


def test_cluster_role_stand_in_kubernetes_and_real_openbao(tmp_path, bao_server, engine_config):
    _need_collections()
    standin = _standin(tmp_path, "kubernetes", "core", ["k8s"])
    inv_dir = tmp_path / "inventory"
    (inv_dir / "sandbox" / "groups").mkdir(parents=True)
    shutil.copyfile(EXAMPLE_FLEET / "sandbox" / "fleet.yml", inv_dir / "sandbox" / "fleet.yml")
    prefix = tmp_path / "prefix"
    (inv_dir / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "sandbox_cluster": {"hosts": {"controller": {"sandbox_prefix": str(prefix)}}},
        "engineering": {"hosts": {"dev-linux-01": {"sandbox_users": [{"name": "alice"}]}}},
    }}}))
    (inv_dir / "sandbox" / "groups" / "sandbox_cluster.yml").write_text(yaml.safe_dump({
        "cluster": {"enabled": True, "api_server": ["10.96.0.1/32"],
                    "egress_proxy": "egress-proxy.agent-sandbox-egress.svc:3128",
                    "vault": {"address": bao_server, "kubernetes_mount": "k8s-role-test",
                              "roles": [{"name": "deploy-staging", "namespaces": ["staging"],
                                         "rules": [{"apiGroups": ["apps"],
                                                    "resources": ["deployments"],
                                                    "verbs": ["get", "patch"]}]}]}}}))
    inv = _inventory(tmp_path, {"controller": {}, "dev-linux-01": {}},
                     groups={"sandbox_cluster": ["controller"]})
    log = tmp_path / "calls.jsonl"
    extra = json.dumps({"sandbox_cluster_render_inventory": str(inv_dir),
                        "sandbox_cluster_vault_token": ROOT_TOKEN,
                        "sandbox_cluster_vault_engine_config": engine_config})
    env = _env([standin, COLLECTIONS], tmp=str(tmp_path / "ansible-tmp"), STANDIN_LOG=str(log))

    out = _playbook(["-v", "-i", str(inv), "playbooks/cluster.yml", "-e", extra, "--check"], env)
    assert "dev-linux-01" not in out.split("PLAY RECAP")[1], "only the cluster group"
    applied = [c["args"]["definition"] for c in _log(log)]
    kinds = [(d["apiVersion"], d["kind"]) for d in applied]
    assert kinds == [("node.k8s.io/v1", "RuntimeClass"), ("v1", "Namespace"),
                     ("v1", "ServiceAccount"), ("networking.k8s.io/v1", "NetworkPolicy"),
                     ("networking.k8s.io/v1", "NetworkPolicy"),
                     ("projectcalico.org/v3", "NetworkPolicy"),
                     ("projectcalico.org/v3", "GlobalNetworkPolicy")]
    assert "create role deploy-staging" in out
    assert not prefix.exists(), "check mode wrote files"
    import hvac

    c = hvac.Client(url=bao_server, token=ROOT_TOKEN)
    assert "k8s-role-test/" not in c.sys.list_mounted_secrets_engines()["data"]

    real = json.dumps({**json.loads(extra), "sandbox_cluster_kubernetes_enabled": False})
    first = _playbook(["-i", str(inv), "playbooks/cluster.yml", "-e", real], env)
    assert _recap(first, "controller")["changed"] >= 2
    assert c.read("k8s-role-test/roles/deploy-staging")["data"]["token_default_ttl"] == 600
    assert (prefix / "cluster" / "30-runner-job.yaml").exists()
    second = _playbook(["-i", str(inv), "playbooks/cluster.yml", "-e", real], env)
    assert _recap(second, "controller")["changed"] == 0
