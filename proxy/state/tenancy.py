"""Who a request belongs to, and the storage names derived from it.

``tenant = HMAC(server secret, credential)``: the same conversation id under two API keys is two
conversations that see nothing of each other. Storage keys are further HMACs of the tenant and the
conversation id, so Redis never holds a raw conversation id or any part of a credential in a key.
A record names its conversation only sealed (AES-GCM under a key derived from the secret and the
tenant), so the value holds no raw id either. Each record also carries an *owner
fingerprint*, checked on every read, as defence in depth against the IDOR class of bug (one
conversation read with another's id, as in Open WebUI CVE-2026-45349).

The secret is ``store.tenant_secret``; without one a Redis store shares a secret created once in
Redis (``SECRET_KEY``, see ``proxy.state.secret``). Until it is read the tenancy is
*provisional*: a random in-process secret that the store uses for in-process state only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.hashes import SHA256
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from proxy.config.store import (
    DEFAULT_CONVERSATION_HEADERS,
    ConversationSettings,
    StoreSettings,
)
from proxy.core.checkpoints import chain_hash
from proxy.errors import InvalidRequest

log = logging.getLogger("proxy.tenancy")

KEY_PREFIX = "cproxy"
# Where a Redis store without store.tenant_secret keeps the secret all replicas share (no TTL).
SECRET_KEY = f"{KEY_PREFIX}:tenant-secret"
# Sealed conversation ids start with a character a conversation id never contains.
_SEALED_ID = "!1"
_ID_KEYS_CACHED = 4096
# Derived names remembered: one request asks for the same few (its tenant, record, owner,
# ledger, salt) several times over, and every later request of the conversation asks again.
_MACS_CACHED = 16_384
MAX_CONVERSATION_ID = 128
_CONVERSATION_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]+$")
_PREAMBLE_ROLES = ("system", "developer")


def usable_conversation_id(value: str) -> bool:
    return 0 < len(value) <= MAX_CONVERSATION_ID and _CONVERSATION_ID.match(value) is not None


def validate_conversation_id(value: str, *, header: str = DEFAULT_CONVERSATION_HEADERS[0]) -> str:
    """Return the id if it is usable, else raise InvalidRequest (a 400; nothing is stored)."""
    if not usable_conversation_id(value):
        raise InvalidRequest(
            f"{header} must be 1 to {MAX_CONVERSATION_ID} characters of letters, digits "
            "and . _ : @ / + = -",
            param=header,
            code="invalid_conversation_id",
        )
    return value


# The headers a caller authenticates with, in the order that picks its credential: OpenAI's
# Authorization (any scheme), Azure OpenAI's api-key, Anthropic's x-api-key.
CREDENTIAL_HEADERS = ("authorization", "api-key", "x-api-key")

Credentials = Mapping[str, str]  # lower-cased header name -> value, as the caller sent them


def credential_from_headers(
    headers: Mapping[str, str], settings: ConversationSettings
) -> str | None:
    """The caller's credential: the configured header, else the first of ``CREDENTIAL_HEADERS``.

    The credential is the secret the caller holds: a Bearer token is the token, an ``api-key``
    or ``x-api-key`` is its value (so one key is one tenant however it is sent), any other
    Authorization scheme (``Basic ...``) is the whole header value.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    if settings.credential_header:
        return lowered.get(settings.credential_header.lower()) or None
    auth = lowered.get("authorization", "").strip()
    scheme, _, token = auth.partition(" ")
    if scheme.lower() == "bearer":
        return token.strip() or None
    if auth:
        return auth
    for name in CREDENTIAL_HEADERS[1:]:
        value = lowered.get(name, "").strip()
        if value:
            return value
    return None


def credential_headers(headers: Credentials) -> dict[str, str]:
    """The credential headers the caller sent (``headers``: by lower-cased name, as
    ``HeaderView.values`` holds them), to send along when a call uses the caller's key."""
    return {name: value for name in CREDENTIAL_HEADERS if (value := headers.get(name))}


