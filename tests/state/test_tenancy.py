"""Tenancy: tenant binding, conversation ids, auto ids, and keys that leak nothing."""

from __future__ import annotations

import logging

import pytest
from pydantic import SecretStr

from proxy.config.settings import ConversationSettings, StoreSettings
from proxy.errors import InvalidRequest
from proxy.state.tenancy import (
    Tenancy,
    credential_from_headers,
    resolve_conversation_id,
    validate_conversation_id,
)

SECRET = b"s" * 32


def test_tenants_depend_on_credential_and_secret() -> None:
    tenancy = Tenancy(SECRET)
    assert tenancy.tenant("sk-a") == tenancy.tenant("sk-a")
    assert tenancy.tenant("sk-a") != tenancy.tenant("sk-b")
    assert Tenancy(b"x" * 32).tenant("sk-a") != tenancy.tenant("sk-a")
    assert "sk-a" not in tenancy.tenant("sk-a")


def test_a_shared_secret_adopted_later_derives_every_name_anew() -> None:
    """A replica starts on a provisional secret and adopts the one kept in the store: names it
    derived before (and remembered) must not outlive the secret they came from."""
    tenancy = Tenancy(b"p" * 32, provisional=True)
    before = tenancy.tenant("sk-a"), tenancy.record_key("t1", "c1"), tenancy.owner("t1", "c1")
    tenancy.adopt(SECRET)
    fresh = Tenancy(SECRET)
    after = tenancy.tenant("sk-a"), tenancy.record_key("t1", "c1"), tenancy.owner("t1", "c1")
    assert after == (fresh.tenant("sk-a"), fresh.record_key("t1", "c1"), fresh.owner("t1", "c1"))
    assert not set(after) & set(before)


def test_keys_contain_no_raw_id_or_credential() -> None:
    tenancy = Tenancy(SECRET)
    credential = "sk-live-SUPERSECRETKEY"
    tenant = tenancy.tenant(credential)
    conv = "customer-42-chat"
    for key in (tenancy.record_key(tenant, conv), tenancy.lock_key(tenant, conv)):
        assert conv not in key and "customer" not in key
        assert credential not in key and "SUPERSECRET" not in key and tenant not in key
    assert tenancy.record_key(tenant, conv).startswith(tenancy.tenant_prefix(tenant))
    assert tenancy.record_key(tenant, conv) != tenancy.record_key(tenancy.tenant("other"), conv)
    # Length framing: moving a character between tenant and id changes the key.
    assert tenancy.record_key("ab", "c") != tenancy.record_key("a", "bc")


def test_owner_fingerprint_is_per_tenant_and_conversation() -> None:
    tenancy = Tenancy(SECRET)
    assert tenancy.owner("t", "c") == tenancy.owner("t", "c")
    assert tenancy.owner("t", "c") != tenancy.owner("t2", "c")
    assert tenancy.owner("t", "c") != tenancy.owner("t", "c2")


def test_missing_secret_is_generated_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="proxy.tenancy"):
        one = Tenancy.from_settings(StoreSettings())
        two = Tenancy.from_settings(StoreSettings())
    assert "tenant_secret is not set" in caplog.text
    assert one.tenant("k") != two.tenant("k")
    fixed = StoreSettings(tenant_secret=SecretStr("0123456789abcdef0123"))
    assert Tenancy.from_settings(fixed).tenant("k") == Tenancy.from_settings(fixed).tenant("k")
    with pytest.raises(ValueError):
        Tenancy(b"short")


@pytest.mark.parametrize(
    "value", ["a", "conv-1", "user@example.com:thread/7", "x" * 128, "A.b_c+d="]
)
def test_valid_conversation_ids(value: str) -> None:
    assert validate_conversation_id(value) == value


@pytest.mark.parametrize(
    "value", ["", "x" * 129, "has space", "new\nline", "ünïcode", "semi;colon"]
)
def test_invalid_conversation_ids_are_400s(value: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate_conversation_id(value, header="X-Conversation-Id")
    assert info.value.status_code == 400
    assert info.value.param == "X-Conversation-Id"
    assert info.value.code == "invalid_conversation_id"


def test_credential_from_headers() -> None:
    default = ConversationSettings()
    assert credential_from_headers({"Authorization": "Bearer sk-1"}, default) == "sk-1"
    assert credential_from_headers({"authorization": "bearer  sk-1 "}, default) == "sk-1"
    assert credential_from_headers({"Authorization": "Basic abc"}, default) == "Basic abc"
    assert credential_from_headers({"api-key": "az-1"}, default) == "az-1"
    assert credential_from_headers({"X-Api-Key": "an-1"}, default) == "an-1"
    # One key is one tenant however it is sent.
    assert credential_from_headers({"api-key": "sk-1"}, default) == "sk-1"
    assert credential_from_headers({}, default) is None
    custom = ConversationSettings(credential_header="X-Api-Key")
    headers = {"x-api-key": "k-2", "Authorization": "Bearer sk-1"}
    assert credential_from_headers(headers, custom) == "k-2"
    assert credential_from_headers({"Authorization": "Bearer sk-1"}, custom) is None


def test_auto_ids_follow_preamble_and_first_user_message() -> None:
    tenancy = Tenancy(SECRET)
    base = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hello"},
    ]
    grown = [*base, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]
    auto = tenancy.auto_conversation_id("t", base)
    assert auto is not None and auto.startswith("auto-")
    validate_conversation_id(auto)
    assert tenancy.auto_conversation_id("t", grown) == auto
    assert tenancy.auto_conversation_id("t2", base) != auto
    other_system = [{"role": "system", "content": "other"}, base[1]]
    assert tenancy.auto_conversation_id("t", other_system) != auto
    assert tenancy.auto_conversation_id("t", [{"role": "system", "content": "sys"}]) is None


def test_resolve_conversation_id() -> None:
    tenancy = Tenancy(SECRET)
    messages = [{"role": "user", "content": "hello"}]
    passthrough = ConversationSettings()
    auto = ConversationSettings(missing="auto", header="X-Chat")

    def resolve(headers: dict[str, str], settings: ConversationSettings) -> str | None:
        return resolve_conversation_id(
            headers, messages, tenant="t", tenancy=tenancy, settings=settings
        )

    assert resolve({"x-conversation-id": "c1"}, passthrough) == "c1"
    assert resolve({}, passthrough) is None
    assert resolve({"X-Chat": "c2"}, auto) == "c2"
    assert resolve({}, auto) == tenancy.auto_conversation_id("t", messages)
    with pytest.raises(InvalidRequest):
        resolve({"X-Conversation-Id": "bad id"}, passthrough)
