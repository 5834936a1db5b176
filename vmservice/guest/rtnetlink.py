# -*- test-case-name: tests.guest.test_rtnetlink -*-
"""
The kernel's routing netlink (``NETLINK_ROUTE``) as bytes: the messages the
guest's adoption sends to set eth0's MAC, link state, addresses and default
route, and the kernel's answers read back.  A pure codec (bytes in, records
out); :class:`RouteSocket` is the socket that carries them.

A message is a ``struct nlmsghdr`` (length, type, flags, sequence number,
port id; host byte order) and its body, padded to 4 bytes; a body is a fixed
``struct`` of its family (``ifinfomsg``, ``ifaddrmsg``, ``rtmsg``) and then
attributes (``struct rtattr``: length, type, the value; each padded to 4
bytes).  A request that asks for an acknowledgement (``NLM_F_ACK``) is
answered by an ``NLMSG_ERROR`` whose error is 0, or minus an errno; a dump
(``NLM_F_DUMP``) by messages flagged ``NLM_F_MULTI``, possibly over several
reads, then ``NLMSG_DONE``.

Standard library only, as all of the guest's code.
"""

from __future__ import annotations

import os
import socket
import struct
from typing import Callable, NamedTuple, Optional

__all__ = [
    "Address",
    "Message",
    "NetlinkError",
    "RouteSocket",
    "address_body",
    "decode_address",
    "decode_attributes",
    "decode_link",
    "decode_messages",
    "decode_route",
    "encode_attributes",
    "encode_message",
    "link_body",
    "outcome",
    "route_body",
]

NLMSG_ERROR = 2
NLMSG_DONE = 3
RTM_NEWLINK = 16
RTM_NEWADDR = 20
RTM_DELADDR = 21
RTM_GETADDR = 22
RTM_NEWROUTE = 24

NLM_F_REQUEST = 0x1
NLM_F_MULTI = 0x2
NLM_F_ACK = 0x4
NLM_F_DUMP = 0x300
NLM_F_REPLACE = 0x100
NLM_F_EXCL = 0x200
NLM_F_CREATE = 0x400

IFF_UP = 0x1
IFLA_ADDRESS = 1
IFA_ADDRESS = 1
IFA_LOCAL = 2
RTA_OIF = 4
RTA_GATEWAY = 5
RT_TABLE_MAIN = 254
#: What ``ip route`` marks its routes with (``proto boot``).
RTPROT_BOOT = 3
RT_SCOPE_UNIVERSE = 0
RTN_UNICAST = 1

#: ``struct nlmsghdr``: length, type, flags, sequence number, port id.
HEADER = struct.Struct("=IHHII")
#: ``struct ifinfomsg``: family, (pad), device type, index, flags, the flags changed.
LINK = struct.Struct("=BxHiII")
#: ``struct ifaddrmsg``: family, prefix length, flags, scope, index.
ADDRESS = struct.Struct("=BBBBI")
#: ``struct rtmsg``: family, destination and source lengths, tos, table, protocol, scope, type; flags.
ROUTE = struct.Struct("=BBBBBBBBI")
#: ``struct rtattr``: length, type.
ATTRIBUTE = struct.Struct("=HH")
#: An ``NLMSG_ERROR``'s (or ``NLMSG_DONE``'s) error: 0, or minus an errno.
ERROR = struct.Struct("=i")


class Message(NamedTuple):
    """One netlink message: its header's fields and its body (without the padding)."""

    type: int
    flags: int
    seq: int
    pid: int
    body: bytes


class Address(NamedTuple):
    """An ``ifaddrmsg`` and its attributes (type, value), in order."""

    family: int
    prefixlen: int
    flags: int
    scope: int
    ifindex: int
    attributes: list[tuple[int, bytes]]


class NetlinkError(OSError):
    """The kernel refused a request: its errno (and that errno's text)."""

    def __init__(self, errno: int) -> None:
        super().__init__(errno, os.strerror(errno))


def _align(length: int) -> int:
    return (length + 3) & ~3


def _padded(data: bytes) -> bytes:
    return data + b"\0" * (_align(len(data)) - len(data))


def encode_message(type_: int, flags: int, seq: int, body: bytes, pid: int = 0) -> bytes:
    """A message whose length is that of the header and ``body``, padded to 4 bytes."""
    return _padded(HEADER.pack(HEADER.size + len(body), type_, flags, seq, pid) + body)


def decode_messages(data: bytes) -> list[Message]:
    """
    The messages of one read (a datagram holds whole ones).

    :raises ValueError: a message is cut short or claims less than its header.
    """
    messages = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < HEADER.size:
            raise ValueError(f"netlink: {len(data) - offset} bytes left, not a message header")
        length, type_, flags, seq, pid = HEADER.unpack_from(data, offset)
        if length < HEADER.size or offset + length > len(data):
            raise ValueError(f"netlink: a message of {length} bytes at {offset} of {len(data)}")
        messages.append(Message(type_, flags, seq, pid, data[offset + HEADER.size:offset + length]))
        offset += _align(length)
    return messages


