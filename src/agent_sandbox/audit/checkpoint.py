"""Signed checkpoints of the audit chain in the C2SP tlog-checkpoint format.

A checkpoint is a signed note (c2sp.org/signed-note) whose text is::

    <origin>
    <number of records>
    <base64 of the chain hash after that record>

followed by a blank line and ``— <key name> base64(key ID || Ed25519 signature)``.
The log is a hash chain rather than an RFC 6962 Merkle tree, so the third line
carries the chain head ``h_N``; the layout, key IDs and signature lines follow
the specifications exactly, so standard note tooling can check the signatures.

Checkpoints live apart from the log (``<log dir>/checkpoints/``) and may be sent
to a remote sink (a callable, or an http(s) URL that receives a POST). The
private key lives apart from both (``<log dir>/../audit-keys/`` by default,
mode 0600). This module never writes to the log and never accepts a note whose
signature it has not verified with a trusted key.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_sandbox.atomic_file import create_once, replace_file
from agent_sandbox.errors import SandboxError

ED25519_TYPE = b"\x01"
VERIFIER_FILE = "verifier.key"
LATEST_FILE = "latest"
_NOTE_SUFFIX = ".note"
_NAME_RE = re.compile(r"^[^\s+]+$")


class CheckpointError(SandboxError):
    """A checkpoint or key is malformed, unsigned or signed by an unknown key."""


@dataclass(frozen=True)
class Checkpoint:
    """The verified content of a checkpoint note."""

    origin: str
    size: int
    head: bytes
    key_name: str
    source: str = ""


def key_id(name: str, public_key: bytes) -> bytes:
    """The 4-byte signed-note key ID of an Ed25519 key."""
    return hashlib.sha256(name.encode() + b"\n" + ED25519_TYPE + public_key).digest()[:4]


def verifier_string(name: str, public_key: bytes) -> str:
    """The note verifier key encoding: ``name+hex(key ID)+base64(0x01 || key)``."""
    enc = base64.b64encode(ED25519_TYPE + public_key).decode()
    return f"{name}+{key_id(name, public_key).hex()}+{enc}"


@dataclass(frozen=True)
class Verifier:
    name: str
    key_id: bytes
    public_key: bytes

    def __str__(self) -> str:
        return verifier_string(self.name, self.public_key)


def parse_verifier(text: str) -> Verifier:
    """Parse a verifier key string; raises CheckpointError on any inconsistency."""
    parts = text.strip().split("+", 2)
    if len(parts) != 3:
        raise CheckpointError("verifier key must look like NAME+KEYID+BASE64KEY")
    name, hexid, enc = parts
    if not _NAME_RE.match(name):
        raise CheckpointError(f"verifier key name {name!r} is empty or contains spaces")
    try:
        raw = base64.b64decode(enc, validate=True)
        kid = bytes.fromhex(hexid)
    except ValueError as exc:
        raise CheckpointError(f"verifier key is not valid hex/base64: {exc}") from exc
    if len(raw) != 33 or raw[:1] != ED25519_TYPE or len(kid) != 4:
        raise CheckpointError("verifier key is not an Ed25519 note key")
    if key_id(name, raw[1:]) != kid:
        raise CheckpointError("verifier key ID does not match its name and public key")
    return Verifier(name, kid, raw[1:])


def checkpoint_text(origin: str, size: int, head: bytes) -> bytes:
    """The note text of a checkpoint (pure)."""
    if not _NAME_RE.match(origin):
        raise CheckpointError(f"checkpoint origin {origin!r} must be non-empty without spaces")
    if size < 0 or len(head) != 32:
        raise CheckpointError("checkpoint needs a size >= 0 and a 32-byte head")
    return f"{origin}\n{size}\n{base64.b64encode(head).decode()}\n".encode()


class Signer:
    """Signs checkpoint notes with an Ed25519 private key."""

    def __init__(self, private_key: Any, origin: str | None = None) -> None:
        from cryptography.hazmat.primitives import serialization

        self._key = private_key
        self.public_key: bytes = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.name = origin or default_origin(self.public_key)
        if not _NAME_RE.match(self.name):
            raise CheckpointError(f"checkpoint origin {self.name!r} must not contain spaces or +")
        self.verifier = Verifier(self.name, key_id(self.name, self.public_key), self.public_key)

    def sign_note(self, text: bytes) -> bytes:
        sig = self._key.sign(text)
        line = base64.b64encode(self.verifier.key_id + sig).decode()
        return text + b"\n" + f"\u2014 {self.name} {line}\n".encode()

    def sign_checkpoint(self, size: int, head: bytes) -> bytes:
        return self.sign_note(checkpoint_text(self.name, size, head))


def default_origin(public_key: bytes) -> str:
    return f"agent-sandbox.local/audit/{hashlib.sha256(public_key).hexdigest()[:16]}"


def load_or_create_signer(key_path: Path, origin: str | None = None) -> Signer:
    """Load the Ed25519 key at ``key_path``, creating it (mode 0600) on first use."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key_path = Path(key_path)
    if not key_path.exists():
        key_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        ignore = key_path.parent / ".gitignore"
        if not ignore.exists():  # keys may sit inside a repository: never let git pick them up
            ignore.write_text("*\n")
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        # first writer wins; never replace an existing key
        create_once(str(key_path), pem, 0o600, sync=True)
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot load checkpoint key {key_path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"checkpoint key {key_path} is not an Ed25519 key")
    return Signer(key, origin)


