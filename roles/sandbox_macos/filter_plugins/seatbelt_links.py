"""Adds the host-resolved forms of denied paths to the rendered Seatbelt profiles.

``agent_sandbox_seatbelt_links(artifacts, results)``: ``artifacts`` as
``agent_sandbox_select`` returns them, ``results`` the registered results of
running ``files/resolve_links.py`` on the host once per ``seatbelt-denies``
artifact. Each profile gets ``render.seatbelt.resolved_denies`` appended (denies
only); a profile whose paths resolve to themselves keeps its rendered bytes.
Any malformed result fails the task: a profile is never installed without the
resolved forms it needs.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

from ansible.errors import AnsibleFilterError

_DENIES = ".denies.json"


def agent_sandbox_seatbelt_links(artifacts: list[dict[str, Any]],
                                 results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    try:
        from agent_sandbox.render import seatbelt
    except ImportError as exc:
        raise AnsibleFilterError(
            f"agent-sandbox is not importable on the controller: {exc}") from None
    extra: dict[str, str] = {}
    for res in results:
        target = str(res.get("item", {}).get("target", ""))
        if not target.endswith(_DENIES) or res.get("rc") != 0:
            raise AnsibleFilterError(f"resolving the denied paths of {target!r} failed")
        try:
            denied = json.loads(base64.b64decode(res["item"]["content_b64"]))
            resolved = json.loads(res["stdout"])
            text = seatbelt.resolved_denies(denied, resolved)
        except Exception as exc:
            raise AnsibleFilterError(f"bad resolution for {target}: {exc}") from None
        extra[target[: -len(_DENIES)] + ".sb"] = text
    out = []
    for art in artifacts:
        text = extra.get(art["target"], "")
        if art["kind"] == "seatbelt" and text:
            content = base64.b64decode(art["content_b64"]) + text.encode()
            art = {**art, "content_b64": base64.b64encode(content).decode("ascii"),
                   "sha256": hashlib.sha256(content).hexdigest()}
        out.append(art)
    missing = {a["target"] for a in artifacts if a["kind"] == "seatbelt"} - set(extra)
    if missing:
        raise AnsibleFilterError(f"no resolution for the profiles {sorted(missing)}")
    return out


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"agent_sandbox_seatbelt_links": agent_sandbox_seatbelt_links}
