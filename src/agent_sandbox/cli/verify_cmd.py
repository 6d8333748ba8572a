"""``sandbox verify``: run the isolation self-check on this host, or with
``--drift`` compare the installed files with the render manifest and run the
host checks, recording the outcome (``hostcheck.drift_check``), or with
``--gvisor`` prove that an action's container runs on the gVisor kernel.

Exit status: 0 when every check passed (or nothing drifted), 1 otherwise.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from agent_sandbox import contract
from agent_sandbox.display import printable


def verify(
    host_only: Annotated[bool, typer.Option(
        "--host-only", help="Only the host's enforcement (reads, writes, network); skip the "
                            "checks that need a connected repository.")] = False,
    drift: Annotated[bool, typer.Option(
        "--drift", help="Compare installed files with the render manifest, run the host "
                        "checks, and record the outcome in the host's audit.")] = False,
    files_only: Annotated[bool, typer.Option(
        "--files-only", help="With --drift: only the files, no host checks.")] = False,
    settings: Annotated[str | None, typer.Option(
        "--settings", help="srt-format settings to check (default: the host's).")] = None,
    check: Annotated[list[str] | None, typer.Option(
        "--check", help="Run only this check (repeatable).")] = None,
    manifest: Annotated[str, typer.Option(
        "--manifest", help="Render manifest for --drift.")] = contract.MANIFEST_FILE,
    gvisor: Annotated[bool, typer.Option(
        "--gvisor", help="Prove instead that an infrastructure action's container runs on "
                         "the gVisor kernel (runtime runsc, gVisor's boot log).")] = False,
    image: Annotated[str | None, typer.Option(
        "--image", help="Image for --gvisor (default: the base image).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Isolation self-check: denied read, protected write, denied and allowed domains,
    escalation through the hook, audit; exit 1 on any failure."""
    from agent_sandbox.hostcheck import VerifyError
    from agent_sandbox.hostcheck import checks as v

    if gvisor:
        from agent_sandbox.hostcheck.gvisor_check import check_gvisor

        result = check_gvisor(image)
        if as_json:
            typer.echo(json.dumps({"passed": int(result.passed), "total": 1,
                                   "checks": [result.__dict__]}, indent=2))
        else:
            typer.echo(f"{'PASS' if result.passed else 'FAIL'}  {result.name:16} "
                       f"{printable(result.detail)}")
        raise typer.Exit(0 if result.passed else 1)
    if drift:  # recorded in the host's audit and state (hostcheck.drift_check)
        from agent_sandbox.hostcheck.drift_check import main as drift_check

        raise typer.Exit(drift_check(manifest, files_only=files_only, settings=settings,
                                     as_json=as_json))

    try:
        results = v.run(settings, only=check or None, host_only=host_only)
    except VerifyError as exc:
        typer.echo(f"sandbox verify: {exc}", err=True)
        raise typer.Exit(1) from None
    from agent_sandbox.last_verify import record

    record(results)  # what `sandbox serve` reports as this host's last verify
    from agent_sandbox.agent.client_checks import check as check_clients

    clients = check_clients(None)  # each installed client, as it will read its files
    passed = sum(r.passed for r in results)
    if as_json:
        typer.echo(json.dumps({"passed": passed, "total": len(results),
                               "checks": [r.__dict__ for r in results],
                               "clients": [f.__dict__ for f in clients]}, indent=2))
    else:
        for r in results:
            typer.echo(f"{'PASS' if r.passed else 'FAIL'}  {r.name:16} {printable(r.detail)}")
        for f in clients:  # a detail may quote a settings file an agent could write
            typer.echo(f"WARN  {f.client}: {f.problem}: {printable(f.detail)}")
        typer.echo(f"{passed}/{len(results)} checks passed"
                   + (f"; {len(clients)} client warning(s)" if clients else ""))
    # a client that would skip our hooks fails the check; calls outside the
    # boundary, and hooks a client would let a call past when they cannot answer,
    # are reported (the hook's own verdicts still hold)
    skipping = [f for f in clients if f.problem not in ("outside-boundary", "fails-open")]
    raise typer.Exit(0 if results and passed == len(results) and not skipping else 1)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
