# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
Background execs: list, describe, read the log of, signal, wait for and
forget one (``/vm/{hostname}/exec/...``); starting one is in
:mod:`vmservice.client.execs`.
"""

from __future__ import annotations

from typing import Any, Callable

import treq

from .records import ExecRecord, NdjsonDecoder, decode_exec_record
from .requests import Requests, _path

__all__ = ["BackgroundCalls"]


class BackgroundCalls(Requests):
    """
    The background execs of a node, once started.
    """

    async def background_execs(self, hostname: str) -> list[dict[str, Any]]:
        """The node's background execs, running or ended and not deleted (``GET /vm/{hostname}/exec``)."""
        result: list[dict[str, Any]] = await self._json("GET", _path("vm", hostname, "exec"))
        return result

    async def background_exec(self, hostname: str, exec_id: str) -> dict[str, Any]:
        """One background exec."""
        result: dict[str, Any] = await self._json("GET", _path("vm", hostname, "exec", exec_id))
        return result

    async def exec_logs(
        self,
        hostname: str,
        exec_id: str,
        *,
        on_record: Callable[[ExecRecord], None],
        from_id: int | None = None,
        follow: bool = False,
    ) -> None:
        """
        Hand each frame of a background exec's log to ``on_record`` as it
        arrives (``stdout``/``stderr`` with their bytes and ``id``, ``gap``
        when frames were dropped before they were read, ``exit`` last).

        :param from_id: the first frame wanted (a client resuming gives its
            last id + 1); ``None`` for the oldest kept.
        :param follow: go on until the exec ends instead of stopping at the
            end of what is kept now.
        """
        params = {"from_id": from_id, "follow": True if follow else None}
        response = await self._send("GET", _path("vm", hostname, "exec", exec_id, "logs"), params,
                                    headers={b"Accept": b"application/x-ndjson"})
        decoder = NdjsonDecoder()

        def deliver(values: list[Any]) -> None:
            for value in values:
                on_record(decode_exec_record(value))

        await treq.collect(response, lambda chunk: deliver(decoder.feed(chunk)))
        deliver(decoder.finish())

    async def kill_exec(
        self, hostname: str, exec_id: str, signal: str | None = None, grace_ms: int | None = None
    ) -> dict[str, Any]:
        """
        Signal a background exec's process group (``TERM`` by default, then
        ``KILL`` after ``grace_ms``, 5000 by default).

        :return: ``{exec_id, pid, running, signal_sent}``.
        """
        body = {key: value for key, value in (("signal", signal), ("grace_ms", grace_ms)) if value is not None}
        result: dict[str, Any] = await self._json("POST", _path("vm", hostname, "exec", exec_id, "kill"), json=body)
        return result

    async def wait_exec(self, hostname: str, exec_id: str, timeout: int | None = None) -> dict[str, Any]:
        """
        Wait up to ``timeout`` whole seconds (the daemon's default: 30) for a
        background exec to end; ``timed_out`` says whether it still runs.
        """
        result: dict[str, Any] = await self._json(
            "GET", _path("vm", hostname, "exec", exec_id, "wait-exit"), {"timeout": timeout}
        )
        return result

    async def delete_exec(self, hostname: str, exec_id: str) -> dict[str, Any]:
        """Forget a background exec that has ended (409 while it runs)."""
        result: dict[str, Any] = await self._json("DELETE", _path("vm", hostname, "exec", exec_id))
        return result
