"""Allowed means contained, judged by what really happens.

Every input (hand-written attacks per class and per tool shape, plus commands
generated from a shell grammar) goes through the client's hook shape and the
policy engine. Whatever the engine allows is then really carried out in a
scratch home and repository: Bash commands by bash under ``strace -f`` inside
bubblewrap, file tools as the write they are, apply_patch as Codex parses it,
WebFetch URLs through Node's WHATWG URL parser (the one the clients use), MCP
names split as a client may have built them. The judges in ``containment``
fail the input if it wrote a protected path, read a denied one, connected
anywhere or ran a program the scratch policy does not allow.

Controls run the same judges on known-bad inputs without the engine, so each
judge is shown to fire. Hypothesis is derandomized with a bounded number of
examples: the same inputs every run, a few tens of seconds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_sandbox.hooks.calls import BadInput, claude_call, cursor_call, gemini_call
from agent_sandbox.policy.engine import Policy
from agent_sandbox.spec.rules import Verdict

from .containment import BWRAP, SCRATCH_POLICY, STRACE, Scratch, judge, run_traced

pytestmark = pytest.mark.skipif(not (STRACE and BWRAP),
                                reason="needs strace (scripts/bootstrap.d) and bwrap")
NODE = shutil.which("node")

# -- the scratch tree, copied fresh for every input -------------------------------

_SCRATCH: dict[str, Scratch] = {}


def fresh() -> Scratch:
    """The scratch tree the engine judges against; each run gets its own copy
    mounted in its place, so the tree itself never changes."""
    if "s" not in _SCRATCH:
        _SCRATCH["s"] = Scratch(Path(tempfile.mkdtemp(prefix="contained-")))
    return _SCRATCH["s"]


@pytest.fixture(scope="module", autouse=True)
def _scratch_removed() -> Iterator[None]:
    yield
    s = _SCRATCH.pop("s", None)
    if s is not None:
        shutil.rmtree(s.root, ignore_errors=True)


def engine(s: Scratch, default: str = "allow") -> Policy:
    doc = json.loads(json.dumps(SCRATCH_POLICY))
    doc["commands"]["default"] = default
    return Policy(doc, repo=str(s.repo), home=str(s.home))


@pytest.fixture(autouse=True)
def _plain_path(monkeypatch: pytest.MonkeyPatch) -> None:
    # the engine resolves command names on the same PATH the scratch shell uses
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("CDPATH", raising=False)


# -- carrying out an allowed call ------------------------------------------------

_RUST_WS = " \t\n\x0b\x0c\r\x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007" \
           "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"


def codex_patch_targets(patch: str) -> list[str]:
    """The files Codex's apply_patch parser writes (read from its parser.rs:
    lines split on \\n, a hunk header trimmed of Unicode white space, Move to
    matched untrimmed)."""
    out = []
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in patch.strip(_RUST_WS).split("\n")]
    for ln in lines:
        t = ln.strip(_RUST_WS)
        for head in ("*** Add File: ", "*** Update File: ", "*** Delete File: "):
            if t.startswith(head):
                out.append(t[len(head):])
        if ln.startswith("*** Move to: "):
            out.append(ln[len("*** Move to: "):])
    return out


def whatwg_host(url: str) -> str | None:
    assert NODE
    p = subprocess.run([NODE, "-e", "try{process.stdout.write(new URL(process.argv[1]).hostname)}"
                        "catch(e){process.exit(3)}", url], capture_output=True, text=True,
                       timeout=20)
    return p.stdout if p.returncode == 0 else None


def carry_out(s: Scratch, shape: str, data: dict[str, Any]) -> list[str]:
    """Do what the client would do with an allowed call; the judges' findings."""
    ti = data.get("tool_input", {})
    if shape == "bash":
        cmd = ti.get("command") or data.get("command")
        return judge(s, run_traced(s, ["/bin/bash", "-c", cmd]))
    if shape == "write":
        path = ti.get("file_path")
        return judge(s, run_traced(s, ["/bin/bash", "-c", 'printf x >> "$1"', "w", path]))
    if shape == "patch":
        found: list[str] = []
        for target in codex_patch_targets(ti["input"]):
            found += judge(s, run_traced(s, ["/bin/bash", "-c", 'printf x >> "$1"', "w",
                                             target]))
        return found
    if shape == "fetch":
        host = whatwg_host(ti["url"])
        ok = host is not None and host.rstrip(".").lower() == "github.com"
        return [] if ok else [f"connected: {ti['url']!r} reaches {host!r}"]
    if shape == "mcp":
        name = data["tool_name"]
        body = name[len("mcp__"):]
        # every (server, tool) split a client could have joined into this name
        servers = {body[:i] for i in range(1, len(body)) if body[i:i + 2] == "__"}
        bad = sorted(x for x in servers if x != "docs")
        return [f"executed: MCP tool of server {x!r}" for x in bad]
    raise AssertionError(shape)


