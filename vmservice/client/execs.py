# -*- test-case-name: tests.client.test_execs,tests.integration.test_client -*-
"""
Commands run in a node (``POST /vm/{hostname}/exec``): streamed
(:meth:`ExecCalls.exec`, records handed on as they arrive, stdin streamed
while the output comes back), buffered (:meth:`ExecCalls.exec_buffered`) or
started in the background (:meth:`ExecCalls.exec_background`).  How a
command runs is one :class:`ExecOptions` record, whichever the way.
"""

from __future__ import annotations

from typing import IO, Any, Callable, Mapping, Sequence

import treq
from attrs import evolve, field, frozen
from twisted.web.iweb import IBodyProducer, IResponse

from .._duplex import DuplexBody
from .errors import ApiError, ExecInterrupted
from .records import ExecRecord, ExecResult, NdjsonDecoder, decode_exec_record, optional, payload
from .requests import Requests, _is_connection_loss, _losses, _octal, _path

__all__ = ["ExecCalls", "ExecOptions"]


def _environment(env: Mapping[str, str] | Sequence[str] | None) -> tuple[str, ...]:
    """``{"K": "V"}`` or ``["K=V", ...]`` as ``("K=V", ...)``."""
    if isinstance(env, Mapping):
        return tuple(f"{key}={value}" for key, value in env.items())
    return tuple(env or ())


@frozen
class ExecOptions:
    """
    How a command runs, whichever way it is run (streamed, buffered or in the
    background); each field left at its default is the daemon's default.

    :ivar env: ``{"K": "V"}`` or ``["K=V", ...]`` (kept as ``("K=V", ...)``).
    :ivar uid: the user to run as (the daemon's default: 0).
    :ivar gid: the group to run as (the daemon's default: 0).
    :ivar cwd: the working directory (absolute, ``~`` or relative to the
        user's home).
    :ivar shell: the shell that runs ``cmd`` (the daemon's default is
        ``/bin/bash``), or ``""`` to run the program itself.
    :ivar permissions: the process's umask (``0o022`` or ``"0022"``).
    :ivar stdout: ``False`` to leave stdout out of the stream.
    :ivar stderr: ``False`` to leave stderr out of the stream.
    :ivar stdio: ``"base64"`` (exact bytes; the default here) or ``"text"``
        (the daemon replaces invalid UTF-8).
    """

    env: tuple[str, ...] = field(default=(), converter=_environment)
    uid: int | None = None
    gid: int | None = None
    cwd: str | None = None
    shell: str | None = None
    permissions: int | str | None = None
    stdout: bool | None = None
    stderr: bool | None = None
    stdio: str = "base64"

    def params(self, cmd: str, args: Sequence[str]) -> dict[str, Any]:
        """The exec route's query for ``cmd`` and ``args`` run this way."""
        return {
            "cmd": cmd,
            "args": list(args),
            "env": list(self.env),
            "uid": self.uid,
            "gid": self.gid,
            "cwd": self.cwd,
            "shell": self.shell,
            "permissions": _octal(self.permissions),
            "stdout": self.stdout,
            "stderr": self.stderr,
            "stdio": self.stdio,
        }


_DEFAULT = ExecOptions()


