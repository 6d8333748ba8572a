"""``sandbox verify --drift``: every installed file that differs from the render
manifest the roles install (missing, modified, or with other permission bits).

Reads only; it never repairs a file (provisioning again does). A manifest it
cannot read is a ``VerifyError``, never "no drift".
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent_sandbox import contract

from . import VerifyError

MANIFEST = contract.MANIFEST_FILE


@dataclass(frozen=True)
class DriftItem:
    target: str
    problem: str  # missing | modified | mode
    detail: str = ""


def compare_manifest(manifest: dict[str, Any],
                     read: Callable[[str], tuple[bytes, int] | None]) -> list[DriftItem]:
    """Every difference between the manifest and what ``read(target)`` returns
    (content and permission bits, or None when the file is missing)."""
    out: list[DriftItem] = []
    for art in manifest.get("artifacts", []):
        target = str(art["target"])
        found = read(target)
        if found is None:
            out.append(DriftItem(target, "missing"))
            continue
        content, mode = found
        digest = hashlib.sha256(content).hexdigest()
        if digest != art["sha256"]:
            out.append(DriftItem(target, "modified",
                                 f"sha256 {digest[:12]} != {art['sha256'][:12]}"))
        want = int(str(art["mode"]), 8)
        if mode != want:
            out.append(DriftItem(target, "mode", f"{mode:04o} != {want:04o}"))
    return out


def read_host_file(target: str) -> tuple[bytes, int] | None:
    try:
        st = os.lstat(target)
        if not stat.S_ISREG(st.st_mode):
            return (b"", -1)
        with open(target, "rb") as fh:
            return fh.read(), stat.S_IMODE(st.st_mode)
    except FileNotFoundError:
        return None


def drift(manifest_path: str = MANIFEST) -> list[DriftItem]:
    try:
        with open(manifest_path, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except FileNotFoundError:
        raise VerifyError(f"no render manifest at {manifest_path}: provision the host "
                          "(ansible-playbook site.yml or the pyinfra deploy) first") from None
    except ValueError as exc:
        raise VerifyError(f"{manifest_path} is not valid JSON: {exc}") from None
    return compare_manifest(manifest, read_host_file)
