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

from agent_sandbox.quickhash import sha256_digest
from agent_sandbox.quickjson import encoder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


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
