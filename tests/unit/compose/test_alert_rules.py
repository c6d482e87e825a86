"""compose/prometheus/alerts.yml: the seed's alert table as rules that read real fleet metrics.

Always: the rules parse, have the shape Prometheus and Alertmanager need, cover every row of
the table in both severities, and read only metrics the code exports. With promtool on PATH
(Debian: apt-get install prometheus): `promtool check rules`, `promtool check config` and the
rule unit tests in compose/prometheus/alerts_test.yml, which prove each alert fires, and stays
quiet, on synthetic series.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.paths import REPO_ROOT as ROOT
from tests.unit.compose.metric_names import exported_series, promql_names, template_names, unknown_names

PROMETHEUS = ROOT / "compose" / "prometheus"
RULES = PROMETHEUS / "alerts.yml"
RULE_TESTS = PROMETHEUS / "alerts_test.yml"
CONFIG = PROMETHEUS / "prometheus.yml"
COMPOSE = ROOT / "compose" / "docker-compose.yml"
SEVERITIES = {"warning", "critical"}

# The seed article's §3.2 table: alert -> the threshold each severity's expression must state.
SEED_TABLE: dict[str, dict[str, str]] = {
    "FleetP99LatencyHigh": {"warning": "0.8 * fleet:request_latency_p99_threshold_seconds",
                            "critical": "> on (model) fleet:request_latency_p99_threshold_seconds"},
    "FleetGpuUtilizationHigh": {"warning": "> 0.85", "critical": "> 0.95"},
    "FleetGpuMemoryHigh": {"warning": "> 0.85", "critical": "> 0.95"},
    "FleetCacheHitRateLow": {"warning": "< 0.20", "critical": "< 0.10"},
    "FleetErrorRateHigh": {"warning": "> 0.005", "critical": "> 0.02"},
}
FLEET_ALERTS = {"FleetConsumerLagGrowing", "FleetNoHealthyPrimary"}
# Alerts of features beyond the table: the semantic cache's false-hit budget and canary versions.
FEATURE_ALERTS = {"FleetSemanticCacheFalseHits", "FleetSemanticCacheDisabled", "FleetCanaryErrorRateHigh"}
MAX_ALERTS = 10  # the seed: no more than about ten alerts that matter; the rest is for dashboards

promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    promtool is None, reason="promtool not on PATH (Debian: apt-get install prometheus); "
                             "the PyYAML checks in this file still run")


def _groups() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    assert isinstance(groups, list) and groups
    return groups


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _groups() for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def _recorded() -> set[str]:
    return {rule["record"] for rule in _rules() if "record" in rule}


def _rule_id(rule: dict[str, Any]) -> str:
    return rule.get("record") or f"{rule['alert']}/{rule['labels']['severity']}"


def _compact(expr: str) -> str:
    return re.sub(r"\s+", " ", expr).strip()


def _grouping_labels(expr: str) -> set[str]:
    """Labels named in the expression's `by (...)` clauses: what its alerts are labelled by."""
    return {label.strip() for group in re.findall(r"by \(([^)]*)\)", expr) for label in group.split(",")}


def test_rules_parse_into_groups_of_alerts_and_recordings() -> None:
    names = [group["name"] for group in _groups()]
    assert len(names) == len(set(names)), "group names are unique"
    for rule in _rules():
        assert ("alert" in rule) != ("record" in rule), rule
        assert isinstance(rule.get("expr"), str) and rule["expr"].strip(), rule


@pytest.mark.parametrize("rule", _alerts(), ids=_rule_id)
def test_alert_has_severity_and_annotations(rule: dict[str, Any]) -> None:
    assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert annotations["summary"].strip() and annotations["description"].strip()
    if "model" in _grouping_labels(rule["expr"]):
        assert "$labels.model" in annotations["summary"], "the summary names the model"
    assert "$value" in annotations["summary"] + annotations["description"], "the annotations give the value"


def test_no_alert_flood() -> None:
    names = {rule["alert"] for rule in _alerts()}
    assert len(names) <= MAX_ALERTS, sorted(names)
    assert names == SEED_TABLE.keys() | FLEET_ALERTS | FEATURE_ALERTS, "the table's rows and the named alerts"


@pytest.mark.parametrize("alert", sorted(SEED_TABLE))
def test_seed_row_has_warning_and_critical_at_its_threshold(alert: str) -> None:
    rules = {rule["labels"]["severity"]: rule for rule in _alerts() if rule["alert"] == alert}
    assert set(rules) == SEVERITIES, f"{alert}: one warning and one critical rule"
    for severity, threshold in SEED_TABLE[alert].items():
        assert threshold in _compact(rules[severity]["expr"]), f"{alert}/{severity} compares with {threshold!r}"


def test_gpu_utilisation_is_sustained_for_five_minutes() -> None:
    for rule in _alerts():
        if rule["alert"] == "FleetGpuUtilizationHigh":
            assert rule["for"] == "5m"


def test_latency_threshold_is_one_recording_and_p99_reads_the_latency_histogram() -> None:
    rules = {rule["record"]: rule["expr"] for rule in _rules() if "record" in rule}
    assert "fleet:request_latency_p99_threshold_seconds" in rules
    p99 = _compact(rules["model:fleet_request_latency_seconds:p99_5m"])
    assert p99.startswith("histogram_quantile(0.99,")
    assert "sum by (model, le) (rate(fleet_request_latency_seconds_bucket" in p99


def test_ratios_guard_against_no_traffic() -> None:
    """Cache hit rate and error rate divide only by models with traffic over a floor."""
    for rule in _alerts():
        if rule["alert"] in {"FleetCacheHitRateLow", "FleetErrorRateHigh"}:
            expr = _compact(rule["expr"])
            assert re.search(r"/ \(sum by \(model\) \(rate\(fleet_worker_results_total\{[^}]*\}\[\w+\]\)\) > [0-9.]+\)",
                             expr), expr


