# -*- test-case-name: tests.guest.test_agent,tests.integration.guest.test_agent -*-
"""
The guest agent: serves the agent wire protocol inside the VM.

It runs as ``from vmservice.guest.agent import main; main()`` under ``python3.11 -I -S``
(respawned by init), so it uses the standard library only.  It finds the
virtio-serial port named ``agent`` through ``/sys/class/virtio-ports/*/name``, opens
``/dev/<vportNpM>`` non-blocking and serves :mod:`vmservice.wire` on it with
``epoll`` (:mod:`vmservice.guest.loop`).

The host may connect late, disconnect and reconnect at any time.  While no host is
connected the port reports POLLHUP and reads return 0; the agent then drops every
stream, forgets its session and checks the port every
:data:`DISCONNECTED_POLL_INTERVAL` seconds (POLLHUP is level-triggered, so waiting in
the selector would spin) until a host is back, then starts a new session by sending
its HELLO.  A host that reconnects faster than that is still noticed, by the new
nonce of its HELLO (see :mod:`vmservice.wire.connection`).

``--listen-unix PATH`` serves a UNIX socket instead, one connection at a time, the
same way: it emulates QEMU's server socket for tests on the host.

The agent also listens on AF_VSOCK port :data:`~vmservice.guest.listeners.VSOCK_PORT`
(any CID) when the kernel command line says ``vmservice.vsock=1`` (the host gave
the machine a vhost-vsock device, and the initramfs loaded the vsock modules) or
when started with ``--listen-vsock [PORT]``.  The port and the vsock listener share
one session slot (:mod:`vmservice.guest.session_slot`): one host session at a time,
on whichever link the host came.  No vsock in the guest is logged, not fatal: the
serial port is still served.

Operations are a table, :data:`vmservice.guest.operations.HANDLERS`: the ``op`` of a
stream's OPEN header names a :class:`~vmservice.guest.streams.StreamHandler` subclass,
instantiated once per stream.  Later operations (exec, file copy, shell, TCP
forwarding) plug in there and use :attr:`~vmservice.guest.streams.GuestStream.loop`
for their own file descriptors and timers.

This module starts the agent (:func:`main`); its runtime is in modules of its own:
:mod:`~vmservice.guest.loop` (the event loop), :mod:`~vmservice.guest.pipe` (bytes
over the port), :mod:`~vmservice.guest.session` (the codec and the streams of one
connection), :mod:`~vmservice.guest.streams` (a stream and what serves it),
:mod:`~vmservice.guest.servers` (the port or a UNIX socket),
:mod:`~vmservice.guest.context` (what handlers know of the agent),
:mod:`~vmservice.guest.deferred` (start-up work put off) and
:mod:`~vmservice.guest.agentlog` (the log).  The operations it serves itself are
:mod:`~vmservice.guest.health`, :mod:`~vmservice.guest.echo` and
:mod:`~vmservice.guest.clock`, listed with the others in
:mod:`~vmservice.guest.operations`.
"""
from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as _signal
else:
    # signal's own module builds enumerations of the signals (it imports enum): the
    # C module underneath has the same functions and numbers, for a cheaper start.
    import _signal

if __name__ == "__main__" and not __package__:
    # Run as a script (tests on the host): make the package importable without
    # letting this directory shadow anything.
    _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
        sys.path[0] = _root
    else:
        sys.path.insert(0, _root)

from vmservice.guest import agentlog, deferred
from vmservice.guest.context import AgentContext
from vmservice.guest.loop import Loop
from vmservice.guest.listeners import VSOCK_PORT, vsock_listener
from vmservice.guest.servers import Server, UnixListenServer, VirtioPortServer, VsockListenServer, wait_for_port
from vmservice.guest.session_slot import SessionSlot

if TYPE_CHECKING:
    import argparse
    from typing import Optional

#: Name of the virtio-serial port the host attaches the agent channel to.
PORT_NAME = "agent"
#: The kernel command line's word for a machine with a vhost-vsock device.
VSOCK_WORD = "vmservice.vsock=1"


class _Arguments:
    """The defaults of the command line, when there is none."""

    version = False
    listen_unix: Optional[str] = None
    port_name = PORT_NAME
    device: Optional[str] = None
    listen_vsock: Optional[int] = None


