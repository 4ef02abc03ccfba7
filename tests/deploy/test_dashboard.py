"""The Grafana dashboard (deploy/grafana/) and the compose `observe` profile that
serves it: the JSON is a dashboard Grafana can load, the provisioning files point at each other
and at the compose services, and every metric (and label) a panel queries is one a real proxy
shows on /metrics after real traffic. No docker here: the files are checked as loaded."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.deploy.files import DEPLOY, load_yaml
from tests.support.clients import openai_client
from tests.support.config import summarizing
from tests.support.provider import SYSTEM, Provider, take_turn

DASHBOARD = DEPLOY / "grafana" / "dashboards" / "compaction-proxy.json"
PROVISIONING = DEPLOY / "grafana" / "provisioning"
METRIC = re.compile(r"\b(proxy_[a-z0-9_]+)\b")
LABELS = re.compile(r"\bby\s*\(([^)]*)\)|[{,]\s*([a-z_]+)\s*(?:=~|!~|!=|=)")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_is_one_grafana_loads(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "compaction-proxy" and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int)
    (variable,) = dashboard["templating"]["list"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    panels = dashboard["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    taken: set[tuple[int, int]] = set()
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["w"] > 0 and box["x"] + box["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(box["x"], box["x"] + box["w"])
            for y in range(box["y"], box["y"] + box["h"])
        }
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
        if panel["type"] == "row":
            continue
        assert panel["type"] in {"timeseries", "stat"}
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


def test_it_shows_what_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    asked = {
        "requests and errors by route": "proxy_requests_total",
        "compaction outcomes": "proxy_compactions_total",
        "tokens saved": "proxy_prompt_tokens_after_total",
        "net of the summarizer": "proxy_summarizer_tokens_total",
        "dollars saved net": "proxy_dollars_net_saved",
        "summarizer latency": "proxy_summarizer_latency_seconds_bucket",
        "summarizer failures": 'proxy_summarizer_calls_total{outcome!="ok"}',
        "store health": "proxy_store_degraded",
        "breaker state": "proxy_store_skipped_total",
        "added latency": "proxy_added_latency_seconds_bucket",
    }
    text = "\n".join(queries(dashboard))
    assert [what for what, query in asked.items() if query not in text] == []


def test_the_observe_profile_provisions_it() -> None:
    compose = load_yaml(DEPLOY / "compose.yaml")
    grafana, prometheus = compose["services"]["grafana"], compose["services"]["prometheus"]
    mounts = {m["target"]: DEPLOY / m["source"] for m in grafana["volumes"]}
    assert mounts["/etc/grafana/provisioning"] == PROVISIONING
    (source,) = load_yaml(PROVISIONING / "datasources" / "prometheus.yaml")["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] is True
    assert source["url"] == "http://prometheus:9090"  # the compose service's port
    (provider,) = load_yaml(PROVISIONING / "dashboards" / "compaction-proxy.yaml")["providers"]
    folder = provider["options"]["path"]
    assert mounts[folder] == DASHBOARD.parent
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{folder}/{DASHBOARD.name}"
    scrape = {
        m["target"]: DEPLOY / m["source"] for m in prometheus["volumes"] if isinstance(m, dict)
    }
    config = load_yaml(scrape["/etc/prometheus/prometheus.yml"])
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert job["static_configs"][0]["targets"] == ["proxy:8080"]  # the proxy's container port
    for port in (*grafana["ports"], *prometheus["ports"]):
        assert port.startswith("127.0.0.1:")  # not published beyond the machine by default


def test_every_metric_it_queries_is_on_metrics(mock, start_proxy, dashboard) -> None:
    """Real traffic through a real proxy (inline summaries, a request passed through), then each
    queried series is checked against /metrics: its family with the right type, and the labels
    the query names on every family that has samples."""
    Provider(mock)
    server = start_proxy(summarizing(mock.url))
    history = [SYSTEM]
    for turn in range(8):
        take_turn(openai_client(server), history, f"Step {turn}: edit src/m{turn}.py " + "x" * 300)
    openai_client(server, conversation=None).models.list()
    families = {
        f.name: f for f in text_string_to_metric_families(httpx.get(f"{server.url}/metrics").text)
    }
    missing, unlabelled = [], []
    for expr in queries(dashboard):
        for name in set(METRIC.findall(expr)):
            family = next(
                (
                    f
                    for base, f in families.items()
                    if any(name == base + s for s in SUFFIXES.get(f.type, ("",)))
                ),
                None,
            )
            if family is None:
                missing.append(name)
                continue
            have = {label for sample in family.samples for label in sample.labels}
            wanted = {
                label.strip()
                for by, matched in LABELS.findall(expr)
                for label in (by.split(",") if by else [matched])
            } - {"le", ""}
            if family.samples and not wanted <= have:
                unlabelled.append(f"{name}: {sorted(wanted - have)}")
    assert missing == []
    assert unlabelled == []
