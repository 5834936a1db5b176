"""
What the guest agent's adopt handler (:class:`vmservice.guest.identity.AdoptHandler`) touches, faked
for a test by :class:`FakeSteps`: the routing netlink (:class:`FakeRoute`, whose interfaces are
:data:`LO` and :data:`ETH0`), the SSH server's files and process (:class:`FakeSshSystem`), the files of
``/etc`` and ``/proc`` in a temporary directory, and a clock set to :data:`BEFORE`.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from tests.guest.session import FakeClock
from tests.short_dirs import temp_dir
from vmservice.guest import deferred
from vmservice.guest import login, rtnetlink
from vmservice.guest.context import AgentContext
from vmservice.guest.identity import AdoptHandler
from vmservice.guest.rtnetlink import Address, Message, NetlinkError

#: The fake clock's time when a test starts (nanoseconds since the epoch).
BEFORE = 1_700_000_000_000_000_000
#: The interface indexes of ``eth0`` and ``lo`` for the fake routing netlink.
ETH0, LO = 2, 1


def _address(index: int, family: int, text: str) -> Message:
    """A dump's part: an address of device ``index``."""
    packed = socket.inet_pton(family, text.partition("/")[0])
    body = rtnetlink.address_body(Address(family, int(text.partition("/")[2]), 0x80, 0, index,
                                          [(rtnetlink.IFA_ADDRESS, packed), (rtnetlink.IFA_LOCAL, packed),
                                           (8, b"flags")]))
    return Message(rtnetlink.RTM_NEWADDR, rtnetlink.NLM_F_MULTI, 1, 0, body)


class FakeRoute:
    """
    The kernel's routing netlink for the network step: decodes each request
    with the codec into :attr:`calls` (``("link", mac or None, "up" or
    "down")``, ``("addresses",)``, ``("deladdr", "10.0.0.3/24")``, ``("addr",
    "10.0.0.9/24")``, ``("route", "10.0.0.1")``) and refuses what
    :attr:`failing` names (``"address while up"`` with EBUSY, or a call's
    first two words joined, ``"addr 10.0.0.9/24"``, with EEXIST).

    :ivar link_up: whether eth0 is up.
    :ivar flags: each request's flags, in order.
    :ivar closed: how many channels were closed.
    """

    def __init__(self, calls: list[Any], failing: set[str]) -> None:
        self.calls, self.failing = calls, failing
        self.link_up = True
        self.flags: list[int] = []
        self.closed = 0
        self.dump = [_address(LO, socket.AF_INET, "127.0.0.1/8"), _address(ETH0, socket.AF_INET, "10.0.0.3/24"),
                     _address(ETH0, socket.AF_INET6, "fe80::ff:fe00:1/64"),
                     Message(rtnetlink.RTM_NEWLINK, rtnetlink.NLM_F_MULTI, 1, 0, b"")]

    def __call__(self) -> FakeRoute:
        return self

    def close(self) -> None:
        self.closed += 1

    def request(self, type_: int, flags: int, body: bytes) -> list[Message]:
        self.flags.append(flags)
        if type_ == rtnetlink.RTM_NEWLINK:
            index, up, change, attributes = rtnetlink.decode_link(body)
            assert (index, change) == (ETH0, rtnetlink.IFF_UP), (index, change)
            mac = dict(attributes).get(rtnetlink.IFLA_ADDRESS)
            call: tuple[Any, ...] = ("link", mac and ":".join(f"{byte:02x}" for byte in mac), "up" if up else "down")
            if mac is not None and self.link_up and "address while up" in self.failing:
                self.calls.append(call)
                raise NetlinkError(errno.EBUSY)
            self.link_up = bool(up)
        elif type_ == rtnetlink.RTM_GETADDR:
            assert rtnetlink.decode_address(body).family == socket.AF_UNSPEC
            call = ("addresses",)
        elif type_ in (rtnetlink.RTM_NEWADDR, rtnetlink.RTM_DELADDR):
            address = rtnetlink.decode_address(body)
            assert address.ifindex == ETH0
            values = dict(address.attributes)
            assert sorted(values) == [rtnetlink.IFA_ADDRESS, rtnetlink.IFA_LOCAL]
            text = socket.inet_ntop(address.family, values[rtnetlink.IFA_LOCAL])
            call = ("addr" if type_ == rtnetlink.RTM_NEWADDR else "deladdr", f"{text}/{address.prefixlen}")
        else:
            assert type_ == rtnetlink.RTM_NEWROUTE
            fields, attributes = rtnetlink.decode_route(body)
            assert fields[:2] == (socket.AF_INET, 0) and fields[4] == rtnetlink.RT_TABLE_MAIN, fields
            values = dict(attributes)
            assert values[rtnetlink.RTA_OIF] == struct.pack("=I", ETH0)
            call = ("route", socket.inet_ntoa(values[rtnetlink.RTA_GATEWAY]))
        self.calls.append(call)
        if " ".join(map(str, call[:2])) in self.failing:
            raise NetlinkError(errno.EEXIST)
        return self.dump if type_ == rtnetlink.RTM_GETADDR else []


