# -*- test-case-name: tests.client.test_kubeapi -*-
"""
Reading objects of the Kubernetes API as a kubeconfig's user, for
``vmctl``'s ``pod/NAME``: :class:`KubeApi` sends ``GET`` requests over treq
with :class:`ClusterTls` (the kubeconfig's CA, or the system's, and its
client certificate when it has one), reads each answer up to
:data:`MAX_ANSWER` bytes within :data:`ANSWER_TIMEOUT` seconds, and raises
:class:`KubeApiError` with the server's own message for anything but a JSON
object.  Redirects are not followed (the token goes to the kubeconfig's
server only).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from treq.client import HTTPClient
from twisted.internet.defer import CancelledError, Deferred, TimeoutError as DeferredTimeout
from twisted.internet.interfaces import IOpenSSLClientConnectionCreator
from twisted.internet.ssl import Certificate, PrivateCertificate, optionsForClientTLS, trustRootFromCertificates
from twisted.web.client import Agent
from twisted.web.iweb import IPolicyForHTTPS
from zope.interface import implementer

from .. import __version__
from ..bounded_body import BodyTooLarge, BoundedBody
from .kubeconfig import ClusterAccess, KubeconfigError
from .reactors import IClientReactor

__all__ = ["ANSWER_TIMEOUT", "ClusterTls", "KubeApi", "KubeApiError", "MAX_ANSWER"]

#: The most bytes of one answer read (a Pod or a Node is a few KiB).
MAX_ANSWER = 4 << 20
#: Seconds one request may take, from sending it to the end of its answer.
ANSWER_TIMEOUT = 30.0

_END = b"-----END CERTIFICATE-----"


class KubeApiError(Exception):
    """
    The Kubernetes API did not give the object asked for.

    :ivar status: the HTTP status, or 0 when there was no answer (unreachable,
        TLS refused, timed out) or the answer was not a JSON object.
    :ivar message: what went wrong, in the server's words when it gave some.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        return self.message


def _certificates(pem: bytes, what: str) -> list[Certificate]:
    """Every certificate of ``pem``; :raise KubeconfigError: there is none, or one OpenSSL cannot read."""
    blocks = [block[block.find(b"-----BEGIN CERTIFICATE-----"):] + _END for block in pem.split(_END)[:-1]]
    try:
        certificates = [Certificate.loadPEM(block) for block in blocks]
    except Exception:
        raise KubeconfigError(f"the {what} holds a certificate that cannot be read") from None
    if not certificates:
        raise KubeconfigError(f"the {what} holds no PEM certificate")
    return certificates


@implementer(IPolicyForHTTPS)
class ClusterTls:
    """
    How ``vmctl`` speaks TLS to the API server: it trusts the kubeconfig's CA
    alone (the system's CAs when it names none), checks the server's name or
    address against its certificate, and presents the user's client
    certificate when there is one.

    :raise KubeconfigError: the CA or the client certificate and key cannot be read.
    """

    def __init__(self, access: ClusterAccess) -> None:
        self._trust = None if access.ca_pem is None else trustRootFromCertificates(
            _certificates(access.ca_pem, "certificate authority"))
        self._client: PrivateCertificate | None = None
        self._chain: list[Any] = []
        if access.client_pem is not None:
            _, *rest = _certificates(access.client_pem, "client certificate")
            try:
                self._client = PrivateCertificate.loadPEM(access.client_pem)
            except Exception:
                raise KubeconfigError("the client key cannot be read, or is not the certificate's") from None
            self._chain = [certificate.original for certificate in rest]

    def creatorForNetloc(self, hostname: bytes, port: int) -> IOpenSSLClientConnectionCreator:
        extra = {"extraCertChain": self._chain} if self._chain else None
        return optionsForClientTLS(hostname.decode("idna"), trustRoot=self._trust, clientCertificate=self._client,
                                   extraCertificateOptions=extra)