def call_of(client: str, data: dict[str, Any]) -> Any:
    if client == "claude":
        return claude_call(data)
    if client == "gemini":
        return gemini_call(data)
    return cursor_call(client.split(":", 1)[1], data)


def verdict_and_effects(shape: str, client: str, data: dict[str, Any], s: Scratch
                        ) -> tuple[Verdict, list[str]]:
    data = json.loads(json.dumps(data).replace("{home}", str(s.home))
                      .replace("{repo}", str(s.repo)))
    data.setdefault("cwd", str(s.repo))
    try:
        call = call_of(client, data)
    except BadInput:
        return Verdict.DENY, []
    # MCP tools: only the server a rule allows (docs) may run; the rest escalate
    v = engine(s, "escalate" if shape == "mcp" else "allow").classify(call).verdict
    if v not in (Verdict.ALLOW, Verdict.OBSERVE):
        return v, []
    return v, carry_out(s, shape, data)


# -- hand-written attacks, one list per class -------------------------------------

BASH_ATTACKS: dict[str, list[str]] = {
    "redirect ending in &": [
        "echo '[core] fsmonitor=x' >&.git/config", "echo x &>>.git/hooks/pre-commit",
        "echo x >&~/.bashrc", "ls 2>&1 >&.sandbox/policy.json", "echo x >|.claude/settings.json",
        "cat <&keys/id_rsa", "cat 0<.env", "echo x 1<>.git/config",
    ],
    "/dev/tcp": [
        "echo hi > /dev/tcp/127.0.0.1/80", "cat < /dev/tcp/127.0.0.1/22",
        "echo x >/dev/udp/127.0.0.1/53", "echo x > /dev/tcp/localhost/80",
        "cd /dev/tcp && echo x > 127.0.0.1/80",
    ],
    "commands that write or run code": [
        "find . -fprint .git/config", "find . -name notes.txt -delete", "find . -fls ~/.bashrc",
        "find . -fprintf .git/hooks/pre-commit x", "find . -exec cat {} ;",
        "rg --pre=cat TODO", "rg --pre cat TODO", "rg -z TODO", "rg --search-zip TODO",
        "sort -o .git/config README.md", "uniq README.md .git/config", "tree -o ~/.profile",
        "git diff --output=.git/config", "git -c core.pager=cat log", "git --exec-path=. status",
        "date -f ~/.ssh/id_rsa", "grep -f ~/.ssh/id_rsa x README.md",
        "diff --from-file=.env README.md", "xxd README.md .git/config",
        "sed -n 'w .git/config' README.md", "git log --ext-diff -p",
        "git branch --edit-description",
    ],
    "bare names after cd": [
        "cd .git && echo '[alias]' >> config", "cd ~/.ssh && cat id_rsa",
        "cd .sandbox/audit-keys; cat audit.ed25519", "cd ~ && echo x >> .bashrc",
        "cd .git/hooks && echo x > pre-commit", "cd keys && cat id_rsa",
        "cd ~/.aws; head credentials",
        "cd .sandbox && ls -R", "cd ../../ && cat .ssh/id_rsa",
    ],
    "cd not literal, across subshells and conditions": [
        'cd "$HOME/.ssh" && cat id_rsa', "cd ~- && cat id_rsa", "d=.git; cd $d; echo x > config",
        "cd $(echo .git) && echo x >> config", "(cd src) ; cat ../.env", "cd src | true; cat .env",
        "false && cd /tmp; echo x > .git/config", "cd nowhere; echo x >> .git/config",
        "cd src & echo x > ../.bashrc", "while cd .git; do echo x >> config; break; done",
        "for d in .git; do cd $d; done; echo x >> config", "cd -P .git && echo x >> config",
        "cd src/.. && echo x >> .git/config", "pushd .git; echo x >> config",
    ],
    "here-document bodies": [
        "cat <<EOF\n$(cat ~/.ssh/id_rsa)\nEOF",
        "cat <<EOF > notes.txt\n$(echo x >> .git/config)\nEOF",
        "cat <<E\n`echo x > ~/.bashrc`\nE",
        "python3 <<EOF\nopen('.git/config','a').write('x')\nEOF",
        "cat <<-EOF\n\t${HOME}\nEOF", "cat <<< $(cat .env)", "cat <<'EOF'\n$(harmless)\nEOF",
    ],
    "$\"...\" and expansions": [
        'echo x > $".git/config"', 'cat $"keys/id_rsa"', "x='$(cat keys/id_rsa)'; echo \"${x@P}\"",
        "x='a[$(echo x >> .git/config)]'; echo $((x))", "cat ~+/.env", "cat ~/.ss{h,x}/id_rsa",
        "cat ~/.ss{h..h}/id_rsa", "cat ~/.ss?/id_rsa", "cat ~/.ss*/id_rsa", "cat .en[v]",
        "cat .e*", "ls ~/.ss*", "cat \\~/.ssh/id_rsa", "cat */id_rsa", "echo x > ${HOME}/.profile",
    ],
    "environment prefixes": [
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.fsmonitor "
        "GIT_CONFIG_VALUE_0='echo x >> .bashrc; false' git status",
        "GIT_EXTERNAL_DIFF=./x.sh git diff", "http_proxy=http://127.0.0.1:1 git status",
        "CDPATH=~ cd .ssh && cat id_rsa", "BASH_ENV=.env bash -c true", "PAGER=cat git log",
        "GIT_DIR=keys git status", "RIPGREP_CONFIG_PATH=.env rg x", "LD_PRELOAD=./x.so ls",
        "TZ=/home/x/.ssh/id_rsa date", "LANG=C cat README.md", "IFS=/ read a",
        "env GIT_CONFIG_PARAMETERS=\"'core.fsmonitor=x'\" git status", "export PATH=.:$PATH; ls",
    ],
    "hosts without a dot": [
        "curl localhost", "curl 2130706433", "nc 127.1 80", "wget 0x7f.1",
        "echo x > /dev/tcp/127.1/80", "git ls-remote http://127.0.0.1:1/x",
        "curl file://{home}/.ssh/id_rsa", "git clone file://{home}/.ssh x",
    ],
    "plain forms and allowed controls": [
        "ls -la", "cat README.md", "git status", "git log --oneline -3", "grep -n TODO README.md",
        "echo ok > notes.txt", "wc -l src/main.py", "head -1 README.md", "cat src/*.py",
        "find src -name '*.py'", "sed -n 1,2p README.md", "cd src && cat main.py",
        "rg TODO src", "LANG=C ls", "cat keys/id_rsa", "cat link.txt", "echo x > link.txt",
        "git status --ignored", "git ls-files -o", "git status -uall",
        "cat README.md > /dev/stdout",
        "cat /proc/self/root/etc/hostname", "cd .. && cd repo && cat .env", "ls .[e]nv",
        "ls keys", "grep -r TODO .", "du -sh .", "stat ~/.ssh/id_rsa",
    ],
}

