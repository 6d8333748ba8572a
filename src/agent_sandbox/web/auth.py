"""Who may use ``sandbox serve``: the holder of the approvers' bearer token.

The token lives in a file only the approver account can read (``contract.web_dir``:
the user's state folder, never a repository; hidden in every sandbox by
``contract.private_paths``), created on first start (mode 0600, in a 0700 folder) and
read again on every start. Every endpoint, the WebSocket included, asks ``Bearer``
(any object with ``identify``) who a presented token names; the file token is one such
check, and a verifier of OIDC access tokens would be another behind the same call. The
dashboard never sends the token: it proves it holds it (``login``), and the file token
answers with ``sign``, so the secret never leaves this object.

``rotate`` writes a new token into the existing folder (a new file renamed over the old
one): the folder itself is never removed or made again, because every running sandbox
hides it with a mount on that very folder, and a new folder in its place would be
visible to them. Every refusal says how to repair in place (chmod, chown, rotate).

Never accepts a token from a file that others can read or that is not the account's
own, never compares in a way that leaks timing, never logs a token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from dataclasses import dataclass
from typing import Protocol

from agent_sandbox.errors import SandboxError

TOKEN_NAME = "token"  # noqa: S105 (the file name, not a secret)
TOKEN_BYTES = 32
SCHEME = "bearer"


class AuthError(SandboxError):
    """The token file cannot be trusted or made; the message says why."""


@dataclass(frozen=True)
class Identity:
    """Who a valid token names: the approver account recorded with each decision,
    and how it was shown (``token-file``; an OIDC check would say ``oidc``)."""

    user: str
    method: str


class Bearer(Protocol):
    def identify(self, token: str) -> Identity | None:
        """The identity ``token`` proves, or None."""


def token_path(home: str) -> str:
    from agent_sandbox.contract import web_dir

    return os.path.join(web_dir(home), TOKEN_NAME)


def _check_private(path: str, st: os.stat_result, kind: str) -> None:
    mode = "0700" if kind == "folder" else "0600"
    if st.st_uid != os.geteuid():
        raise AuthError(f"{path} belongs to uid {st.st_uid}, not to this account "
                        f"({os.geteuid()}): refusing it as the approvers' {kind}; give it "
                        f"back with `chown {os.geteuid()} {path}` and `chmod {mode} {path}` "
                        "(never remove the folder: running sandboxes hide it where it is)")
    if st.st_mode & 0o077:
        raise AuthError(f"{path} is readable or writable by others (mode "
                        f"{stat.S_IMODE(st.st_mode):04o}): `chmod {mode} {path}`, then "
                        "`sandbox serve --rotate-token` (whoever could read it may hold the "
                        "token); never remove the folder: running sandboxes hide it where "
                        "it is")


def _private_folder(folder: str) -> None:
    """Make the token's folder when there is none (0700) and check it; never remove it."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    st = os.lstat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise AuthError(f"{folder} is not a folder (a link or a file stands there): move it "
                        "aside and start again, then restart running sandboxes so they hide "
                        "the new folder")
    _check_private(folder, st, "folder")


def load_or_create(path: str) -> str:
    """The token in ``path``, created (0600, exclusively) when there is none."""
    _private_folder(os.path.dirname(path))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW,
                     0o600)
    except FileExistsError:
        pass
    else:
        try:
            os.write(fd, (secrets.token_urlsafe(TOKEN_BYTES) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as exc:
        raise AuthError(f"cannot read {path}: {exc.strerror} (`sandbox serve --rotate-token` "
                        "writes a new one in place)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AuthError(f"{path} is not a regular file: `sandbox serve --rotate-token` "
                            "writes a new one in its place")
        _check_private(path, st, "token")
        token = os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if len(token) < 32 or not all(c.isalnum() or c in "-_" for c in token):
        raise AuthError(f"{path} does not hold a token: `sandbox serve --rotate-token` "
                        "writes a new one in place")
    return token


def rotate(path: str) -> None:
    """Replace the token in ``path`` by a new one, atomically: a new 0600 file in the same
    folder, renamed over the old (a reader sees the old token or the new, whole). The
    folder is checked and kept, never removed or made again."""
    folder = os.path.dirname(path)
    _private_folder(folder)
    from agent_sandbox.atomic_file import replace_file

    try:
        replace_file(path, (secrets.token_urlsafe(TOKEN_BYTES) + "\n").encode(), 0o600,
                     sync=True)
    except OSError as exc:
        raise AuthError(f"cannot write a new token in {folder}: {exc.strerror}") from None


class FileToken:
    """The token file's check: one secret, naming the account that serves."""

    def __init__(self, token: str, user: str) -> None:
        self._token = token.encode()
        self._user = user

    def identify(self, token: str) -> Identity | None:
        given = token.encode("utf-8", "replace")
        if not given or not hmac.compare_digest(given, self._token):
            return None
        return Identity(self._user, "token-file")

    @property
    def user(self) -> str:
        return self._user

    def sign(self, message: bytes) -> bytes:
        """HMAC-SHA256 of ``message`` keyed with the token (the login's proofs)."""
        return hmac.new(self._token, message, hashlib.sha256).digest()


def from_header(value: str | None) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, or None (pure)."""
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != SCHEME or not token or " " in token:
        return None
    return token
