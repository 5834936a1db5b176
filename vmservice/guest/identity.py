# -*- test-case-name: tests.guest.test_identity -*-
"""
The guest's identity: the ``adopt`` operation, which makes a guest cloned from a
template its own (see :mod:`vmservice.wire.adoption` for the request).

In this order, each step only once the one before succeeded:

1. ``entropy``: the host's bytes into the kernel's pool (``RNDADDENTROPY``) and a
   reseed of its random generator (``RNDRESEEDCRNG``), first of all: a clone's
   generator state is the template's, so every clone would otherwise draw the
   same numbers;
2. ``ssh``: the SSH server copied from the parent, if its agent started one, is stopped
   (``SIGSTOP``: it holds the parent's host key and would answer on the
   node's address once the network step made it the node's; stopped, it
   never runs again, and its exit is not on the path to the answer), and
   the host keys on the disk are marked inherited: after the answer they are
   deleted, and a stopped server ended and started again with a new key
   (:func:`vmservice.guest.login.renew_host_keys`, with the ``files`` step
   below).  A template's agent never started an SSH server, so for a clone
   this is one attribute read: no system call;
3. ``clock``: the wall clock (the template's stood still while it was frozen);
4. ``hostname``: the kernel's host name;
5. ``network`` (with a net): eth0's MAC and ``IFF_UP`` (one ``RTM_NEWLINK``; a
   device that refuses a new MAC while up is taken down for it), its addresses
   flushed (``RTM_GETADDR``'s dump, an ``RTM_DELADDR`` for each of eth0's), the
   new address (``RTM_NEWADDR``) and the default route via the gateway
   (``RTM_NEWROUTE``, create or replace), each acknowledged, through the
   kernel's routing netlink from the agent itself (:mod:`vmservice.guest.rtnetlink`):
   no ``ip`` process, whose fork, exec, dynamic loading and fresh translation
   under TCG cost tens of milliseconds each.  The kernel's refusal fails the
   step with its errno's text.

``{"op": "adopt", "prepare": true}`` (no body) does none of it and answers
``{"prepared": true}``: a template sends it before it is frozen, so that this
module is loaded in its clones already.  It answers once the guest *settled*:
its metrics agent serves its port (``/run/vmservice-metrics.ready``) and the
kernel no longer zeroes the inode tables of the root file system the agent grew
to its disk (no ``ext4lazyinit`` thread: the guest's ``init`` mounts it with
``init_itable=0``, so that takes a moment, not seconds), or the agent has run
for :data:`SETTLE_LIMIT` seconds (an image without a metrics agent, a fork's
parent that runs for longer); then it moves its Python objects out of the
garbage collector's reach (``gc.freeze``: a clone's collection would write to
every page that holds one, each then a copy-on-write page of the clone's own)
and writes what the guest's file systems hold in memory to its disk
(``sync``).  A template frozen while its metrics agent still started would
have every clone finish that start (a Python interpreter's start and imports,
all of it translated anew under TCG) right after its adoption, and every clone
would zero those inode tables and write the template's dirty pages and journal
to its own disk once the kernel's writeback found them due, seconds later (the
file system's, the block layer's and virtio's paths, translated anew by each).

Then the answer, ``{"previous_ns": N}``, and a new agent session whose nonce is
drawn after the reseed.  A failed step answers ``{"error": "adoption_failed",
"step": ..., "message": ...}`` and the session goes on; an invalid request is
refused (BAD_HEADER).

6. ``files``: ``/etc/hostname`` and ``/etc/hosts`` (as the guest's ``rc`` writes
   them at boot) and ``/etc/machine-id``, each written beside and renamed over
   the old one, after the answer, as the agent's deferred start-up work is
   (:func:`vmservice.guest.deferred.run_deferred`): before the first operation
   that could read them (any but health, echo, clock, secrets and login, which
   do not), else :data:`~vmservice.guest.deferred.DEFERRED_DELAY` seconds later.
   No request of the host (on any session) can see the template's files, the
   host does not wait for them, and clones created together do not spend the
   shared CPU on them while the others adopt.  In the default image the three are links into the
   tmpfs ``/run/vmservice/``: the file that is written is the link's target, so
   a clone's path does not touch the root file system (its journal, writeback
   and the virtio disk: kernel paths a clone would translate anew under TCG,
   about 0.1-0.3 s of it and megabytes of translation cache).  A failure there
   can no longer be answered: it is logged on the console and the files keep
   the template's content.  Then the inherited SSH host keys are deleted and
   a stopped SSH server started again (``ssh-keygen`` and ``sshd``: two
   processes, so not on the path to the answer; only a fork's child whose
   parent ran one pays them).
7. ``persist``: :data:`PERSIST_DELAY` seconds after the files, the machine-id is kept on
   the root file system too (:data:`PERSISTED_MACHINE_ID`: the hostname, then
   the machine-id, each on a line; synced), where the guest's ``rc`` finds it
   again at boot (a reboot, a reset or a relaunch) if the hostname is still its
   own: a fork's child, whose disk holds its parent's, ignores that one.  The
   guest's shutdown script writes it too, so a guest that powers off or reboots
   itself sooner keeps it; a reset by the host sooner loses it (the guest then
   has no machine-id, as a cold-booted node), as a reset within the file
   system's commit interval lost the file written at once before.

Standard library only, and no process started before the answer (a fork and an
exec cost under TCG, and adopting is on the path of every clone).
"""

