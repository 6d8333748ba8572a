"""Canonical bytes and the chain step of the audit log.

A record's canonical form is JSON with sorted keys, compact separators and
UTF-8 text (no ASCII escaping, no NaN or infinities). Each stored line is the
canonical form of the record without its ``hash`` member, with
``,"hash":"<hex>"`` spliced in before the closing brace, so the hashed bytes
can be sliced out of a line without parsing it:

    h_i = SHA-256(h_{i-1} || canonical(record_i without "hash"))

``h_0`` is 32 zero bytes. This module is pure: it never touches files and never
accepts a value it cannot encode canonically (it raises instead).
"""

from __future__ import annotations

from agent_sandbox.quickjson import encoder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


def _sha256_impl() -> Any:
    """The interpreter's own SHA-256, for short inputs: hashlib loads OpenSSL,
    which costs the hook 3 to 18 ms on its allow path for one small record."""
    for name in ("_sha2", "_sha256"):  # 3.12+, then 3.11 (``__import__``: no importlib)
        try:
            return __import__(name).sha256
        except (ImportError, AttributeError):
            continue
    import hashlib  # pragma: no cover - a build without them

    return hashlib.sha256


_SHA256: Any = _sha256_impl()
_SMALL = 4096  # above this OpenSSL's (vectorised) SHA-256 wins by far: 5x on megabytes
_openssl: list[Any] = []


def _hasher(size: int) -> Any:
    if size <= _SMALL:
        return _SHA256
    if not _openssl:
        import hashlib

        _openssl.append(hashlib.sha256)
    return _openssl[0]


def sha256_digest(data: bytes) -> bytes:
    """SHA-256 of ``data`` (the same bytes whichever implementation computes it)."""
    out: bytes = _hasher(len(data))(data).digest()
    return out


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` in hex."""
    out: str = _hasher(len(data))(data).hexdigest()
    return out


GENESIS: bytes = b"\x00" * 32
GENESIS_HEX: str = GENESIS.hex()

#: ``,"hash":"`` + 64 hex digits + ``"}`` + newline: the fixed tail of every line.
HASH_SUFFIX_LEN = 9 + 64 + 2 + 1
_HASH_OPEN = b',"hash":"'

# json.JSONEncoder(...).encode with these settings, without importing json (the hook)
_encode = encoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical(obj: Any) -> bytes:
    """Canonical UTF-8 JSON bytes of ``obj`` (sorted keys, compact, no NaN).

    Lone surrogates (undecodable bytes smuggled into text) cannot be UTF-8; they
    are written as JSON ``\\uXXXX`` escapes, which parse back to the same string.
    """
    text = _encode(obj)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace")


def chain_hash(prev: bytes, body: bytes) -> bytes:
    """One chain step: SHA-256 of the previous digest followed by the record bytes."""
    return sha256_digest(prev + body)


def seal_line(body: bytes, digest: bytes) -> bytes:
    """The stored line for a record whose canonical bytes (without ``hash``) are ``body``."""
    return body[:-1] + _HASH_OPEN + digest.hex().encode("ascii") + b'"}\n'


def split_line(line: bytes) -> tuple[bytes, bytes] | None:
    """Split a stored line (with its newline) into (hashed body, stored hex digest).

    Returns None when the line does not have the fixed tail layout.
    """
    if len(line) < HASH_SUFFIX_LEN + 2 or not line.endswith(b'"}\n'):
        return None
    cut = len(line) - HASH_SUFFIX_LEN
    if line[cut : cut + 9] != _HASH_OPEN:
        return None
    return line[:cut] + b"}", line[cut + 9 : cut + 73]