class FakeSshSystem(login.System):
    """
    The SSH server's files rooted in a temporary directory; its process is :attr:`pid` (``None``: none
    runs), the signals sent to it and the waits for its end recorded (in ``calls``, with the steps);
    programs are recorded, not run.
    """

    def __init__(self, root: str, calls: list[Any]) -> None:
        super().__init__(root)
        self.calls = calls
        self.pid: int | None = None
        #: When the pid file was looked at: how many calls there were then.
        self.looked: list[int] = []
        self.ran: list[list[str]] = []
        os.makedirs(self.path("/run"))
        os.makedirs(self.path(login.HOST_KEY_DIR))
        os.makedirs(self.path("/usr/sbin"))
        with open(self.path(self.sshd), "w"):
            pass
        os.chmod(self.path(self.sshd), 0o755)

    def sshd_pid(self) -> int | None:
        self.looked.append(len(self.calls))
        return self.pid

    def signal(self, pid: int, number: int) -> None:
        self.calls.append(("signal", pid, number))
        if number == signal.SIGKILL:
            self.pid = None

    def wait_gone(self, pid: int, timeout: float = 5.0) -> None:
        self.calls.append(("gone", pid))

    def run(self, argv: list[str]) -> None:
        self.ran.append(argv)
        self.calls.append(("run", argv[0]))
        if argv[0] == self.sshd:
            self.pid = 99

    def files(self, directory: str) -> list[str]:
        return sorted(os.listdir(self.path(directory)))


class FakeSteps:
    """
    Replaces what :class:`AdoptHandler` touches for ``case``: the ioctl, the
    routing netlink (:class:`FakeRoute`, failing when asked), the files (in a
    temporary directory) and the clock.

    :ivar calls: the ioctls, netlink requests and clock settings, in order.
    :ivar failing: what fails: ``"ioctl"``, or what :class:`FakeRoute` refuses.
    :ivar route: the routing netlink.
    :ivar context: an agent context whose clock is :attr:`clock`.
    """

    def __init__(self, case: SynchronousTestCase) -> None:
        self.calls: list[Any] = []
        self.failing: set[str] = set()
        root = temp_dir(case)
        self.etc = os.path.join(root, "etc")
        os.mkdir(self.etc)
        for name in ("hostname", "hosts", "machine-id"):
            with open(os.path.join(self.etc, name), "w") as stream:
                stream.write("template\n")
        self.kernel: list[str] = []
        random_device = os.path.join(root, "urandom")
        open(random_device, "w").close()
        calls, failing = self.calls, self.failing

        def ioctl(fd: int, request: int, argument: Any) -> None:
            calls.append(("ioctl", request, argument))
            if "ioctl" in failing:
                raise PermissionError(1, "Operation not permitted")

        self.route = FakeRoute(calls, failing)
        self.clock = FakeClock(BEFORE)

        def set_clock(unix_ns: int) -> None:
            calls.append(("clock", unix_ns))
            self.clock.set(unix_ns)

        case.patch(AdoptHandler, "ioctl", staticmethod(ioctl))
        case.patch(AdoptHandler, "open_route", self.route)
        case.patch(AdoptHandler, "interface_index", staticmethod({"eth0": ETH0}.__getitem__))
        case.patch(AdoptHandler, "random_device", random_device)
        case.patch(AdoptHandler, "set_kernel_hostname", staticmethod(self.kernel.append))
        case.patch(AdoptHandler, "etc", self.etc)
        # The guest's other services: the metrics agent serves (its file exists), no ext4lazyinit thread.
        self.metrics_ready = os.path.join(root, "metrics.ready")
        open(self.metrics_ready, "w").close()
        self.proc = os.path.join(root, "proc")
        os.makedirs(os.path.join(self.proc, "1"))
        with open(os.path.join(self.proc, "1", "comm"), "w") as stream:
            stream.write("init\n")
        self.persisted = os.path.join(root, "var", "lib", "vmservice", "machine-id")
        case.patch(deferred, "DEFERRED", [])
        case.patch(AdoptHandler, "metrics_ready", self.metrics_ready)
        case.patch(AdoptHandler, "proc", self.proc)
        case.patch(AdoptHandler, "persisted_machine_id", self.persisted)
        self.ssh = FakeSshSystem(os.path.join(root, "ssh-root"), calls)
        case.patch(AdoptHandler, "ssh_system", staticmethod(lambda: self.ssh))
        case.patch(login, "INHERITED", login._Inherited())
        case.patch(login, "SERVER", login._Server())
        case.patch(AdoptHandler, "sync", staticmethod(lambda: calls.append("sync")))
        case.patch(AdoptHandler, "freeze_objects", staticmethod(lambda: calls.append("freeze")))
        #: The loop's and the handler's monotonic clock, in seconds.
        self.now = 1000.0
        case.patch(AdoptHandler, "monotonic_ns", staticmethod(lambda: int(self.now * 1e9)))
        self.context = AgentContext("t", int(self.now * 1e9), realtime_ns=self.clock.read, set_realtime_ns=set_clock)