def encode_attributes(attributes: list[tuple[int, bytes]]) -> bytes:
    """Attributes, each its ``rtattr`` and value padded to 4 bytes."""
    return b"".join(_padded(ATTRIBUTE.pack(ATTRIBUTE.size + len(value), type_) + value)
                    for type_, value in attributes)


def decode_attributes(data: bytes) -> list[tuple[int, bytes]]:
    """
    The attributes of ``data`` (type, value), in order.

    :raises ValueError: an attribute is cut short.
    """
    attributes = []
    offset = 0
    while offset + ATTRIBUTE.size <= len(data):
        length, type_ = ATTRIBUTE.unpack_from(data, offset)
        if length < ATTRIBUTE.size or offset + length > len(data):
            raise ValueError(f"netlink: an attribute of {length} bytes at {offset} of {len(data)}")
        attributes.append((type_, data[offset + ATTRIBUTE.size:offset + length]))
        offset += _align(length)
    return attributes


def link_body(index: int, flags: int, change: int, mac: Optional[bytes] = None) -> bytes:
    """An ``RTM_NEWLINK`` body: device ``index``'s ``change`` flags set to ``flags``, and its MAC if given."""
    return LINK.pack(socket.AF_UNSPEC, 0, index, flags, change) + encode_attributes(
        [(IFLA_ADDRESS, mac)] if mac is not None else [])


def decode_link(body: bytes) -> tuple[int, int, int, list[tuple[int, bytes]]]:
    """An ``ifinfomsg`` body: index, flags, the flags changed, and the attributes."""
    _, _, index, flags, change = LINK.unpack_from(body)
    return index, flags, change, decode_attributes(body[LINK.size:])


def address_body(address: Address) -> bytes:
    """An ``ifaddrmsg`` body (``RTM_NEWADDR``, ``RTM_DELADDR``, ``RTM_GETADDR``)."""
    return ADDRESS.pack(address.family, address.prefixlen, address.flags, address.scope, address.ifindex) \
        + encode_attributes(address.attributes)


def decode_address(body: bytes) -> Address:
    """An ``ifaddrmsg`` body, as :func:`address_body` makes them."""
    family, prefixlen, flags, scope, index = ADDRESS.unpack_from(body)
    return Address(family, prefixlen, flags, scope, index, decode_attributes(body[ADDRESS.size:]))


def route_body(gateway: bytes, index: int) -> bytes:
    """An ``RTM_NEWROUTE`` body: the IPv4 default route of the main table via ``gateway`` on device ``index``."""
    return ROUTE.pack(socket.AF_INET, 0, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RTN_UNICAST, 0) \
        + encode_attributes([(RTA_GATEWAY, gateway), (RTA_OIF, struct.pack("=I", index))])


def decode_route(body: bytes) -> tuple[tuple[int, ...], list[tuple[int, bytes]]]:
    """An ``rtmsg`` body: its fields and its attributes."""
    return ROUTE.unpack_from(body), decode_attributes(body[ROUTE.size:])


def outcome(messages: list[Message], seq: int) -> tuple[bool, list[Message]]:
    """
    What the kernel's messages say of request ``seq``: whether it is answered
    (its acknowledgement, or a dump's ``NLMSG_DONE``) and the messages it got
    meanwhile (a dump's parts); other requests' messages are left out.

    :raises NetlinkError: the kernel refused it.
    :raises ValueError: an error message too short to hold its error.
    """
    found: list[Message] = []
    for message in messages:
        if message.seq != seq:
            continue
        if message.type in (NLMSG_ERROR, NLMSG_DONE):
            if message.type == NLMSG_ERROR or len(message.body) >= ERROR.size:
                if len(message.body) < ERROR.size:
                    raise ValueError(f"netlink: an error message of {len(message.body)} bytes")
                (error,) = ERROR.unpack_from(message.body)
                if error != 0:
                    raise NetlinkError(-error)
            return True, found
        found.append(message)
    return False, found


class RouteSocket:
    """
    A ``NETLINK_ROUTE`` socket that sends one request at a time and reads its
    answer (see :func:`outcome`).  Opened on first use.
    """

    #: The most one read takes: the kernel's dump parts fit in a page or two.
    READ = 65536

    def __init__(self, open_socket: Optional[Callable[[], socket.socket]] = None) -> None:
        self._open = open_socket or (lambda: socket.socket(
            socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE))
        self._socket: Optional[socket.socket] = None
        self._seq = 0

    def request(self, type_: int, flags: int, body: bytes) -> list[Message]:
        """
        Send a request (``NLM_F_REQUEST`` added to ``flags``) and read until it
        is answered; the messages it got (a dump's parts).

        :raises NetlinkError: the kernel refused it.
        """
        if self._socket is None:
            self._socket = self._open()
            self._socket.bind((0, 0))
        self._seq += 1
        seq = self._seq
        self._socket.send(encode_message(type_, flags | NLM_F_REQUEST, seq, body))
        found: list[Message] = []
        while True:
            done, got = outcome(decode_messages(self._socket.recv(self.READ)), seq)
            found += got
            if done:
                return found

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
