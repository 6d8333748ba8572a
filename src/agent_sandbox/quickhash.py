"""SHA-256 without importing ``hashlib`` for short inputs: the interpreter's own
implementation, since hashlib loads OpenSSL, which costs the hook 3 to 18 ms on
its allow path for one small record. Above a few kilobytes OpenSSL's vectorised
SHA-256 wins by far, and is used. The bytes are the same either way.
"""

from __future__ import annotations

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