class ExecCalls(Requests):
    """
    Commands run in a node.
    """

    async def exec(
        self,
        hostname: str,
        cmd: str,
        args: Sequence[str] = (),
        options: ExecOptions = _DEFAULT,
        *,
        on_record: Callable[[ExecRecord], None],
        stdin: IBodyProducer | IO[bytes] | bytes | None = None,
    ) -> ExecRecord:
        """
        Run a command in node ``hostname`` and hand each record of its output
        stream to ``on_record`` as soon as it arrives; nothing is buffered
        beyond one NDJSON line, and a slow ``on_record`` slows the guest.

        :param cmd: a command line for the options' ``shell`` (the daemon's
            default is ``/bin/bash``), or the program itself when ``shell`` is ``""``.
        :param args: words appended to ``cmd``, each quoted as one word (or
            the argv after the program when ``shell`` is ``""``).
        :param options: how it runs (see :class:`ExecOptions`).
        :param on_record: called with every :class:`ExecRecord`, the last
            one (``exit`` or ``error``) included; an exception it raises
            ends the request and is raised here.
        :param stdin: the process's stdin, streamed while its output comes
            back: a producer, a file object (see
            :func:`~vmservice.client.bodies.body_producer`: a pipe is read as
            data arrives and sent chunked) or bytes; ``None`` for no stdin.
        :return: the last record: ``exit`` (with ``exit_code`` and
            ``signal``) or ``error`` (could not be started).
        :raise ApiError: an error before the stream started (bad input 400,
            unknown node 404, paused 409, agent not connected 503).
        :raise ExecInterrupted: the stream ended without a last record.
        """
        params = options.params(cmd, args)
        body: IBodyProducer | bytes | None = None
        if stdin is not None:
            params["stdin"] = True
            body = DuplexBody(self._producer(stdin))
        response = await self._send(
            "POST",
            _path("vm", hostname, "exec"),
            params,
            data=body,
            headers={b"Accept": b"application/x-ndjson", b"Content-Type": b"application/octet-stream"},
        )
        return await _last_record(response, on_record)

    async def exec_buffered(
        self, hostname: str, cmd: str, args: Sequence[str] = (), options: ExecOptions = _DEFAULT
    ) -> ExecResult:
        """
        Run a command and answer its whole output once it has ended
        (``buffered=true``): for short commands whose output fits in memory.
        The parameters are those of :meth:`exec`.

        :raise ApiError: an error before the command ran.
        """
        params = options.params(cmd, args)
        params["buffered"] = True
        result = await self._json("POST", _path("vm", hostname, "exec"), params)
        if not isinstance(result, dict):
            raise ApiError(200, "invalid_response", "the daemon's answer is not an ExecResult")
        encoding = result.get("encoding")
        try:
            out, err = payload(result.get("stdout"), encoding), payload(result.get("stderr"), encoding)
        except ExecInterrupted as error:
            raise ApiError(200, "invalid_response", str(error)) from None
        exit_code = result.get("exit_code")
        return ExecResult(
            stdout=out,
            stderr=err,
            exit_code=exit_code if isinstance(exit_code, int) else 0,
            pid=optional(result.get("pid"), int),
            signal=optional(result.get("signal"), str) or None,
            error=optional(result.get("error"), str) or None,
            started_at=optional(result.get("started_at"), str),
            ended_at=optional(result.get("ended_at"), str),
        )

    async def exec_background(
        self,
        hostname: str,
        cmd: str,
        args: Sequence[str] = (),
        options: ExecOptions = _DEFAULT,
        *,
        ring_bytes: int | None = None,
    ) -> dict[str, Any]:
        """
        Start a command in the background (``background=true``): it runs in the
        guest on its own, its output kept there in a ring of ``ring_bytes``
        (the daemon's default: 1 MiB).  The other parameters are those of
        :meth:`exec`; the options' ``stdout``, ``stderr`` and ``stdio`` are not sent.

        :return: ``{exec_id, pid, started_at, ring_bytes}``.
        """
        params = evolve(options, stdout=None, stderr=None, stdio="base64").params(cmd, args)
        params.update(background=True, ring_bytes=ring_bytes)
        result: dict[str, Any] = await self._json("POST", _path("vm", hostname, "exec"), params)
        return result


async def _last_record(response: IResponse, on_record: Callable[[ExecRecord], None]) -> ExecRecord:
    """
    Hand each record of an exec stream to ``on_record`` as it arrives and
    answer the last one.

    :raise ExecInterrupted: the stream ended without a last record, or went on after it.
    """
    decoder = NdjsonDecoder()
    last: list[ExecRecord] = []

    def deliver(values: list[Any]) -> None:
        for value in values:
            if last:
                raise ExecInterrupted("records after the last record")
            record = decode_exec_record(value)
            if record.final:
                last.append(record)
            on_record(record)

    def decode(feed: Callable[[], list[Any]]) -> list[Any]:
        try:
            return feed()
        except ValueError as error:
            raise ExecInterrupted(f"the daemon sent something that is not NDJSON: {error}") from None

    try:
        await treq.collect(response, lambda chunk: deliver(decode(lambda: decoder.feed(chunk))))
        deliver(decode(decoder.finish))
    except ExecInterrupted:
        raise
    except Exception as error:
        if last:
            return last[0]
        if _is_connection_loss(error):
            raise ExecInterrupted(f"the connection to the daemon was lost: {_losses(error)}") from None
        raise
    if not last:
        raise ExecInterrupted("the stream ended without an exit record")
    return last[0]