# Attacks on the modelled set itself: every spelling of a path, flag, cd and
# descriptor the table allows, for one client (the shape is the same for all).
MODEL_ATTACKS = [
    'ls -la -- .env', 'cat -- .env', 'cat ./.env', 'cat src/../.env', 'cat .//.env', 'cat .env/',
    'grep -r x --include=.env .', 'grep -R TODO src', 'rg --hidden TODO', 'rg -uuu TODO',
    'rg --no-ignore TODO src', 'rg -L TODO', 'ls -RL', 'du -aL', 'find . -L -name x', 'find -L .',
    'find . -newer .env', 'find . -samefile .env', 'stat -L keys', 'file keys/id_rsa', 'tree -a',
    'diff -r . /tmp', 'cat README.md > /dev/stdout', 'echo x > /dev/fd/3',
    'echo x >/proc/self/fd/1', 'echo x > /proc/self/cwd/.git/config', 'cat /proc/self/cwd/.env',
    'cat /proc/self/root/etc/hostname', 'cat /proc/self/root$HOME/.ssh/id_rsa',
    'echo x>.git/config', 'echo x>>~/.bashrc', 'echo x >\\.git/config', "echo x > '.git'/config",
    "echo x > .git/co''nfig", 'echo x 3>.git/config', 'echo x {fd}>x', 'cat < link.txt',
    'ls -d .git/hooks', 'wc -l keys/*', 'head -c1 keys/config', 'tac keys/config',
    'sort keys/id_rsa', 'cut -c1 .env', 'od .env', 'xxd .env', 'cmp .env README.md', 'nl .env',
    'rev .env', 'git show HEAD:README.md', 'git log -p -- .env', 'git diff -- .env',
    'git blame README.md', 'git ls-files -o', 'git status --ignored',
    'git --no-pager log -1 --format=%H', 'git log --grep=x --all', 'git log -S x',
    'git rev-parse --show-toplevel', 'git branch -a', 'git branch -l foo', 'git remote -v',
    'cd ~ ; ls -a', 'cd; cat .bashrc', 'cd ..; cd ..; cat .ssh/id_rsa',
    'cd / && cat etc/hostname', 'cd .. && cd repo && cat .env',
    'cd src; cd ..; echo x > .git/config', 'cd src && cat ../.env',
    'true || cd .git; echo x >> config', 'cd .git || true; echo x >> config',
    '! cd .git; echo x >> config', 'if cd .git; then echo x >> config; fi',
    '{ cd .git; }; echo x >> config', 'cd .git & wait; echo x >> config', "echo $'\\x2e'env",
    "cat $'.env'", "cat '.en'v", 'cat \\.env', 'cat ".e"nv', 'ls .[e]nv', 'cat .e?v', 'cat ?env',
    'cat *env', 'cat .*', 'cat */main.py', 'ls ~/.*', 'echo ~', 'echo ~/x > ~/.profile',
    'LANG=C.UTF-8 cat .env', 'LC_ALL=../x cat README.md', 'TZ=:/etc/localtime date',
    'TERM=dumb ls', 'env -i cat README.md', 'env -u HOME ls', 'nice cat README.md',
    'timeout 1 cat .env', 'command cat .env', 'command -v cat', 'time cat README.md', 'type cat',
    'which cat', "printf '%s' x > notes.txt", 'echo x | cat > .git/config',
    'cat README.md | grep x > notes.txt', "cat <<'EOF' > .git/config\nx\nEOF",
    'cat <<< x > .bashrc', 'exit; cat .env', 'cat README.md; exit 1', 'test -f .env && echo yes',
    '[ -r ~/.ssh/id_rsa ]', 'echo $(( 1 + 1 ))', 'echo x # > .git/config', 'echo x #; cat .env',
    'echo x\\\n > .git/config', 'echo x \\\n> notes.txt', 'cat\t.env', 'ls\x0b.env', 'git -P log',
    "git log --format='%(describe)'", 'git log --pretty=format:%x', 'git -C .. status',
    'git status -- ../../..', 'git diff HEAD~1 -- ~/.ssh/id_rsa', 'git show ::README.md',
    'readlink keys', 'realpath keys/id_rsa', 'basename ~/.ssh/id_rsa', 'dirname .env',
    'uniq -c .env', 'grep -f .env README.md', 'grep --file=.env README.md',
    'rg -f .env README.md', 'grep -e x -- .env', 'rg --files-from=x', 'ls --hyperlink',
    'date --file=.env', 'du --exclude-from=.env', 'sed -n 1p .env', "sed -n '1p;w x' README.md",
    "sed -n $'1p\\nw .git/config' README.md",
]

