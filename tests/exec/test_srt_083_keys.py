"""srt 0.0.83's new settings keys: typed as srt types them; those this backend does
not enforce, set to more than their default, make the file srt's alone (a clear
refusal naming --backend srt), never a silently looser run."""

from __future__ import annotations

import json

import pytest

from agent_sandbox.runtime.settings import SettingsError, parse, require_enforceable

BASE = {"network": {"allowedDomains": [], "deniedDomains": []},
        "filesystem": {"denyRead": [], "denyWrite": [], "allowWrite": []}}


def settings(top: dict[str, object] | None = None, **net: object) -> str:
    doc = json.loads(json.dumps(BASE))
    doc["network"].update(net)
    doc.update(top or {})
    return json.dumps(doc)


@pytest.mark.parametrize(("doc", "key"), [
    (settings(requireHostMatch=True), "network.requireHostMatch"),
    (settings(refuseOpaqueTunnels=True), "network.refuseOpaqueTunnels"),
    (settings(stripResponseHeaders=["set-cookie"]), "network.stripResponseHeaders"),
    (settings({"allowNestedUserNamespaces": True}), "allowNestedUserNamespaces"),
])
def test_what_only_srt_enforces_is_refused_here_and_named(doc: str, key: str) -> None:
    s = parse(json.loads(doc), source="s.json")
    require_enforceable(s, "srt")  # srt itself takes the file
    for backend in ("bwrap", "gvisor"):
        with pytest.raises(SettingsError, match=f"{key}: only the srt backend.*--backend srt"):
            require_enforceable(s, backend)


@pytest.mark.parametrize("doc", [
    settings(requireHostMatch=False), settings(refuseOpaqueTunnels=False),
    settings(stripResponseHeaders=[]), settings({"allowNestedUserNamespaces": False}),
    settings(allowPlaintextHeaderSet=True), settings(ambiguousRequestTarget="asSpelled"),
])
def test_defaults_and_filter_only_keys_run_here(doc: str) -> None:
    require_enforceable(parse(json.loads(doc), source="s.json"), "bwrap")


@pytest.mark.parametrize(("doc", "key"), [
    (settings(requireHostMatch="yes"), "network.requireHostMatch"),
    (settings(stripResponseHeaders=[""]), "network.stripResponseHeaders"),
    (settings(stripResponseHeaders="set-cookie"), "network.stripResponseHeaders"),
    (settings(ambiguousRequestTarget="loose"), "network.ambiguousRequestTarget"),
    (settings(allowPlaintextHeaderSet=1), "network.allowPlaintextHeaderSet"),
    (settings({"allowNestedUserNamespaces": "no"}), "allowNestedUserNamespaces"),
])
def test_srt_refuses_these_and_so_does_every_backend(doc: str, key: str) -> None:
    with pytest.raises(SettingsError, match=key):
        parse(json.loads(doc), source="s.json")
