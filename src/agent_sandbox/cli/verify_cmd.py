"""``sandbox verify``: run the isolation self-check on this host, or with
``--drift`` compare the installed files with the render manifest, or with
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
        "--drift", help="Compare installed files with the render manifest instead.")] = False,
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
    from agent_sandbox.hostcheck.drift import drift as find_drift

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
    if drift:
        try:
            items = find_drift(manifest)
        except VerifyError as exc:
            typer.echo(f"sandbox verify: {exc}", err=True)
            raise typer.Exit(1) from None
        if as_json:
            typer.echo(json.dumps({"drift": [i.__dict__ for i in items]}, indent=2))
        elif items:
            for i in items:
                extra = f"  ({i.detail})" if i.detail else ""
                typer.echo(f"DRIFT {i.problem:8} {i.target}{extra}")
            typer.echo(f"{len(items)} managed file(s) differ from {manifest}")
        else:
            typer.echo(f"no drift: every file in {manifest} is as rendered")
        raise typer.Exit(1 if items else 0)

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
