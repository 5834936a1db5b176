# -*- test-case-name: tests.api.test_fuzzing -*-
"""
Every route of the API, from every resource module: the one list the daemon
serves and the OpenAPI document describes.
"""

from __future__ import annotations

from twisted.internet.interfaces import IReactorTime

from ..buffer_budget import BufferBudget
from ..metrics import Metrics
from ..nodes.background_limit import BackgroundLimit
from ..nodes.fleet import Fleet
from ..secretstore import SecretStore
from .background import BackgroundApi
from .copying import CopyApi
from .events import EventsApi
from .execution import ExecApi
from .filesystem import FilesystemApi
from .forwarding import ForwardApi
from .images import ImagesApi
from .tunnel_socket import tunnel_socket_handler
from .forking import ForkApi
from .lifecycle import LifecycleApi
from .meta import MetaApi
from .nodes import NodesApi
from .stats import StatsApi
from .routing import Route
from .secrets import SecretsApi
from .shell import ShellApi
from .tags import TagsApi
from .vm import VmApi
from .watching import WatchApi


def every_route(
    fleet: Fleet, clock: IReactorTime, metrics: Metrics, secrets: SecretStore | None = None,
    public_metrics: bool = False, budget: BufferBudget | None = None,
    background_limit: BackgroundLimit | None = None,
) -> list[Route]:
    """
    The routes of the daemon.

    :param fleet: the nodes they act on.
    :param clock: for request and record times.
    :param metrics: what ``/metrics`` shows.
    :param secrets: the daemon's secrets store (the one the fleet's nodes
        get their secrets from); ``None`` leaves out ``/secrets`` (tests of
        other routes).
    :param public_metrics: ``/metrics`` needs no token (``api.auth.public_metrics``).
    :param budget: the daemon's buffer budget (buffered execs, directory listings, background exec
        lists); ``None``: no bound.
    :param background_limit: the bound on each node's background execs; ``None``: the default one.
    """
    routes: list[Route] = []
    routes += MetaApi(metrics, lambda: routes, public_metrics).routes()
    routes += NodesApi(fleet).routes() + VmApi(fleet).routes() + TagsApi(fleet).routes()
    routes += StatsApi(fleet).routes()
    routes += ImagesApi(fleet).routes()
    routes += FilesystemApi(fleet, budget).routes()
    background = BackgroundApi(fleet, background_limit, budget)
    routes += ExecApi(fleet, clock, background, budget).routes() + background.routes()
    routes += CopyApi(fleet).routes() + LifecycleApi(fleet).routes() + ForkApi(fleet).routes()
    routes += WatchApi(fleet, clock).routes() + EventsApi(fleet, clock).routes()
    routes += ShellApi(fleet, clock).routes()
    routes += ForwardApi(fleet, tunnel_socket_handler(fleet, clock)).routes()
    if secrets is not None:
        routes += SecretsApi(secrets).routes()
    return routes


__all__ = ["every_route"]
