# -*- test-case-name: tests.guest.test_port_state -*-
"""
Tests for :func:`vmservice.guest.servers.port_state`: what a poll of the
virtio-serial port says, as the guest's ``virtio_console`` driver reports it.
"""

from __future__ import annotations

import select

from twisted.trial.unittest import SynchronousTestCase

from vmservice.guest.servers import HOST, NO_HOST, PORT_GONE, port_state


class PortStateTests(SynchronousTestCase):
    def test_no_host(self) -> None:
        """
        No host connected: the driver reports POLLHUP with POLLIN (a read
        returns 0 at once) and POLLOUT; that is no host, not a session to serve.
        """
        self.assertEqual(port_state(select.POLLIN | select.POLLOUT | select.POLLHUP), NO_HOST)
        self.assertEqual(port_state(select.POLLHUP), NO_HOST)
        self.assertEqual(port_state(select.POLLERR | select.POLLOUT), NO_HOST)

    def test_host(self) -> None:
        """A host connected: no POLLHUP, whether or not it has written anything yet."""
        self.assertEqual(port_state(select.POLLOUT), HOST)
        self.assertEqual(port_state(select.POLLIN | select.POLLOUT), HOST)
        self.assertEqual(port_state(0), HOST)

    def test_gone(self) -> None:
        """An unplugged or closed port: opened again."""
        self.assertEqual(port_state(select.POLLNVAL), PORT_GONE)
        self.assertEqual(port_state(select.POLLNVAL | select.POLLHUP), PORT_GONE)
