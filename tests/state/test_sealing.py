"""Sealing: AES-GCM at rest, key ids and rotation, the storage key as associated data."""

from __future__ import annotations

import base64

import pytest
from pydantic import SecretStr

from proxy.errors import ConfigError
from proxy.state.sealing import MAGIC, Sealer, SealError, parse_key

KEY_1 = ("k1", b"1" * 32)
KEY_2 = ("k2", b"2" * 16)


def test_round_trip_hides_the_plaintext() -> None:
    sealer = Sealer([KEY_1])
    sealed = sealer.seal(b'{"summary":"secret plans"}', context=b"key")
    assert sealed.startswith(MAGIC) and b"secret" not in sealed
    assert sealer.open(sealed, context=b"key") == b'{"summary":"secret plans"}'
    assert sealer.seal(b"x", context=b"key") != sealer.seal(b"x", context=b"key")  # fresh nonces


def test_rotation_old_keys_open_new_key_seals() -> None:
    old = Sealer([KEY_1]).seal(b"old", context=b"k")
    rotated = Sealer([KEY_2, KEY_1])
    assert rotated.open(old, context=b"k") == b"old"
    new = rotated.seal(b"new", context=b"k")
    assert Sealer([KEY_2]).open(new, context=b"k") == b"new"
    with pytest.raises(SealError, match="unknown key id"):
        Sealer([KEY_1]).open(new, context=b"k")


def test_another_context_does_not_open() -> None:
    sealer = Sealer([KEY_1])
    with pytest.raises(SealError):
        sealer.open(sealer.seal(b"v", context=b"key-a"), context=b"key-b")


@pytest.mark.parametrize("position", [len(MAGIC) + 4, -1, -20])
def test_tampering_is_detected(position: int) -> None:
    sealer = Sealer([KEY_1])
    sealed = bytearray(sealer.seal(b"value", context=b"k"))
    sealed[position] ^= 0x01
    with pytest.raises(SealError):
        sealer.open(bytes(sealed), context=b"k")


def test_truncated_values_are_rejected() -> None:
    sealer = Sealer([KEY_1])
    sealed = sealer.seal(b"value", context=b"k")
    for cut in (len(MAGIC), len(MAGIC) + 3, len(sealed) - 1):
        with pytest.raises(SealError):
            sealer.open(sealed[:cut], context=b"k")


def test_plain_and_sealed_never_mix() -> None:
    assert Sealer().open(b"{}", context=b"k") == b"{}"
    assert Sealer().seal(b"{}", context=b"k") == b"{}"
    with pytest.raises(SealError, match="unencrypted"):
        Sealer([KEY_1]).open(b"{}", context=b"k")
    with pytest.raises(SealError, match="no encryption keys"):
        Sealer().open(Sealer([KEY_1]).seal(b"{}", context=b"k"), context=b"k")


def test_keys_from_settings() -> None:
    spec = "main:" + base64.b64encode(b"k" * 32).decode()
    sealer = Sealer.from_settings([SecretStr(spec)])
    assert sealer.enabled
    assert parse_key(spec) == ("main", b"k" * 32)


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("nokeyid", "KEYID:BASE64KEY"),
        ("bad id:" + base64.b64encode(b"k" * 32).decode(), "KEYID"),
        ("k:not base64!", "base64"),
        ("k:" + base64.b64encode(b"short").decode(), "16, 24 or 32"),
    ],
)
def test_bad_keys_are_config_errors_that_do_not_echo_the_key(spec: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as info:
        Sealer.from_settings([SecretStr(spec)])
    assert "store.encryption_keys[0]" in str(info.value)
    assert spec.partition(":")[2] not in str(info.value) or not spec.partition(":")[2]


def test_duplicate_key_ids_are_refused() -> None:
    with pytest.raises(ConfigError, match="unique"):
        Sealer([KEY_1, ("k1", b"3" * 32)])
