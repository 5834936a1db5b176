# -*- test-case-name: tests.client.test_facade,tests.integration.test_client -*-
"""
What the client needs of its reactor, named for the type checker.
"""

from __future__ import annotations

from twisted.internet.interfaces import (
    IReactorFDSet,
    IReactorPluggableNameResolver,
    IReactorTCP,
    IReactorTime,
    IReactorUNIX,
)

__all__ = ["IBodyReactor", "IClientReactor"]


class IBodyReactor(IReactorTime, IReactorFDSet):
    """
    What :func:`body_producer` needs of its reactor: ``IReactorTime`` to read a
    file in chunks, ``IReactorFDSet`` to read a pipe as data arrives.

    Every reactor Twisted installs provides both; this interface only names
    the pair for the type checker (no reactor declares it).
    """


class IClientReactor(IBodyReactor, IReactorTCP, IReactorUNIX, IReactorPluggableNameResolver):
    """
    What a :class:`Client` needs of its reactor: connections over TCP (with
    host names resolved) or a UNIX socket, timers, and request bodies read
    from files and pipes (see :class:`IBodyReactor`).

    Every reactor Twisted installs provides all of these; this interface only
    names them together for the type checker (no reactor declares it).
    """
