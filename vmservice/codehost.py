# -*- test-case-name: tests.test_codehost -*-
"""
The SSH public keys a user publishes on a code-hosting site, for a node's
``codehost_user``.

Code-hosting sites serve them as plain text, one OpenSSH key line each, at
``{base_url}/{user}.keys`` (``https://github.com/octocat.keys``; GitLab and
Gitea answer the same path).  The daemon fetches that page once per create,
within a short timeout and a size cap, and checks every line with the parser
``ssh_keys`` uses.

What can happen, as domain errors:

- the site says the user does not exist (404), or the user publishes no key
  (an empty page): :class:`~vmservice.errors.BadRequest`
  ``codehost_user_has_no_keys`` — nothing to install, the caller's mistake;
- the site cannot be reached, breaks off or does not answer in time:
  :class:`~vmservice.errors.BadGateway` ``codehost_unreachable``;
- it answers something else (another status, a page too large, text that
  holds no key line): :class:`~vmservice.errors.BadGateway`
  ``codehost_bad_answer``.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from attrs import frozen
from treq.client import HTTPClient
from twisted.internet.defer import CancelledError, Deferred, TimeoutError
from twisted.internet.error import ConnectingCancelledError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http_headers import Headers
from twisted.web.iweb import IResponse

from .bounded_body import BodyTooLarge, BoundedBody
from .config import DEFAULT_CODEHOST_TIMEOUT
from .errors import BadGateway, BadRequest
from .nodes.model import MAX_SSH_KEYS, unique
from .sshkeys import InvalidPublicKey, parse_public_key

__all__ = ["CODEHOST_USER_PATTERN", "MAX_KEYS_BODY", "CodeHost"]

log = Logger()

#: Most bytes of a key page the daemon reads (a hundred 16384-bit RSA keys fit).
MAX_KEYS_BODY = 512 * 1024
#: User names of code-hosting sites: letters, digits and single hyphens, not
#: first or last, at most 39 characters (GitHub's rule; GitLab's and Gitea's
#: names that fit it work the same).
CODEHOST_USER_PATTERN = r"(?=.{1,39}$)[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*"


def _discard(response: IResponse) -> None:
    """Drop a response's body: close the connection at its first byte, rather than leave it open unread."""
    reader = BoundedBody(0)
    response.deliverBody(reader)
    reader.done.addErrback(lambda _: None)


