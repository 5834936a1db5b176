"""Tests for :mod:`vmservice.codehost`: a user's published SSH keys fetched from a code host."""

from __future__ import annotations

import re
from typing import Any

from treq.client import HTTPClient
from treq.testing import RequestTraversalAgent
from twisted.internet.defer import CancelledError, Deferred, fail
from twisted.internet.error import ConnectionRefusedError, DNSLookupError
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IAgent, IRequest
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET
from zope.interface import implementer

from vmservice.codehost import CODEHOST_USER_PATTERN, MAX_KEYS_BODY, CodeHost
from vmservice.errors import BadGateway, BadRequest, ServiceError
from vmservice.nodes.model import MAX_SSH_KEYS

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGlHwjbWs3bxNfDjyrG31OFHagdTFb6IcKC46dPoRPBs"
ECDSA = ("ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBN0e+UXNgfEnJ7kKUYPuNKu5MHOGxJf3YEnn8II"
         "DVchypW2vcAHUAE8TbNKR2BEUR6FQEa/Eq1us96A8ELi9JG0=")
OTHER = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBtvT6HR4TvFsTmVm7wBgXVf0M6RprIaaQJcYmcvtIvz"


class _Site(Resource):
    """
    A code host: ``pages`` maps a path to ``(status, body)``; a body of
    ``None`` never finishes, and ``(200, b"...", None)`` sends its start and
    then nothing more.  Records the paths asked for.
    """

    isLeaf = True

    def __init__(self, pages: dict[bytes, tuple[Any, ...]]) -> None:
        super().__init__()
        self.pages = pages
        self.asked: list[bytes] = []
        self.waiting: list[IRequest] = []
        self.ended: list[object] = []

    def render_GET(self, request: IRequest) -> bytes | int:
        assert request.path is not None
        self.asked.append(request.path)
        status, *body = self.pages.get(request.path, (404, b"Not Found"))
        request.setResponseCode(status)
        request.setHeader(b"content-type", b"text/plain; charset=utf-8")
        if body[0] is None or len(body) > 1:
            if body[0]:
                request.write(body[0])
            self.waiting.append(request)
            request.notifyFinish().addBoth(self.ended.append)
            return NOT_DONE_YET
        result: bytes = body[0]
        return result


