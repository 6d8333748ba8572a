"""Secrets are redacted before anything is written: none reaches the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_sandbox.audit import AuditLog
from agent_sandbox.audit.redact import MARK, is_secret_name, redact, redact_text

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
SECRETS = {
    "gh": "ghp_Zq8d7Yw2Lm4Np6Rt1Vx3Bc5Df7Gh9Jk1Mn3P",
    "aws_id": "AKIAIOSFODNN7EXAMPLE",
    "aws_secret": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "anthropic": "sk-ant-api03-Qw3rTy8uIo9pAs0dFg1hJk2lZx3cVb4nM5",
    "slack": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "vault": "hvs.CAESIJq8d7Yw2Lm4Np6Rt1Vx3Bc5Df7Gh9Jk1Mn3PqRs",
    "pw": "correct-horse-battery-staple",
    "url_pw": "s3cr3tP4ss",
    "bearer": "AbCdEf0123456789xyz",
    "cookie": "sessionid=abc123def456",
    "nested_env": "n3st3d-v4lu3-very-private",
    "opt": "opt-t0k3n-v4lue-9988",
    "google": "AIzaSyDdI0hCZtE6vySjMm-WEfRq3CPzqKqqsHI",
}


def event_with_secrets() -> dict[str, object]:
    s = SECRETS
    return {
        "request_id": "req-1",
        "session_id": "7f0c2b1e-2f6a-4c1b-9d3e-1a2b3c4d5e6f",
        "cwd": "/home/dev/repo",
        "env": {
            "GITHUB_TOKEN": s["gh"],
            "AWS_ACCESS_KEY_ID": s["aws_id"],
            "AWS_SECRET_ACCESS_KEY": s["aws_secret"],
            "PATH": "/usr/bin:/bin",
            "PWD": "/home/dev/repo",
        },
        "command": f"curl -H 'Authorization: Bearer {s['bearer']}' https://user:{s['url_pw']}@example.com/x",
        "argv": ["deploy", "--api-token", s["opt"], f"--password={s['pw']}"],
        "tool_input": {
            "headers": [{"name": "Cookie", "value": "x"}, {"Cookie": s["cookie"]}],
            "config": {"deep": {"deeper": {"clientSecret": s["nested_env"]}}},
            "text": f"here is a jwt {JWT} and a key {PEM} and {s['anthropic']}",
        },
        "output": f"export SLACK_TOKEN={s['slack']}\nVAULT_TOKEN={s['vault']} key={s['google']}",
        ("tuple",): None,
    }


def test_no_secret_reaches_the_file(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit", sync="none", checkpoint_every=None, checkpoint_interval=None)
    fields = event_with_secrets()
    fields.pop(("tuple",))
    rec = log.append("tool_result", **fields)
    raw = (tmp_path / "audit" / "audit.jsonl").read_bytes()
    for name, secret in [*SECRETS.items(), ("jwt", JWT), ("pem", "b3BlbnNzaC1rZXktdjEAAAAABG5v")]:
        assert secret.encode() not in raw, name
        assert secret not in str(rec), name
    # public context survives for correlation
    assert b"7f0c2b1e-2f6a-4c1b-9d3e-1a2b3c4d5e6f" in raw
    assert b"/usr/bin:/bin" in raw and b'"PWD":"/home/dev/repo"' in raw
    assert raw.count(MARK.encode()) >= len(SECRETS)


def test_redaction_is_recursive_and_keeps_structure() -> None:
    out = redact({"a": [{"b": ({"token": "x" * 30},)}], "n": 3, "ok": True, "none": None})
    assert out == {"a": [{"b": [{"token": MARK}]}], "n": 3, "ok": True, "none": None}


def test_secret_names() -> None:
    for name in ["password", "DB_PASSWORD", "api_key", "apiKey", "GITHUB_TOKEN", "client_secret",
                 "Authorization", "private_key", "AWS_SECRET_ACCESS_KEY", "x-api-key", "cookie"]:
        assert is_secret_name(name), name
    for name in ["PATH", "PWD", "cwd", "session_id", "request_id", "max_tokens", "public_key",
                 "author", "verdict", "tool", "keyboard", "monkey"]:
        assert not is_secret_name(name), name


def test_plain_text_is_left_alone() -> None:
    text = "git commit -m 'fix the token parser' && ls -la /home/dev"
    assert redact_text(text) == text


def test_secrets_anywhere_in_nested_data_never_survive() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from agent_sandbox.audit.canonical import canonical

    token = st.sampled_from([
        "ghp_" + "A1b2C3d4E5" * 4, "AKIA" + "ABCDEFGHIJ234567", "xoxb-" + "1234567890-abcdef",
        "sk-ant-" + "q" * 30, JWT, "hvs." + "x" * 30,
    ])
    words = st.text(alphabet="abcdefgh _-/.", max_size=12)
    leaf = st.one_of(words, st.integers(), st.none(), st.booleans(),
                     st.tuples(words, token, words).map(lambda t: f"{t[0]} {t[1]} {t[2]}"))
    tree = st.recursive(leaf, lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(words, kids, max_size=4)), max_leaves=12)

    @settings(max_examples=100, deadline=None)
    @given(tree, st.lists(token, min_size=1, max_size=3))
    def check(data: object, extra: list[str]) -> None:
        wrapped = {"data": data, "env": {f"X_{i}_TOKEN": t for i, t in enumerate(extra)}}
        out = canonical(redact(wrapped)).decode()
        for t in [*extra, "A1b2C3d4E5" * 4, "ABCDEFGHIJ234567", "1234567890-abcdef", "q" * 30,
                  JWT, "x" * 30]:
            assert t not in out

    check()


def test_credentials_in_command_lines_are_redacted() -> None:
    cases = {
        "curl -u alice:Sw0rdf1sh https://api.example/x": "Sw0rdf1sh",
        "curl --user=alice:pa:ss:w0rd https://api.example/x": "pa:ss:w0rd",
        "curl -ualice:GluedPw9 https://api.example/x": "GluedPw9",
        "curl --proxy-user bob:Pr0xyPw https://api.example/x": "Pr0xyPw",
        "mysql -h db -u root -pMyS3cret mydb": "MyS3cret",
        "mysqldump -pDump5ecret shop > shop.sql": "Dump5ecret",
        "sshpass -p hunter22 ssh host": "hunter22",
        "git clone https://bob:p@ss@w0rd@github.com/x/y.git": "ss@w0rd",
        "git push https://bob:a:b@c@github.com/x/y.git main": "a:b@c",
    }
    for text, secret in cases.items():
        out = redact_text(text)
        assert secret not in out and MARK in out, (text, out)
    assert "github.com/x/y.git" in redact_text("git clone https://bob:p@ss@github.com/x/y.git")
    for plain in ("sort -u names.txt", "mkdir -p a/b", "git add -u", "ps -u root",
                  "curl -u alice https://x", "mysql -u root mydb", "scp a:b c"):
        assert redact_text(plain) == plain                          # controls


# one form per client of ``OPTION_TABLE``: the secret, and what must stay
TABLE_CASES = {
    "gpg --batch --passphrase Gp9Phrase -d f.gpg": ("Gp9Phrase", "-d f.gpg"),
    "ldapsearch -x -w Ld4pPw -b dc=x": ("Ld4pPw", "-b dc=x"),
    "ldappasswd -w Ld4pPw2 -s N3wPw uid=x": ("N3wPw", "uid=x"),
    "smbclient //h/s -U alice%Smb9Pw -c ls": ("Smb9Pw", "-c ls"),
    "zip -P Z1pPw out.zip f": ("Z1pPw", "out.zip f"),
    "unzip -P Z1pPw2 out.zip": ("Z1pPw2", "out.zip"),
    "az login -u me -p Az9Pw": ("Az9Pw", "az login -u me"),
    "redis-cli -a R3disPw -h cache ping": ("R3disPw", "-h cache ping"),
    "redis-cli --pass R3disPw2 ping": ("R3disPw2", "ping"),
    "redis-cli -h cache --pass=R3disPw3 ping": ("R3disPw3", "-h cache"),
    "valkey-cli -a Va1keyPw get k": ("Va1keyPw", "get k"),
    "mongosh -u admin -p M0ngoPw --authenticationDatabase admin": ("M0ngoPw", "-u admin"),
    "mongodump --password=Dump3dPw --out /tmp/d": ("Dump3dPw", "--out /tmp/d"),
    "mysql --pass Mysq1Pw db": ("Mysq1Pw", "db"),
    "psql 'host=db user=app password=PgS3cret dbname=x'": ("PgS3cret", "dbname=x"),
    "PGPASSWORD=PgEnvPw psql -h db": ("PgEnvPw", "psql -h db"),
    "curl --pass KeyPhr4se --key k.pem https://x": ("KeyPhr4se", "https://x"),
    "curl -E client.pem:C3rtPw https://x": ("C3rtPw", "https://x"),
    "curl --oauth2-bearer OauthT0k https://x": ("OauthT0k", "https://x"),
    "wget --user=bob --password=Wg3tPw https://x/f": ("Wg3tPw", "https://x/f"),
    "wget --ftp-password Ftp9Pw ftp://x/f": ("Ftp9Pw", "ftp://x/f"),
    "ssh-keygen -t ed25519 -N N3wPhrase -f k": ("N3wPhrase", "-f k"),
    "ssh-keygen -p -P 0ldPhrase -N N3wPhr2 -f k": ("0ldPhrase", "-f k"),
    "openssl rsa -in k.pem -passin pass:Ss1Pass -out k2.pem": ("Ss1Pass", "-out k2.pem"),
    "openssl pkcs12 -export -passout pass:P12Pw -out a.p12": ("P12Pw", "-out a.p12"),
    "openssl enc -aes-256-cbc -k EncK3y -in f": ("EncK3y", "-in f"),
    "htpasswd -b .htpasswd alice HtP4ss": ("HtP4ss", ".htpasswd alice"),
    "htpasswd -nb alice HtP4ss2": ("HtP4ss2", "-nb alice"),
    "docker login -u bob -p D0ckerPw registry.example": ("D0ckerPw", "registry.example"),
    "podman login --password P0dPw quay.io": ("P0dPw", "quay.io"),
    "helm registry login r.example --password H3lmPw": ("H3lmPw", "r.example"),
    "printf 'protocol=https\nhost=x\nusername=bob\npassword=GitCr3d\n' | git credential "
    "approve": ("GitCr3d", "git credential approve"),
}


@pytest.mark.parametrize("text", TABLE_CASES)
def test_clients_that_take_secrets_as_options(text: str) -> None:
    secret, kept = TABLE_CASES[text]
    out = redact_text(text)
    assert secret not in out and MARK in out, out
    assert kept in out, out  # only the secret goes
    assert secret not in json.dumps(redact({"command": text, "nested": [{"argv": text}]}))


def test_the_option_table_leaves_other_options_alone() -> None:
    for plain in ("redis-cli -h cache ping", "mongosh --host db", "curl -s https://x",
                  "ssh-keygen -t ed25519 -f k",
                  "openssl x509 -in c.pem -noout", "docker run -p 80:80 img",
                  "htpasswd -c .htpasswd alice", "wget https://x/f"):
        assert redact_text(plain) == plain, plain


def test_the_queues_records_are_redacted(tmp_path: Path) -> None:
    from agent_sandbox.queue import FolderQueue

    q = FolderQueue(str(tmp_path / "escalations"))
    q.ensure()
    cmd = "curl -u alice:Sw0rdf1sh https://api.example/deploy"
    req = q.submit({"tool": "Bash", "params": {"command": cmd}, "cwd": "/r", "kind": "bash",
                    "summary": cmd, "mode": "run"})
    q.decide(req["id"], "approve", by="alice")
    q.execute(req["id"], lambda r: {"status": "completed", "exit_code": 0,
                                     "stdout": "token=ghp_Zq8d7Yw2Lm4Np6Rt1Vx3Bc5Df7Gh9Jk1Mn3P",
                                     "stderr": ""})
    for path in tmp_path.rglob("*.json"):
        body = path.read_text()
        assert "Sw0rdf1sh" not in body and "ghp_Zq8d7" not in body, path
    assert q.result(req["id"])["request"]["hash"] == req["hash"]


@pytest.mark.parametrize(("text", "secret"), [
    ("mysql -u root -p'My9Pw' db", "My9Pw"), ('mysql -p"My9Pw2" db', "My9Pw2"),
    ("7z a -p7zPw9 out.7z f", "7zPw9"), ("DB_PWD=Db9Pw run", "Db9Pw"),
    ("ENCRYPTION_KEY=Enc9Key run", "Enc9Key"), ("export APP_SIGNING_KEY=Sig9 x", "Sig9"),
])
def test_glued_and_named_secrets_are_redacted(text: str, secret: str) -> None:
    out = redact_text(text)
    assert secret not in out and MARK in out, out


@pytest.mark.parametrize("plain", ["PWD=/home/x ls", "monkey=1", "keyboard=us", "cd /tmp",
                                   "zip -r out.zip src", "gpg --list-keys"])
def test_look_alikes_stay(plain: str) -> None:
    assert redact_text(plain) == plain
