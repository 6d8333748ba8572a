"""What a Terraform or OpenTofu plan changes, read from the documented JSON
representation (``terraform show -json PLANFILE``, ``tofu show -json``):
which resource changes destroy something (the gate stops those at a human),
and whether the plan changes anything at all.

Read from the format's own rules: ``resource_changes[].change.actions`` is one
of ``["no-op"]``, ``["create"]``, ``["read"]``, ``["update"]``, ``["delete",
"create"]`` and ``["create", "delete"]`` (replace, either order),
``["delete"]``, ``["forget"]`` and ``["create", "forget"]`` (Terraform 1.7+:
the old object is left, unmanaged); ``replace_paths`` lists the attributes
that force a replacement; ``action_reason`` says why; ``format_version`` is
``MAJOR.MINOR`` and a reader must refuse a major version it does not know.

Destructive signals: every action list with ``delete`` or ``forget`` in it
(a deposed object's delete too: a deposed object is a real object, and the
plan is text the agent handed in, so "deposed" is no excuse), every
``replace_paths``, and what the reader cannot judge: an action list it does
not know, provider actions invoked by the plan (``action_invocations``), and a
plan marked ``errored``. Not destructive: create, update in place, read,
import, move (``previous_address``) and output changes. A document that is
not JSON, has duplicate keys, is a state rather than a plan, has no
``resource_changes`` list (``planned_values`` alone, or nothing: what is
deleted is only ever said there, so its absence is never "no changes"), or has
a major version other than 0 or 1 is unreadable; a plan whose
``resource_changes`` is an empty list changes nothing. (Terraform leaves the
list out of a plan for a configuration with no resources at all: such a plan
escalates, which is the safe side.) Never raises on the document.
"""

from __future__ import annotations

from typing import Any

from .plan_reading import Reading, Unreadable, shown, strict_json, unreadable

KNOWN_MAJOR = ("0", "1")
NOT_A_CHANGE = (("no-op",), ("read",))
VERBS = {("create",): ("create", ""), ("update",): ("update", ""), ("delete",): ("delete", ""),
         ("forget",): ("forget", "left running, unmanaged"),
         ("delete", "create"): ("replace", "delete first"),
         ("create", "delete"): ("replace", "create first"),
         ("create", "forget"): ("replace", "the old one left running, unmanaged")}
REASONS = {
    "replace_because_tainted": "tainted", "replace_because_cannot_update": "cannot update",
    "replace_by_request": "requested", "replace_by_triggers": "replace_triggered_by",
    "delete_because_no_resource_config": "no longer configured",
    "delete_because_no_module": "its module is gone",
    "delete_because_wrong_repetition": "wrong count/for_each",
    "delete_because_count_index": "beyond count", "delete_because_each_key": "not in for_each",
    "delete_because_no_move_target": "no move target",
}


def read(text: str) -> Reading:
    """What the plan document ``text`` changes."""
    try:
        return _read(strict_json(text))
    except Unreadable as exc:
        return unreadable(str(exc))


def _read(doc: Any) -> Reading:
    if not isinstance(doc, dict):
        raise Unreadable("a plan is a JSON object")
    version = doc.get("format_version")
    if not isinstance(version, str) or version.split(".")[0] not in KNOWN_MAJOR:
        raise Unreadable(f"format_version {shown(version)} is not a plan format this gate "
                          "reads (1.x)")
    if "resource_changes" not in doc:  # planned_values alone never says what is deleted
        seen = "only planned_values" if "planned_values" in doc else "a state?"
        raise Unreadable(f"not a plan the gate can judge: no resource_changes list ({seen})")
    if doc.get("errored") is True:
        raise Unreadable("the plan is marked errored: Terraform would not apply it as shown")
    changes: list[str] = []
    signals: list[str] = []
    writes = False
    resource_changes = doc["resource_changes"]
    if not isinstance(resource_changes, list):
        raise Unreadable("resource_changes is not a list")
    for rc in resource_changes:
        entry, signal, changed = _resource(rc)
        writes = writes or changed
        if entry:
            changes.append(entry)
        if signal:
            signals.append(signal)
    invocations = doc.get("action_invocations", [])
    if not isinstance(invocations, list):
        raise Unreadable("action_invocations is not a list")
    if invocations:
        writes = True
        signals.append(f"invokes {len(invocations)} provider action(s) (the gate cannot "
                       "judge them)")
    outputs = doc.get("output_changes", {})
    if not isinstance(outputs, dict):
        raise Unreadable("output_changes is not an object")
    for name, change in outputs.items():
        actions = _actions(change, f"output {shown(name)}")
        if actions not in NOT_A_CHANGE:
            writes = True
            changes.append(f"output {shown(name)}: {'+'.join(actions)}")
    if not changes:
        changes.append("no changes")
    return Reading(changes=tuple(changes), signals=tuple(signals), writes=writes)


def _actions(change: Any, where: str) -> tuple[str, ...]:
    if not isinstance(change, dict):
        raise Unreadable(f"{where}: the change is not an object")
    actions = change.get("actions")
    if not isinstance(actions, list) or not actions or not all(
            isinstance(a, str) for a in actions):
        raise Unreadable(f"{where}: change.actions is not a list of action names")
    return tuple(actions)


def _path(steps: Any) -> str:
    if not isinstance(steps, list):
        return shown(steps)
    out = ""
    for step in steps:
        if isinstance(step, int) and not isinstance(step, bool):
            out += f"[{step}]"
        elif isinstance(step, str):
            out += ("." if out else "") + step
        else:
            out += "[?]"
    return shown(out or "?")


def _resource(rc: Any) -> tuple[str, str, bool]:
    """(what it does, its destructive signal or "", whether it changes anything)."""
    if not isinstance(rc, dict) or not isinstance(rc.get("address"), str):
        raise Unreadable("a resource change has no address")
    address = shown(rc["address"])
    deposed = rc.get("deposed")
    if deposed is not None:
        address += f" (deposed object {shown(deposed, 20)})"
    actions = _actions(rc.get("change"), address)
    change: dict[str, Any] = rc["change"]
    reason = rc.get("action_reason")
    forced = change.get("replace_paths") or []
    if not isinstance(forced, list):
        raise Unreadable(f"{address}: replace_paths is not a list")
    moved = rc.get("previous_address")
    notes = []
    if isinstance(moved, str) and moved:
        notes.append(f"moved from {shown(moved)}")
    if change.get("importing") is not None:
        notes.append("import")
    if actions in NOT_A_CHANGE and not forced:
        if not notes:
            return "", "", False
        return f"{'move' if moved else 'import'} {address} ({'; '.join(notes)})", "", True
    known = VERBS.get(actions)
    verb, detail = known if known else ("+".join(shown(a, 20) for a in actions), "")
    if detail:
        notes.insert(0, detail)
    if isinstance(reason, str) and reason:
        notes.append(REASONS.get(reason, shown(reason, 60)))
    if forced:
        notes.append("forced by " + ", ".join(_path(p) for p in forced[:5])
                     + (" ..." if len(forced) > 5 else ""))
    text = f"{verb} {address}" + (f" ({'; '.join(notes)})" if notes else "")
    if known is None:
        return text, f"{text}: actions the gate does not know", True
    if "delete" in actions or "forget" in actions or forced:
        return text, text, True
    return text, "", True
