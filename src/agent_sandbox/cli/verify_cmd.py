"""``sandbox verify``: run the isolation self-check on this host, or with
``--drift`` compare the installed files with the render manifest and run the
host checks, recording the outcome (``hostcheck.drift_check``), or with
``--gvisor`` prove that an action's container runs on the gVisor kernel.

Reports as text, JSON or JUnit XML (``--format``; ``--json`` is ``--format json``),
built by ``hostcheck.report`` with the host's waivers applied (``hostcheck.waivers``).

Exit status: 0 when every check passed or is waived and no waiver expired (or
nothing drifted), 1 otherwise.
"""

from __future__ import annotations

from typing import Annotated

import typer

from agent_sandbox import contract


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
    as_json: Annotated[bool, typer.Option("--json", help="The same as --format json.")] = False,
    fmt: Annotated[str, typer.Option(
        "--format", help="text, json (one document) or junit (JUnit XML for CI systems).")
    ] = "text",
    waivers: Annotated[str, typer.Option(
        "--waivers", help="The host's waivers (rendered from the spec's verify.waivers).")
    ] = contract.VERIFY_WAIVERS_FILE,
) -> None:
    """Isolation self-check: denied read, protected write, denied and allowed domains,
    escalation through the hook, audit; exit 1 on any failure."""
    from agent_sandbox.hostcheck import VerifyError, report
    from agent_sandbox.hostcheck import checks as v
    from agent_sandbox.hostcheck.waivers import read_waivers

    if fmt not in report.FORMATS:
        typer.echo(f"sandbox verify: --format is one of {', '.join(report.FORMATS)}", err=True)
        raise typer.Exit(2)
    fmt = "json" if as_json else fmt

    if gvisor:
        from agent_sandbox.hostcheck.gvisor_check import check_gvisor

        proved = report.check_report([check_gvisor(image)], {})
        typer.echo(report.output(proved, fmt))
        raise typer.Exit(0 if proved.ok() else 1)
    if drift:  # recorded in the host's audit and state (hostcheck.drift_check)
        from agent_sandbox.hostcheck.drift_check import main as drift_check

        raise typer.Exit(drift_check(manifest, files_only=files_only, settings=settings,
                                     fmt=fmt))

    try:
        waived = read_waivers(waivers)
        results = v.run(settings, only=check or None, host_only=host_only)
    except VerifyError as exc:
        typer.echo(f"sandbox verify: {exc}", err=True)
        raise typer.Exit(1) from None
    from agent_sandbox.last_verify import record

    record(results)  # what `sandbox serve` reports as this host's last verify
    from agent_sandbox.agent.client_checks import check as check_clients

    # each installed client, as it will read its files: one that would skip our hooks
    # fails the run; calls outside the boundary, and hooks a client would let a call
    # past when they cannot answer, are reported (the hook's own verdicts still hold)
    found = report.check_report(results, waived, check_clients(None))
    typer.echo(report.output(found, fmt))
    raise typer.Exit(0 if found.ok() else 1)


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
