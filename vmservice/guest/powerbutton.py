# -*- test-case-name: tests.images.test_powerbutton -*-
"""
The guest's power-button watcher: powers the guest off cleanly when the host presses the ACPI power button.

QMP ``system_powerdown`` only raises an ACPI event; nothing happens unless the guest acts on it. The
kernel's ``button`` driver turns the event into a ``KEY_POWER`` key press on an input device and ``evdev``
exposes it as ``/dev/input/eventN``. This program (run and respawned by busybox init) watches every such
device and then becomes ``poweroff``, which makes init run its shutdown actions, so the disk is left clean.

Guest side: standard library only, no imports from the rest of ``vmservice``. It starts on every boot next
to the agent on a single virtual CPU, where each imported module costs milliseconds under TCG, so it
imports as little as it can (no ``dataclasses``, ``typing``, ``glob`` or ``subprocess``): events are plain
``(type, code, value)`` tuples.
"""

from __future__ import annotations

import os
import selectors
import struct
import sys
import time

__all__ = ["EV_KEY", "INPUT_EVENT", "KEY_POWER", "is_power_press", "main", "parse_events", "watch"]

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


def _open_new_devices(directory: str, selector: selectors.BaseSelector, opened: dict[str, int]) -> None:
    try:
        names = sorted(name for name in os.listdir(directory) if name.startswith("event"))
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        if path in opened:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        opened[path] = fd
        selector.register(fd, selectors.EVENT_READ, (path, bytearray()))


def _power_pressed(selector: selectors.BaseSelector, opened: dict[str, int], timeout: float) -> bool:
    pressed = False
    for key, _mask in selector.select(timeout):
        path, pending = key.data
        try:
            chunk = os.read(key.fd, INPUT_EVENT.size * 64)
        except BlockingIOError:
            continue
        except OSError:
            chunk = b""
        if not chunk:  # the device went away
            selector.unregister(key.fd)
            os.close(key.fd)
            del opened[path]
            continue
        events, rest = parse_events(bytes(pending) + chunk)
        pending[:] = rest
        pressed = pressed or any(is_power_press(event) for event in events)
    return pressed


def watch(directory: str = "/dev/input", rescan_seconds: float = 5.0) -> None:
    """
    Block until a power key press arrives on any ``event*`` device in ``directory``, then return.

    Devices that appear later (a module loaded after boot) are picked up every ``rescan_seconds``.
    """
    selector = selectors.DefaultSelector()
    opened: dict[str, int] = {}
    try:
        while True:
            _open_new_devices(directory, selector, opened)
            if not opened:
                time.sleep(rescan_seconds)
            elif _power_pressed(selector, opened, rescan_seconds):
                return
    finally:
        for fd in opened.values():
            os.close(fd)
        selector.close()


def main(argv: list[str] | None = None) -> None:
    """
    Watch the input devices (the directory may be given as the only argument, for tests); on a power key
    press, print a line on the console and replace this process with ``poweroff``.
    """
    args = sys.argv[1:] if argv is None else argv
    watch(args[0] if args else "/dev/input")
    print("vmservice-init: power button pressed, powering off", flush=True)
    os.execvp("poweroff", ["poweroff"])


if __name__ == "__main__":
    main()
