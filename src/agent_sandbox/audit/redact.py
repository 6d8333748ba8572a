"""Redaction of secrets before anything reaches the audit log.

Walks nested dicts, lists and tuples and returns a redacted copy: values under
keys named like credentials (``password``, ``api_key``, ``GITHUB_TOKEN`` ...),
and substrings that look like secrets anywhere in text (JWTs, bearer tokens,
provider API keys, PEM private keys, ``NAME=value`` assignments of secret-named
variables, passwords in URLs and ``--token``-style options). Dict keys are
scanned like text too.

Pure and stdlib-only (imported on the hook's hot path). It errs towards
redacting too much: it must never return a secret it was given.
"""

from __future__ import annotations

import re
from functools import lru_cache

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

MARK = "[REDACTED]"


class _Lazy:
    """A regular expression compiled on first use: compiling all of them costs
    the hook ~30 ms, and most records (an allowed ``ls``) never need one."""

    __slots__ = ("_args", "_rx")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._rx: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> Any:
        rx = self._rx
        if rx is None:
            rx = self._rx = re.compile(*self._args)
        return getattr(rx, name)

# Names of fields / environment variables whose values are always secret.
_SECRET_NAME = _Lazy(
    r"(?i)(?:^|[_\-.])(?:"
    r"pass(?:word|wd|phrase)?|pwd|secret|token|api[_\-.]?key|apikey|access[_\-.]?key|"
    r"private[_\-.]?key|secret[_\-.]?key|signing[_\-.]?key|client[_\-.]?secret|credentials?|"
    r"auth(?:orization)?|cookie|set[_\-.]?cookie|session[_\-.]?(?:key|token|secret)|"
    r"bearer|jwt|otp|pin|(?:ssh|gpg|pgp)[_\-.]?key|key[_\-.]?material|x[_\-.]?api[_\-.]?key"
    r")(?:$|[_\-.])"
)
_SECRET_NAME_SUFFIX = _Lazy(
    r"(?i)(?:_|-|^)(?:token|secret|password|passwd|pass|pwd|key|apikey|credentials?|auth)$"
)
# Names that contain a secret word but name public data.
_PUBLIC_NAME = _Lazy(
    r"(?i)^(?:token_count|tokens|max_tokens|input_tokens|output_tokens|key_id|keyid|"
    r"public_key|pubkey|key_name|auth_method|password_policy|secret_name|token_type|"
    r"credential_id|credential_name|credential_ttl|credential_kind|pwd_dir|pwd|oldpwd|"
    r"author|authors|key_count|keys)$"
)

