"""The host's waivers of ``sandbox verify``'s checks, as the renderer installed them
(``contract.VERIFY_WAIVERS_FILE``, from the spec's ``verify.waivers``).

No file: no waivers (an unprovisioned host, or one provisioned before waivers were
rendered). A file that is there but cannot be read whole is a ``VerifyError``,
never "no waivers" and never a partial list. Stdlib only: the host needs no spec.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from agent_sandbox import contract

from . import VerifyError


@dataclass(frozen=True)
class Waiver:
    check: str
    justification: str
    expires: dt.date  # the last day it holds, in UTC
    layer: str = ""  # the spec layer it comes from (fleet.yml, groups/<g>.yml, hosts/<h>.yml)

    def expired(self, today: dt.date) -> bool:
        return self.expires < today

    def as_dict(self) -> dict[str, str]:
        return {"check": self.check, "justification": self.justification,
                "expires": self.expires.isoformat(), "layer": self.layer}


def parse_waivers(doc: Any, source: str) -> dict[str, Waiver]:
    """``{check: Waiver}`` from a verify.json document; any entry of the wrong shape,
    or a check waived twice, is a ``VerifyError`` naming ``source``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("waivers"), list):
        raise VerifyError(f"{source}: expected {{\"version\": 1, \"waivers\": [...]}}")
    out: dict[str, Waiver] = {}
    for i, entry in enumerate(doc["waivers"]):
        where = f"{source}: waivers[{i}]"
        if not isinstance(entry, dict) or not all(
                isinstance(entry.get(k), str) for k in ("check", "justification", "expires")):
            raise VerifyError(f"{where}: expected check, justification and expires as text")
        try:
            expires = dt.date.fromisoformat(entry["expires"])
        except ValueError:
            raise VerifyError(f"{where}: expires {entry['expires']!r} is not YYYY-MM-DD") from None
        check = entry["check"]
        if check in out:
            raise VerifyError(f"{where}: check {check!r} is waived twice")
        layer = entry.get("layer", "")
        out[check] = Waiver(check, entry["justification"], expires,
                            layer if isinstance(layer, str) else "")
    return out


def read_waivers(path: str = contract.VERIFY_WAIVERS_FILE) -> dict[str, Waiver]:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise VerifyError(f"cannot read the host's waivers {path}: {exc}") from None
    return parse_waivers(doc, path)
