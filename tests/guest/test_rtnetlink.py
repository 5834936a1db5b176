# -*- test-case-name: tests.guest.test_rtnetlink -*-
"""
The routing netlink codec (:mod:`vmservice.guest.rtnetlink`): messages and
attributes round trip with their padding, the kernel's answers (acknowledgements,
errors, dumps over several reads) read back; :class:`RouteSocket` over a fake
socket (no netlink socket is opened).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest import rtnetlink
from vmservice.guest.rtnetlink import (Address, Message, NetlinkError, RouteSocket, address_body, decode_address,
                                       decode_attributes, decode_link, decode_messages, decode_route,
                                       encode_attributes, encode_message, link_body, outcome, route_body)

u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
attributes = st.lists(st.tuples(u16, st.binary(max_size=40)), max_size=6)
messages = st.lists(st.tuples(st.integers(4, 0xFFFF), u16, u32, u32, st.binary(max_size=80)), max_size=6)


def error_message(seq: int, error: int, request: bytes = b"") -> Message:
    """The kernel's ``NLMSG_ERROR`` for request ``seq``: minus an errno (0: an acknowledgement), its header echoed."""
    return Message(rtnetlink.NLMSG_ERROR, 0, seq, 0, struct.pack("=i", error) + request)


def wire(*parts: Message) -> bytes:
    return b"".join(encode_message(m.type, m.flags, m.seq, m.body, m.pid) for m in parts)