WRITE_PATHS = ["{repo}/.git/config", "{repo}/./.git//config", "{repo}/notes.txt/../.git/config",
               "{repo}/link.txt", "/proc/self/cwd/.git/config", "~/.bashrc",
               "{repo}/../../.profile", "{repo}/.sandbox/policy.json", "{repo}/.GIT/config",
               "{repo}/src/new.py", "{repo}/keys/authorized_keys", "{home}/.gitconfig",
               "{repo}/.git/hooks/../config", "{repo}/.claude/settings.local.json",
               "{repo}/.git/hooks/post-checkout"]
PATCHES = [
    "*** Begin Patch\n*** Add File: .git/config\n+x\n*** End Patch",
    "*** Begin Patch\n  *** Add File: .git/config\n+x\n*** End Patch",
    "*** Begin Patch\n\t*** Add File: .git/hooks/pre-commit\n+x\n*** End Patch",
    "*** Begin Patch\n\u3000*** Add File: .bashrc\n+x\n*** End Patch",
    "*** Begin Patch\n*** Add File: notes2.txt\n+x\n\x0b*** Add File: .sandbox/x\n+y\n"
    "*** End Patch",
    "*** Begin Patch\n*** Update File: notes.txt\n*** Move to: .git/hooks/pre-commit\n@@\n-notes\n"
    "+x\n*** End Patch",
    "*** Begin Patch\n*** Add File: .git/config\r\n+x\n*** End Patch",
    "*** Begin Patch\n*** Add File: a\u2028/../.git/config\n+x\n*** End Patch",
    "*** Begin Patch\n*** Add File: src/ok.py\n+x\n*** End Patch",
]
URLS = ["https://github.com/x", "http://evil.example\\@github.com/",
        "http://github.com\\@evil.example/",
        "https://github.com@evil.example/", "https:evil.example", "https:\\\\evil.example\\x",
        "http://\uff45\uff56\uff49\uff4c.example/", "http://127.0.0.%31/", "http://git\thub.com/",
        "http://github.com.evil.example/", "HTTPS://GITHUB.COM/", "http://0x7f.1/",
        "http://[::ffff:127.0.0.1]/", "file:///etc/passwd", "http://github.com:443@127.0.0.1/",
        "https://github.com%2f@evil.example/", " https://github.com/", "https://github.com./",
        "http://github.com\n.evil.example/", "https://%67ithub.com/"]
