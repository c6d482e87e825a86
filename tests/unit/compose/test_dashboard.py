"""compose/grafana: the fleet dashboard parses, has its panels, and queries only exported metrics."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.paths import REPO_ROOT as ROOT
from tests.unit.compose.metric_names import exported_series, promql_names, unknown_names

GRAFANA = ROOT / "compose" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "fleet.json"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "prometheus.yml"
PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "fleet.yml"
RULES = ROOT / "compose" / "prometheus" / "alerts.yml"
COMPOSE = ROOT / "compose" / "docker-compose.yml"

# What Grafana puts in place of its variables before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$model": ".*", "$role": ".*"}

# Panel title -> fleet metrics its queries must read.
PANELS = {
    "Throughput (results/s by status)": {"fleet_worker_results_total"},
    "Latency per stage (p50 / p99) and end-to-end p99": {"fleet_stage_seconds_bucket",
                                                         "fleet_request_latency_seconds_bucket"},
    "Batch size distribution": {"fleet_batch_size_bucket"},
    "Cache hit rate by tier": {"fleet_worker_results_total"},
    "Backlog per partition": {"fleet_backlog_records"},
    "Worker health": {"fleet_worker_healthy"},
    "GPU utilisation": {"fleet_gpu_utilization_ratio"},
    "GPU memory used": {"fleet_gpu_memory_used_ratio"},
    "GPU temperature": {"fleet_gpu_temperature_celsius"},
    "Padding efficiency": {"fleet_padding_efficiency_bucket"},
    "Expired and dead letters": {"fleet_expired_total", "fleet_worker_dead_letters_total"},
}


def _dashboard() -> dict[str, Any]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert isinstance(dashboard, dict)
    return dashboard


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # inside collapsed rows


def _queried() -> list[dict[str, Any]]:
    return [panel for panel in _panels(_dashboard()["panels"]) if panel.get("type") != "row"]


def _exprs(panel: dict[str, Any]) -> list[str]:
    return [target["expr"] for target in panel.get("targets", []) if target.get("expr")]


def _recorded() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["record"] for group in groups for rule in group["rules"] if "record" in rule}


def test_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"] and dashboard["title"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    ids = [panel["id"] for panel in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in _panels(dashboard["panels"]):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]


def test_queries_use_the_prometheus_datasource_variable() -> None:
    variables = {variable["name"]: variable for variable in _dashboard()["templating"]["list"]}
    assert variables["DS"]["type"] == "datasource" and variables["DS"]["query"] == "prometheus"
    for panel in _queried():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS}"}, panel["title"]
        for target in panel["targets"]:
            assert target.get("datasource", panel["datasource"]) == panel["datasource"], panel["title"]


def test_has_the_fleet_panels() -> None:
    titles = [panel["title"] for panel in _queried()]
    assert len(titles) == len(set(titles)), "panel titles are unique"
    missing = PANELS.keys() - set(titles)
    assert not missing, f"missing panels: {sorted(missing)}"


@pytest.mark.parametrize("title", sorted(PANELS))
def test_panel_reads_its_metrics(title: str) -> None:
    panel = next(panel for panel in _queried() if panel["title"] == title)
    names = set().union(*(promql_names(expr) for expr in _exprs(panel)))
    assert PANELS[title] <= names, f"{title} reads {sorted(names)}"


def test_latency_panel_shows_p50_and_p99_by_stage_and_end_to_end_p99() -> None:
    panel = next(panel for panel in _queried() if panel["title"].startswith("Latency per stage"))
    exprs = [" ".join(expr.split()) for expr in _exprs(panel)]
    for quantile in ("0.5", "0.99"):
        assert any(expr.startswith(f"histogram_quantile({quantile}, sum by (stage, le)") for expr in exprs)
    assert any("histogram_quantile(0.99" in expr and "fleet_request_latency_seconds_bucket" in expr for expr in exprs)


def test_batch_size_panel_is_a_heatmap_of_buckets() -> None:
    panel = next(panel for panel in _queried() if panel["title"] == "Batch size distribution")
    assert panel["type"] == "heatmap"
    assert all(target.get("format") == "heatmap" for target in panel["targets"])


@pytest.mark.parametrize("title", sorted(panel["title"] for panel in _queried()))
def test_panel_queries_only_exported_metrics(title: str) -> None:
    panel = next(panel for panel in _queried() if panel["title"] == title)
    names = set().union(*(promql_names(expr) for expr in _exprs(panel)))
    assert names, f"{title} has no fleet query"
    unknown = unknown_names(names, _recorded())
    assert not unknown, (f"{title}: {sorted(unknown)} are neither exported by WorkerMetrics/GatewayMetrics "
                         f"nor recorded in alerts.yml; exported: {sorted(exported_series())}")


def test_provisioning_matches_the_dashboard_and_compose() -> None:
    datasource = yaml.safe_load(DATASOURCES.read_text())["datasources"][0]
    assert datasource["type"] == "prometheus" and datasource["url"] == "http://prometheus:9090"
    default = next(v for v in _dashboard()["templating"]["list"] if v["name"] == "DS")["current"]["value"]
    assert default in {datasource["uid"], datasource["name"]}
    provider = yaml.safe_load(PROVIDERS.read_text())["providers"][0]
    grafana = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]
    mounts = {volume.split(":")[0]: volume.split(":")[1] for volume in grafana["volumes"]}
    assert mounts["./grafana/dashboards"] == provider["options"]["path"]
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert grafana["environment"]["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not on PATH (Debian: apt-get install prometheus); it checks the query syntax")
def test_queries_are_valid_promql(tmp_path: Path) -> None:
    """Each query, with Grafana's variables filled in, as a recording rule for `promtool check rules`."""
    rules = []
    for panel in _queried():
        for expr in _exprs(panel):
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, f"{panel['title']}: unknown variable in {expr!r}"
            rules.append({"record": f"dashboard:query:{len(rules)}", "expr": expr})
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
