"""Our Seatbelt profiles held against srt's own generator (the pinned npm package).

srt's ``wrapCommandWithSandboxMacOS`` runs under node (``srt_macos_profile.mjs``)
on the srt-format settings derived from each spec of ``srt_diff.settings_matrix``;
both profiles are asked the same probes with Seatbelt's last-match-wins rule.
No probe may be allowed by ours and denied by srt's, unless docs/provisioning.md lists it
(``- looser than srt: `PROBE` ...``) with a reason. This is an evaluation of the
profile text, not a run of sandbox-exec: no macOS host exists here.
"""

from __future__ import annotations

import pytest

from agent_sandbox.render import seatbelt
from agent_sandbox.spec.models import Spec

from . import srt_diff
from .sbpl import Profile, Query

MATRIX = srt_diff.settings_matrix()
pytestmark = pytest.mark.slow  # srt's own generator runs under node for each spec


@pytest.fixture(scope="module", autouse=True)
def _srt_installed():
    if not srt_diff.SRT_PACKAGE.exists():
        pytest.fail("srt's npm package is missing: run `make setup`")
    assert srt_diff.srt_version() == "0.0.78", "the comparison is pinned to srt 0.0.78"


@pytest.mark.parametrize("name", sorted(MATRIX))
def test_no_probe_is_looser_than_srt(name):
    diff = srt_diff.compare(name, MATRIX[name])
    allowed = set(srt_diff.readme_exceptions())
    unexplained = [w for w in diff.looser if w not in allowed]
    assert diff.total > 1500
    assert not unexplained, f"{name}: ours allows what srt denies: {unexplained}"


def test_the_judge_fires_on_a_looser_profile(monkeypatch):
    """Control: the profile as it was before (pty, every sysctl, cfprefsd, no
    create guard on protected names) is reported looser, cause by cause."""
    real = seatbelt.seatbelt_profile

    def loosened(spec, home):
        return real(spec, home) + "\n".join([
            "(allow sysctl-read)", "(allow pseudo-tty)",
            '(allow mach-lookup (global-name "com.apple.cfprefsd.daemon"))',
            '(allow file-write-create (regex #"^/Users/erin/src/app/\\.claude$"))', ""])

    monkeypatch.setattr(seatbelt, "seatbelt_profile", loosened)
    diff = srt_diff.compare("control", MATRIX["golden"])
    for want in ("sysctl kern.procargs2", "pseudo-tty", "mach com.apple.cfprefsd.daemon",
                 "create /Users/erin/src/app/.claude", "symlink /Users/erin/src/app/.claude"):
        assert want in diff.looser, (want, diff.looser)


def test_srt_profile_is_really_srts():
    """The reference is srt's text (its own header and rules), evaluated by the same reader."""
    text = srt_diff.srt_profile(MATRIX["golden"])
    assert "; Essential permissions - based on Chrome sandbox policy" in text
    prof = Profile(text)
    assert prof.decide(Query("sysctl-read", name="kern.procargs2")) == "deny"
    assert prof.decide(Query("sysctl-read", name="hw.ncpu")) == "allow"
    # srt resolves /tmp to /private/tmp on a Mac; the spelling is rewritten likewise
    assert '"/private/tmp' in text


def test_matrix_covers_every_cause():
    spec_names = set(MATRIX)
    assert {"home-wide-deny", "glob-deny-longer-allow", "absent-parents", "sockets-pty",
            "no-trustd", "golden", "relative-deny-home-root"} <= spec_names
    assert any(n.startswith("fleet:") for n in spec_names)
    assert isinstance(MATRIX["golden"], Spec)


def test_readme_exceptions_are_exact_and_each_has_a_reason():
    text = (srt_diff.REPO / "docs" / "provisioning.md").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("- looser than srt:")]
    assert lines and len(lines) == len(srt_diff.readme_exceptions())
    for line in lines:
        assert len(line.split("`", 2)[2].strip(" -:")) > 20, f"no reason given: {line}"


def test_a_relative_deny_is_not_carried_away_by_renaming_a_folder_above_cwd():
    """The listed exception above is harmless: after the rename the denied
    path is still denied, by name, wherever it now is."""
    spec = MATRIX["relative-deny-home-root"]
    prof = Profile(seatbelt.seatbelt_profile(spec, srt_diff.HOME), {"CWD": srt_diff.CWD})
    for p in (f"{srt_diff.CWD}/secrets/key", "/Users/erin/src2/app/secrets/key"):
        assert prof.decide(Query("file-read-data", path=p)) == "deny", p
    for p in (f"{srt_diff.CWD}/deploy/keys/k", "/Users/erin/src2/app/deploy/keys/k"):
        assert prof.decide(Query("file-write-data", path=p)) == "deny", p
    assert prof.decide(Query("file-write-unlink", path=f"{srt_diff.CWD}/secrets")) == "deny"
