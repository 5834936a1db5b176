# -*- test-case-name: tests.api.test_openapi,tests.api.test_secrets -*-
"""
Stored secrets: their metadata, and the bodies that create and change them.
"""

from __future__ import annotations

from datetime import datetime

from attrs import field, frozen

from ...nodes.model import SECRET_NAME_PATTERN
from ...secretstore import MAX_ID, MAX_SECRET_SIZE
from .fields import constrained


#: The uid and gid of a secret's file: a uint32 (4294967295 is no owner to the kernel).
_SECRET_ID = {"format": "uint32", "minimum": 0, "maximum": MAX_ID}


#: Standard base64 with its padding; blanks and line breaks anywhere are ignored (as the parser does).
_B64 = r"\s*[A-Za-z0-9+/]"
BASE64_PATTERN = (f"^(?:{_B64}{_B64}{_B64}{_B64})*(?:{_B64}{_B64}\\s*=\\s*=|{_B64}{_B64}{_B64}\\s*=)?\\s*$")

#: A secret's permission bits: octal text.
_SECRET_PERMISSIONS = {"pattern": "^0?[0-7]{1,3}$", "description": "Octal permission bits, e.g. 0400 (at most 0777)"}


@frozen
class Secret:
    """A stored secret's metadata; its content is never returned."""

    name: str
    size: int
    permissions: str = field(metadata={"schema": {"description": "Octal text, e.g. 0600"}})
    uid: int = field(metadata={"schema": _SECRET_ID})
    gid: int = field(metadata={"schema": _SECRET_ID})
    mod_time: datetime
    modified_at: datetime = field(metadata={"schema": {"description": "The same as mod_time, under the "
                                                                      "name existing clients read"}})


@frozen
class CreateSecretRequest:
    """
    The body of ``POST /secrets``: the name, the content as base64, and the
    guest file's permissions (default 0600), uid and gid (default 0).
    """

    name: str = field(metadata={"schema": {"pattern": f"^{SECRET_NAME_PATTERN}$"}})
    data: str = field(metadata={"schema": {
        "contentEncoding": "base64", "pattern": BASE64_PATTERN, "description": f"The content, standard base64 (at most {MAX_SECRET_SIZE} bytes "
                                                   "once decoded)"}})
    permissions: str | None = constrained(_SECRET_PERMISSIONS)
    uid: int | None = constrained(_SECRET_ID)
    gid: int | None = constrained(_SECRET_ID)


@frozen
class UpdateSecretRequest:
    """The body of ``PATCH /secrets/{secret}``: what changes; absent fields stay as they are."""

    data: str | None = constrained({
        "contentEncoding": "base64", "pattern": BASE64_PATTERN, "description": f"The new content, standard base64 (at most {MAX_SECRET_SIZE} "
                                                   "bytes once decoded)"})
    permissions: str | None = constrained(_SECRET_PERMISSIONS)
    uid: int | None = constrained(_SECRET_ID)
    gid: int | None = constrained(_SECRET_ID)
