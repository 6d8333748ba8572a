"""``sandbox verify --drift``, recorded: the installed files against the render
manifest, the host's isolation checks (as ``--host-only`` runs them; not with
``--files-only``), and the outcome kept twice, as the scheduled job (systemd timer,
LaunchDaemon, Scheduled Task) leaves it for people and tools to find:

- one ``drift_check`` event in the host's audit chain (the drifted paths and their
  problems, the failed checks), through the audit's one writer, ``AuditLog``;
- the last check's record in the host's state (``last_verify.record_drift``), which
  ``sandbox status`` and ``sandbox serve`` show.

Fails closed: a manifest it cannot read, or checks that cannot run, are findings
(never "clean"), and an outcome it cannot record is an error (exit status 1).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from agent_sandbox import contract

from . import VerifyError

EVENT = "drift_check"


def run_checks(manifest: str, *, files_only: bool = False,
               settings: str | None = None) -> dict[str, Any]:
    """One drift check's outcome, in ``last_verify.DRIFT_KEYS`` form."""
    from .drift import drift

    error = None
    drifted: list[dict[str, str]] = []
    try:
        drifted = [dict(i.__dict__) for i in drift(manifest)]
    except VerifyError as exc:
        error = str(exc)
    failed: list[dict[str, str]] = []
    total = 0
    if not files_only:
        from . import checks

        try:
            results = checks.run(settings, host_only=True)
        except VerifyError as exc:
            failed.append({"name": "host_checks", "detail": str(exc)})
        else:
            total = len(results)
            failed = [{"name": r.name, "detail": r.detail} for r in results if not r.passed]
            if not results:
                failed.append({"name": "host_checks", "detail": "no check ran"})
    return {"at": time.time(), "clean": not (error or drifted or failed), "drifted": drifted,
            "failed_checks": failed, "checks": total, "error": error}


def audit_dir() -> str:
    """The host's audit folder: ``$AGENT_SANDBOX_AUDIT_DIR``, else the one the host
    profile names (``audit.host_path``, rendered into ``exec.json``), else the default."""
    chosen = os.environ.get(contract.AUDIT_DIR_ENV)
    if chosen:
        return chosen
    try:
        with open(contract.EXEC_PROFILE, encoding="utf-8") as fh:
            named = json.load(fh).get("auditDir")
    except (OSError, ValueError, AttributeError):
        named = None
    return named if isinstance(named, str) and os.path.isabs(named) else contract.HOST_AUDIT_DIR


def record(outcome: dict[str, Any], manifest: str) -> None:
    """The outcome as one audit event and as the host's last drift record; a
    ``VerifyError`` when either cannot be written."""
    from agent_sandbox.audit import AuditLog
    from agent_sandbox.last_verify import record_drift

    directory = audit_dir()
    key = contract.HOST_AUDIT_KEY if directory == contract.HOST_AUDIT_DIR else None
    try:
        log = AuditLog(directory, key_path=key, max_bytes=contract.AUDIT_SEGMENT_BYTES)
        try:
            fields = {k: v for k, v in outcome.items() if k != "at"}
            log.append(EVENT, manifest=os.path.abspath(manifest), **fields)
        finally:
            log.close()
    except Exception as exc:  # the audit's own errors, and the disk's
        raise VerifyError(f"cannot record the drift check in the audit at {directory}: "
                          f"{exc} (run it as root)") from None
    try:
        record_drift(outcome)
    except OSError as exc:
        raise VerifyError(f"cannot keep the drift check's record: {exc} (run it as root)"
                          ) from None


def report(outcome: dict[str, Any], manifest: str, fmt: str = "text") -> str:
    """What ``sandbox verify --drift`` prints: text, or the report module's JSON or
    JUnit (each drifted file and each failed host check a failing case), the JSON
    with this check's own keys too."""
    from agent_sandbox.display import printable

    if fmt != "text":
        import dataclasses
        import types

        from . import report as reports

        items = [types.SimpleNamespace(**i) for i in outcome["drifted"]]
        built = reports.drift_report(items, manifest)
        failed = tuple(reports.Case(c["name"], False, c["detail"], "failed")
                       for c in outcome["failed_checks"])
        if failed or outcome["error"]:
            error = (reports.Case("manifest", False, outcome["error"], "failed"),
                     ) if outcome["error"] else ()
            kept = tuple(c for c in built.cases if not c.passed)
            built = dataclasses.replace(built, cases=kept + failed + error)
        if fmt == "junit":
            return reports.output(built, fmt)
        doc = reports.to_json(built)
        doc.update({"failed_checks": outcome["failed_checks"], "checks": outcome["checks"],
                    "clean": outcome["clean"], "error": outcome["error"]})
        return json.dumps(doc, indent=2)
    lines = []
    for i in outcome["drifted"]:
        extra = f"  ({i['detail']})" if i["detail"] else ""
        lines.append(f"DRIFT {i['problem']:8} {printable(i['target'])}{extra}")
    for c in outcome["failed_checks"]:
        lines.append(f"FAIL  {c['name']:16} {printable(c['detail'])}")
    if outcome["drifted"]:
        lines.append(f"{len(outcome['drifted'])} managed file(s) differ from {manifest}")
    elif not outcome["error"]:
        lines.append(f"no drift: every file in {manifest} is as rendered")
    if outcome["checks"] or outcome["failed_checks"]:
        passed = outcome["checks"] - len(outcome["failed_checks"])
        lines.append(f"{max(passed, 0)}/{outcome['checks']} host checks passed")
    return "\n".join(lines)


def main(manifest: str, *, files_only: bool = False, settings: str | None = None,
         fmt: str = "text") -> int:
    """``sandbox verify --drift``: check, record, print; the exit status (0: clean)."""
    outcome = run_checks(manifest, files_only=files_only, settings=settings)
    if outcome["error"]:
        sys.stderr.write(f"sandbox verify: {outcome['error']}\n")
    try:
        record(outcome, manifest)
    except VerifyError as exc:
        sys.stderr.write(f"sandbox verify: {exc}\n")
        print(report(outcome, manifest, fmt))
        return 1
    print(report(outcome, manifest, fmt))
    return 0 if outcome["clean"] else 1