from __future__ import annotations

import fcntl
import gc
import os
import socket
import time
from typing import Any, Callable, Mapping, Optional, Protocol

from vmservice.guest import agentlog, deferred
from vmservice.guest.adoption_system import add_entropy, hosts_file, replace_file
from vmservice.guest.streams import GuestStream
from vmservice.guest.bodies import BodyHandler
from vmservice.guest.login import System as LoginSystem
from vmservice.guest.login import renew_host_keys, stop_inherited_sshd
from vmservice.guest.metrics import READY_FILE as METRICS_READY
from vmservice.guest.rtnetlink import (IFA_ADDRESS, IFA_LOCAL, IFF_UP, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
                                       NLM_F_EXCL, NLM_F_REPLACE, RT_SCOPE_UNIVERSE, RTM_DELADDR, RTM_GETADDR,
                                       RTM_NEWADDR, RTM_NEWLINK, RTM_NEWROUTE, Address, Message, NetlinkError,
                                       RouteSocket, address_body, decode_address, link_body, route_body)
from vmservice.wire.adoption import AdoptionError, AdoptionRequest, decode_adoption, entropy_size

__all__ = [
    "PERSISTED_MACHINE_ID",
    "PERSIST_DELAY",
    "SETTLE_LIMIT",
    "AdoptHandler",
    "AdoptionFailed",
]

#: Seconds after the agent started when ``prepare`` stops waiting for the guest's other services.
SETTLE_LIMIT = 15.0
#: How often ``prepare`` looks for them meanwhile.
SETTLE_POLL = 0.05
#: Seconds after the files when the machine-id is also written to the root file system: about when the
#: file system would have committed the files written at once (ext4's journal commits every 5 s), so a
#: reset of the node loses it in the same window as before, while a burst of clones created together has
#: answered by then (the disk's kernel paths, translated anew by each clone, do not compete with them).
PERSIST_DELAY = 5.0
#: Where the machine-id is kept on the root file system (read by the guest's ``rc`` at boot).
PERSISTED_MACHINE_ID = "/var/lib/vmservice/machine-id"


class RouteChannel(Protocol):
    """What the network step needs of the kernel's routing netlink (:class:`~vmservice.guest.rtnetlink.RouteSocket`)."""

    def request(self, type_: int, flags: int, body: bytes) -> list[Message]: ...

    def close(self) -> None: ...


class AdoptionFailed(Exception):
    """A step of the adoption failed.

    :ivar step: which one (``entropy``, ``ssh``, ``clock``, ``hostname``, ``network``; ``files`` after the
        answer).
    """

    def __init__(self, step: str, message: str) -> None:
        super().__init__(message)
        self.step = step


def _freeze_objects() -> None:
    gc.collect()
    gc.freeze()


