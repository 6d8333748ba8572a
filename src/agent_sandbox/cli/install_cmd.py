"""``sandbox install proxy-service|apparmor-profile|repo``: the host install steps the roles and the
pyinfra deploy share. Each prints ``changed`` or ``unchanged`` as its last line
(the roles' ``changed_when`` reads it) and exits 1 with a message on failure."""

from __future__ import annotations

import typer

from agent_sandbox import contract


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="Idempotent install steps on a host (print changed/unchanged).",
                        no_args_is_help=True)

    @group.command("proxy-service")
    def proxy_service_cmd(
        unit: str = typer.Option(contract.PROXY_UNIT, "--unit",
                                 help="The installed, rendered unit file."),
        supervisor: str = typer.Option(
            "auto", "--supervisor",
            help="systemd, detached (no init system) or auto (systemd when it is PID 1)."),
        restart: bool = typer.Option(False, "--restart", help="Restart even if unchanged."),
        log_dir: str = typer.Option(contract.HOST_AUDIT_DIR, "--log-dir",
                                    help="Where a detached proxy logs."),
    ) -> None:
        """Run the egress proxy from its rendered unit (restarted on new settings)."""
        from agent_sandbox.install.proxy_service import install

        changed = install(unit, supervisor=supervisor, restart=restart, log_dir=log_dir)
        typer.echo("changed" if changed else "unchanged")

    @group.command("apparmor-profile")
    def apparmor_cmd(
        profile: str = typer.Option(contract.APPARMOR_PROFILE, "--profile",
                                    help="The installed, rendered profile."),
        when: str = typer.Option(
            "auto", "--when",
            help="auto: only where AppArmor restricts user namespaces; always."),
    ) -> None:
        """Load the bubblewrap AppArmor profile where it is needed (again when changed)."""
        from agent_sandbox.install.apparmor import install

        typer.echo("changed" if install(profile, when=when) else "unchanged")

    @group.command("repo")
    def repo_cmd(
        path: str = typer.Argument(..., help="The repository to connect."),
        claude: bool = typer.Option(False, "--claude"),
        codex: bool = typer.Option(False, "--codex"),
        cursor: bool = typer.Option(False, "--cursor"),
        gemini: bool = typer.Option(False, "--gemini"),
        mcp: bool = typer.Option(False, "--mcp"),
        trust: bool = typer.Option(False, "--trust"),
        policy: str | None = typer.Option(
            None, "--policy",
            help="Text of .sandbox/policy.yml when there is none (default: an empty "
                 "layer; '' lets sandbox init write its own)."),
    ) -> None:
        """Run sandbox init in PATH as the folder's owner, once."""
        from agent_sandbox.install.repository import install

        flags = [f"--{n}" for n, on in (("claude", claude), ("codex", codex),
                                        ("cursor", cursor), ("gemini", gemini),
                                        ("mcp", mcp), ("trust", trust)) if on]
        changed = install(path, flags, policy)
        typer.echo("changed" if changed else "unchanged")

    app.add_typer(group, name="install")
