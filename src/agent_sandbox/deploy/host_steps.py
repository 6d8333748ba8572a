"""The host steps of a bundle: which ``sandbox install ...`` commands the host's
installer (``agent_sandbox.install.rendered_files.install_bundle``) runs, in which
phase, worked out on the controller from the host's rendered artifacts.

Both front ends hand the installer what this module lists: the Ansible roles
through the ``agent_sandbox_steps`` filter, the pyinfra deploy directly.

- ``early_steps``: ``sandbox install repo`` in each repository, after the host's
  files (the managed policy ``sandbox init`` layers under) and before the agent
  files that replace what init wrote;
- ``late_steps``: ``sandbox install apparmor-profile`` for the rendered profile
  and ``sandbox install proxy-service`` for each proxy unit, after every file; a
  proxy changes nothing when its unit and settings did not, and is restarted
  when the runtime was upgraded by the same call (``after_upgrade``); then the
  systemd units that only need to be enabled and running (the web approvals
  service, the scheduled jobs' timers), reloaded and restarted when the same call
  rewrote their files (``after_change``). A host without systemd keeps the files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from agent_sandbox import contract
from agent_sandbox.repo_layout import SANDBOX

PREFIX = "/opt/agent-sandbox"
# kinds whose systemd units are only enabled and started (a timer starts its service)
STARTED_KINDS = ("web-unit", "drift-schedule", "pull-schedule")
# enable and start a unit under systemd; `restart` after its files changed
UNIT_SCRIPT = """[ -d /run/systemd/system ] || { echo unchanged; exit 0; }
if [ "${2:-}" = restart ]; then
  systemctl daemon-reload && systemctl enable --quiet "$1" && systemctl restart "$1" && echo changed
  exit
fi
if systemctl is-enabled --quiet "$1" && systemctl is-active --quiet "$1"; then
  echo unchanged
else
  systemctl daemon-reload && systemctl enable --quiet "$1" && systemctl start "$1" && echo changed
fi
"""


def sandbox_command(prefix: str = PREFIX) -> str:
    return f"{prefix.rstrip('/')}/venv/bin/sandbox"


def repo_steps(repositories: Iterable[str], flags: Iterable[str], *, prefix: str = PREFIX,
               policy: str | None = None) -> list[dict[str, Any]]:
    """``sandbox install repo`` for each repository (as its owner, once: not run
    where the repository was connected before, as the step itself decides)."""
    extra = ["--policy", policy] if policy is not None else []
    return [{"name": f"sandbox install repo {repo}",
             "argv": [sandbox_command(prefix), "install", "repo", str(repo), *extra, *flags],
             # the step's own test for a repository connected before (its owner's
             # files: they can only skip their own repository's first connection)
             "unless_exist": [f"{repo}/{SANDBOX}/policy.json",
                              *([f"{repo}/{SANDBOX}/policy.yml"] if policy else [])]}
            for repo in map(str, repositories)]


def service_steps(artifacts: Iterable[Mapping[str, Any]], *, prefix: str = PREFIX,
                  log_dir: str = contract.HOST_AUDIT_DIR, supervisor: str = "auto",
                  apparmor: str = "auto", proxy: bool = True) -> list[dict[str, Any]]:
    """The AppArmor profile loaded where needed (``apparmor``: auto, yes or no) and
    each proxy unit run (``proxy``), for artifacts as the render filter lists them."""
    sandbox = sandbox_command(prefix)
    arts = sorted(artifacts, key=lambda a: str(a["target"]))
    out: list[dict[str, Any]] = []
    if apparmor != "no":
        out += [{"name": f"load {a['target']}",
                 "argv": [sandbox, "install", "apparmor-profile", "--profile", a["target"],
                          "--when", "always" if apparmor == "yes" else "auto"]}
                for a in arts if a["kind"] == "apparmor-profile"]
    if proxy:
        out += [{"name": f"run {os.path.basename(a['target'])}",
                 "argv": [sandbox, "install", "proxy-service", "--unit", a["target"],
                          "--supervisor", supervisor, "--log-dir", log_dir],
                 "after_upgrade": ["--restart"]}
                for a in arts if a["kind"] == "systemd-unit"]
    return out + unit_steps(arts)


def unit_steps(artifacts: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each web approvals unit and scheduled job's timer enabled and started under
    systemd, restarted when the call rewrote any file of its kind (the timer or
    the service it starts)."""
    arts = [a for a in artifacts if a["kind"] in STARTED_KINDS]
    out = []
    for a in arts:
        name = os.path.basename(str(a["target"]))
        if a["kind"] != "web-unit" and not name.endswith(".timer"):
            continue
        mates = [str(b["target"]) for b in arts if b["kind"] == a["kind"]]
        out.append({"name": f"start {name}", "argv": ["/bin/sh", "-c", UNIT_SCRIPT, "sh", name],
                    "after_change": {"targets": mates, "args": ["restart"]}})
    return out
