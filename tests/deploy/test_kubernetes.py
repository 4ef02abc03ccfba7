"""deploy/kubernetes: every manifest is valid against the Kubernetes schemas, and fits together.

Validation is kubernetes-validate's bundled OpenAPI schemas (offline), strict: an unknown or
misspelt field fails, as ``kubectl apply --validate=strict`` would. The other tests check what a
schema cannot: replicas, probes, drain timing, selectors, and references between the objects.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.config.settings import parse_settings
from proxy.errors import ConfigError
from tests.deploy.files import KUBERNETES, load_all_yaml, load_yaml

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate.utils", reason="pip install kubernetes-validate (test extras)"
)

# The oldest Kubernetes we claim to support, and the newest the validator bundles.
VERSIONS = ("1.29", kubernetes_validate.latest_version())
MANIFESTS = sorted(p for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml")
PROXY = {"app.kubernetes.io/name": "compaction-proxy"}
REDIS = {"app.kubernetes.io/name": "redis"}
# What a real Secret would hold: values the proxy accepts.
SECRETS = {
    "COMPACTION_TENANT_SECRET": "a" * 64,
    "COMPACTION_ENCRYPTION_KEY": "k1:" + "A" * 43 + "=",  # 32 zero bytes in base64
}


def all_objects() -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in load_all_yaml(path)]


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in all_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def proxy_container() -> dict[str, Any]:
    (container,) = find("Deployment", "compaction-proxy")["spec"]["template"]["spec"]["containers"]
    return container


def proxy_config_text() -> str:
    return find("ConfigMap", "compaction-proxy-config")["data"]["proxy.yaml"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_is_valid(path: Path, version: str) -> None:
    docs = load_all_yaml(path)
    assert docs, f"{path.name} holds no object"
    for doc in docs:
        where = f"{path.name}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            field = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{where} is invalid for Kubernetes {version}: {field}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(f"{where}: {exc.message}")


def test_validator_rejects_a_broken_manifest() -> None:
    # The check above must be able to fail: a misspelt probe and a string replica count.
    deployment = find("Deployment", "compaction-proxy")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)
    deployment = find("Deployment", "compaction-proxy")
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[-1], strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = load_yaml(KUBERNETES / "kustomization.yaml")
    assert sorted(kustomization["resources"]) == [p.name for p in MANIFESTS]


def test_deployment_runs_several_probed_replicas() -> None:
    deployment = find("Deployment", "compaction-proxy")
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    container = proxy_container()
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in port_names
    assert port_names["http"] == 8080  # COMPACTION_PROXY_PORT of the image
    resources = container["resources"]
    assert resources["requests"]["cpu"] and resources["requests"]["memory"]
    assert resources["limits"]["memory"]


def test_termination_grace_outlasts_prestop_and_drain() -> None:
    pod = find("Deployment", "compaction-proxy")["spec"]["template"]["spec"]
    command = proxy_container()["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    pre_stop = float(command[1])
    drain = parse_settings(proxy_config_text(), environ=SECRETS).server.shutdown_grace_seconds
    assert pre_stop > 0
    assert pod["terminationGracePeriodSeconds"] > pre_stop + drain


def test_pods_run_non_root_on_a_read_only_root() -> None:
    for name in ("compaction-proxy", "redis"):
        kind = "Deployment" if name == "compaction-proxy" else "StatefulSet"
        pod = find(kind, name)["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["automountServiceAccountToken"] is False
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
    # The image's user (Dockerfile: USER 10001) is the one the pod asserts.
    pod = find("Deployment", "compaction-proxy")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 10001


def test_selectors_match_the_pods() -> None:
    deployment = find("Deployment", "compaction-proxy")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert find("Service", "compaction-proxy")["spec"]["selector"] == PROXY
    assert (
        find("PodDisruptionBudget", "compaction-proxy")["spec"]["selector"]["matchLabels"] == PROXY
    )
    assert PROXY.items() <= labels.items()
    service_port = find("Service", "compaction-proxy")["spec"]["ports"][0]
    assert service_port["targetPort"] in {p["name"] for p in proxy_container()["ports"]}
    redis = find("StatefulSet", "redis")
    assert redis["spec"]["serviceName"] == "redis"
    assert find("Service", "redis")["spec"]["selector"] == REDIS
    assert REDIS.items() <= redis["spec"]["template"]["metadata"]["labels"].items()


def test_autoscaler_and_disruption_budget_keep_two_replicas() -> None:
    hpa = find("HorizontalPodAutoscaler", "compaction-proxy")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "compaction-proxy",
    }
    assert 2 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    pdb = find("PodDisruptionBudget", "compaction-proxy")
    assert pdb["spec"]["maxUnavailable"] < hpa["spec"]["minReplicas"]


def test_secrets_and_config_are_wired_by_reference() -> None:
    container = proxy_container()
    secret = find("Secret", "compaction-proxy-secrets")
    env = {e["name"]: e for e in container["env"]}
    for name in ("COMPACTION_TENANT_SECRET", "COMPACTION_ENCRYPTION_KEY"):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"]
        assert ref["key"] in secret["stringData"]
        assert f"${{{name}}}" in proxy_config_text()
    pod = find("Deployment", "compaction-proxy")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    config_mount = mounts["/etc/compaction-proxy"]
    assert volumes[config_mount["name"]]["configMap"]["name"] == "compaction-proxy-config"
    assert env["COMPACTION_PROXY_CONFIG"]["value"] == "/etc/compaction-proxy/proxy.yaml"
    assert "/tmp" in mounts  # the only writable path on the read-only root


def test_config_map_is_a_valid_proxy_config() -> None:
    settings = parse_settings(proxy_config_text(), source="configmap.yaml", environ=SECRETS)
    assert settings.store.url.startswith("redis://redis:6379")
    assert settings.store.tenant_secret is not None
    assert settings.store.tenant_secret.get_secret_value() == SECRETS["COMPACTION_TENANT_SECRET"]
    assert len(settings.store.encryption_keys) == 1


def test_placeholder_secret_cannot_start_the_proxy() -> None:
    from proxy.state.sealing import Sealer
    from proxy.state.tenancy import Tenancy

    placeholders = find("Secret", "compaction-proxy-secrets")["stringData"]
    assert all("REPLACE_ME" in value for value in placeholders.values())
    environ = {
        "COMPACTION_TENANT_SECRET": placeholders["tenant-secret"],
        "COMPACTION_ENCRYPTION_KEY": placeholders["encryption-key"],
    }
    settings = parse_settings(proxy_config_text(), environ=environ)
    with pytest.raises(ConfigError, match=r"encryption_keys\[0\]"):
        Sealer.from_settings(settings.store.encryption_keys)
    with pytest.raises(ValueError, match="16 bytes"):
        Tenancy.from_settings(settings.store)
