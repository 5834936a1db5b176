# -*- test-case-name: tests.nodes.test_provisioning -*-
"""
Making a node's guest what its creator asked for: its secrets in
``/run/secrets``, its login user and SSH keys, and its userdata, run once.

Every time the node's agent answers on a new connection (the first boot, a
reboot or relaunch, a restore, a restarted agent or daemon) the guest is
*configured* again: the secrets are placed, as the store holds them now, and
the login user and keys installed; then its userdata is asked for, which the
guest runs only the first time (its marker on the node's disk says whether it
ran) and answers at once afterwards.  Each step is idempotent, so doing it
again is always safe, and a guest that lost its tmpfs (a cold boot) gets its
secrets back.

Waiting for it (``wait=agent`` waits until the guest is configured,
``wait=userdata`` until its userdata is over) goes through
:meth:`Provisioning.configured` and :meth:`Provisioning.userdata_over`, which
fire for the first boot of this run of the daemon.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from attrs import frozen
from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger

from ..errors import AgentError, GuestErrorKind, NotFound
from ..guestport.guest import GuestSecret, IGuest, UserdataOutcome
from ..observer import OneShotObserver

log = Logger()

__all__ = ["GuestSetup", "Provisioning", "SecretSource", "StoredSecret", "guest_secrets"]


class StoredSecretMeta(Protocol):
    """The metadata of a stored secret, as the secrets store has it."""

    @property
    def permissions(self) -> int: ...

    @property
    def uid(self) -> int: ...

    @property
    def gid(self) -> int: ...


class StoredSecret(Protocol):
    """A stored secret: its metadata and content."""

    @property
    def meta(self) -> StoredSecretMeta: ...

    @property
    def data(self) -> bytes: ...


class SecretSource(Protocol):
    """Where secrets come from (the daemon's secrets store)."""

    def get(self, name: str) -> StoredSecret:
        """The secret ``name``; :class:`NotFound` when there is none."""

    def resolve(self, names: Sequence[str]) -> Sequence[StoredSecret]:
        """The secrets ``names``; :class:`BadRequest` naming every unknown one."""

    def subscribe(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback`` with a secret's name after it was created, changed or deleted; returns a stop."""


def guest_secrets(source: SecretSource | None, names: Sequence[str]) -> tuple[GuestSecret, ...]:
    """
    The secrets of ``names`` that the store holds now, as they go into the
    guest; names deleted since are left out (their files are removed).
    """
    placed = []
    for name in names:
        if source is None:
            break
        try:
            secret = source.get(name)
        except NotFound:
            continue
        meta = secret.meta
        placed.append(GuestSecret(name=name, data=secret.data, mode=meta.permissions, uid=meta.uid, gid=meta.gid))
    return tuple(placed)


@frozen
class GuestSetup:
    """
    What a node's guest is made into.

    :ivar secrets: the names of its secrets.
    :ivar user: its login user; empty for none to make.
    :ivar ssh_keys: the authorized keys of that user.
    :ivar userdata: the script run at its first boot; empty for none.
    """

    secrets: tuple[str, ...] = ()
    user: str = ""
    ssh_keys: tuple[str, ...] = ()
    userdata: bytes = b""

    @property
    def configures(self) -> bool:
        """Whether there is anything to place before the guest is ready for its user."""
        return bool(self.secrets or self.user or self.ssh_keys)


def _gone(error: BaseException) -> bool:
    """Whether ``error`` means the agent went away (the next connection does it again)."""
    return isinstance(error, AgentError) and error.kind is GuestErrorKind.UNAVAILABLE


class Provisioning:
    """
    The configuration of one node's guest.

    :param hostname: the node, for the log.
    :param setup: reads what the guest is made into (the userdata script is
        read from the node's directory each time: it is not kept in memory).
    :param secrets: the secrets store.
    :param finished: called with the userdata's outcome when it is first
        known in this run of the daemon (the ``userdata_finished`` event).
    """

    def __init__(self, hostname: str, setup: Callable[[], GuestSetup], secrets: SecretSource | None,
                 finished: Callable[[UserdataOutcome], None] = lambda outcome: None) -> None:
        self._hostname = hostname
        self._finished = finished
        self._setup = setup
        self._secrets = secrets
        self._configured: OneShotObserver[None] = OneShotObserver()
        self._userdata: OneShotObserver[UserdataOutcome | None] = OneShotObserver()
        self._running: Deferred[None] | None = None
        self._again: IGuest | None = None

    def configured(self) -> Deferred[None]:
        """Fires once the guest got its secrets and login (fails when the guest refused them)."""
        return self._configured.when_fired()

    def userdata_over(self) -> Deferred[UserdataOutcome | None]:
        """Fires with the userdata's outcome once it is over (None for a node without userdata)."""
        return self._userdata.when_fired()

    def agent_ready(self, agent: IGuest) -> None:
        """The agent answers on a new connection: configure the guest (after a run under way)."""
        if self._running is not None:
            self._again = agent
            return
        self._running = Deferred.fromCoroutine(self._configure(agent))
        self._running.addBoth(self._ran)

    def _ran(self, _: object) -> None:
        self._running = None
        again, self._again = self._again, None
        if again is not None:
            self.agent_ready(again)

    async def resync_secrets(self, agent: IGuest) -> None:
        """Place the secrets again, as the store holds them now (one of them changed)."""
        setup = self._setup()
        if setup.secrets:
            await agent.place_secrets(guest_secrets(self._secrets, setup.secrets))

    async def _configure(self, agent: IGuest) -> None:
        try:
            setup = self._setup()
            if setup.secrets:
                await agent.place_secrets(guest_secrets(self._secrets, setup.secrets))
            if setup.user:
                outcome = await agent.login(setup.user, setup.ssh_keys)
                if setup.ssh_keys and outcome.sshd == "absent":
                    log.warn("node {hostname}: its image has no SSH server; its keys are installed but unused",
                             hostname=self._hostname)
        except CancelledError:
            raise
        except Exception as error:
            if not _gone(error):
                log.error("node {hostname}: configuring its guest failed: {error}", hostname=self._hostname, error=error)
                if not self._configured.fired:
                    self._configured.error(error)
            return
        if not self._configured.fired:
            self._configured.fire(None)
        if not setup.userdata:
            if not self._userdata.fired:
                self._userdata.fire(None)
            return
        try:
            result = await agent.run_userdata(setup.userdata)
        except CancelledError:
            raise
        except Exception as error:
            if not _gone(error):
                log.error("node {hostname}: running its userdata failed: {error}", hostname=self._hostname, error=error)
                if not self._userdata.fired:
                    self._userdata.error(error)
            return
        if not self._userdata.fired:
            log.info("node {hostname}: userdata {state}{code}", hostname=self._hostname, state=result.state,
                     code="" if result.exit_code is None else f" with exit code {result.exit_code}")
            self._userdata.fire(result)
            self._finished(result)
