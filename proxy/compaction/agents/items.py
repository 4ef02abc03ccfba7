"""The compaction items the proxy hands out from ``/v1/responses/compact``: sealed and opaque.

An item carries the summary itself (not a handle into the store), so it lives as long as the
agent keeps it, whatever the store's TTL. It is sealed with AES-GCM under a key derived from the
tenant secret, whatever ``store.encryption_keys`` says, with the caller's tenant as associated
data: the client cannot read it, and another caller's item does not open
(docs/agent-compaction.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json

from proxy.state.sealing import Sealer, SealError
from proxy.state.tenancy import Tenancy

PREFIX = "cpx1."  # what the proxy's items start with: an item without it is the provider's
_KEY_ID = "item"
_PURPOSE = b"compaction-proxy responses compaction item v1"


class ItemSeal:
    """Seals a summary into an item's ``encrypted_content`` and opens it again."""

    def __init__(self, tenancy: Tenancy) -> None:
        self._tenancy = tenancy

    def _sealer(self) -> Sealer:
        # Derived on each use: the tenancy may adopt the secret shared through Redis after start.
        key = hmac.new(self._tenancy.secret, _PURPOSE, hashlib.sha256).digest()
        return Sealer([(_KEY_ID, key)])

    def seal(self, tenant: str, summary: str) -> str:
        plain = json.dumps({"summary": summary}).encode()
        sealed = self._sealer().seal(plain, context=tenant.encode())
        return PREFIX + base64.urlsafe_b64encode(sealed).decode("ascii")

    def open(self, tenant: str, encrypted: str) -> str | None:
        """The summary an item of ours holds; None when it does not open (another caller's,
        tampered with, or sealed under a secret this proxy no longer has)."""
        if not encrypted.startswith(PREFIX):
            return None
        try:
            sealed = base64.urlsafe_b64decode(encrypted[len(PREFIX) :].encode("ascii"))
            plain = self._sealer().open(sealed, context=tenant.encode())
            summary = json.loads(plain)["summary"]
        except (SealError, binascii.Error, ValueError, KeyError, TypeError, UnicodeError):
            return None
        return summary if isinstance(summary, str) else None


def is_ours(encrypted: object) -> bool:
    return isinstance(encrypted, str) and encrypted.startswith(PREFIX)