@implementer(IAgent)
class _Failing:
    """An agent whose every request fails with ``error`` (nothing listens, no such host)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def request(self, method: bytes, uri: bytes, headers: Any = None, bodyProducer: Any = None) -> Deferred[Any]:
        return fail(self.error)


class CodeHostTests(SynchronousTestCase):
    def setUp(self) -> None:
        self.clock = Clock()
        self.site = _Site({
            b"/alice.keys": (200, f"{ED25519} \n\n{ECDSA} laptop\n{ED25519}\n".encode()),
            b"/empty.keys": (200, b"\n  \n"),
            b"/mixed.keys": (200, f"ssh-dss AAAAB3NzaC1kc3MAAACBAP\n{OTHER} kept\n".encode()),
            b"/html.keys": (200, b"<!DOCTYPE html>\n<html><body>Sign in</body></html>\n"),
            b"/binary.keys": (200, b"\xff\xfe\x00ssh"),
            b"/error.keys": (503, b"unavailable"),
            b"/limited.keys": (429, b"slow down"),
            b"/huge.keys": (200, (ED25519 + "\n").encode() * (MAX_KEYS_BODY // len(ED25519) + 10)),
            b"/many.keys": (200, "\n".join(f"{ED25519} key{n}" for n in range(MAX_SSH_KEYS + 5)).encode()),
            b"/slow.keys": (200, None),
            b"/trickle.keys": (200, f"{ED25519}\n".encode(), None),
        })
        self.agent = RequestTraversalAgent(self.site)
        self.host = CodeHost(self.clock, HTTPClient(self.agent), "http://codehost.test", timeout=5.0)

    def keys(self, user: str, host: CodeHost | None = None) -> Deferred[tuple[str, ...]]:
        fetching = (host or self.host).public_keys(user)
        self.agent.flush()
        return fetching

    def refused(self, user: str, kind: type[ServiceError], code: str) -> ServiceError:
        error = self.failureResultOf(self.keys(user), kind).value
        assert isinstance(error, ServiceError)
        self.assertEqual(error.code, code, error.message)
        return error

    def test_keys(self) -> None:
        """The page's key lines, normalised, each once, in order; the page asked for is /USER.keys."""
        self.assertEqual(self.successResultOf(self.keys("alice")), (ED25519, f"{ECDSA} laptop"))
        self.assertEqual(self.site.asked, [b"/alice.keys"])
        self.assertEqual(self.clock.getDelayedCalls(), [])

    def test_base_url_with_a_path(self) -> None:
        """A base URL with a path (and a final slash) puts the user's page under it."""
        self.site.pages[b"/git/alice.keys"] = self.site.pages[b"/alice.keys"]
        host = CodeHost(self.clock, HTTPClient(self.agent), "http://codehost.test/git/")
        self.assertEqual(len(self.successResultOf(self.keys("alice", host))), 2)
        self.assertEqual(self.site.asked, [b"/git/alice.keys"])

    def test_no_keys(self) -> None:
        """A user the site does not know (404), or one with an empty page, is a 400: nothing to install."""
        self.assertIn("no user 'nobody'", self.refused("nobody", BadRequest, "codehost_user_has_no_keys").message)
        self.assertIn("publishes no SSH keys", self.refused("empty", BadRequest, "codehost_user_has_no_keys").message)

    def test_bad_answers(self) -> None:
        """Other statuses, text without a key, bytes that are not UTF-8 and oversized pages are 502s."""
        self.assertIn("answered 503", self.refused("error", BadGateway, "codehost_bad_answer").message)
        self.assertIn("answered 429", self.refused("limited", BadGateway, "codehost_bad_answer").message)
        self.refused("html", BadGateway, "codehost_bad_answer")
        self.refused("binary", BadGateway, "codehost_bad_answer")
        self.assertIn(f"more than {MAX_KEYS_BODY} bytes", self.refused("huge", BadGateway, "codehost_bad_answer").message)

    def test_lines_not_accepted_are_left_out(self) -> None:
        """A line of a type this daemon does not accept is left out; the others are used."""
        self.assertEqual(self.successResultOf(self.keys("mixed")), (f"{OTHER} kept",))

    def test_at_most_max_keys(self) -> None:
        """Of more keys than a node takes, the first ones are used."""
        keys = self.successResultOf(self.keys("many"))
        self.assertEqual((len(keys), keys[0], keys[-1]), (MAX_SSH_KEYS, f"{ED25519} key0", f"{ED25519} key{MAX_SSH_KEYS - 1}"))

    def test_unreachable(self) -> None:
        """A site that cannot be connected to or looked up is a 502 naming the site, not its credentials."""
        for error in (ConnectionRefusedError("127.0.0.1:9"), DNSLookupError("codehost.test")):
            host = CodeHost(self.clock, HTTPClient(_Failing(error)), "https://user:secret@codehost.test:8443")
            failure = self.failureResultOf(host.public_keys("alice"), BadGateway)
            assert isinstance(failure.value, BadGateway)
            self.assertEqual(failure.value.code, "codehost_unreachable")
            self.assertIn("codehost.test:8443 cannot be reached", failure.value.message)
            self.assertNotIn("secret", failure.value.message)

    def test_timeout_before_the_answer(self) -> None:
        """A site that does not answer within the timeout is a 502, and its connection is closed."""
        fetching = self.keys("slow")
        self.assertNoResult(fetching)
        self.clock.advance(4.9)
        self.assertNoResult(fetching)
        self.clock.advance(0.2)
        self.agent.flush()
        error = self.failureResultOf(fetching, BadGateway).value
        assert isinstance(error, BadGateway)
        self.assertEqual(error.code, "codehost_unreachable")
        self.assertIn("did not answer within 5 s", error.message)
        self.assertIsInstance(self.site.ended[0], Failure)  # the connection was closed before the page was sent

    def test_timeout_while_reading(self) -> None:
        """The timeout covers the whole answer: a page that stops half-way is a 502 as well."""
        fetching = self.keys("trickle")
        self.assertNoResult(fetching)
        self.clock.advance(5.1)
        self.agent.flush()
        error = self.failureResultOf(fetching, BadGateway).value
        assert isinstance(error, BadGateway)
        self.assertEqual(error.code, "codehost_unreachable")
        self.assertIsInstance(self.site.ended[0], Failure)

    def test_broken_off(self) -> None:
        """A page whose connection ends before its end is a 502."""
        fetching = self.keys("trickle")
        self.assertNoResult(fetching)
        channel = self.site.waiting[0].channel  # type: ignore[attr-defined]  # twisted.web's Request has it
        channel.transport.loseConnection()
        self.agent.flush()
        error = self.failureResultOf(fetching, BadGateway).value
        assert isinstance(error, BadGateway)
        self.assertEqual(error.code, "codehost_unreachable")
        self.assertIn("broke off", error.message)

    def test_cancel(self) -> None:
        """A create that is cancelled (its client went away) cancels the fetch and leaves no timer behind."""
        fetching = self.keys("slow")
        fetching.cancel()
        self.failureResultOf(fetching, CancelledError)
        self.assertEqual(self.clock.getDelayedCalls(), [])


class UserPatternTests(SynchronousTestCase):
    def test_user_names(self) -> None:
        """Code-host user names: letters, digits, single hyphens inside, 1 to 39 characters."""
        for name in ("a", "octocat", "Octo-Cat", "a-b-c", "x" * 39, "42"):
            self.assertTrue(re.fullmatch(CODEHOST_USER_PATTERN, name), name)
        for name in ("", "-a", "a-", "a--b", "a_b", "a.b", "x" * 40, "a/b", "../a", "a b", "ä"):
            self.assertIsNone(re.fullmatch(CODEHOST_USER_PATTERN, name), name)
