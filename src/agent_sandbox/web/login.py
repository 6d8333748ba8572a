"""The dashboard's login: a challenge and answer over the token, never the token itself.

A page that held the token and sent it would send it to whatever listens on the port
once the server is gone (a restart, a crash: another local account may bind the port
meanwhile). So the page never sends it. It proves it holds it, and the server proves
it first:

1. ``challenge``: the page sends a nonce of its own and the origin it was loaded from;
   the server answers with a fresh nonce and its proof,
   HMAC-SHA256(token, ``SERVER|origin|server nonce|page nonce``).
2. The page checks that proof (Web Crypto) and only then answers with its own,
   HMAC-SHA256(token, ``CLIENT|origin|server nonce|page nonce``).
3. ``answer``: the proof must be over a nonce this process issued (used once, within
   ``CHALLENGE_TTL``); the server opens a session, a random id held in this process's
   memory only and expiring after ``SESSION_TTL`` (a restart forgets every session),
   which the page sends with each call (``Authorization: Session ID``) and as the
   first message of the WebSocket. When the socket drops, the page logs in again.

A listener that is not the server cannot make the server's proof, so it never gets
the page's, and a session id it catches later died with the server that issued it.
The origin is inside both proofs and must be the server's own (``own_origin``), so a
challenge of another ``sandbox serve`` sharing the token (another port) cannot be
relayed through the squatted port; the two labels keep a server's proof from ever
serving as a page's.

Never keeps the token (``Signer.sign`` only), never accepts a nonce twice, and never
holds more than ``MAX_CHALLENGES`` challenges or ``MAX_SESSIONS`` sessions.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

from .auth import Identity

CLIENT = "agent-sandbox web login client v1"
SERVER = "agent-sandbox web login server v1"
NONCE_PATTERN = r"^[A-Za-z0-9_-]{22,86}$"
PROOF_PATTERN = r"^[0-9a-f]{64}$"
CHALLENGE_TTL = 60.0
SESSION_TTL = 3600.0
MAX_CHALLENGES = 1024
MAX_SESSIONS = 256
SESSION_SCHEME = "session"
T = TypeVar("T")


class Signer(Protocol):
    @property
    def user(self) -> str:
        """The account a valid proof names."""

    def sign(self, message: bytes) -> bytes:
        """HMAC-SHA256 of ``message`` keyed with the token."""


def proof(signer: Signer, label: str, origin: str, server_nonce: str,
          client_nonce: str) -> str:
    """The hex HMAC-SHA256 of ``label|origin|server_nonce|client_nonce`` (pure)."""
    message = "|".join((label, origin, server_nonce, client_nonce)).encode()
    return signer.sign(message).hex()


def own_origin(origin: str, host: str, port: int, tls: bool,
               public_url: str | None = None) -> bool:
    """Whether ``origin`` (``scheme://host:port``, nothing more) is this server's (pure):
    its scheme and port, and its bound host (on loopback also ``localhost`` and
    127.0.0.1; any name when bound to every address), or ``public_url``'s origin."""
    try:
        parts = urlsplit(origin)
        given_port = parts.port
    except ValueError:
        return False
    if origin != f"{parts.scheme}://{parts.netloc}" or not parts.hostname:
        return False
    if public_url:
        pub = urlsplit(public_url)
        if origin == f"{pub.scheme}://{pub.netloc}":
            return True
    scheme = "https" if tls else "http"
    if parts.scheme != scheme or (given_port or (443 if tls else 80)) != port:
        return False
    name = parts.hostname
    try:
        bound = ipaddress.ip_address(host)
    except ValueError:
        return name == host.lower() or (host == "localhost" and name == "127.0.0.1")
    if bound.is_unspecified:
        return True
    if bound.is_loopback:
        return name in (str(bound), "localhost")
    return name == str(bound)


@dataclass(frozen=True)
class Challenge:
    origin: str
    client_nonce: str
    expires: float


class Login:
    """The challenges handed out and the sessions opened, in memory only."""

    def __init__(self, signer: Signer, is_own: Callable[[str], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._signer = signer
        self._is_own = is_own
        self._clock = clock
        self._lock = threading.Lock()
        self._challenges: dict[str, Challenge] = {}
        self._sessions: dict[str, float] = {}

    def challenge(self, origin: str, client_nonce: str) -> tuple[str, str] | None:
        """A fresh server nonce and the server's proof over it, or None when ``origin``
        is not this server's."""
        if not self._is_own(origin):
            return None
        nonce = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            _expire(self._challenges, now, lambda c: c.expires)
            while len(self._challenges) >= MAX_CHALLENGES:  # the oldest go first
                del self._challenges[next(iter(self._challenges))]
            self._challenges[nonce] = Challenge(origin, client_nonce, now + CHALLENGE_TTL)
        return nonce, proof(self._signer, SERVER, origin, nonce, client_nonce)

    def answer(self, server_nonce: str, client_proof: str) -> str | None:
        """A new session id for a right proof over a live challenge (used up either
        way), or None."""
        now = self._clock()
        with self._lock:
            ch = self._challenges.pop(server_nonce, None)
        if ch is None or ch.expires < now:
            return None
        expected = proof(self._signer, CLIENT, ch.origin, server_nonce, ch.client_nonce)
        if not hmac.compare_digest(expected, client_proof):
            return None
        sid = secrets.token_urlsafe(32)
        with self._lock:
            _expire(self._sessions, now, lambda e: e)
            while len(self._sessions) >= MAX_SESSIONS:
                del self._sessions[next(iter(self._sessions))]
            self._sessions[sid] = now + SESSION_TTL
        return sid

    def identify(self, sid: str) -> Identity | None:
        """Who an open session is, or None (unknown, expired, or of another process)."""
        if not sid:
            return None
        with self._lock:
            expires = self._sessions.get(sid)
        if expires is None or expires < self._clock():
            return None
        return Identity(self._signer.user, "session")


def _expire(table: dict[str, T], now: float, when: Callable[[T], float]) -> None:
    for key in [k for k, v in table.items() if when(v) < now]:
        del table[key]


def from_session_header(value: str | None) -> str | None:
    """The id of an ``Authorization: Session ID`` header, or None (pure)."""
    if not value:
        return None
    scheme, _, sid = value.strip().partition(" ")
    sid = sid.strip()
    if scheme.lower() != SESSION_SCHEME or not sid or " " in sid:
        return None
    return sid