class MessageTests(SynchronousTestCase):
    """Messages and attributes as bytes."""

    @given(messages)
    def test_messages_round_trip(self, parts: list[tuple[int, int, int, int, bytes]]) -> None:
        """Messages one after another are read back as they were, each starting on a 4-byte boundary."""
        encoded = [encode_message(type_, flags, seq, body, pid) for type_, flags, seq, pid, body in parts]
        for chunk, (_, _, _, _, body) in zip(encoded, parts):
            self.assertEqual(len(chunk) % 4, 0)
            self.assertEqual(struct.unpack_from("=I", chunk)[0], 16 + len(body))
            self.assertLess(len(chunk) - 16 - len(body), 4)
            self.assertEqual(chunk[16 + len(body):], b"\0" * (len(chunk) - 16 - len(body)))
        self.assertEqual(decode_messages(b"".join(encoded)),
                         [Message(type_, flags, seq, pid, body) for type_, flags, seq, pid, body in parts])

    @given(attributes)
    def test_attributes_round_trip(self, values: list[tuple[int, bytes]]) -> None:
        """Attributes are read back in order, each padded to 4 bytes (not its length)."""
        encoded = encode_attributes(values)
        self.assertEqual(len(encoded), sum(4 + (len(value) + 3) // 4 * 4 for _, value in values))
        self.assertEqual(decode_attributes(encoded), values)
        offset = 0
        for _, value in values:
            self.assertEqual(struct.unpack_from("=H", encoded, offset)[0], 4 + len(value))
            offset += 4 + (len(value) + 3) // 4 * 4

    @given(messages.filter(bool), st.data())
    def test_truncated_messages(self, parts: list[tuple[int, int, int, int, bytes]], data: st.DataObject) -> None:
        """A read cut inside a message is refused, not read as a shorter one."""
        encoded = b"".join(encode_message(type_, flags, seq, body, pid) for type_, flags, seq, pid, body in parts)
        type_, flags, seq, pid, body = parts[-1]
        last = encode_message(type_, flags, seq, body, pid)
        cut = data.draw(st.integers(len(encoded) - len(last) + 1, len(encoded) - 1 - (len(last) - 16 - len(parts[-1][4]))))
        with self.assertRaises(ValueError):
            decode_messages(encoded[:cut])

    def test_bad_lengths(self) -> None:
        """A length shorter than the header, or an attribute past the end, is refused."""
        with self.assertRaises(ValueError):
            decode_messages(struct.pack("=IHHII", 8, 0, 0, 0, 0))
        with self.assertRaises(ValueError):
            decode_attributes(struct.pack("=HH", 12, 1) + b"abcd")
        with self.assertRaises(ValueError):
            decode_attributes(struct.pack("=HH", 2, 1))

    @given(u32, st.sampled_from([0, rtnetlink.IFF_UP]), st.one_of(st.none(), st.binary(min_size=6, max_size=6)))
    def test_link(self, index: int, flags: int, mac: bytes | None) -> None:
        """An RTM_NEWLINK body: the index, flags and flags changed, and the MAC as IFLA_ADDRESS."""
        index = index & 0x7FFFFFFF
        body = link_body(index, flags, rtnetlink.IFF_UP, mac)
        self.assertEqual(body[:1], bytes([socket.AF_UNSPEC]))
        self.assertEqual(decode_link(body), (index, flags, rtnetlink.IFF_UP,
                                             [(rtnetlink.IFLA_ADDRESS, mac)] if mac is not None else []))

    @given(st.sampled_from([socket.AF_INET, socket.AF_INET6]), st.integers(0, 128), st.integers(0, 255),
           st.integers(0, 255), u32, attributes)
    def test_address_round_trip(self, family: int, prefix: int, flags: int, scope: int, index: int,
                                values: list[tuple[int, bytes]]) -> None:
        address = Address(family, prefix, flags, scope, index, values)
        self.assertEqual(decode_address(address_body(address)), address)

    def test_route(self) -> None:
        """The default route (no destination) of the main table, ``proto boot``, via the gateway on the device."""
        fields, values = decode_route(route_body(socket.inet_aton("10.0.0.1"), 2))
        self.assertEqual(fields, (socket.AF_INET, 0, 0, 0, 254, 3, 0, 1, 0))
        self.assertEqual(values, [(rtnetlink.RTA_GATEWAY, socket.inet_aton("10.0.0.1")),
                                  (rtnetlink.RTA_OIF, struct.pack("=I", 2))])


class OutcomeTests(SynchronousTestCase):
    """What the kernel's answers say of a request."""

    @given(st.integers(1, 4095), u32)
    def test_error(self, code: int, seq: int) -> None:
        """An NLMSG_ERROR with minus an errno is that errno, with its text."""
        with self.assertRaises(NetlinkError) as caught:
            outcome(decode_messages(wire(error_message(seq, -code, b"\0" * 16))), seq)
        self.assertEqual((caught.exception.errno, caught.exception.strerror), (code, os.strerror(code)))

    def test_ack(self) -> None:
        """An NLMSG_ERROR with error 0 answers the request; messages of other requests are left out."""
        self.assertEqual(outcome([error_message(6, -errno.EEXIST), error_message(7, 0)], 7), (True, []))
        self.assertEqual(outcome([error_message(6, 0)], 7), (False, []))

    def test_short_error(self) -> None:
        with self.assertRaises(ValueError):
            outcome([Message(rtnetlink.NLMSG_ERROR, 0, 1, 0, b"\0\0")], 1)

    @given(st.lists(st.binary(max_size=30), max_size=8), st.data())
    def test_multi_part_dump(self, bodies: list[bytes], data: st.DataObject) -> None:
        """
        A dump's parts over any number of reads, then NLMSG_DONE (its error 0,
        or no body as older kernels send), are its parts in order.
        """
        seq = 9
        parts = [Message(rtnetlink.RTM_NEWADDR, rtnetlink.NLM_F_MULTI, seq, 0, body) for body in bodies]
        done = Message(rtnetlink.NLMSG_DONE, rtnetlink.NLM_F_MULTI, seq, 0, data.draw(st.sampled_from([b"", b"\0" * 4])))
        cuts = sorted(data.draw(st.sets(st.integers(0, len(parts)))))
        reads = [parts[start:end] for start, end in zip([0, *cuts], [*cuts, len(parts)])]
        reads[-1] = [*reads[-1], done]
        found: list[Message] = []
        for index, read in enumerate(reads):
            answered, got = outcome(decode_messages(wire(*read)), seq)
            found += got
            self.assertEqual(answered, index == len(reads) - 1)
        self.assertEqual(found, parts)

    def test_failed_dump(self) -> None:
        """A dump that ends with an error in its NLMSG_DONE is that error."""
        with self.assertRaises(NetlinkError) as caught:
            outcome([Message(rtnetlink.NLMSG_DONE, rtnetlink.NLM_F_MULTI, 3, 0, struct.pack("=i", -errno.EINVAL))], 3)
        self.assertEqual(caught.exception.errno, errno.EINVAL)


class FakeSocket:
    """A netlink socket whose reads are given: records what is bound and sent."""

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads
        self.sent: list[bytes] = []
        self.bound: Any = None
        self.closed = False

    def bind(self, address: Any) -> None:
        self.bound = address

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        return len(data)

    def recv(self, size: int) -> bytes:
        return self.reads.pop(0)

    def close(self) -> None:
        self.closed = True


class RouteSocketTests(SynchronousTestCase):
    """RouteSocket's requests and reads."""

    def test_request(self) -> None:
        """
        The socket is opened and bound on first use; each request is flagged
        NLM_F_REQUEST with the next sequence number, and read until answered:
        a stale answer of another request is skipped, a dump over two reads
        gathered.
        """
        part = Message(rtnetlink.RTM_NEWADDR, rtnetlink.NLM_F_MULTI, 2, 0, b"part")
        fake = FakeSocket([wire(error_message(1, 0)),
                           wire(error_message(7, -errno.EEXIST), part), wire(part, Message(rtnetlink.NLMSG_DONE, 2, 2, 0, b"\0" * 4))])
        opened: list[FakeSocket] = []
        route = RouteSocket(lambda: opened.append(fake) or fake)  # type: ignore[arg-type,func-returns-value]
        self.assertEqual(route.request(rtnetlink.RTM_NEWLINK, rtnetlink.NLM_F_ACK, b"body"), [])
        self.assertEqual(route.request(rtnetlink.RTM_GETADDR, rtnetlink.NLM_F_DUMP, b""), [part, part])
        self.assertEqual((opened, fake.bound), ([fake], (0, 0)))
        self.assertEqual(decode_messages(b"".join(fake.sent)), [
            Message(rtnetlink.RTM_NEWLINK, rtnetlink.NLM_F_ACK | rtnetlink.NLM_F_REQUEST, 1, 0, b"body"),
            Message(rtnetlink.RTM_GETADDR, rtnetlink.NLM_F_DUMP | rtnetlink.NLM_F_REQUEST, 2, 0, b"")])
        route.close()
        self.assertTrue(fake.closed)

    def test_refused(self) -> None:
        fake = FakeSocket([wire(error_message(1, -errno.EBUSY))])
        route = RouteSocket(lambda: fake)  # type: ignore[arg-type,return-value]
        with self.assertRaises(NetlinkError) as caught:
            route.request(rtnetlink.RTM_NEWLINK, rtnetlink.NLM_F_ACK, b"")
        self.assertEqual(caught.exception.errno, errno.EBUSY)
