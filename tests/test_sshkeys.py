"""Tests for :mod:`vmservice.sshkeys`: OpenSSH public key lines parsed strictly."""

from __future__ import annotations

import base64

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.sshkeys import KEY_TYPES, InvalidPublicKey, PublicKey, parse_public_key

#: Lines made by ssh-keygen (OpenSSH 9.2), without their comments.
GENERATED = [
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGlHwjbWs3bxNfDjyrG31OFHagdTFb6IcKC46dPoRPBs",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC8Avt20SZ6dM9lXOx9MnYnL7qWzUn0VpPQutbiVfrChb/7S5UhWUKaf5m8SEpTYOEJu1Scn"
    "S7MnPwL00wmK19SN6lFxY5t9Uz3my+L+CsW5J2HnzDkmCymrgeHUVz5480nasgvcKR5+nAaTgfCNdrxU0zTZlg7OHgMIXRYs1vQTZWo31dqik"
    "6avK565FfXHj5zi18M/Np5zQShI1HWzNBWgTJv1YbUDYKiB8dmy6XXw2qyzTldDc5rotv7YQjqNR67G3YaXPJbyfDGeBghcohkvIXTJzG0Mxtk"
    "SL2ya3uuRJnYcdWk/0kDTlR85GJthxDP/SAGoCK+AVBFak284awd",
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBN0e+UXNgfEnJ7kKUYPuNKu5MHOGxJf3YEnn8II"
    "DVchypW2vcAHUAE8TbNKR2BEUR6FQEa/Eq1us96A8ELi9JG0=",
    "ecdsa-sha2-nistp384 AAAAE2VjZHNhLXNoYTItbmlzdHAzODQAAAAIbmlzdHAzODQAAABhBPiFgEP+b7X2BGiWUZVpTuCiP7RIDUAK1ugludC"
    "KJO7xkc6uFfd5IId6gXUh/7C8FASmPvIGhwgVUSOm/kjjrQiUIy7byQNf48CSJcZaLYb5HYv5F5cZjt0/SODVQionAw==",
    "ecdsa-sha2-nistp521 AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBAE1KH0iX2bvkW/3vAqeiVdalHlJj4uZWJxUyH7"
    "w/gOhUBHphXK56+LJm2bbVG95kBHXMsOyCpPKQlkAUrf0PJPZcQGMwyWHk8RQi6BYofIJfY/JuTfsZViMrCATYFVyGqPFVRdqCBUD9kyBY3NcB"
    "NoTU2mjrXFWDWrB9iXqjZBWGhAUdg==",
]


