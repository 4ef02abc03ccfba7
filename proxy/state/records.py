"""Checkpoint records as the backend holds them: sealed, bound to their key and owner, bounded.

A record is encoded (``proxy.core.checkpoints``), then sealed (``proxy.state.sealing``) with its
storage key as the associated data, so a value copied under another key does not open. Values
that do not open (tampered, moved, wrong key), do not parse, or belong to another owner
(``proxy.state.tenancy.Tenancy.owner``) are misses; an owner mismatch is also a security log event.
"""

from __future__ import annotations

import dataclasses
import logging

from proxy.core.checkpoints import Record, RecordError, decode_record, encode_record
from proxy.state.counters import StoreCounters
from proxy.state.sealing import MAGIC, Sealer, SealError

# The store's log lines keep the names they are documented under.
log = logging.getLogger("proxy.store.conversations")
security_log = logging.getLogger("proxy.security")


class SealedRecords:
    """Turns records into stored values and back, under ``store.max_record_bytes``."""

    def __init__(self, sealer: Sealer, *, max_record_bytes: int, counters: StoreCounters) -> None:
        self.max_record_bytes = max_record_bytes
        self._sealer = sealer
        # Without keys a record is kept as it is, so only a sealed one (met after the keys were
        # removed: the sealer says so) is handed to the sealer; decided once.
        self._plain = not sealer.enabled
        self._counters = counters

    def open(self, key: str, raw: bytes, *, owner: str | None) -> Record | None:
        """The record stored under ``key``; None when it does not open or is not ``owner``'s
        (``owner=None`` skips that check, for a caller that checks it otherwise)."""
        try:
            plain = raw
            if not self._plain or raw.startswith(MAGIC):
                plain = self._sealer.open(raw, context=key.encode())
            record = decode_record(plain)
        except (SealError, RecordError) as exc:
            self._counters.invalid_values += 1
            log.warning("ignoring an unreadable stored record: %s", exc)
            return None
        if owner is not None and record.owner != owner:
            self._counters.owner_mismatches += 1
            security_log.warning("stored record under %s carries another owner; ignored", key)
            return None
        return record

    def seal(self, key: str, record: Record) -> bytes:
        plain = encode_record(record)
        return plain if self._plain else self._sealer.seal(plain, context=key.encode())

    def seal_within_limit(self, key: str, record: Record) -> bytes | None:
        """The sealed record, its oldest checkpoints dropped until it fits max_record_bytes;
        None when the newest checkpoint alone does not fit (a 10 MB summary made an
        84 MB Redis value)."""
        while True:
            raw = self.seal(key, record)
            if len(raw) <= self.max_record_bytes:
                return raw
            if len(record.checkpoints) <= 1:
                return None
            record = dataclasses.replace(record, checkpoints=record.checkpoints[:-1])
