# -*- test-case-name: tests.test_auth -*-
"""
Bearer-token authentication of the API.

The token is made once, at the first start with authentication on, in
``<state_dir>/auth/token`` (directory 0700, file 0600), and reused afterwards;
operators read it from there.  Requests are compared in constant time.
"""

from __future__ import annotations

import hmac
import os
import secrets

from .durable import write_atomic

#: Bytes of entropy in a new token (encoded as URL-safe base64: 43 characters).
TOKEN_BYTES = 32


def token_path(state_dir: str) -> str:
    """Where the token of a daemon with ``state_dir`` lives."""
    return os.path.join(state_dir, "auth", "token")


def load_or_create_token(state_dir: str) -> str:
    """
    Read the API token of the daemon with ``state_dir``, creating it (and
    its directory) on first use.

    Permissions are tightened to 0700/0600 even when the files already exist.
    """
    directory = os.path.join(state_dir, "auth")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    path = token_path(state_dir)
    try:
        with open(path) as f:
            token = f.read().strip()
    except FileNotFoundError:
        token = ""
    if not token:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        write_atomic(path, token.encode() + b"\n", mode=0o600)
    os.chmod(path, 0o600)
    return token


def bearer_matches(header: bytes | None, token: str) -> bool:
    """
    Whether an ``Authorization`` header carries ``token`` as a Bearer token.
    The comparison takes the same time wherever the first difference is.
    """
    if not header:
        return False
    scheme, _, presented = header.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(presented.strip(), token.encode())
