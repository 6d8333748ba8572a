"""The host runtime: ``sandbox exec`` on Linux (bubblewrap + egress proxy), and
the srt and gVisor backends behind the same policy.

``run_sandboxed`` is the stable entry point for code that needs to run a
command in the sandbox; importing this package is cheap (nothing heavy loads
until a run starts).

The trust boundary. The sandboxed command is hostile, and so is every byte it
can write. The host-side readers of sandbox-writable data, and why each is safe:

- the planner (``bwrap.plan``) walks the writable roots before the run: it only
  lists names and reads small git files (``.git`` files, configs, through
  ``bwrap.gitmeta``; configs read exactly as git reads them, ``bwrap.gitconfig``) to decide
  what to protect; what it reads can only make the plan stricter (more paths
  read-only), and a walk that cannot finish refuses the run;
- the broker (``broker``) reads the command's memory while one of its calls
  waits (a path or a socket address, copied once and never read again),
  resolves that path in the command's own view (its root, no magic links) and
  judges the place it reaches; it makes the call itself on that place, with no
  capability and never through a link at the name, so what the command can
  change in between (its memory, the tree) changes nothing it decided; any
  fault refuses the call;
- the late binds' helper (``bwrap.late_binds``) resolves the plan's paths in the
  sandbox's mount namespace once bwrap is set up and before the command runs
  (nothing of the command's runs there yet, as when bwrap resolved them), reads
  only each mount's flags (``statvfs``), and any failure ends the sandbox;
- the sweep (``bwrap.sweep``) walks them after the run, with nothing inside running,
  compares identities recorded before the run (device, inode, change time and
  size: nothing the command can reproduce), and only renames new or changed
  protected names to an inert quarantine name; it reads git configs of new
  repositories, and a new virtualenv's ``pyvenv.cfg`` and interpreter links,
  only to judge them, never to run anything, and refuses a git config it cannot
  read exactly as git would;
- the proxy (``proxy``) reads only bytes from the sandbox's sockets, each request
  decided before anything is relayed; its policy is the parsed settings object,
  never a file re-read;
- the runs' records and the owed sweeps live in the per-user lock
  folder, under the state folders that every sandbox gets read-only
  (``contract.state_paths``), checked to be this user's private folder;
- settings are read only from a file outside their own writable roots and bound
  read-only in the run (``run.load_settings``), and the runtime's own
  installation is read-only in every sandbox, so no run can change what decides
  or runs the next one. Helpers started on the host (the proxy service, ssh's
  connect helper inside) run with an absolute interpreter in isolated mode
  (``-I``), importing nothing from a path a sandbox can write.
- the executor of approvals (``approval.executor``) never writes into a writable root
  by path: a tree a running sandbox can rearrange (a folder exchanged with a
  link or another folder) between a check and a write would redirect it, so an
  approved file write runs in a sandbox of its own (``approval.approved_write``), where
  the protected set is read-only by mount whatever name the tree gives it;
- ``sandbox init`` and ``uninstall`` (``repo_init``) read, copy, write and remove
  files in a repository a command may have written only through ``below_root``:
  each component opened without following a link, a link or non-folder where a
  folder should be refused before anything changes, and the paths the
  repository's own state names kept below it;
- the resident MCP server (``mcp_resident``) serves, outside any sandbox, sessions
  that launchers hand it over a unix socket in the user's state folder, a folder
  every sandbox gets hidden (``contract.private_paths``: bwrap and gVisor hide it,
  srt denies reading it); it accepts only a peer of this uid confined exactly as
  itself (namespaces, no_new_privs, seccomp, capability bounding set, LSM label:
  a sandboxed peer differs in its network and mount namespaces at least), so what
  a peer sends (arguments, environment, working folder) gives it nothing it could
  not do by starting ``sandbox mcp`` itself. It runs isolated from ``/``, had
  imported everything before any peer spoke, and serves only while the installed
  code's identity matches the launcher's (``mcp_launch.identity``);
- later host tools (git, shells, editors, agents, package managers, Python) read
  what the protected set (``agent_sandbox.protected``) keeps read-only in every
  writable root, at every depth, and in the home folder. A repository's own
  virtualenv is inside the boundary for its start-up (``pyvenv.cfg``, the
  interpreter links and activate scripts, ``.pth`` files and the modules they
  import, ``sitecustomize``; every ``.pyc``) and outside it for its packages,
  which are the command's to change like the repository's own code: run them
  on the host only after review. The planner reads existing ``.pth`` files to
  find the modules they import, which only makes the plan stricter.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["SANDBOX_FAILED", "CompletedRun", "SandboxStartError", "run_sandboxed"]


def __getattr__(name: str) -> Any:
    if name in ("SANDBOX_FAILED", "SandboxStartError"):
        from . import errors

        return getattr(errors, name)
    if name == "CompletedRun":
        from .result import CompletedRun

        return CompletedRun
    if name == "run_sandboxed":
        from .run import run_sandboxed

        return run_sandboxed
    raise AttributeError(name)