class Requester(Protocol):
    """What sends the requests: treq's ``HTTPClient`` (a test's fake in the unit tests)."""

    def get(self, url: str, /, *, headers: dict[bytes | str, list[bytes | str]], allow_redirects: bool,
            unbuffered: bool) -> "Deferred[Any]":
        """One ``GET``; its answer, whose body the caller reads."""


class KubeApi:
    """
    ``GET`` of objects of one API server as one user.

    :param clock: times the requests.
    :param access: the server and the credentials (see :mod:`~vmservice.client.kubeconfig`).
    :param http: sends the requests; by default treq over :class:`ClusterTls` on ``clock``.
    """

    def __init__(self, clock: IClientReactor, access: ClusterAccess, http: Requester | None = None,
                 timeout: float = ANSWER_TIMEOUT, limit: int = MAX_ANSWER) -> None:
        self._clock, self._access, self._timeout, self._limit = clock, access, timeout, limit
        self._http: Requester = http or HTTPClient(Agent(clock, contextFactory=ClusterTls(access)))

    def _headers(self) -> dict[bytes | str, list[bytes | str]]:
        headers: dict[bytes | str, list[bytes | str]] = {b"Accept": [b"application/json"], b"User-Agent": [f"vmctl/{__version__}".encode("ascii")]}
        if self._access.token is not None:
            headers[b"Authorization"] = [b"Bearer " + self._access.token.encode("ascii")]
        return headers

    async def _get(self, path: str) -> dict[str, Any]:
        try:
            response = await self._http.get(self._access.server + path, headers=self._headers(),
                                            allow_redirects=False, unbuffered=True)
        except CancelledError:
            raise  # the timeout, reported by get()
        except Exception as error:
            raise KubeApiError(0, f"cannot reach the Kubernetes API at {self._access.server}: "
                                  f"{_reasons(error)}") from None
        reader = BoundedBody(self._limit)
        response.deliverBody(reader)
        try:
            body = await reader.done
        except BodyTooLarge as error:
            raise KubeApiError(0, f"the Kubernetes API's answer to GET {path}: {error}") from None
        except CancelledError:
            raise  # the timeout, reported by get()
        except Exception as error:
            raise KubeApiError(0, f"the Kubernetes API's answer to GET {path} was cut: {_reasons(error)}") from None
        if not 200 <= response.code < 300:
            raise KubeApiError(response.code, f"the Kubernetes API refused GET {path}: {response.code} "
                                              f"{_status_message(body)}")
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            document = None
        if not isinstance(document, dict):
            raise KubeApiError(0, f"the Kubernetes API's answer to GET {path} is not a JSON object")
        return document

    async def get(self, path: str) -> dict[str, Any]:
        """
        The object at ``path`` (``/api/v1/namespaces/NS/pods/NAME``), a JSON object.

        :raise KubeApiError: no answer in time, a status other than 2xx, an
            answer too large or not a JSON object.
        """
        answer = Deferred.fromCoroutine(self._get(path))
        answer.addTimeout(self._timeout, self._clock)
        try:
            return await answer
        except DeferredTimeout:
            raise KubeApiError(0, f"the Kubernetes API at {self._access.server} did not answer GET {path} "
                                  f"within {self._timeout:g} s") from None


def _printable(text: str, limit: int = 300) -> str:
    """``text`` on one line, its control characters dropped, at most ``limit`` characters."""
    return " ".join("".join(c for c in text if c.isprintable() or c.isspace()).split())[:limit]


def _status_message(body: bytes) -> str:
    """The ``message`` of a Kubernetes Status answer, else the answer's text (both trimmed)."""
    text = body.decode("utf-8", "replace")
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        document = None
    if isinstance(document, dict) and isinstance(document.get("message"), str) and document["message"]:
        return _printable(document["message"])
    return _printable(text) or "(no message)"


def _reasons(error: Exception) -> str:
    """Why a connection failed: Twisted's reasons (TLS ones included) when it has them, else the error."""
    reasons = getattr(error, "reasons", None)
    if reasons:
        return _printable("; ".join(str(reason.getErrorMessage()) for reason in reasons))
    return _printable(str(error)) or type(error).__name__