class Tenancy:
    """Derives tenants, storage keys and owner fingerprints from one server secret."""

    def __init__(self, secret: bytes, *, provisional: bool = False) -> None:
        self._secret = b""
        self.provisional = provisional
        self._id_keys: dict[str, AESGCM] = {}
        self._macs: dict[tuple[str, ...], str] = {}
        self.adopt(secret, provisional=provisional)

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> Tenancy:
        if settings.tenant_secret is not None:
            return cls(settings.tenant_secret.get_secret_value().encode())
        if settings.url.startswith("memory://"):
            log.warning(
                "store.tenant_secret is not set: using a random secret for this process; "
                "conversation state is lost on restart and not shared between replicas"
            )
            return cls(secrets.token_bytes(32))
        # A shared store: the store replaces this with the secret kept in Redis at start-up.
        return cls(secrets.token_hex(32).encode(), provisional=True)

    @property
    def secret(self) -> bytes:
        """The secret in use (for the store to share it through Redis; never log it)."""
        return self._secret

    def adopt(self, secret: bytes, *, provisional: bool = False) -> None:
        """Derive everything from ``secret`` from now on (the shared one, once it is read)."""
        if len(secret) < 16:
            raise ValueError("the tenant secret needs at least 16 bytes")
        self._secret = secret
        self.provisional = provisional
        self._id_keys.clear()
        self._macs.clear()

    def _mac(self, purpose: str, *parts: str) -> str:
        key = (purpose, *parts)
        mac = self._macs.get(key)
        if mac is None:
            # Each purpose is its own domain, and parts are length-framed, so no two inputs
            # collide.
            h = hmac.new(self._secret, purpose.encode(), hashlib.sha256)
            for part in parts:
                encoded = part.encode()
                h.update(len(encoded).to_bytes(4, "big"))
                h.update(encoded)
            mac = h.hexdigest()[:32]
            if len(self._macs) >= _MACS_CACHED:  # names come from clients: stay bounded
                self._macs.clear()
            self._macs[key] = mac
        return mac

    def tenant(self, credential: str | None) -> str:
        """The tenant id of a credential; callers without one share the anonymous tenant."""
        return "t" + self._mac("tenant", credential or "")

    def record_key(self, tenant: str, conversation_id: str) -> str:
        return f"{self.tenant_prefix(tenant)}{self._mac('conversation', tenant, conversation_id)}"

    def lock_key(self, tenant: str, conversation_id: str) -> str:
        return f"{KEY_PREFIX}:l:{self._mac('lock', tenant, conversation_id)}"

    def ledger_key(self, tenant: str, conversation_id: str) -> str:
        """Where a conversation's ledger lives (``proxy.state.ledgers``): outside the listed
        record prefix, so the admin listing never takes it for a conversation."""
        return f"{KEY_PREFIX}:g:{self._mac('ledger', tenant, conversation_id)}"

    def originals_key(self, tenant: str, conversation_id: str) -> str:
        """Where what compaction removed from a conversation is kept (``proxy.state.originals``),
        outside the listed record prefix like the ledger."""
        return f"{KEY_PREFIX}:o:{self._mac('originals', tenant, conversation_id)}"

    def recall_salt(self, tenant: str, conversation_id: str) -> str:
        """The key a conversation's recall handles are made with: the same original has another
        handle in every other conversation, and nobody without the secret can make one."""
        return self._mac("recall", tenant, conversation_id)

    def prompt_cache_key(self, tenant: str, conversation_id: str) -> str:
        """The ``prompt_cache_key`` a conversation's rewritten OpenAI requests carry:
        stable for the conversation, so its turns share the provider's cache routing, and
        meaningless without the secret (the provider never learns the id or the tenant)."""
        return "cpx-" + self._mac("prompt-cache", tenant, conversation_id)

    def tenant_prefix(self, tenant: str) -> str:
        """The key prefix of one tenant's records (for the admin listing)."""
        return f"{KEY_PREFIX}:r:{self._mac('tenant-tag', tenant)[:16]}:"

    def index_key(self, tenant: str) -> str:
        """The tenant's listing index: a sorted set of its record keys by last use."""
        return f"{KEY_PREFIX}:i:{self._mac('tenant-tag', tenant)[:16]}"

    def owner(self, tenant: str, conversation_id: str) -> str:
        """The fingerprint a record of this tenant and conversation must carry."""
        return self._mac("owner", tenant, conversation_id)

    def auto_conversation_id(
        self, tenant: str, messages: Sequence[Mapping[str, Any]]
    ) -> str | None:
        """``conversation.missing: auto``: an id from the tenant, preamble and first user message.

        The same client resending a growing history keeps the same id; None when there is no user
        message yet (nothing to name the conversation by).
        """
        named: list[Mapping[str, Any]] = []
        for message in messages:
            role = message.get("role")
            if role == "user":
                return "auto-" + self._mac("auto", tenant, chain_hash([*named, message]))
            if role in _PREAMBLE_ROLES:
                named.append(message)  # interaction-0 messages do not name the conversation
        return None

    def seal_conversation_id(self, tenant: str, conversation_id: str, *, key: str) -> str:
        """The id as a record stores it: sealed, bound to the tenant and the storage key, so a
        Redis reader learns nothing of it without the secret and the caller's credential."""
        nonce = os.urandom(12)
        sealed = self._id_cipher(tenant).encrypt(nonce, conversation_id.encode(), key.encode())
        return _SEALED_ID + base64.urlsafe_b64encode(nonce + sealed).decode()

    def open_conversation_id(self, tenant: str, stored: str, *, key: str) -> str | None:
        """The id a record names, or None if it does not open for this tenant and key. Records
        written before ids were sealed hold the plain id and are read as they are."""
        if not stored.startswith(_SEALED_ID):
            return stored
        try:
            raw = base64.urlsafe_b64decode(stored[len(_SEALED_ID) :])
            return self._id_cipher(tenant).decrypt(raw[:12], raw[12:], key.encode()).decode()
        except (binascii.Error, ValueError, InvalidTag):
            return None

    def _id_cipher(self, tenant: str) -> AESGCM:
        cipher = self._id_keys.get(tenant)
        if cipher is None:
            derived = HKDF(
                algorithm=SHA256(),
                length=32,
                salt=None,
                info=b"compaction-proxy/conversation-id\0" + tenant.encode(),
            ).derive(self._secret)
            if len(self._id_keys) >= _ID_KEYS_CACHED:  # tenants come from clients: stay bounded
                self._id_keys.clear()
            cipher = self._id_keys[tenant] = AESGCM(derived)
        return cipher


