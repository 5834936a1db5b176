# -*- test-case-name: tests.cluster.kubelet.test_exec_session -*-
"""
``kubectl exec -it POD -- sh``: a lone shell asked for with a terminal runs
as the guest's interactive shell (:meth:`~vmservice.guestport.guest.IGuest.shell`:
``SHELL -l`` on a pseudo-terminal), so the prompt, line editing and resizes
work as in a container.  The guest's exec has no terminal, so other
commands with ``tty=1`` run without one (:mod:`.exec_socket`).

A terminal has no half-close: the client's close of stdin types the EOF
character (Ctrl-D).  Hanging up (the client gone) sends SIGHUP.
"""

from __future__ import annotations

import posixpath
from typing import Optional

from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from ...api.shell_bridge import OutputPause
from ...errors import AgentError
from ...guestport.guest import IGuest
from ...guestport.shell import IShellSession, IShellSink, ShellRequest
from . import channels, status
from .exec_session import SessionInputs
from .params import ExecQuery

#: The shells run on a terminal when named alone (by name, found in /bin, or by absolute path).
SHELLS = frozenset({"sh", "bash", "ash", "dash", "zsh", "ksh", "mksh"})
#: What closing stdin types: the terminal's EOF character.
EOF_CHARACTER = b"\x04"


def terminal_shell(query: ExecQuery) -> Optional[str]:
    """The shell to run on a terminal for ``query``: ``tty=1`` and a command that is one shell, else ``None``."""
    if not query.tty or len(query.command) != 1:
        return None
    program = query.command[0]
    name = posixpath.basename(program)
    if name not in SHELLS or (program != name and posixpath.normpath(program) != program):
        return None
    return program if program.startswith("/") else "/bin/" + name


@implementer(IShellSink)
class TerminalCommand:
    """
    A shell on a terminal as an exec session's command: the guest shell's
    sink (its output goes out on stdout) and what the session drives.

    :param shell: the shell's absolute path.
    """

    def __init__(self, shell: str) -> None:
        self._shell = shell
        self.session: Optional[IShellSession] = None
        self.inputs: Optional[SessionInputs] = None

    def start(self, guest: IGuest) -> IPushProducer:
        """Start the shell in ``guest``: its terminal's output producer (:raise AgentError: no guest)."""
        self.session = guest.shell(ShellRequest(shell=self._shell), self)
        return OutputPause(self.session)

    def register_stdin(self, producer: IPushProducer) -> None:
        if self.session is not None:
            self.session.register_input_producer(producer)

    # -- the session's Command -----------------------------------------------------------

    def write_stdin(self, data: bytes) -> None:
        if self.session is not None:
            self.session.write(data)

    def close_stdin(self) -> None:
        self.write_stdin(EOF_CHARACTER)

    def resize(self, width: int, height: int) -> None:
        if self.session is not None and width > 0 and height > 0:
            self.session.resize(width, height)

    def kill(self) -> None:
        if self.session is not None:
            self.session.unregister_input_producer()
            self.session.hangup()

    # -- IShellSink ----------------------------------------------------------------------

    def started(self, pid: int) -> None:
        pass

    def output(self, data: bytes) -> None:
        if self.inputs is not None:
            self.inputs.output(channels.STDOUT, data)

    def _end(self, body: bytes) -> None:
        if self.session is not None:
            self.session.unregister_input_producer()
        if self.inputs is not None:
            self.inputs.ended(body)

    def exited(self, exit_code: int, signal: Optional[str]) -> None:
        self._end(status.exec_ended(exit_code, signal))

    def lost(self, error: AgentError) -> None:
        self._end(status.exec_error(f"the shell was lost: {error}"))


__all__ = ["EOF_CHARACTER", "SHELLS", "TerminalCommand", "terminal_shell"]
