"""
Input events as the kernel writes them to a ``/dev/input`` event device, for the tests of the guest's
power-button watcher (:mod:`tests.images.test_powerbutton`,
:mod:`tests.integration.images.test_powerbutton`).
"""

from __future__ import annotations

from vmservice.guest.powerbutton import INPUT_EVENT


def event(kind: int, code: int, value: int) -> bytes:
    """One input event as the kernel writes it."""
    return INPUT_EVENT.pack(1700000000, 5, kind, code, value)
