# -*- test-case-name: tests.service.test_host -*-
"""
What the daemon takes of its host as it starts: its images, its state
directory (locked, kept private), the tmpfs directories, the network
ranges, the RAM and CPUs its budgets come from, its tokens and its audit
log.  Each refusal is a :class:`StartupError`, one line for the operator.
"""

from __future__ import annotations

import os
from typing import Callable

from twisted.logger import Logger

from ..audit import AuditLog
from ..auth import TokenFileError, Tokens, create_token_file, token_path
from ..buffer_budget import BufferBudget, default_size
from ..config import Config
from ..images.store import Image, ImageNotFound, resolve_image
from ..network.claims import RangeClaims, RangeTaken
from ..network.ipam import pool
from ..nodes.admission import Admission, limits, mem_total
from ..nodes.store import NodeStore, StateDirectoryInUse
from ..nodes.warm.fork_memory import memory_directory
from ..nodes.warm.template_files import ram_directory
from ..private_files import NotPrivate, private_directory, tighten
from ..secretstore import SecretStore
from .reactor import IDaemonReactor

#: Logged under the package's name, as when it was one module.
log = Logger(namespace="vmservice.service")


class StartupError(Exception):
    """The daemon cannot start; the message is one line for the operator."""


def find_images(config: Config) -> Callable[[str], Image]:
    """
    What finds an image by name in ``image_dir``, once every image the
    configuration names was found.

    :raise StartupError: one of them is missing.
    """
    def image(name: str) -> Image:
        return resolve_image(config.image_dir, name)

    for name in sorted({config.image, *(g.image for g in config.host_groups)}):
        try:
            image(name)
        except ImageNotFound as error:
            raise StartupError(str(error)) from None
    return image


def take_state_dir(config: Config) -> NodeStore:
    """
    The node store of the state directory, made or verified as the daemon's
    alone and locked; then the modes under it and the tmpfs directories
    kept private (:func:`keep_private`).

    :raise StartupError: it is not private, another daemon holds it, or a
        tmpfs directory is not the daemon's.
    """
    try:
        private_directory(config.state_dir, repair=True)
    except NotPrivate as error:
        raise StartupError(f"state_dir: {error}") from None
    store = NodeStore(config.state_dir)
    try:
        store.lock()
    except StateDirectoryInUse as error:
        raise StartupError(str(error)) from None
    keep_private(config)
    return store


def open_secret_store(config: Config, reactor: IDaemonReactor) -> SecretStore:
    """
    The secrets store in the state directory.

    :raise StartupError: its directory cannot be made.
    """
    try:
        return SecretStore(config.state_dir, reactor)
    except OSError as error:
        raise StartupError(f"secrets store: {error}") from None


def claim_ranges(config: Config) -> RangeClaims:
    """
    Claim the network ranges of every group host-wide, so that a second
    daemon with an overlapping range (or on the same state directory)
    refuses to start.
    """
    claims = RangeClaims()
    ranges = [pool(g.network) for g in config.host_groups if g.network is not None]
    try:
        claims.claim(ranges, os.path.abspath(config.state_dir))
    except (RangeTaken, OSError) as error:
        raise StartupError(f"network ranges: {error}") from None
    return claims


def size_buffer_budget(config: Config) -> BufferBudget:
    """The buffer budget, its default size from this host's RAM (``/proc/meminfo``)."""
    size = config.limits.buffer_budget
    if size is None:
        try:
            with open("/proc/meminfo") as f:
                total = mem_total(f.read())
        except OSError:
            total = None
        size = default_size(total)
    log.info(
        "limits: buffer budget {budget} MiB, {execs} background execs per node, {most} connections "
        "({per_peer} per client)", budget=size // 2**20, execs=config.limits.background_execs_per_node,
        most=config.limits.max_connections, per_peer=config.limits.max_connections_per_peer,
    )
    return BufferBudget(size)


def make_admission(config: Config, reactor: IDaemonReactor) -> Admission:
    """Admission with its defaults from this host's RAM (``/proc/meminfo``) and CPU count."""
    try:
        with open("/proc/meminfo") as f:
            meminfo: str | None = f.read()
    except OSError:
        meminfo = None
    allowed = limits(config, meminfo, os.cpu_count())
    log.info(
        "admission: memory budget {budget} ({explained}), {overhead} MiB per VM beyond its RAM, "
        "cold boots at once: {boots}",
        budget="none" if allowed.budget is None else f"{allowed.budget // 2**20} MiB", explained=allowed.explained,
        overhead=allowed.overhead // 2**20, boots=allowed.boot_concurrency or "no bound",
    )
    return Admission(reactor, allowed)


def keep_private(config: Config) -> None:
    """
    At each start, with the state directory taken: the daemon's directories
    in the tmpfs, whose names others can predict, made or verified as its own
    alone, and the modes of every file under them and the state directory
    tightened (what an earlier version or umask left); see docs/security.md.

    :raise StartupError: a tmpfs directory is not the daemon's alone.
    """
    tmpfs = (ram_directory(config.state_dir, config.templates_tmpfs_dir),
             memory_directory(config.state_dir, config.templates_tmpfs_dir))
    for directory in tmpfs:
        try:
            private_directory(directory)
        except NotPrivate as error:
            raise StartupError(
                f"templates_tmpfs_dir: {error}; another user may have made it first, to read or replace guest "
                "memory: look at it and remove it, or set templates_tmpfs_dir to a directory only root may write in"
            ) from None
    for directory in (config.state_dir, *tmpfs):
        try:
            changed = tighten(directory)
        except OSError as error:
            raise StartupError(f"cannot tighten the modes under {directory}: {error}") from None
        if changed:
            log.info("{count} mode(s) under {directory} tightened: no group or other access",
                     count=changed, directory=directory)


def load_tokens(config: Config) -> Tokens | None:
    """
    The API's tokens with auth on (``None`` with it off): read from
    ``api.auth.token_file``, or from ``<state_dir>/auth/token``, which is made
    with one new token when missing.

    :raise StartupError: the token file cannot be used.
    """
    if not config.api.auth.enabled:
        return None
    path = config.api.auth.token_file
    if path is None:
        path = token_path(config.state_dir)
        create_token_file(path)
    tokens = Tokens(path)
    try:
        tokens.load()
    except TokenFileError as error:
        raise StartupError(f"api.auth: {error}") from None
    return tokens


def open_audit_log(config: Config) -> AuditLog | None:
    """
    The audit log (``None`` when ``audit.enabled`` is off), in a directory
    of the daemon's alone.

    :raise StartupError: it cannot be opened there.
    """
    if not config.audit.enabled:
        return None
    path = config.audit.path or os.path.join(config.state_dir, "audit", "audit.log")
    try:
        private_directory(os.path.dirname(path))
        return AuditLog(path, config.audit.max_size, config.audit.keep)
    except (NotPrivate, OSError) as error:
        raise StartupError(f"audit: {error}") from None
