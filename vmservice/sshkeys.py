# -*- test-case-name: tests.test_sshkeys -*-
"""
OpenSSH public key lines, as a login user's ``authorized_keys`` holds them:
``TYPE BASE64 [COMMENT]``, checked strictly before a key reaches a guest.

A key is accepted only when its type is one of :data:`KEY_TYPES`, its
base64 decodes, and the decoded blob is that type's public key in the SSH
wire format (RFC 4253 §6.6, RFC 5656 §3.1, OpenSSH's PROTOCOL.u2f): the type
string inside the blob is the declared one and the fields that follow have
their sizes, with nothing left over.  ``authorized_keys`` options before the
type (``from="..."``, ``command="..."``) are refused: the daemon writes the
file, and a key given to it is a plain key.

Parsing is pure: no I/O, no Twisted.
"""

from __future__ import annotations

import base64
import binascii
import re

from attrs import frozen

__all__ = ["KEY_TYPES", "InvalidPublicKey", "PublicKey", "parse_public_key"]

#: The key types accepted, as OpenSSH names them.
KEY_TYPES = (
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)

#: Most characters of a key line (an RSA key of 16384 bits takes about 2.8 KiB).
MAX_LINE = 16 * 1024
#: RSA moduli OpenSSH accepts: at least 1024 bits, at most 16384.
RSA_BITS = (1024, 16384)
#: The size of an uncompressed elliptic-curve point (0x04, X, Y) by curve.
_EC_POINT = {"nistp256": 65, "nistp384": 97, "nistp521": 133}
#: Characters of a comment that would break the one-line format or a terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class InvalidPublicKey(ValueError):
    """A line is not an accepted OpenSSH public key; the message says why."""


@frozen
class PublicKey:
    """
    One public key.

    :ivar kind: its type, one of :data:`KEY_TYPES`.
    :ivar blob: the key in the SSH wire format (what the line's base64 holds).
    :ivar comment: the free text after it (often ``user@host``), or ``""``.
    """

    kind: str
    blob: bytes
    comment: str = ""

    def line(self) -> str:
        """The key as one ``authorized_keys`` line: ``TYPE BASE64 [COMMENT]`` (base64 in canonical form)."""
        words = [self.kind, base64.b64encode(self.blob).decode("ascii")]
        if self.comment:
            words.append(self.comment)
        return " ".join(words)


def parse_public_key(line: str) -> PublicKey:
    """
    Parse one OpenSSH public key line.

    White space around the line (a final newline too) and between its words
    is ignored; the comment keeps its inner spacing.

    :raise InvalidPublicKey: the line is not one accepted key; the message
        says what is wrong without repeating the line.
    """
    if len(line) > MAX_LINE:
        raise InvalidPublicKey(f"longer than {MAX_LINE} characters")
    line = line.strip()
    if "\n" in line or "\r" in line:
        raise InvalidPublicKey("more than one line")
    words = line.split(None, 2)
    if not words:
        raise InvalidPublicKey("empty")
    kind = words[0]
    if kind not in KEY_TYPES:
        if any(word in KEY_TYPES for word in line.split()[1:]):
            raise InvalidPublicKey("options before the key type are not accepted")
        raise InvalidPublicKey(f"unknown key type {kind[:40]!r} (accepted: {', '.join(KEY_TYPES)})")
    if len(words) < 2:
        raise InvalidPublicKey(f"no key data after {kind}")
    try:
        blob = base64.b64decode(words[1], validate=True)
    except (binascii.Error, ValueError):
        raise InvalidPublicKey("the key data is not base64") from None
    comment = words[2].strip() if len(words) > 2 else ""
    if _CONTROL.search(comment):
        raise InvalidPublicKey("the comment holds control characters")
    _check_blob(kind, blob)
    return PublicKey(kind=kind, blob=blob, comment=comment)


def _check_blob(kind: str, blob: bytes) -> None:
    """:raise InvalidPublicKey: ``blob`` is not a public key of type ``kind``."""
    reader = _WireReader(blob)
    embedded = reader.string()
    if embedded != kind.encode("ascii"):
        raise InvalidPublicKey(f"the key data is of another type than {kind}")
    if kind in ("ssh-ed25519", "sk-ssh-ed25519@openssh.com"):
        if len(reader.string()) != 32:
            raise InvalidPublicKey("an Ed25519 key is 32 bytes")
    elif kind == "ssh-rsa":
        exponent = reader.mpint()
        modulus = reader.mpint()
        if exponent < 3 or exponent % 2 == 0:
            raise InvalidPublicKey("the RSA exponent is not an odd number of at least 3")
        if not RSA_BITS[0] <= modulus.bit_length() <= RSA_BITS[1]:
            raise InvalidPublicKey(f"an RSA modulus must have {RSA_BITS[0]} to {RSA_BITS[1]} bits")
    else:
        curve = kind.removeprefix("sk-").removeprefix("ecdsa-sha2-").removesuffix("@openssh.com")
        if reader.string() != curve.encode("ascii"):
            raise InvalidPublicKey(f"the key data names another curve than {curve}")
        point = reader.string()
        if len(point) != _EC_POINT[curve] or point[0] != 4:
            raise InvalidPublicKey(f"not an uncompressed {curve} point")
    if kind.startswith("sk-"):
        reader.string()  # the application (``ssh:`` by default)
    if not reader.done():
        raise InvalidPublicKey("the key data has bytes after the key")


class _WireReader:
    """Reads the SSH wire format's ``string`` and ``mpint`` fields from a blob, in order."""

    def __init__(self, blob: bytes) -> None:
        self._blob = blob
        self._at = 0

    def string(self) -> bytes:
        """:raise InvalidPublicKey: the blob ends before the field does."""
        if self._at + 4 > len(self._blob):
            raise InvalidPublicKey("the key data is cut short")
        size = int.from_bytes(self._blob[self._at:self._at + 4], "big")
        start = self._at + 4
        if start + size > len(self._blob):
            raise InvalidPublicKey("the key data is cut short")
        self._at = start + size
        return self._blob[start:self._at]

    def mpint(self) -> int:
        """A non-negative multiple-precision integer; :raise InvalidPublicKey: a negative one."""
        data = self.string()
        if data and data[0] & 0x80:
            raise InvalidPublicKey("the key data holds a negative number")
        return int.from_bytes(data, "big")

    def done(self) -> bool:
        """Whether every byte was read."""
        return self._at == len(self._blob)
