# -*- test-case-name: tests.images.test_powerbutton -*-
"""
The guest's power-button watcher: powers the guest off cleanly when the host presses the ACPI power button.

QMP ``system_powerdown`` only raises an ACPI event; nothing happens unless the guest acts on it. The
kernel's ``button`` driver turns the event into a ``KEY_POWER`` key press on an input device and ``evdev``
exposes it as ``/dev/input/eventN``. The guest agent watches every such device in its own loop
(:class:`PowerButton`, started once the agent serves its port: one Python interpreter fewer per guest than
a watcher process of its own) and on a press runs ``poweroff`` (:func:`power_off`), which makes init run
its shutdown actions, so the disk is left clean.  A press that comes before the agent is up is lost; the
host presses again every few seconds while a graceful stop waits (``QemuMachine.stop``).

Guest side: standard library only, no imports from the rest of ``vmservice`` (the loop is only named for
the type checker). Events are plain ``(type, code, value)`` tuples.
"""

from __future__ import annotations

import os
import struct

TYPE_CHECKING = False

if TYPE_CHECKING:
    import signal as _signal
else:
    # signal's own module builds enumerations of the signals (it imports enum): the
    # C module underneath has the same functions and numbers, for a cheaper start.
    import _signal

if TYPE_CHECKING:
    from typing import Callable, Optional, Protocol

    class _Timer(Protocol):
        def cancel(self) -> None: ...

    class _Loop(Protocol):
        def watch(self, fd: int, on_readable: Optional[Callable[[], None]] = None,
                  on_writable: Optional[Callable[[], None]] = None) -> None: ...

        def call_later(self, delay: float, callback: Callable[[], None]) -> _Timer: ...

__all__ = ["EV_KEY", "INPUT_EVENT", "KEY_POWER", "PowerButton", "is_power_press", "parse_events", "power_off"]

# struct input_event on 64-bit Linux: struct timeval (two longs), __u16 type, __u16 code, __s32 value.
INPUT_EVENT = struct.Struct("=qqHHi")
EV_KEY = 0x01
KEY_POWER = 116
_PRESSED = 1


def parse_events(buffer: bytes) -> tuple[list[tuple[int, int, int]], bytes]:
    """
    Split ``buffer`` into whole events, each ``(type, code, value)``, and the leftover bytes of an
    incomplete one (reads from an event device return whole events, but the parser does not rely on it).
    """
    whole = len(buffer) - len(buffer) % INPUT_EVENT.size
    events = [(kind, code, value) for _sec, _usec, kind, code, value in INPUT_EVENT.iter_unpack(buffer[:whole])]
    return events, buffer[whole:]


def is_power_press(event: tuple[int, int, int]) -> bool:
    """
    Whether ``event`` is the power key going down (value 1); a release (0) or an auto-repeat (2) is not.
    """
    return event == (EV_KEY, KEY_POWER, _PRESSED)


class PowerButton:
    """
    Watches every ``event*`` device in ``directory`` from the guest agent's loop and calls ``on_press``
    for each power key press; devices that appear later (a module loaded after boot) are picked up every
    ``rescan_seconds``.

    :param loop: the agent's :class:`~vmservice.guest.loop.Loop` (``watch`` and ``call_later``).
    :param on_press: called for each press, from the loop.
    """

    def __init__(self, loop: _Loop, on_press: Callable[[], None], directory: str = "/dev/input",
                 rescan_seconds: float = 5.0) -> None:
        self._loop = loop
        self._on_press = on_press
        self._directory = directory
        self._rescan_seconds = rescan_seconds
        self._opened: dict[str, int] = {}
        self._timer: _Timer | None = None

    def start(self) -> None:
        """
        Open the devices there are now and look for new ones every ``rescan_seconds``.
        """
        self._scan()

    def stop(self) -> None:
        """
        Close every device and stop looking for new ones.
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for path in list(self._opened):
            self._forget(path)

    def _scan(self) -> None:
        try:
            names = sorted(name for name in os.listdir(self._directory) if name.startswith("event"))
        except OSError:
            names = []
        for name in names:
            path = os.path.join(self._directory, name)
            if path in self._opened:
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue
            self._opened[path] = fd
            self._loop.watch(fd, self._reader(path, fd))
        self._timer = self._loop.call_later(self._rescan_seconds, self._scan)

    def _forget(self, path: str) -> None:
        fd = self._opened.pop(path)
        self._loop.watch(fd)
        os.close(fd)

    def _reader(self, path: str, fd: int) -> Callable[[], None]:
        pending = bytearray()
        return lambda: self._readable(path, fd, pending)

    def _readable(self, path: str, fd: int, pending: bytearray) -> None:
        try:
            chunk = os.read(fd, INPUT_EVENT.size * 64)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the device went away
            self._forget(path)
            return
        events, rest = parse_events(bytes(pending) + chunk)
        pending[:] = rest
        if any(is_power_press(event) for event in events):
            self._on_press()


def power_off() -> None:
    """
    What the agent does on a press: say so on the console and run ``poweroff`` (without waiting for
    it), which makes init run its shutdown actions, so the disk is left clean.  Should ``poweroff``
    not start, signal init the way busybox's ``poweroff`` does (SIGUSR2).
    """
    print("vmservice-init: power button pressed, powering off", flush=True)
    try:
        os.posix_spawnp("poweroff", ["poweroff"], dict(os.environ))
    except OSError:
        os.kill(1, _signal.SIGUSR2)