def publish_verifier(checkpoint_dir: Path, signer: Signer) -> None:
    """Write the public verifier key beside the checkpoints (if not already there)."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    path = checkpoint_dir / VERIFIER_FILE
    text = str(signer.verifier) + "\n"
    if path.exists() and path.read_text() == text:
        return
    _atomic_write(path, text.encode(), 0o644)


def store(checkpoint_dir: Path, size: int, note: bytes) -> Path:
    """Store a signed note as ``<size>.note`` and as ``latest`` (atomic renames)."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
    path = checkpoint_dir / f"{size:020d}{_NOTE_SUFFIX}"
    _atomic_write(path, note, 0o644)
    _atomic_write(checkpoint_dir / LATEST_FILE, note, 0o644)
    return path


def stored_notes(checkpoint_dir: Path) -> list[tuple[str, bytes]]:
    """Every stored checkpoint note as (file name, bytes), oldest first."""
    try:
        names = sorted(p for p in os.listdir(checkpoint_dir) if p.endswith(_NOTE_SUFFIX))
    except FileNotFoundError:
        return []
    return [(n, (checkpoint_dir / n).read_bytes()) for n in names]


def open_note(note: bytes, verifier: Verifier, source: str = "") -> Checkpoint:
    """Verify a checkpoint note's signature with ``verifier`` and parse its text."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        text_s = note.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(f"{source}: checkpoint is not UTF-8") from exc
    if any(ord(c) < 0x20 and c != "\n" for c in text_s):
        raise CheckpointError(f"{source}: checkpoint contains control characters")
    split = note.rfind(b"\n\n")
    if split < 0:
        raise CheckpointError(f"{source}: checkpoint has no signature block")
    text, sigblock = note[: split + 1], note[split + 2 :]
    if not sigblock.endswith(b"\n"):
        raise CheckpointError(f"{source}: checkpoint signature block must end with a newline")
    pub = Ed25519PublicKey.from_public_bytes(verifier.public_key)
    verified = False
    for raw in sigblock[:-1].split(b"\n"):
        line = raw.decode()
        if not line.startswith("\u2014 "):
            raise CheckpointError(f"{source}: malformed signature line {line!r}")
        try:
            name, b64 = line[2:].split(" ")
            sig = base64.b64decode(b64, validate=True)
        except ValueError as exc:
            raise CheckpointError(f"{source}: malformed signature line") from exc
        if name != verifier.name or sig[:4] != verifier.key_id:
            continue  # unknown key: ignored, as the note format requires
        try:
            pub.verify(sig[4:], text)
        except InvalidSignature as exc:
            raise CheckpointError(f"{source}: checkpoint signature does not verify") from exc
        verified = True
    if not verified:
        raise CheckpointError(f"{source}: checkpoint is not signed by the trusted key")
    lines = text[:-1].decode().split("\n")
    if len(lines) < 3 or any(not x for x in lines):
        raise CheckpointError(f"{source}: checkpoint text needs origin, size and head lines")
    origin, size_s, head_s = lines[:3]
    if not re.fullmatch(r"0|[1-9][0-9]*", size_s):
        raise CheckpointError(f"{source}: checkpoint size {size_s!r} is not a decimal number")
    try:
        head = base64.b64decode(head_s, validate=True)
    except ValueError as exc:
        raise CheckpointError(f"{source}: checkpoint head is not base64") from exc
    if len(head) != 32:
        raise CheckpointError(f"{source}: checkpoint head is not 32 bytes")
    return Checkpoint(origin, int(size_s), head, verifier.name, source)


def send_to_sink(sink: Callable[[bytes], object] | str, note: bytes) -> None:
    """Send a signed note to a remote sink: a callable, or POST to an http(s) URL."""
    if callable(sink):
        sink(note)
        return
    import urllib.request

    if not sink.startswith(("http://", "https://")):
        raise CheckpointError(f"checkpoint sink {sink!r} must be an http(s) URL or a callable")
    req = urllib.request.Request(  # noqa: S310 - scheme checked above
        sink, data=note, method="POST", headers={"Content-Type": "text/plain; charset=utf-8"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310
        if resp.status >= 300:
            raise CheckpointError(f"checkpoint sink answered HTTP {resp.status}")


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    replace_file(str(path), data, mode, sync=True)