MCP_NAMES = ["mcp__docs__search", "mcp__docs___search", "mcp__docs__x__y", "mcp__github__create",
             "mcp__docs", "mcp__docsx__y", "mcp__docs____"]


def hand_written() -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(class, shape, client, hook input) for every hand-written case."""
    for cls, cmds in BASH_ATTACKS.items():
        for c in cmds:
            yield cls, "bash", "claude", {"tool_name": "Bash", "tool_input": {"command": c}}
            yield cls, "bash", "gemini", {"tool_name": "run_shell_command",
                                          "tool_input": {"command": c}}
            yield cls, "bash", "cursor:before-shell-execution", {"command": c}
    for c in MODEL_ATTACKS:
        yield "attacks on the modelled set", "bash", "claude", {"tool_name": "Bash",
                                                                "tool_input": {"command": c}}
    for p in WRITE_PATHS:
        for tool in ("Write", "Edit", "MultiEdit"):
            yield "file tools", "write", "claude", {"tool_name": tool,
                                                    "tool_input": {"file_path": p}}
        yield "file tools", "write", "gemini", {"tool_name": "write_file",
                                                "tool_input": {"file_path": p}}
    for patch in PATCHES:
        yield "apply_patch", "patch", "claude", {"tool_name": "apply_patch",
                                                 "tool_input": {"input": patch}}
    for u in URLS:
        yield "WebFetch", "fetch", "claude", {"tool_name": "WebFetch",
                                              "tool_input": {"url": u, "prompt": "x"}}
    for m in MCP_NAMES:
        yield "MCP", "mcp", "claude", {"tool_name": m, "tool_input": {}}


CASES = list(hand_written())


@pytest.mark.parametrize("cls,shape,client,data", CASES,
                         ids=[f"{c[0]}:{c[2]}:{i}" for i, c in enumerate(CASES)])
def test_hand_written_allowed_calls_are_contained(cls: str, shape: str, client: str,
                                                  data: dict[str, Any]) -> None:
    if shape == "fetch" and not NODE:
        pytest.skip("needs node for the WHATWG URL parser")
    v, effects = verdict_and_effects(shape, client, data, fresh())
    assert not effects, f"{v.value} but: {effects}"


def test_the_controls_are_allowed_and_run() -> None:
    """The suite is not vacuous: the plain, harmless forms are allowed (and so
    really run and judged)."""
    allowed = 0
    for c in BASH_ATTACKS["plain forms and allowed controls"]:
        v, effects = verdict_and_effects("bash", "claude", {"tool_name": "Bash",
                                                            "tool_input": {"command": c}},
                                         fresh())
        allowed += v is Verdict.ALLOW
        assert not effects
    assert allowed >= 12


@pytest.mark.parametrize("shape,data,judge_name", [
    ("bash", {"command": "echo x >> .git/config"}, "wrote"),
    ("bash", {"command": "mv notes.txt .sandbox/x"}, "wrote"),
    ("bash", {"command": "echo x > /tmp/outside"}, "wrote"),
    ("bash", {"command": "cat ~/.ssh/id_rsa"}, "read"),
    ("bash", {"command": "grep -r TODO ."}, "read"),
    ("bash", {"command": "exec 3<>/dev/tcp/127.0.0.1/80"}, "connected"),
    ("bash", {"command": "python3 -c 1"}, "executed"),
    ("write", {"file_path": "{repo}/.git/hooks/pre-commit"}, "wrote"),
    ("patch", {"input": "*** Begin Patch\n  *** Add File: .bashrc\n+x\n*** End Patch"}, "wrote"),
    ("fetch", {"url": "http://evil.example\\@github.com/"}, "connected"),
    ("mcp", {}, "executed"),
])
def test_each_judge_can_fire(shape: str, data: dict[str, Any], judge_name: str) -> None:
    """Controls: the judges, without the engine, catch a known effect."""
    if shape == "fetch" and not NODE:
        pytest.skip("needs node")
    s = fresh()
    filled = json.loads(json.dumps(data).replace("{repo}", str(s.repo)))
    payload = {"tool_input": filled, "tool_name": "mcp__docs___x"}
    effects = carry_out(s, shape, payload)
    assert any(e.startswith(judge_name) for e in effects), effects


# -- commands generated from a shell grammar ---------------------------------------

NAMES = 3 * ["cat", "ls", "grep", "head", "echo", "cd", "git status", "git log"] + [
         "cat", "ls", "grep", "rg", "find", "head", "wc", "echo", "printf", "git", "sed", "sort",
         "tree", "du", "stat", "diff", "cd", "env", "timeout 5", "command", "cp", "tee", "sh -c",
         "python3 -c", "xargs", "awk", "touch", "true", "test -f"]
WORDS = ["README.md", "notes.txt", "config", "id_rsa", ".env", "src", "main.py", "keys",
         "link.txt", ".git", ".git/config", ".git/hooks/pre-commit", "~/.ssh/id_rsa", "~/.bashrc",
         "~", ".", "..", "../..", "/etc/passwd", ".sandbox/policy.json",
         ".sandbox/audit-keys/audit.ed25519", "TODO", "1,2p", "x", "-r", "-n", "-la", "-R",
         "--pre=cat", "-delete", "-fprint", "-exec", "-o", "-i", "--output=x", "-z", "-c",
         "-name", "'*.py'", "status", "log", "diff", "-5", "--", "+%s", "-e", "-f", "-L"]
TRANSFORMS = 6 * ["{}"] + ["'{}'", '"{}"', "$'{}'", '$"{}"', "{}*", "${{HOME}}/{}", "$(echo {})",
              "\\{}", "{}?"]
TARGETS = ["notes.txt", "out.txt", ".git/config", "config", "~/.bashrc", "/dev/null",
           "/dev/tcp/127.0.0.1/80", ".sandbox/x", "link.txt", "&1", "&2", "keys/x", "-",
           "src/new.txt", "/tmp/x"]
REDIRS = [">", ">>", ">|", ">&", "&>", "&>>", "<", "<>", "2>", "1>&", "<&"]
PREFIXES = 8 * [""] + [ "LANG=C ", "GIT_CONFIG_COUNT=0 ", "http_proxy=x ", "CDPATH=~ ",
            "GIT_EXTERNAL_DIFF=./x ", "TZ=UTC ", "x=1 "]
OPS = 2 * [" ; ", " && "] + [" ; ", " && ", " || ", " | ", " & ", "\n"]

word = st.tuples(st.sampled_from(TRANSFORMS), st.sampled_from(WORDS)).map(
    lambda t: t[0].format(t[1]))
redirect = st.tuples(st.sampled_from(REDIRS), st.sampled_from(TARGETS)).map(
    lambda t: f"{t[0]}{t[1]}" if t[1].startswith("&") else f"{t[0]} {t[1]}")
simple = st.tuples(st.sampled_from(PREFIXES), st.sampled_from(NAMES),
                   st.lists(word, max_size=4), st.lists(redirect, max_size=2)).map(
    lambda t: (t[0] + " ".join([t[1], *t[2], *t[3]])).strip())
group = st.one_of(simple, simple, simple, simple.map(lambda c: f"( {c} )"),
                  simple.map(lambda c: f"echo $({c})"), simple.map(lambda c: f"{{ {c}; }}"))
HEREDOCS = 3 * [""] + [" <<EOF\n$(cat ~/.ssh/id_rsa) TODO\nEOF",
                       " <<'EOF'\n$(cat ~/.ssh/id_rsa) TODO\nEOF", " <<< TODO",
                       " <<-X\n\t`echo x >> .git/config`\n\tX"]
command_lines = st.tuples(
    group, st.lists(st.tuples(st.sampled_from(OPS), group), max_size=3),
    st.sampled_from(HEREDOCS),
).map(lambda t: t[0] + "".join(op + g for op, g in t[1]) + t[2])

# a second grammar close to what the engine allows: modelled commands, their own
# flags and every path of the scratch tree, so that many inputs really run
MODELLED = ["cat", "cat -n", "ls", "ls -la", "ls -R", "grep -n TODO", "grep -rn TODO", "rg TODO",
            "rg -l TODO", "find", "head -n 1", "tail -1", "wc -l", "git status", "git log -1",
            "git diff", "git show", "stat", "du -sh", "sort", "uniq", "nl", "tac", "file",
            "readlink -f", "realpath", "diff README.md", "cmp README.md", "od -c", "echo",
            "printf %s", "basename", "sed -n 1p"]
PATHS = ["README.md", "notes.txt", "src", "src/main.py", ".", "..", "../..", "~", "~/.ssh",
         "keys", "keys/id_rsa", "link.txt", ".git", ".git/config", ".git/hooks", ".env",
         ".sandbox", ".sandbox/audit-keys", "~/.aws/credentials", "/etc/hostname", "src/*",
         "*.md", ".*", "~/.bashrc", "config", "id_rsa", "audit.ed25519", "credentials"]
CDS = 3 * [""] + ["cd src && ", "cd .git && ", "cd ~ && ", "cd keys; ", "cd .sandbox && ",
                  "cd .. && ", "cd ~/.aws; ", "(cd .git); ", "cd src | cat; ", "cd -P keys && "]
OUT = 4 * [""] + [" > notes.txt", " >> out.txt", " > config", " >&2", " 2>/dev/null",
                  " > .git/config", " >&link.txt", " &> ~/.profile", " < .env", " < id_rsa"]
focused = st.tuples(st.sampled_from(CDS), st.sampled_from(MODELLED),
                    st.lists(st.sampled_from(PATHS), max_size=2), st.sampled_from(OUT)).map(
    lambda t: t[0] + " ".join([t[1], *t[2]]) + t[3])

STATS: dict[str, int] = {"generated": 0, "allowed": 0, "violations": 0}


@settings(max_examples=400, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(command=st.one_of(command_lines, focused))
def test_generated_commands_that_are_allowed_are_contained(command: str) -> None:
    STATS["generated"] += 1
    v, effects = verdict_and_effects("bash", "claude", {
        "tool_name": "Bash", "tool_input": {"command": command}}, fresh())
    STATS["allowed"] += v is Verdict.ALLOW
    STATS["violations"] += bool(effects)
    assert not effects, f"allowed {command!r}, but: {effects}"


def test_generated_inputs_reach_the_runner(capsys: pytest.CaptureFixture[str]) -> None:
    """Control for the generator: some generated commands are allowed and run."""
    if STATS["generated"] == 0:
        test_generated_commands_that_are_allowed_are_contained()
    with capsys.disabled():
        print(f"\ngenerated shell commands: {STATS}")
    assert STATS["allowed"] >= 10, STATS
