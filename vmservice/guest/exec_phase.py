# -*- test-case-name: tests.guest.test_exec_phase -*-
"""
The phases of one exec in the guest (:class:`vmservice.guest.execution.ExecHandler`),
as transition tables: ``(phase, event) -> next phase``, any other pair a bug.
Diagram and theory: ``docs/state-machines/guest-exec.dot`` and ``.md``.
Standard library only.

Three things change over an exec's life, each on its own:

- **The process** (:data:`TRANSITIONS`): not started yet (``Starting``); it
  runs and its outputs are read (``Running``); it was reaped but output pipes
  are still open, and an empty pipe is closed at once (``Draining``); it runs
  with every output closed (``Quiet``); both happened and the EXIT record
  ended the stream (``Ended``); it could not start, and ERROR or REJECTED
  ended the stream (``Refused``); the host reset the stream while it ran and
  its process group is being killed, to be forgotten, not reaped, once it
  exits (``Killing``); the host reset the stream and nothing is left to do
  (``Abandoned``).
- **Reading the outputs** (:data:`FLOW`): the pipes are not watched
  (``Held``: before the start, or while :data:`~vmservice.guest.execution.PENDING_HIGH_WATER`
  bytes wait for the link) or they are (``Reading``).
- **Stdin** (:data:`STDIN`): no pipe (``Closed``), a pipe taking the host's
  DATA (``Open``), or a pipe that the host's HALF_CLOSE will close once what
  it buffered is written (``Ending``).
"""

from __future__ import annotations

STARTING, RUNNING, DRAINING, QUIET = "Starting", "Running", "Draining", "Quiet"
ENDED, REFUSED, KILLING, ABANDONED = "Ended", "Refused", "Killing", "Abandoned"
#: The process: ``(phase, event) -> next phase``.  Events: ``started``,
#: ``refused``, ``exited`` (the process exited), ``drained`` (its last output
#: pipe closed), ``reset`` (the host gave up).
TRANSITIONS = {
    (STARTING, "started"): RUNNING,
    (STARTING, "refused"): REFUSED,
    (STARTING, "reset"): ABANDONED,
    (RUNNING, "exited"): DRAINING,
    (RUNNING, "drained"): QUIET,
    (RUNNING, "reset"): KILLING,
    (DRAINING, "drained"): ENDED,
    (DRAINING, "reset"): ABANDONED,
    (QUIET, "exited"): ENDED,
    (QUIET, "reset"): KILLING,
    (KILLING, "exited"): ABANDONED,
    (KILLING, "reset"): KILLING,
    (ENDED, "reset"): ENDED,
    (REFUSED, "reset"): REFUSED,
    (ABANDONED, "reset"): ABANDONED,
}

HELD, READING = "Held", "Reading"
#: Reading the output pipes.  Events: ``room`` (the link has room again),
#: ``full`` (:data:`~vmservice.guest.execution.PENDING_HIGH_WATER` bytes wait).
FLOW = {
    (HELD, "room"): READING,
    (READING, "full"): HELD,
}

CLOSED, OPEN, ENDING = "Closed", "Open", "Ending"
#: Stdin.  Events: ``opened`` (the process was started with a stdin pipe),
#: ``eof`` (the host's HALF_CLOSE), ``closed`` (the pipe was closed: at
#: EOF, when the process closed its end, or when the exec ends).
STDIN = {
    (CLOSED, "opened"): OPEN,
    (CLOSED, "eof"): CLOSED,
    (CLOSED, "closed"): CLOSED,
    (OPEN, "eof"): ENDING,
    (OPEN, "closed"): CLOSED,
    (ENDING, "closed"): CLOSED,
}


__all__ = [
    "ABANDONED", "CLOSED", "DRAINING", "ENDED", "ENDING", "FLOW", "HELD", "KILLING", "OPEN", "QUIET", "READING",
    "REFUSED", "RUNNING", "STARTING", "STDIN", "TRANSITIONS",
]