def _parse_arguments(arguments: list[str], context: "AgentContext") -> argparse.Namespace:
    import argparse

    parser = argparse.ArgumentParser(prog="vmservice-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"vmservice-agent {context.version}")
    parser.add_argument("--listen-unix", metavar="PATH", help="serve a UNIX socket instead")
    parser.add_argument("--port-name", default=PORT_NAME, help="virtio-serial port name")
    parser.add_argument("--device", help="serve this character device as the port")
    parser.add_argument("--listen-vsock", metavar="PORT", type=int, nargs="?", const=VSOCK_PORT,
                        help=f"also listen on this AF_VSOCK port (default {VSOCK_PORT}), any CID")
    return parser.parse_args(arguments)


def vsock_wanted(cmdline_path: str = "/proc/cmdline") -> bool:
    """
    Whether the kernel command line says the machine has a vhost-vsock device (:data:`VSOCK_WORD`).
    """
    try:
        with open(cmdline_path) as f:
            return VSOCK_WORD in f.read().split()
    except OSError:
        return False


def _vsock_server(loop: Loop, context: AgentContext, port: int, slot: SessionSlot) -> Optional[VsockListenServer]:
    """The vsock listener on ``port``, or ``None`` (logged) when the guest has no vsock."""
    try:
        listener = vsock_listener(port)
    except OSError as error:
        agentlog.log(f"no vsock listener on port {port}: {error}")
        return None
    return VsockListenServer(loop, context, listener, slot)


def _mark_ready() -> None:
    """
    Create the file ``$VMSERVICE_AGENT_READY`` names, if any: the guest's
    other services wait for it before they start, so that the agent, which
    the host waits for, has the vCPU to itself at boot.
    """
    path = os.environ.get("VMSERVICE_AGENT_READY")
    if path:
        try:
            with open(path, "w"):
                pass
        except OSError as error:
            agentlog.log(f"cannot create {path}: {error}")


def _start_guest_duties(loop: Loop) -> None:
    """
    In the guest (the agent started without arguments), once it serves its port: watch the ACPI power
    button (no process of its own for it), and grow the root file system to its disk (one ioctl, no
    program to run), put off past what the host asks before a create answers but done before any
    other operation (:func:`run_deferred`).
    """
    from vmservice.guest.powerbutton import PowerButton, power_off
    from vmservice.guest.rootgrowth import grow_root

    PowerButton(loop, power_off).start()

    def grow() -> None:
        grow_root(lambda line: print(line, flush=True))

    deferred.DEFERRED.append(grow)
    loop.call_later(deferred.DEFERRED_DELAY, deferred.run_deferred)


def main(argv: Optional[list[str]] = None) -> None:
    """
    Run the agent until killed.

    :param argv: command-line arguments (default ``sys.argv[1:]``).
    """
    context = AgentContext()
    arguments = sys.argv[1:] if argv is None else argv
    args: _Arguments | argparse.Namespace
    if arguments:
        args = _parse_arguments(arguments, context)
    else:
        # The guest starts the agent without arguments: skip argparse, whose
        # import costs about a tenth of a second under TCG.
        args = _Arguments()

    loop = Loop()
    slot = SessionSlot()
    server: Server
    if args.listen_unix:
        server = unix = UnixListenServer(loop, context, args.listen_unix, slot)
        where = args.listen_unix
    else:
        where = args.device or wait_for_port(loop, args.port_name)
        server = VirtioPortServer(loop, context, where, slot)
        unix = None
    vsock_port = args.listen_vsock if arguments else (VSOCK_PORT if vsock_wanted() else None)
    vsock = _vsock_server(loop, context, vsock_port, slot) if vsock_port is not None else None

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(0)

    _signal.signal(_signal.SIGTERM, terminate)
    _signal.signal(_signal.SIGINT, terminate)
    server.start()
    if vsock is not None:
        vsock.start()
        where += f" and vsock port {vsock_port}"
    print(f"vmservice-agent: ready on {where}", flush=True)
    _mark_ready()
    if not arguments:
        _start_guest_duties(loop)
    try:
        loop.run()
    finally:
        if unix is not None:
            unix.close()


if __name__ == "__main__":
    main()

