"""The metrics reference, read from the Prometheus registries the processes build.

Every class of the project's packages that builds a metrics registry with no arguments (the
worker's, the gateway's, the shadow's) is built once here and its registry read: names, types,
labels and help as a scrape would show them. A class added anywhere is found by what it does."""

import importlib
import inspect
from pathlib import Path

from prometheus_client import CollectorRegistry

from markdown_table import code, table
from settings_ref import PACKAGES

SUFFIX = {"counter": "_total", "info": "_info"}


def registry_builders(root: Path) -> list[tuple[str, CollectorRegistry]]:
    """(class, its registry) for every class that owns a registry it makes itself."""
    found: list[tuple[str, CollectorRegistry]] = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "CollectorRegistry" not in path.read_text(encoding="utf-8"):
                continue
            module = importlib.import_module(".".join(path.relative_to(root).with_suffix("").parts))
            for name, cls in inspect.getmembers(module, inspect.isclass):
                if cls.__module__ != module.__name__:
                    continue
                try:
                    instance = cls()
                except TypeError:
                    continue  # needs arguments: built by one of the others, on their registry
                registry = getattr(instance, "registry", None)
                if isinstance(registry, CollectorRegistry):
                    found.append((f"{module.__name__}.{name}", registry))
    return found


def label_names(registry: CollectorRegistry) -> dict[str, tuple[str, ...]]:
    """Each metric's label names: the families of an unobserved metric carry no samples to read them from."""
    names: dict[str, tuple[str, ...]] = {}
    for collector, exposed in registry._collector_to_names.items():  # noqa: SLF001 - no public view of labels
        labels = tuple(getattr(collector, "_labelnames", ()))
        for family in getattr(collector, "describe", lambda: [])() or []:
            labels = labels or tuple(getattr(family, "_labelnames", ()))
        for name in exposed:
            names.setdefault(name, labels)
    return names


def metric_rows(registry: CollectorRegistry) -> list[tuple[str, str, str, str]]:
    labels = label_names(registry)
    rows = []
    for family in registry.collect():
        exposed = family.name + SUFFIX.get(family.type, "")
        rows.append((code(exposed), family.type, ", ".join(labels.get(family.name, labels.get(exposed, ()))),
                     family.documentation))
    return rows


def metrics_page(root: Path) -> str:
    sections = []
    for owner, registry in registry_builders(root):
        sections.append(f"## {owner.rsplit('.', 1)[1]}\n\n`{owner}`\n\n"
                        + table(("metric", "type", "labels", "help"), metric_rows(registry)))
    intro = ("# Metrics\n\nGenerated at build time from the Prometheus registries the processes build. Workers "
             "serve theirs on `FLEET_METRICS_PORT` (`/metrics`), the gateway on its own port (`/metrics`, with a "
             "key of a tenant in `FLEET_METRICS_TENANTS`). A histogram `x` is exposed as `x_bucket`, `x_sum` "
             "and `x_count`.\n\n")
    return intro + "\n\n".join(sections) + "\n"
