"""What the conversation store counts, for the metrics layer to read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class StoreCounters:
    """Plain counters for the metrics layer to read (monotonic, never reset). One instance is
    shared by the store's parts: each counts what it sees."""

    loads: int = 0
    hits: int = 0
    misses: int = 0
    writes: int = 0
    write_rejected: int = 0
    write_conflicts: int = 0
    write_gave_up: int = 0
    write_too_large: int = 0
    errors: int = 0
    skipped: int = 0
    fallbacks: int = 0
    invalid_values: int = 0
    owner_mismatches: int = 0
    locks_acquired: int = 0
    locks_busy: int = 0
    backend_calls: int = 0