@frozen
class CodeHost:
    """
    A code-hosting site, asked for the keys its users publish.

    :ivar clock: times each fetch (an ``IReactorTime`` provider).
    :ivar http: treq's HTTP client, over an ``Agent`` of the same reactor.
    :ivar base_url: the site, ``https://github.com``; the page of a user is
        ``{base_url}/{user}.keys``.
    :ivar timeout: seconds one fetch may take, from the request to the last
        byte of the answer.
    """

    clock: IReactorTime
    http: HTTPClient
    base_url: str
    timeout: float = DEFAULT_CODEHOST_TIMEOUT

    def public_keys(self, user: str) -> Deferred[tuple[str, ...]]:
        """
        The keys ``user`` publishes, each as the normalised line of
        :func:`~vmservice.sshkeys.parse_public_key`, once, in the site's
        order, at most :data:`~vmservice.nodes.model.MAX_SSH_KEYS`.

        Lines that are not an accepted key (a type this daemon does not take)
        are left out and logged; none accepted at all is a bad answer.

        :raise BadRequest: (``codehost_user_has_no_keys``) the site does not
            know the user, or the user publishes no key.
        :raise BadGateway: (``codehost_unreachable``, ``codehost_bad_answer``)
            see the module's description.
        """
        return Deferred.fromCoroutine(self._keys(user))

    @property
    def _site(self) -> str:
        """The site's host (and port), for messages: never credentials or a path."""
        return urlsplit(self.base_url).netloc.rpartition("@")[2] or self.base_url

    async def _keys(self, user: str) -> tuple[str, ...]:
        url = f"{self.base_url.rstrip('/')}/{quote(user, safe='')}.keys"
        fetching = Deferred.fromCoroutine(self._fetch(url, user))
        fetching.addTimeout(self.timeout, self.clock)
        try:
            page = await fetching
        except TimeoutError:
            raise BadGateway(f"code host {self._site} did not answer within {self.timeout:g} s",
                             code="codehost_unreachable") from None
        return self._parse(page, user)

    async def _fetch(self, url: str, user: str) -> bytes:
        """The page at ``url``; :raise BadRequest, BadGateway: as :meth:`public_keys` says."""
        try:
            response = await self.http.get(url, unbuffered=True, headers=Headers({b"Accept": [b"text/plain"]}))
        except Exception as error:
            if _cancelled(error):
                raise CancelledError() from None
            raise BadGateway(f"code host {self._site} cannot be reached: {_reason(error)}",
                             code="codehost_unreachable") from None
        if response.code != 200:
            _discard(response)
        if response.code == 404:
            raise BadRequest(f"code host {self._site} has no user {user!r}, so no keys for it",
                             code="codehost_user_has_no_keys")
        if response.code != 200:
            raise BadGateway(f"code host {self._site} answered {response.code} for the keys of {user!r}",
                             code="codehost_bad_answer")
        reader = BoundedBody(MAX_KEYS_BODY)
        response.deliverBody(reader)
        try:
            return await reader.done
        except BodyTooLarge:
            raise BadGateway(f"code host {self._site} sent more than {MAX_KEYS_BODY} bytes of keys",
                             code="codehost_bad_answer") from None
        except Exception as error:
            if _cancelled(error):
                raise CancelledError() from None
            raise BadGateway(f"code host {self._site} broke off its answer: {_reason(error)}",
                             code="codehost_unreachable") from None

    def _parse(self, page: bytes, user: str) -> tuple[str, ...]:
        """The key lines of a page; :raise BadRequest, BadGateway: as :meth:`public_keys` says."""
        try:
            text = page.decode("utf-8")
        except UnicodeDecodeError:
            raise BadGateway(f"code host {self._site} sent keys that are not UTF-8 text",
                             code="codehost_bad_answer") from None
        lines = [line.strip() for line in text.split("\n") if line.strip()]
        if not lines:
            raise BadRequest(f"user {user!r} publishes no SSH keys on code host {self._site}",
                             code="codehost_user_has_no_keys")
        keys = []
        for number, line in enumerate(lines, 1):
            try:
                keys.append(parse_public_key(line).line())
            except InvalidPublicKey as error:
                log.warn("code host {site}: line {number} of the keys of {user} is left out: {reason}",
                         site=self._site, number=number, user=user, reason=str(error))
        if not keys:
            raise BadGateway(f"code host {self._site} sent no SSH key that this daemon accepts for {user!r}",
                             code="codehost_bad_answer")
        found = unique(keys)
        if len(found) > MAX_SSH_KEYS:
            log.warn("code host {site}: {user} publishes {count} keys; the first {most} are used",
                     site=self._site, user=user, count=len(found), most=MAX_SSH_KEYS)
        return found[:MAX_SSH_KEYS]


def _cancelled(error: Exception) -> bool:
    """
    Whether ``error`` is a cancellation: of the connection attempt
    (``ConnectingCancelledError``), or of the request, maybe wrapped by the
    HTTP client (``ResponseNeverReceived``).
    """
    reasons = getattr(error, "reasons", None) or []
    return isinstance(error, (CancelledError, ConnectingCancelledError)) or any(
        isinstance(reason, Failure) and reason.check(CancelledError) for reason in reasons)


def _reason(error: Exception) -> str:
    """A failure in a few words: Twisted's connection errors say it in their docstring and arguments."""
    text = str(error).strip()
    if hasattr(error, "reasons"):  # ResponseFailed and friends: a list of Failures
        text = "; ".join(str(reason.value) for reason in error.reasons) or text
    return " ".join(text.split())[:200] or type(error).__name__
