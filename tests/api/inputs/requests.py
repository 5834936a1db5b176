"""
Requests for the parsers of :mod:`vmservice.api.inputs`: a body (bytes, or
JSON of any value) and headers.
"""

from __future__ import annotations

import io
import json
from typing import Any

from twisted.web.test.requesthelper import DummyRequest


def dummy_request(body: Any = b"", headers: dict[bytes, bytes] | None = None) -> DummyRequest:
    """A request with ``body`` (JSON-encoded unless bytes) and ``headers``."""
    request = DummyRequest([b""])
    request.content = io.BytesIO(body if isinstance(body, bytes) else json.dumps(body).encode())
    for name, value in (headers or {}).items():
        request.requestHeaders.addRawHeader(name, value)
    return request