_VALUE_PATTERNS: tuple[tuple[str, str], ...] = (
    # PEM private keys (any flavour), possibly truncated.
    (
        "private_key",
        r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z0-9 ]*PRIVATE KEY-----|$)",
    ),
    # JSON Web Tokens / JWS compact form.
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}"),
    # Authorization header values.
    ("bearer", r"\b(?i:bearer|basic|token)\s+[A-Za-z0-9_\-.~+/]{8,}=*"),
    # Provider keys and tokens.
    ("github", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("gitlab", r"\bglpat-[A-Za-z0-9_\-]{20,}"),
    ("aws_access_key", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),
    ("openai_anthropic", r"\bsk-(?:ant-|proj-|live-)?[A-Za-z0-9_\-]{16,}"),
    ("stripe", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("slack", r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("google_api", r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("vault", r"\b(?:hv[sbr]|s|b|r)\.[A-Za-z0-9_\-]{24,}"),
    ("npm", r"\bnpm_[A-Za-z0-9]{36}\b"),
    ("pypi", r"\bpypi-[A-Za-z0-9_\-]{50,}"),
    ("hf", r"\bhf_[A-Za-z0-9]{30,}"),
    # user:password@ in URLs; the password may itself hold "@" (and ":"), so it
    # runs to the last "@" of the authority.
    ("url_password", r"(?<=://)[^\s/?#:@]*:[^\s/?#]*(?=@[^\s/?#@]*(?:[/?#\s\"']|$))"),
)
_VALUE_RE = _Lazy("|".join(f"(?:{p})" for _, p in _VALUE_PATTERNS))

# NAME=value / NAME: value / --name value where NAME is secret-like.
_ASSIGN_RE = _Lazy(
    r"(?i)(?P<name>\b[A-Za-z0-9_\-]*?"
    r"(?:pass(?:word|wd)?|secret|token|api[_\-]?key|apikey|access[_\-]?key|private[_\-]?key|"
    r"credentials?|auth|(?<=[A-Za-z0-9])_(?:pwd|key))\b[A-Za-z0-9_]*[\"']?)"
    r"(?P<sep>\s*[=:]\s*|\s+)"
    r"(?P<q>[\"']?)(?P<value>[^\s\"'&;|]+)"
)
_OPTION_RE = _Lazy(
    r"(?i)(?P<name>--?[A-Za-z0-9\-]*(?:password|passwd|secret|token|api-?key|access-?key|auth)"
    r"[A-Za-z0-9\-]*)(?P<sep>=|\s+)(?P<q>[\"']?)(?P<value>[^\s\"']+)"
)
# curl/wget/httpie style credentials: -u user:pass, --user=user:pass, --proxy-user.
_USERPASS_RE = _Lazy(
    r"(?P<name>(?<![\w-])(?:-u|-U|--user|--proxy-user|--http-user|--auth))"
    r"(?P<sep>=|\s+|(?=[^\s-]))(?P<q>[\"']?)(?P<user>[^\s:\"']*):(?P<value>[^\s\"']+)"
)
# MySQL-family clients take the password glued to -p (-pSECRET); sshpass -p SECRET.
_GLUED_P_RE = _Lazy(
    r"(?P<cmd>\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mysqlpump|"
    r"mariadb|mariadb-dump|mariadb-admin|7z|7za|7zr)\b[^|;&\n]*?\s)-p(?P<q>[\"']?)"
    r"(?P<value>[^\s\"';|&]+)"
)
_SSHPASS_RE = _Lazy(r"(?P<cmd>\bsshpass\s+-p)(?P<sep>\s*)(?P<value>[^\s\"';|&]+)")
# Clients that take a secret as the value of an option whose name says nothing of
# it: program (as the command names it) -> those options. The value is the next
# word or follows ``=``; both are redacted, with whatever the program glues to it
# (``openssl -passin pass:X``, ``curl -E cert.pem:X``).
OPTION_TABLE: dict[str, tuple[str, ...]] = {
    "redis-cli": ("-a", "--pass", "--askpass-value"),
    "valkey-cli": ("-a", "--pass"),
    "mongosh": ("-p", "--password"),
    "mongo": ("-p", "--password"),
    "mongodump": ("-p", "--password"),
    "mongorestore": ("-p", "--password"),
    "mysql": ("--password", "--pass"),
    "psql": ("--password-value",),
    "curl": ("--pass", "-E", "--cert", "--proxy-pass", "--proxy-cert", "--oauth2-bearer",
             "--aws-sigv4-secret"),
    "wget": ("--password", "--http-password", "--ftp-password", "--proxy-password"),
    "ssh-keygen": ("-N", "-P"),
    "openssl": ("-passin", "-passout", "-pass", "-k", "-K", "-password"),
    "docker login": ("-p", "--password"),
    "podman login": ("-p", "--password"),
    "nerdctl login": ("-p", "--password"),
    "helm registry login": ("--password",),
    "helm repo add": ("--password",),
    "htpasswd": (),  # the password is the last word with -b (``HTPASSWD_RE``)
    "gpg": ("--passphrase",),
    "ldapsearch": ("-w",), "ldapmodify": ("-w",), "ldapadd": ("-w",), "ldapdelete": ("-w",),
    "ldapwhoami": ("-w",), "ldappasswd": ("-w", "-s"),
    "smbclient": ("-U", "--user", "--password"),  # -U user%password
    "zip": ("-P", "--password"), "unzip": ("-P",),
    "az login": ("-p", "--password"),
}
def _table_re(program: str, options: tuple[str, ...]) -> _Lazy:
    """Each of ``options`` of one client of ``OPTION_TABLE`` with its value."""
    return _Lazy(
        r"(?P<cmd>(?<![\w.-])" + re.escape(program).replace(r"\ ", r"\s+") + r"\b"
        r"[^|;&\n]*?\s(?:" + "|".join(re.escape(o) for o in sorted(options, key=len,
                                                                       reverse=True))
        + r"))(?P<sep>=|\s+)(?P<q>[\"']?)(?!\[REDACTED)(?P<value>[^\s\"';|&]+)")


_TABLE_RES = tuple((p.split()[0], _table_re(p, o)) for p, o in OPTION_TABLE.items() if o)
_HTPASSWD_RE = _Lazy(
    r"(?P<cmd>(?<![\w.-])htpasswd\b(?=[^|;&\n]*\s-[A-Za-z]*b)[^|;&\n]*\s)"
    r"(?P<q>[\"']?)(?P<value>[^\s\"';|&]+)[\"']?\s*(?=$|[|;&\n])"
)
# The gate before any expression runs: every text one of them could change
# contains one of these (lower-cased) substrings. Plain substring tests, no
# compiling; a superset, so it only ever lets more text through to the checks.
_TRIGGERS = (
    "pass", "pwd", "secret", "token", "key", "auth", "cred", "eyj", "bearer", "basic",
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat", "glpat", "akia", "asia", "agpa", "aida",
    "aroa", "anpa", "anva", "aipa", "sk-", "sk_",
    "rk_", "pk_", "xox", "aiza", "hvs.", "hvb.", "hvr.", "s.", "b.", "r.", "npm_", "pypi-",
    "hf_", "@", "-----begin", "-u", "--user", "--proxy-user", "mysql", "mariadb", "sshpass",
    "redis", "valkey", "mongo", "curl", "wget", "ssh-keygen", "openssl", "docker", "podman",
    "nerdctl", "helm", "gpg", "ldap", "smbclient", "zip", "7z", "az",
)


def _may_hold_secret(text: str) -> bool:
    low = text.lower()
    return any(t in low for t in _TRIGGERS)


_CAMEL = _Lazy(r"([a-z0-9])([A-Z])")


# Field names the project's own records use that are never secret (skips the
# name expressions on the hook's path; their values are still scanned).
_PLAIN_FIELDS = frozenset({
    "event", "tool", "agent", "summary", "session", "session_id", "tool_use_id", "verdict",
    "request_id", "reasons", "risk", "mode", "wait", "cwd", "status", "exit_code",
    "duration_ms", "remembered", "by", "uid", "always", "scope", "request_hash", "reason",
    "command", "used", "ok", "kind", "id", "repo",
})


@lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """True when a field or variable called ``name`` holds a secret value."""
    if name in _PLAIN_FIELDS:
        return False
    if _PUBLIC_NAME.match(name):
        return False
    snake = _CAMEL.sub(r"\1_\2", name)
    return bool(_SECRET_NAME.search(snake) or _SECRET_NAME_SUFFIX.search(snake))


_OPTION_NAME = _Lazy(r"^--?[A-Za-z][A-Za-z0-9_\-]*$")


def _is_secret_option(arg: str) -> bool:
    """``--api-token`` style argv items whose next item is the secret."""
    return bool(_OPTION_NAME.match(arg)) and is_secret_name(arg.lstrip("-"))


def _assign_sub(m: re.Match[str]) -> str:
    name = m.group("name")
    value = m.group("value")
    if value == MARK or value.startswith("[REDACTED"):
        return m.group(0)
    if m.group("sep").strip() == "" and not name.startswith("-"):
        # "token abc" prose: only redact if the value looks like a credential.
        if len(value) < 16 or not re.search(r"\d", value):
            return m.group(0)
    return f"{name}{m.group('sep')}{m.group('q')}{MARK}"


def _userpass_sub(m: re.Match[str]) -> str:
    if m.group("value").startswith("[REDACTED"):
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{m.group('q')}{m.group('user')}:{MARK}"


def _table_sub(text: str) -> str:
    """``OPTION_TABLE``: each secret option of a listed client, as often as it occurs
    (an expression finds one per pass: options of one command overlap)."""
    for program, rx in _TABLE_RES:
        if program not in text:
            continue
        for _ in range(16):
            done = rx.sub(_table_one, text)
            if done == text:
                break
            text = done
    return text


def _table_one(m: re.Match[str]) -> str:
    if m.group("value").startswith("[REDACTED"):
        return m.group(0)
    return f"{m.group('cmd')}{m.group('sep')}{m.group('q')}{MARK}"


def redact_text(text: str) -> str:
    """Replace every secret-looking substring of ``text`` with the redaction mark."""
    if len(text) <= 128:
        return _redact_short(text)
    return _redact_text(text)


@lru_cache(maxsize=8192)
def _redact_short(text: str) -> str:
    return _redact_text(text)


def _redact_text(text: str) -> str:
    if not _may_hold_secret(text):
        return text
    text = _VALUE_RE.sub(MARK, text)
    text = _USERPASS_RE.sub(_userpass_sub, text)
    text = _GLUED_P_RE.sub(lambda m: f"{m.group('cmd')}-p{m.group('q')}{MARK}", text)
    text = _SSHPASS_RE.sub(lambda m: f"{m.group('cmd')}{m.group('sep')}{MARK}", text)
    text = _table_sub(text)
    text = _HTPASSWD_RE.sub(lambda m: f"{m.group('cmd')}{m.group('q')}{MARK}", text)
    text = _OPTION_RE.sub(_assign_sub, text)
    out: str = _ASSIGN_RE.sub(_assign_sub, text)
    return out


@lru_cache(maxsize=4096)
def _key_info(key: str) -> tuple[str, bool]:
    return redact_text(key), is_secret_name(key)


def redact(value: Any, *, _depth: int = 0) -> Any:
    """A redacted deep copy of ``value`` (dicts, lists, tuples, strings, scalars)."""
    if _depth > 64:
        return MARK  # pathological nesting: refuse to look further, keep nothing
    tv = type(value)
    if tv is str:
        return _redact_short(value) if len(value) <= 128 else _redact_text(value)
    if tv is dict or isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            rkey, secret = _key_info(k if type(k) is str else str(k))
            tvv = type(v)
            if secret and v is not None and v != "" and tvv is not bool:
                out[rkey] = MARK
            elif tvv is str:
                out[rkey] = _redact_short(v) if len(v) <= 128 else _redact_text(v)
            elif tvv is int or tvv is float or tvv is bool or v is None:
                out[rkey] = v
            else:
                out[rkey] = redact(v, _depth=_depth + 1)
        return out
    if isinstance(value, list | tuple):
        items: list[Any] = []
        secret_next = False
        for v in value:
            if secret_next and isinstance(v, str) and v:
                items.append(MARK)
                secret_next = False
                continue
            secret_next = isinstance(v, str) and _is_secret_option(v)
            items.append(redact(v, _depth=_depth + 1))
        return items
    if isinstance(value, str):
        return redact_text(str(value))
    if isinstance(value, bytes | bytearray):
        return redact_text(bytes(value).decode("utf-8", "replace"))
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_text(str(value))
