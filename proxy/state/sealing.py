"""Encryption at rest for stored records: AES-GCM with key ids, rotation, and the key as context.

Keys come from ``store.encryption_keys`` as ``KEYID:BASE64KEY`` (16, 24 or 32 bytes). The first key
seals; every key opens, so records written before a rotation stay readable until their TTL ends.
The storage key is the associated data: a value copied under another key fails to open, which is
what makes moving ciphertext between conversations useless.

Sealed layout: ``MAGIC | len(key id) | key id | 12-byte nonce | ciphertext+tag``.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import SecretStr

from proxy.errors import ConfigError

MAGIC = b"\xa5G1"  # never the first bytes of a JSON document, so plain and sealed never mix up
_NONCE_BYTES = 12
_KEY_ID = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


class SealError(ValueError):
    """A value cannot be opened: tampered, sealed under another key or context, or unknown key."""


def parse_key(spec: str, *, index: int = 0) -> tuple[str, bytes]:
    """Parse ``KEYID:BASE64KEY``; a ConfigError names the entry (never its secret part)."""
    where = f"store.encryption_keys[{index}]"
    key_id, sep, encoded = spec.partition(":")
    if not sep or not _KEY_ID.match(key_id):
        raise ConfigError(
            f"{where}: expected 'KEYID:BASE64KEY' with KEYID of [A-Za-z0-9_.-]{{1,32}}"
        )
    try:
        key = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"{where} ({key_id}): the key is not valid base64") from exc
    if len(key) not in (16, 24, 32):
        raise ConfigError(f"{where} ({key_id}): an AES key has 16, 24 or 32 bytes, not {len(key)}")
    return key_id, key


class Sealer:
    """Seals and opens stored values; with no keys it passes plain values through."""

    def __init__(self, keys: Sequence[tuple[str, bytes]] = ()) -> None:
        ids = [key_id for key_id, _ in keys]
        if len(set(ids)) != len(ids):
            raise ConfigError("store.encryption_keys: key ids must be unique")
        self._ciphers = {key_id: AESGCM(key) for key_id, key in keys}
        self._current = ids[0] if ids else None

    @classmethod
    def from_settings(cls, keys: Sequence[SecretStr]) -> Sealer:
        return cls([parse_key(k.get_secret_value(), index=i) for i, k in enumerate(keys)])

    @property
    def enabled(self) -> bool:
        return self._current is not None

    def is_current(self, value: bytes) -> bool:
        """Whether ``value`` is sealed as ``seal`` would seal it now (with the first key, or
        plain when encryption is off): False means re-sealing it finishes a key rotation."""
        if self._current is None:
            return not value.startswith(MAGIC)
        key_id = self._current.encode()
        start = len(MAGIC) + 1
        return value.startswith(MAGIC) and value[start : start + value[len(MAGIC)]] == key_id

    def seal(self, plaintext: bytes, *, context: bytes) -> bytes:
        if self._current is None:
            return plaintext
        key_id = self._current.encode()
        nonce = os.urandom(_NONCE_BYTES)  # random 96-bit nonces: safe far beyond our write volume
        sealed = self._ciphers[self._current].encrypt(nonce, plaintext, context)
        return MAGIC + bytes([len(key_id)]) + key_id + nonce + sealed

    def open(self, value: bytes, *, context: bytes) -> bytes:
        if not value.startswith(MAGIC):
            if self.enabled:
                # Accepting plaintext while encryption is on would let anyone who can write to
                # Redis inject a record; a plain value left from before costs one re-summary.
                raise SealError("unencrypted value while encryption is on")
            return value
        if not self.enabled:
            raise SealError("encrypted value but no encryption keys are configured")
        start = len(MAGIC) + 1
        if len(value) < start:
            raise SealError("truncated value")
        id_end = start + value[len(MAGIC)]
        key_id = value[start:id_end].decode("ascii", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise SealError(f"sealed with unknown key id {key_id!r}")
        nonce = value[id_end : id_end + _NONCE_BYTES]
        try:
            return cipher.decrypt(nonce, value[id_end + _NONCE_BYTES :], context)
        except (InvalidTag, ValueError) as exc:
            raise SealError("value does not authenticate (tampered or moved)") from exc