def test_fleet_alerts() -> None:
    alerts = {rule["alert"]: rule for rule in _alerts() if rule["alert"] in FLEET_ALERTS}
    interactive, lower = [rule for rule in _alerts() if rule["alert"] == "FleetConsumerLagGrowing"]
    lag = _compact(interactive["expr"])
    assert "deriv(" in lag and 'fleet_backlog_records{lane=~"interactive|"}' in lag and interactive["for"] == "30s"
    stalled = _compact(lower["expr"])
    assert "unless on (model, role, lane)" in stalled and "fleet_lane_batches_total" in stalled and lower["for"] == "15m"
    healthy = _compact(alerts["FleetNoHealthyPrimary"]["expr"])
    assert 'sum by (model) (fleet_worker_healthy{role="primary"}) == 0' in healthy
    assert alerts["FleetNoHealthyPrimary"]["labels"]["severity"] == "critical"


@pytest.mark.parametrize("rule", _rules(), ids=_rule_id)
def test_rule_reads_only_exported_metrics(rule: dict[str, Any]) -> None:
    names = promql_names(rule["expr"])
    for text in (rule.get("annotations") or {}).values():
        names |= template_names(text)
    assert names, "every rule reads a fleet metric"
    unknown = unknown_names(names, _recorded())
    assert not unknown, (f"{sorted(unknown)} are neither exported by WorkerMetrics/GatewayMetrics "
                         f"nor recorded in alerts.yml; exported: {sorted(exported_series())}")


def test_recordings_are_defined_before_use() -> None:
    seen: set[str] = set()
    recorded = _recorded()
    for rule in _rules():
        used = {name for name in promql_names(rule["expr"]) if name in recorded}
        assert used <= seen, f"{_rule_id(rule)} reads {sorted(used - seen)} before it is recorded"
        if "record" in rule:
            seen.add(rule["record"])


def test_rule_unit_tests_cover_every_alert() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())
    assert tests["rule_files"] == [RULES.name]
    tested = {case["alertname"] for test in tests["tests"] for case in test.get("alert_rule_test", [])
              if case.get("exp_alerts")}
    assert tested == {rule["alert"] for rule in _alerts()}


# --- prometheus.yml and the compose service -------------------------------------------------------

def _compose_services() -> dict[str, dict[str, Any]]:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert isinstance(services, dict)
    return services


def test_prometheus_config_loads_the_rules_and_scrapes_the_compose_fleet() -> None:
    config = yaml.safe_load(CONFIG.read_text())
    assert config["rule_files"] == [RULES.name]
    targets = {target for job in config["scrape_configs"] for static in job.get("static_configs", [])
               for target in static["targets"]}
    expected = set()
    for name, service in _compose_services().items():
        command = service.get("command") or []
        env = service.get("environment") or {}
        if command[:1] == ["fleet-gateway"]:
            expected.add(f"{name}:{env.get('FLEET_PORT', 8080)}")
        if command[:1] == ["fleet-worker"]:
            assert "FLEET_METRICS_PORT" in env, f"{name} serves no metrics"
            assert env.get("FLEET_METRICS_HOST") == "0.0.0.0", f"{name}: metrics must be reachable from other containers"
            expected.add(f"{name}:{env['FLEET_METRICS_PORT']}")
    assert len(expected) >= 3
    assert expected <= targets


def test_compose_prometheus_mounts_config_and_rules() -> None:
    prometheus = _compose_services()["prometheus"]
    assert prometheus["image"].startswith("prom/prometheus:")
    mounts = {volume.split(":")[0]: volume.split(":")[1] for volume in prometheus["volumes"]}
    assert mounts["./prometheus/prometheus.yml"] == "/etc/prometheus/prometheus.yml"
    assert mounts["./prometheus/alerts.yml"] == "/etc/prometheus/alerts.yml"  # next to the config, as it names it


def test_prometheus_reads_the_gateway_metrics_with_a_key_made_by_fleet_keys() -> None:
    """The gateway's /metrics needs a metrics tenant's key: a one-shot service makes it with
    `fleet keys create`, Prometheus reads it from a volume it mounts read-only and starts after it."""
    services = _compose_services()
    maker = services["metrics-key"]
    script = maker["command"][-1]
    assert "fleet keys create --tenant metrics" in script and "/secrets/metrics.key" in script
    secret_volume = next(volume.split(":")[0] for volume in maker["volumes"] if volume.endswith(":/secrets"))
    prometheus = services["prometheus"]
    mounts = {volume.split(":")[0]: volume.split(":", 1)[1] for volume in prometheus["volumes"]}
    assert mounts[secret_volume] == "/etc/prometheus/secrets:ro"
    assert prometheus["depends_on"]["metrics-key"]["condition"] == "service_completed_successfully"
    gateway_job = next(job for job in yaml.safe_load(CONFIG.read_text())["scrape_configs"]
                       if job["job_name"] == "fleet-gateway")
    assert gateway_job["authorization"] == {"type": "Bearer",
                                            "credentials_file": "/etc/prometheus/secrets/metrics.key"}


# --- promtool -------------------------------------------------------------------------------------

def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert promtool is not None
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, cwd=ROOT)


@needs_promtool
def test_promtool_check_rules() -> None:
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_check_config() -> None:
    done = _promtool("check", "config", "--syntax-only", str(CONFIG))  # the key file lives in the compose stack
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_promtool_rule_unit_tests() -> None:
    done = _promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr
