"""The fleet_ metric names the code exports, and the names a PromQL expression uses.

Shared by test_alert_rules.py and test_dashboard.py: every name an alert rule or a dashboard
query reads must be one that workers/observability/metrics.py (WorkerMetrics), workers/shadow/engine.py
(ShadowMetrics) or gateway/app.py (GatewayMetrics) exports. The exported set comes from the registries themselves, never from
a list kept by hand.
"""

from __future__ import annotations

import re
from functools import cache

from prometheus_client import CollectorRegistry

from gateway.app import GatewayMetrics
from workers.observability.metrics import WorkerMetrics
from workers.shadow.engine import ShadowMetrics

PREFIX = "fleet_"

# The series names a family of each type shows in the text exposition format.
SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "info": ("_info",),
    "gauge": ("",),
    "stateset": ("",),
    "unknown": ("",),
}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACKETS = re.compile(r"\[[^\]]*\]")  # range selectors and subqueries: [5m], [5m:], [$__rate_interval]
_MATCHERS = re.compile(r"\{[^}]*\}")  # label matchers, once strings are gone
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_TEMPLATE_NAME = re.compile(r"(?<![\w:.])fleet_\w+")


def _series_of(registry: CollectorRegistry) -> dict[str, str]:
    series: dict[str, str] = {}
    for family in registry.collect():
        for suffix in SERIES_SUFFIXES.get(family.type, ("",)):
            series[family.name + suffix] = family.name
        for sample in family.samples:  # whatever else a family shows (none unlabelled today)
            series[sample.name] = family.name
    return series


@cache
def exported_series() -> dict[str, str]:
    """Every fleet_ series name a worker, a shadow worker or the gateway exposes on /metrics -> its family."""
    series = (_series_of(WorkerMetrics().registry) | _series_of(ShadowMetrics().registry)
              | _series_of(GatewayMetrics().registry))
    return {name: family for name, family in series.items() if name.startswith(PREFIX)}


def promql_names(expr: str) -> set[str]:
    """Metric and recorded-rule names an expression reads: fleet_* names and names with a colon.

    Strings (label values, Grafana's $variables inside them), label matchers and range
    brackets are dropped first, so that neither `cache!="miss"` nor `[5m:1m]` reads as a name.
    """
    text = _STRING.sub("", expr)
    text = _MATCHERS.sub("", text)
    text = _BRACKETS.sub("", text)
    return {name for name in _IDENTIFIER.findall(text) if name.startswith(PREFIX) or ":" in name}


def template_names(text: str) -> set[str]:
    """fleet_* names in free text such as an alert annotation's query template."""
    return set(_TEMPLATE_NAME.findall(text))


def unknown_names(names: set[str], recorded: set[str] = frozenset()) -> set[str]:
    """The names neither exported by the code nor recorded by a rule (names with a colon)."""
    exported = exported_series()
    return {name for name in names if name not in exported and name not in recorded}