class HeaderLookup(Protocol):
    """What ``conversation_header`` reads headers through: a ``HeaderView`` or a plain
    mapping of lower-cased names."""

    def get(self, name: str, /) -> str | None: ...


def conversation_header(
    headers: HeaderLookup, settings: ConversationSettings
) -> tuple[str, str] | None:
    """The first configured header naming a conversation that ``headers`` hold (lower-cased
    names, as a ``HeaderView`` or the request's mapping holds them) and its value; None if
    none is. Read as it comes, unchecked: ``resolve_conversation_id`` says whether it is an id."""
    for name in settings.header:
        value = headers.get(name.lower())
        if value is not None:
            return name, value
    return None


def resolve_conversation_id(
    headers: Mapping[str, str],
    messages: Sequence[Mapping[str, Any]],
    *,
    tenant: str,
    tenancy: Tenancy,
    settings: ConversationSettings,
) -> str | None:
    """The request's conversation id, or None to pass it through uncompacted.

    The proxy's own header (the first configured) present but invalid raises InvalidRequest: the
    client meant it for the proxy. A coding agent's session header (the others) was not, so one
    the proxy cannot use as an id is passed over, never a reason to refuse the agent's request.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    for index, header in enumerate(settings.header):
        value = lowered.get(header.lower())
        if value is None:
            continue
        if index == 0:  # the proxy's own
            return validate_conversation_id(value.strip(), header=header)
        if usable_conversation_id(value.strip()):
            return value.strip()
    if settings.missing == "auto":
        return tenancy.auto_conversation_id(tenant, messages)
    return None
