"""deploy/compose.yaml: what matters, checked on the loaded file (no compose plugin here).

Services, healthchecks, the proxy waiting for a healthy Redis, the config mount, the ports,
secrets taken from the environment, and the mounted config being one the proxy accepts.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy.config.settings import parse_settings
from tests.deploy.files import DEPLOY, load_yaml
from tests.support.paths import REPO_ROOT

COMPOSE = DEPLOY / "compose.yaml"
# `${NAME}`, `${NAME:-default}`, `${NAME:?error}`: compose's interpolation of the host environment.
REQUIRED_FROM_ENV = re.compile(r"^\$\{(?P<name>[A-Z_][A-Z0-9_]*):\?[^}]+\}$")


@pytest.fixture
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def service(compose: dict[str, Any], name: str) -> dict[str, Any]:
    return compose["services"][name]


def test_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    # `up` starts the proxy and Redis; `--profile observe` adds Prometheus and Grafana
    # (tests/deploy/test_dashboard.py checks those).
    assert {n for n, s in services.items() if "profiles" not in s} == {"proxy", "redis"}
    assert {n for n, s in services.items() if s.get("profiles") == ["observe"]} == {
        "prometheus",
        "grafana",
    }
    assert service(compose, "redis")["image"].startswith("redis:7.")
    build = service(compose, "proxy")["build"]
    assert (COMPOSE.parent / build["context"] / build["dockerfile"]).is_file()
    assert "tiktoken" in build["additional_contexts"]  # the Dockerfile's named context


def test_tiktoken_context_defaults_to_a_folder_of_the_repository(compose: dict[str, Any]) -> None:
    # A fresh clone builds: the default context is inside the repo (a README only, so the build
    # downloads the files and checks them); TIKTOKEN_DIR opts into an offline folder.
    value = service(compose, "proxy")["build"]["additional_contexts"]["tiktoken"]
    match = re.fullmatch(r"\$\{TIKTOKEN_DIR:-(?P<default>[^}]+)\}", value)
    assert match, value
    folder = (COMPOSE.parent / match["default"]).resolve()
    assert folder.is_dir() and folder.is_relative_to(REPO_ROOT)
    # Nothing in it looks like a tiktoken cache file (those are never committed).
    assert not [p for p in folder.iterdir() if re.fullmatch(r"[0-9a-f]{40}", p.name)]
    assert (folder / "README.md").is_file()


def test_healthchecks(compose: dict[str, Any]) -> None:
    redis = service(compose, "redis")["healthcheck"]
    assert redis["test"] == ["CMD", "redis-cli", "ping"]
    proxy = service(compose, "proxy")["healthcheck"]
    # The image's own healthcheck script (GET /healthz), so no curl is needed in the image.
    assert proxy["test"] == ["CMD", "python", "/usr/local/lib/compaction-proxy/healthcheck.py"]
    for check in (redis, proxy):
        assert {"interval", "timeout", "retries"} <= check.keys()


def test_proxy_waits_for_a_healthy_redis(compose: dict[str, Any]) -> None:
    assert service(compose, "proxy")["depends_on"]["redis"]["condition"] == "service_healthy"


def test_redis_persistence_is_off_and_memory_bounded(compose: dict[str, Any]) -> None:
    command = service(compose, "redis")["command"]
    options = dict(zip(command[1::2], command[2::2], strict=True))
    assert options["--save"] == ""
    assert options["--appendonly"] == "no"
    assert options["--maxmemory-policy"].endswith("-lru")
    assert "ports" not in service(compose, "redis")  # reachable from the proxy only


def test_config_is_mounted_read_only_where_the_image_reads_it(compose: dict[str, Any]) -> None:
    proxy = service(compose, "proxy")
    (mount,) = proxy["volumes"]
    target = proxy["environment"]["COMPACTION_PROXY_CONFIG"]
    assert mount["target"] == target == "/etc/compaction-proxy/proxy.yaml"
    assert mount["read_only"] is True
    assert (COMPOSE.parent / mount["source"]).is_file()


def test_ports(compose: dict[str, Any]) -> None:
    (port,) = service(compose, "proxy")["ports"]
    match = re.fullmatch(r"(?P<ip>[\d.]+):(?P<host>\$\{[^}]+\}|\d+):(?P<container>\d+)", port)
    assert match, port
    assert match["ip"] == "127.0.0.1"  # not published beyond the machine by default
    assert match["host"] == "${COMPACTION_PROXY_PUBLISH_PORT:-8080}"
    assert match["container"] == "8080"  # COMPACTION_PROXY_PORT of the image


def test_secrets_come_from_the_environment(compose: dict[str, Any]) -> None:
    environment = service(compose, "proxy")["environment"]
    for name in ("COMPACTION_TENANT_SECRET", "COMPACTION_ENCRYPTION_KEY"):
        match = REQUIRED_FROM_ENV.match(environment[name])
        assert match and match["name"] == name, f"{name} must be ${{{name}:?...}}, not inline"
    text = COMPOSE.read_text(encoding="utf-8")
    assert "REPLACE_ME" not in text


def test_stop_grace_outlasts_the_drain(compose: dict[str, Any]) -> None:
    mount = service(compose, "proxy")["volumes"][0]
    text = (COMPOSE.parent / mount["source"]).read_text(encoding="utf-8")
    settings = parse_settings(text, environ=VALID_SECRETS)
    grace = service(compose, "proxy")["stop_grace_period"]
    assert grace.endswith("s") and float(grace[:-1]) > settings.server.shutdown_grace_seconds


VALID_SECRETS = {
    "COMPACTION_TENANT_SECRET": "b" * 64,
    "COMPACTION_ENCRYPTION_KEY": "k1:" + "A" * 43 + "=",
}


def test_mounted_config_is_valid_and_shares_state_through_redis(compose: dict[str, Any]) -> None:
    mount = service(compose, "proxy")["volumes"][0]
    text = (COMPOSE.parent / mount["source"]).read_text(encoding="utf-8")
    settings = parse_settings(text, source=mount["source"], environ=VALID_SECRETS)
    assert settings.store.url == "redis://redis:6379/0"  # the compose service name
    assert settings.store.tenant_secret is not None
    assert len(settings.store.encryption_keys) == 1
