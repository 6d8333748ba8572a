"""``sandbox audit verify|show|export|tail|repair|checkpoint``: the audit log's CLI.

A thin shell over ``agent_sandbox.audit``: every decision (what is wrong, what
matches a filter, how a record maps to OCSF) lives in that package. Bad input
gives a one-line error and exit code 2, never a traceback; ``verify`` exits 1
naming the first bad record. ``repair`` only seals an interrupted final write;
it never truncates or rewrites the log.

Every record holds agent-written text, and each of these commands prints to a
terminal: ``show`` (its table through ``display.printable``; ``--format json``
and ``jsonl``), ``tail`` and ``export`` write JSON in which every character a
terminal would act on or not show as itself (ESC, C1 controls, bidi overrides,
zero-width and combining characters) is a JSON ``\\uXXXX`` escape
(``display.json_line``). ``export`` is data for a SIEM, and stays exactly that: the
escapes parse to the very same values.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from agent_sandbox.display import printable
from agent_sandbox.errors import SandboxError

from ..repo_layout import SANDBOX

audit_app = typer.Typer(
    name="audit",
    help="Verify, search and export the tamper-evident audit log.",
    no_args_is_help=True,
    add_completion=False,
)

DirArg = Annotated[Path, typer.Argument(help="Audit log folder (holds audit.jsonl).")]


def _dir(directory: Path) -> Path:
    """Accept a repository too: its log lives in ``.sandbox/audit``."""
    if not (directory / "audit.jsonl").exists():
        inner = directory / SANDBOX / "audit"
        if (inner / "audit.jsonl").exists():
            return inner
    return directory


def _die(msg: str, code: int = 2) -> None:
    typer.echo(f"sandbox audit: {msg}", err=True)
    raise typer.Exit(code)


@audit_app.command("verify")
def verify_cmd(
    directory: DirArg,
    key: Annotated[
        str | None,
        typer.Option("--key", help="Pinned verifier key (NAME+ID+KEY) or a file holding it."),
    ] = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option("--checkpoint", help="Extra signed checkpoint (e.g. a remote sink's copy)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Also check each record's form, seq and prev fields.")
    ] = False,
    every: Annotated[
        int, typer.Option("--checkpoint-every", min=1,
                          help="The writers' checkpoint period in records (the spec's "
                               "audit.checkpoint_every): an anchored log whose newest "
                               "checkpoint leaves more uncovered fails.")
    ] = 1000,
) -> None:
    """Check the chain, torn writes and signed checkpoints; exit 1 naming the first bad record."""
    directory = _dir(directory)
    from agent_sandbox.audit import verify

    extra: list[tuple[str, bytes]] = []
    for p in checkpoint or []:
        try:
            extra.append((str(p), p.read_bytes()))
        except OSError as exc:
            _die(f"cannot read checkpoint {p}: {exc.strerror}")
    from agent_sandbox.audit.repo import pinned_verifier

    pinned = None if key else pinned_verifier(str(directory))
    try:
        result = verify(directory, verifier=key or (pinned[1] if pinned else None),
                        extra_checkpoints=extra, strict=strict, every=every)
    except SandboxError as exc:
        _die(str(exc))
        return
    if result.ok and not result.anchored:
        result.warnings.insert(0, "UNANCHORED: no pinned verifier key for this log (run "
                               "`sandbox audit pin` on a connected repository, or pass "
                               "--key); the chain is intact, but whoever can rewrite the log "
                               "and its folder could have rewritten it whole")
    elif result.ok and result.records > result.checkpoint_size:
        result.warnings.append(f"records {result.checkpoint_size + 1}..{result.records} come "
                               "after the last signed checkpoint: not yet anchored")
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2))
    else:
        if result.ok:
            cover = (
                f", signed checkpoints up to record {result.checkpoint_size}"
                if result.checkpoints
                else ""
            )
            sealed = f", {result.sealed} sealed torn write(s)" if result.sealed else ""
            anchor = (f", anchored to {pinned[0] if pinned else 'the given key'}"
                      if result.anchored else ", UNANCHORED")
            typer.echo(f"OK: {result.records} records, head {result.head[:16]}{cover}{sealed}"
                       f"{anchor}")
        else:
            typer.echo(f"FAIL: {printable(str(result.problem))}")
        for w in result.warnings:
            typer.echo(f"warning: {printable(w)}", err=True)
    raise typer.Exit(0 if result.ok else 1)


@audit_app.command("pin")
def pin_cmd(repo: Annotated[Path, typer.Argument(help="A connected repository.")]) -> None:
    """Pin the verifier key of the repository's log in the user's state folder."""
    from agent_sandbox.audit.repo import pin_verifier

    if not (repo / SANDBOX).is_dir():
        _die(f"{repo} is not connected (no .sandbox/): run `sandbox init` first")
    try:
        path, text = pin_verifier(str(repo.resolve()))
    except SandboxError as exc:
        _die(str(exc))
        return
    typer.echo(f"pinned {text} in {path}")


def _records(directory: Path) -> Iterator[dict[str, Any]]:
    from agent_sandbox.audit.query import iter_records, log_path

    path = log_path(directory)

    def bad(n: int, line: bytes) -> None:
        typer.echo(
            f"warning: line {n} is not a record (run `sandbox audit verify`)", err=True
        )

    return iter_records(path, bad)


@audit_app.command("show")
def show_cmd(
    directory: DirArg,
    request_id: Annotated[
        str | None, typer.Option("--request-id", "--request", help="Only this request's events.")
    ] = None,
    since: Annotated[str | None, typer.Option(help="RFC 3339 time: from here on.")] = None,
    until: Annotated[str | None, typer.Option(help="RFC 3339 time: up to here.")] = None,
    verdict: Annotated[str | None, typer.Option(help="allow, observe, escalate or deny.")] = None,
    event: Annotated[str | None, typer.Option(help="Only this event name.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="table, json or jsonl.")] = "table",
) -> None:
    """List records, filtered by request id, time range, verdict or event."""
    directory = _dir(directory)
    from agent_sandbox.audit.query import Filter, format_table, parse_time

    if fmt not in ("table", "json", "jsonl"):
        _die(f"unknown format {fmt!r}: use table, json or jsonl")
    try:
        flt = Filter(
            request_id=request_id,
            since=parse_time(since) if since else None,
            until=parse_time(until) if until else None,
            verdict=verdict,
            event=event,
        )
        selected = [r for r in _records(directory) if flt(r)]
    except SandboxError as exc:
        _die(str(exc))
        return
    from agent_sandbox.display import json_line

    if fmt == "table":
        typer.echo(format_table(selected), nl=False)
    elif fmt == "json":
        typer.echo(json_line(json.dumps(selected, indent=2, ensure_ascii=False)))
    else:
        for r in selected:
            typer.echo(json_line(json.dumps(r, ensure_ascii=False, separators=(",", ":"))))


@audit_app.command("export")
def export_cmd(
    directory: DirArg,
    fmt: Annotated[str, typer.Option("--format", help="ocsf or jsonl.")] = "ocsf",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="File (default: stdout).")] = None,
    hostname: Annotated[
        str | None, typer.Option(help="Device name for OCSF events (default: this host).")
    ] = None,
) -> None:
    """Export records as OCSF 1.x JSON lines (or the raw chained JSON lines)."""
    directory = _dir(directory)
    if fmt not in ("ocsf", "jsonl"):
        _die(f"unknown export format {fmt!r}: use ocsf or jsonl")
    from agent_sandbox.display import json_line

    try:
        records = _records(directory)
        if fmt == "ocsf":
            from agent_sandbox.audit.ocsf import export

            lines = (
                json_line(json.dumps(e, ensure_ascii=False, separators=(",", ":")))
                for e in export(records, hostname=hostname)
            )
        else:
            lines = (json_line(json.dumps(r, ensure_ascii=False, separators=(",", ":")))
                     for r in records)
        sink = open(out, "w", encoding="utf-8") if out else sys.stdout
        try:
            for line in lines:
                sink.write(line + "\n")
        finally:
            if out:
                sink.close()
    except SandboxError as exc:
        _die(str(exc))
    except OSError as exc:
        _die(f"cannot write export: {exc}")


@audit_app.command("tail")
def tail_cmd(
    directory: DirArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new records.")
    ] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="How many recent records.")] = 10,
) -> None:
    """Print the last records; with -f, keep printing new ones as they are appended."""
    directory = _dir(directory)
    from agent_sandbox.audit.query import follow as follow_lines
    from agent_sandbox.audit.query import log_path

    try:
        path = log_path(directory)
    except SandboxError as exc:
        _die(str(exc))
        return
    from agent_sandbox.display import json_line

    if not follow:
        data = path.read_bytes()
        for line in data[: data.rfind(b"\n") + 1].splitlines()[-lines:] if lines > 0 else []:
            typer.echo(json_line(line.decode("utf-8", "replace")))
        return
    try:
        for line in follow_lines(path, last=lines):
            sys.stdout.write(json_line(line.decode("utf-8", "replace").rstrip("\n")) + "\n")
            sys.stdout.flush()
    except KeyboardInterrupt:
        return


@audit_app.command("repair")
def repair_cmd(directory: DirArg) -> None:
    """Seal an interrupted final write with an explicit record (never rewrites anything)."""
    directory = _dir(directory)
    from agent_sandbox.audit import AuditLog, verify

    try:
        before = verify(directory)
        if before.ok:
            typer.echo("nothing to repair: the log verifies")
            return
        if before.problem is None or before.problem.kind != "torn":
            _die(
                f"refusing to repair: {before.problem}. Only an interrupted final write can be "
                "sealed; other damage is evidence and is left as it is",
                1,
            )
        log = AuditLog(directory, checkpoint_every=None, checkpoint_interval=None)
        sealed = log.seal_torn_tail()
        after = verify(directory)
    except SandboxError as exc:
        _die(str(exc))
        return
    if sealed is not None:
        typer.echo(
            f"sealed {sealed['torn_length']} torn bytes at offset {sealed['torn_offset']} "
            f"with record {sealed['seq']}"
        )
    if not after.ok:
        _die(f"log still fails verification: {after.problem}", 1)


@audit_app.command("checkpoint")
def checkpoint_cmd(directory: DirArg) -> None:
    """Sign a checkpoint of the log's current head now."""
    directory = _dir(directory)
    from agent_sandbox.audit import AuditLog
    from agent_sandbox.audit.query import log_path

    try:
        log_path(directory)
        note = AuditLog(directory).checkpoint()
    except SandboxError as exc:
        _die(str(exc))
        return
    typer.echo(note.decode() if note else "empty log: nothing to sign", nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(audit_app, name="audit")