def _string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _mpint(value: int) -> bytes:
    """A positive integer as an SSH mpint: big-endian, a zero byte first when the high bit is set."""
    return _string(value.to_bytes((value.bit_length() + 8) // 8, "big"))


_CURVES = {"nistp256": 32, "nistp384": 48, "nistp521": 66}


@st.composite
def _blobs(draw: st.DrawFn, kind: str) -> bytes:
    """The wire-format blob of a random (well-formed, not necessarily valid on its curve) key of ``kind``."""
    head = _string(kind.encode())
    if kind in ("ssh-ed25519", "sk-ssh-ed25519@openssh.com"):
        body = _string(draw(st.binary(min_size=32, max_size=32)))
    elif kind == "ssh-rsa":
        exponent = draw(st.integers(1, 2**32).map(lambda n: 2 * n + 1))
        bits = draw(st.integers(1024, 16384))
        modulus = draw(st.integers(2 ** (bits - 1), 2**bits - 1))
        body = _mpint(exponent) + _mpint(modulus)
    else:
        curve = kind.removeprefix("sk-").removeprefix("ecdsa-sha2-").removesuffix("@openssh.com")
        point = b"\x04" + draw(st.binary(min_size=2 * _CURVES[curve], max_size=2 * _CURVES[curve]))
        body = _string(curve.encode()) + _string(point)
    if kind.startswith("sk-"):
        body += _string(draw(st.sampled_from([b"ssh:", b"ssh:work", b""])))
    return head + body


#: Comments: printable text, inner spaces and tabs allowed, no line breaks or other control characters.
_comments = st.text(st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="\u2028\u2029\x85"),
                    max_size=40).map(str.strip)
_keys = st.sampled_from(KEY_TYPES).flatmap(
    lambda kind: st.builds(PublicKey, kind=st.just(kind), blob=_blobs(kind), comment=_comments))


class GeneratedTests(SynchronousTestCase):
    def test_ssh_keygen_lines(self) -> None:
        """Keys made by ssh-keygen parse, with or without a comment, and print back as given."""
        for line in GENERATED:
            self.assertEqual(parse_public_key(line).line(), line)
            self.assertEqual(parse_public_key(f"  {line}  alice@laptop \n").line(), f"{line} alice@laptop")
            self.assertEqual(parse_public_key(f"{line} my key\tfor work").comment, "my key\tfor work")

    def test_refusals(self) -> None:
        """Each kind of bad line is refused with a reason."""
        ed25519 = GENERATED[0]
        data = ed25519.split()[1]
        rsa_blob = base64.b64decode(GENERATED[1].split()[1])
        cases = [
            ("", "empty"),
            ("ssh-ed25519", "no key data"),
            ("ssh-dss AAAAB3NzaC1kc3MAAACBAP", "unknown key type"),
            ("ssh-ed25519-cert-v01@openssh.com AAAA", "unknown key type"),
            (f'from="10.0.0.1" {ed25519}', "options"),
            (f"command=\"true\",no-pty {ed25519} me", "options"),
            ("ssh-ed25519 not*base64", "not base64"),
            ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGlHwjbWs3bxNfDjyrG31OFHagdTFb6IcKC46dPoRPB", "not base64"),
            (f"ssh-rsa {data}", "another type"),
            (f"ecdsa-sha2-nistp384 {GENERATED[2].split()[1]}", "another type"),
            (f"{ed25519}\nssh-rsa AAAA", "more than one line"),
            (f"{ed25519} a\x1b[31mb", "control characters"),
            ("ssh-ed25519 " + base64.b64encode(_string(b"ssh-ed25519") + _string(b"x" * 31)).decode(), "32 bytes"),
            ("ssh-ed25519 " + base64.b64encode(_string(b"ssh-ed25519") + _string(b"x" * 32) + b"!").decode(),
             "bytes after"),
            ("ssh-ed25519 " + base64.b64encode(_string(b"ssh-ed25519")).decode(), "cut short"),
            ("ssh-rsa " + base64.b64encode(_string(b"ssh-rsa") + _mpint(65537) + _mpint(2**1000 + 1)).decode(),
             "RSA modulus"),
            ("ssh-rsa " + base64.b64encode(_string(b"ssh-rsa") + _mpint(65536) + _mpint(2**2047 + 1)).decode(),
             "RSA exponent"),
            ("ssh-rsa " + base64.b64encode(_string(b"ssh-rsa") + _string(b"\x81") + rsa_blob[18:]).decode(),
             "negative"),
            ("ecdsa-sha2-nistp256 " + base64.b64encode(_string(b"ecdsa-sha2-nistp256") + _string(b"nistp384")
                                                        + _string(b"\x04" + b"x" * 64)).decode(), "another curve"),
            ("ecdsa-sha2-nistp256 " + base64.b64encode(_string(b"ecdsa-sha2-nistp256") + _string(b"nistp256")
                                                        + _string(b"\x02" + b"x" * 32)).decode(), "uncompressed"),
            ("ssh-ed25519 " + "A" * 20000, "longer than"),
        ]
        for line, reason in cases:
            error = self.assertRaises(InvalidPublicKey, parse_public_key, line)
            self.assertIn(reason, str(error), line[:80])


class PropertyTests(SynchronousTestCase):
    @given(_keys)
    def test_round_trip(self, key: PublicKey) -> None:
        """Every well-formed key of an accepted type prints as a line that parses back to itself."""
        self.assertEqual(parse_public_key(key.line()), key)

    @given(_keys, st.sampled_from(KEY_TYPES))
    def test_declared_type_must_match(self, key: PublicKey, other: str) -> None:
        """A blob declared as another type than its own is refused."""
        line = PublicKey(kind=other, blob=key.blob).line()
        if other == key.kind:
            self.assertEqual(parse_public_key(line).blob, key.blob)
        else:
            self.assertRaises(InvalidPublicKey, parse_public_key, line)

    @given(_keys, st.data())
    def test_truncated_or_extended(self, key: PublicKey, data: st.DataObject) -> None:
        """A blob cut anywhere, or with bytes after it, is refused."""
        cut = data.draw(st.integers(0, len(key.blob) - 1))
        self.assertRaises(InvalidPublicKey, parse_public_key, PublicKey(kind=key.kind, blob=key.blob[:cut]).line())
        extra = data.draw(st.binary(min_size=1, max_size=8))
        self.assertRaises(InvalidPublicKey, parse_public_key, PublicKey(kind=key.kind, blob=key.blob + extra).line())

    @given(st.text(max_size=300))
    def test_any_text(self, text: str) -> None:
        """Any text either parses or raises InvalidPublicKey, never another error."""
        try:
            key = parse_public_key(text)
        except InvalidPublicKey:
            return
        self.assertIn(key.kind, KEY_TYPES)

    @given(st.sampled_from(KEY_TYPES), st.binary(max_size=200))
    def test_any_blob(self, kind: str, blob: bytes) -> None:
        """Any bytes as a declared type's key data either parse (as that type) or raise InvalidPublicKey."""
        try:
            key = parse_public_key(PublicKey(kind=kind, blob=blob).line())
        except InvalidPublicKey:
            return
        self.assertEqual((key.kind, key.blob), (kind, blob))