class AdoptHandler(BodyHandler):
    """Adopts the identity the host sends (see the module's description)."""

    limit = 4096
    #: Where the kernel's random generator is reached; tests point it elsewhere.
    random_device = "/dev/urandom"
    #: The ``ioctl`` used on it; tests replace it.
    ioctl: Callable[..., Any] = staticmethod(fcntl.ioctl)
    #: Sets the kernel's host name (``sethostname``: a shorter kernel path than a
    #: write to ``/proc/sys/kernel/hostname``, so less to translate); tests replace it.
    set_kernel_hostname: Callable[[str], None] = staticmethod(socket.sethostname)
    #: The directory of ``hostname``, ``hosts`` and ``machine-id``.
    etc = "/etc"
    #: Writes every file system's dirty data and journal to the disk (``sync``); tests replace it.
    sync: Callable[[], None] = staticmethod(os.sync)
    #: Collects, then moves the agent's objects out of the collector's reach; tests replace it.
    freeze_objects: Callable[[], None] = staticmethod(_freeze_objects)
    #: The clock of :attr:`AgentContext.started_ns`; tests replace it.
    monotonic_ns: Callable[[], int] = staticmethod(time.monotonic_ns)
    #: Where the processes are listed; tests point it elsewhere.
    proc = "/proc"
    #: Where the metrics agent says it serves; tests point it elsewhere.
    metrics_ready = METRICS_READY
    #: Where the machine-id is kept on the root file system; tests point it elsewhere.
    persisted_machine_id = PERSISTED_MACHINE_ID
    #: Opens the kernel's routing netlink (a :class:`~vmservice.guest.rtnetlink.RouteSocket`); tests replace it.
    open_route: Callable[[], RouteChannel] = RouteSocket
    #: An interface's index (``if_nametoindex``); tests replace it.
    interface_index: Callable[[str], int] = staticmethod(socket.if_nametoindex)
    #: The interface the network step configures.
    interface = "eth0"
    #: The files and programs of the SSH server (:class:`~vmservice.guest.login.System`); tests replace it.
    ssh_system: Callable[[], LoginSystem] = LoginSystem

    def __init__(self, stream: GuestStream, header: Mapping[str, Any]) -> None:
        super().__init__(stream, header)
        self._request: Optional[AdoptionRequest] = None

    def start(self) -> None:
        if self.header.get("prepare") is True:
            return
        try:
            entropy_size(self.header)
        except AdoptionError as error:
            self.refuse(str(error))

    def complete(self, body: bytes) -> None:
        if self.header.get("prepare") is True:
            # A template loads what adopting needs before it is frozen, so that
            # its clones do not import it on their first request.
            self._settle()
            return
        try:
            request = decode_adoption(self.header, body)
        except AdoptionError as error:
            self.refuse(str(error))
            return
        started = time.monotonic()
        try:
            previous = self._adopt(request)
        except AdoptionFailed as failure:
            agentlog.log(f"adoption failed at {failure.step}: {failure}")
            self.reply({"error": "adoption_failed", "step": failure.step, "message": str(failure)[:500]})
            return
        self.stream.write(b'{"previous_ns":%d}' % previous)
        # The nonce of the new session is drawn after the reseed.
        self.stream.end_session("adopted a new identity")
        answered = time.monotonic()
        # Before the first operation that could read them, else a moment later (deferred.run_deferred).
        deferred.DEFERRED.append(lambda: self._write_files(request, (answered - started) * 1000))
        deferred.DEFERRED.append(self._renew_host_keys)
        self.stream.loop.call_later(deferred.DEFERRED_DELAY, deferred.run_deferred)

    def _settle(self) -> None:
        """Answer ``prepare`` once the guest settled (see the module's description)."""
        age = (self.monotonic_ns() - self.stream.context.started_ns) / 1e9
        if age >= SETTLE_LIMIT or os.path.exists(self.metrics_ready) and not self._lazy_init():
            # What the guest wrote so far goes to its disk now, not from every clone (or fork child)
            # once the kernel's writeback finds it due: each of them would write the same pages.
            # The agent's objects so far are the template's: its clones' collections leave them alone,
            # rather than each writing to (so copying) every page of them.
            self.freeze_objects()
            self.sync()
            self.reply({"prepared": True})
            return
        self.stream.loop.call_later(min(SETTLE_POLL, SETTLE_LIMIT - age), self._settle)

    def _lazy_init(self) -> bool:
        """Whether the kernel still zeroes inode tables of a file system (its ``ext4lazyinit`` thread runs)."""
        for entry in os.listdir(self.proc):
            if entry.isdigit():
                try:
                    with open(os.path.join(self.proc, entry, "comm"), "rb") as stream:
                        if stream.read() == b"ext4lazyinit\n":
                            return True
                except OSError:
                    pass
        return False

    def _write_files(self, request: AdoptionRequest, answered_ms: float) -> None:
        """The ``files`` step, then the log line (the console is slow too: after the answer)."""
        try:
            self._step("files", self._files, request)
        except Exception as failure:  # the loop must go on: the host was answered already
            agentlog.log(f"adoption of {request.hostname} answered, then failed at files: {failure}")
            return
        agentlog.log(f"adopted {request.hostname} ({', '.join(self._timings)}; answered after {answered_ms:.0f} ms)")
        self.stream.loop.call_later(PERSIST_DELAY, lambda: self._persist(request))

    def _renew_host_keys(self) -> None:
        """The inherited SSH host keys deleted, a stopped SSH server started again with a new one."""
        try:
            done = renew_host_keys(self.ssh_system())
        except Exception as failure:  # the loop must go on: the host was answered already
            agentlog.log(f"renewing the SSH host keys failed: {failure}")
            return
        if done:
            agentlog.log(done)

    def _persist(self, request: AdoptionRequest) -> None:
        """The ``persist`` step: the hostname and machine-id on the root file system."""
        try:
            os.makedirs(os.path.dirname(self.persisted_machine_id), exist_ok=True)
            replace_file(self.persisted_machine_id, f"{request.hostname}\n{request.machine_id}\n", 0o444, True)
        except OSError as failure:
            agentlog.log(f"cannot keep the machine-id of {request.hostname} on the disk: {failure}")

    def _adopt(self, request: AdoptionRequest) -> int:
        self._timings: list[str] = []
        self._step("entropy", self._entropy, request.entropy)
        # After the reseed (new keys come from the reseeded generator), before the network is the node's.
        self._step("ssh", self._stop_sshd, None)
        context = self.stream.context
        previous = context.realtime_ns()
        self._step("clock", context.set_realtime_ns, request.wall_clock_ns)
        self._step("hostname", self._hostname, request.hostname)
        if request.mac is not None:
            self._step("network", self._network, request)
        return previous

    def _step(self, name: str, action: Callable[[Any], None], argument: Any) -> None:
        started = time.monotonic()
        try:
            action(argument)
        except AdoptionFailed:
            raise
        except (OSError, ValueError, OverflowError) as error:
            raise AdoptionFailed(name, f"{name}: {error}") from None
        self._timings.append(f"{name} {(time.monotonic() - started) * 1000:.0f} ms")

    def _entropy(self, entropy: bytes) -> None:
        fd = os.open(self.random_device, os.O_RDWR | os.O_CLOEXEC)
        try:
            add_entropy(fd, entropy, self.ioctl)
        finally:
            os.close(fd)

    def _stop_sshd(self, _: None) -> None:
        stop_inherited_sshd(self.ssh_system())

    def _hostname(self, hostname: str) -> None:
        self.set_kernel_hostname(hostname)

    def _files(self, request: AdoptionRequest) -> None:
        replace_file(os.path.join(self.etc, "hostname"), f"{request.hostname}\n", 0o644)
        replace_file(os.path.join(self.etc, "hosts"), hosts_file(request.hostname), 0o644)
        replace_file(os.path.join(self.etc, "machine-id"), f"{request.machine_id}\n", 0o444)

    def _netlink(self, channel: RouteChannel, what: str, type_: int, flags: int, body: bytes) -> list[Message]:
        """One request with its acknowledgement; the kernel's refusal fails the network step."""
        try:
            return channel.request(type_, flags | NLM_F_ACK, body)
        except NetlinkError as error:
            raise AdoptionFailed("network", f"network: {what}: {error.strerror} (errno {error.errno})"[:500]) from None

    def _network(self, request: AdoptionRequest) -> None:
        assert request.mac is not None and request.address is not None
        device = self.interface
        index = self.interface_index(device)
        mac = bytes.fromhex(request.mac.replace(":", ""))
        address, _, prefix = request.address.partition("/")
        channel = self.open_route()
        try:
            what = f"{device}'s address {request.mac}, up"
            try:
                # The new MAC and IFF_UP in one message: the kernel sets the address, then the flags.
                self._netlink(channel, what, RTM_NEWLINK, 0, link_body(index, IFF_UP, IFF_UP, mac))
            except AdoptionFailed:
                # A device that cannot change its address while up.
                self._netlink(channel, f"{device} down", RTM_NEWLINK, 0, link_body(index, 0, IFF_UP))
                self._netlink(channel, what, RTM_NEWLINK, 0, link_body(index, IFF_UP, IFF_UP, mac))
            self._flush(channel, device, index)
            local = socket.inet_aton(address)
            self._netlink(channel, f"add {request.address} to {device}", RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL,
                          address_body(Address(socket.AF_INET, int(prefix), 0, RT_SCOPE_UNIVERSE, index,
                                               [(IFA_LOCAL, local), (IFA_ADDRESS, local)])))
            if request.gateway is not None:
                self._netlink(channel, f"default route via {request.gateway} on {device}", RTM_NEWROUTE,
                              NLM_F_CREATE | NLM_F_REPLACE, route_body(socket.inet_aton(request.gateway), index))
        finally:
            channel.close()

    def _flush(self, channel: RouteChannel, device: str, index: int) -> None:
        """Remove every address (of any family) of device ``index``, as ``ip addr flush`` does."""
        dump = self._netlink(channel, f"list {device}'s addresses", RTM_GETADDR, NLM_F_DUMP,
                             address_body(Address(socket.AF_UNSPEC, 0, 0, 0, 0, [])))
        for message in dump:
            if message.type != RTM_NEWADDR:
                continue
            old = decode_address(message.body)
            if old.ifindex != index:
                continue
            named = [(kind, value) for kind, value in old.attributes if kind in (IFA_LOCAL, IFA_ADDRESS)]
            self._netlink(channel, f"remove an address of {device}", RTM_DELADDR, 0,
                          address_body(old._replace(attributes=named)))
