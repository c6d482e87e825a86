"""The site builds strictly, offline, and its generated Reference pages hold every setting, CLI
flag and metric the code defines. The code is read here with ast, not by the generator's own
route, so a generator that stops finding something fails these tests."""

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.paths import REPO_ROOT

PACKAGES = ("schemas", "common", "models", "versions", "workers", "gateway", "fleet")
METRIC_TYPES = {"Counter", "Gauge", "Histogram", "Summary", "Info", "Enum", "PromCounter",
                "GaugeMetricFamily", "CounterMetricFamily", "HistogramMetricFamily"}
# Where a built page may point: the site itself, or nowhere at all.
# A link a reader follows is fine; a resource the browser fetches (src=, <link href=>) is not.
OFF_SITE = re.compile(r"""(?:\bsrc\s*=\s*|<link\b[^>]*\bhref\s*=\s*)["'](?:https?:)?//""", re.IGNORECASE)
CSS_IMPORT = re.compile(r"""@import\s+url\(\s*["']?(?:https?:)?//|url\(\s*["']?https?://""", re.IGNORECASE)


def source_trees() -> Iterator[tuple[Path, ast.Module]]:
    for package in PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            yield path, ast.parse(path.read_text(encoding="utf-8"))


def settings_env_names() -> set[str]:
    """`FLEET_<FIELD>` for every annotated field of every class whose base is a *Settings class."""
    names = set()
    for _, tree in source_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                    (isinstance(base, ast.Name) and base.id.endswith("Settings")) for base in node.bases):
                names |= {f"FLEET_{item.target.id.upper()}" for item in node.body
                          if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                          and item.target.id != "model_config"}
    return names


def cli_flags() -> set[str]:
    flags = set()
    for _, tree in source_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
                flags |= {arg.value for arg in node.args
                          if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("-")}
    return flags - {"-h", "--help"}


def metric_names() -> set[str]:
    """Names of metrics made with a literal name, or `f"{PREFIX}_..."` (PREFIX being `fleet`)."""
    names = set()
    for _, tree in source_trees():
        prefix = module_prefix(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Name)
                    and node.func.id in METRIC_TYPES):
                continue
            name = literal_name(node.args[0], prefix)
            if name is not None and name.startswith("fleet_"):
                names.add(name)
    return names


def module_prefix(tree: ast.Module) -> str:
    """The module's `PREFIX = "..."`, which its metric names start with."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PREFIX" for t in node.targets)
                and isinstance(node.value, ast.Constant)):
            return str(node.value.value)
    return "fleet"


def literal_name(node: ast.expr, prefix: str) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) and value.value.id == "PREFIX":
                parts.append(prefix)
            else:
                return None  # a name made at run time (one per GPU reading, say): checked by its pattern elsewhere
        return "".join(parts)
    return None


def page_text(site: Path, page: str) -> str:
    return (site / page / "index.html").read_text(encoding="utf-8")


def test_every_setting_is_on_the_settings_page(built_site: Path) -> None:
    names = settings_env_names()
    assert len(names) > 80, "the scan finds the settings classes"
    page = page_text(built_site, "reference/settings")
    missing = sorted(name for name in names if name not in page)
    assert not missing, f"settings in the code but not on the settings page: {missing}"


def test_every_cli_flag_is_on_the_cli_page(built_site: Path) -> None:
    flags = cli_flags()
    assert {"--json", "--tenant", "--workers"} <= flags, "the scan finds the parsers' flags"
    page = page_text(built_site, "reference/cli")
    missing = sorted(flag for flag in flags if f"<code>{flag}" not in page and f" {flag}<" not in page
                     and f"{flag}</code>" not in page)
    assert not missing, f"flags in the code but not on the CLI page: {missing}"


def test_every_metric_is_on_the_metrics_page(built_site: Path) -> None:
    names = metric_names()
    assert {"fleet_batch_size", "fleet_gateway_requests"} <= names, "the scan finds the metrics"
    page = page_text(built_site, "reference/metrics")
    missing = sorted(name for name in names if f"<code>{name}" not in page)
    assert not missing, f"metrics in the code but not on the metrics page: {missing}"


def test_the_http_api_page_lists_the_gateways_routes(built_site: Path) -> None:
    page = page_text(built_site, "reference/http-api")
    for route in ("/v1/models/{model}/infer", "/v1/results/{request_id}", "/readyz"):
        assert route in page
    assert (built_site / "reference" / "openapi.json").stat().st_size > 1000


def test_the_wire_contract_is_included_from_schemas_readme(built_site: Path) -> None:
    page = page_text(built_site, "reference/wire")
    assert "Wire contract (schema version 1)" in page and "fleet:apikeys" in page


def test_nothing_on_the_site_is_fetched_from_elsewhere(built_site: Path) -> None:
    offenders = []
    for path in built_site.rglob("*"):
        if path.suffix in {".html", ".css"}:
            text = path.read_text(encoding="utf-8", errors="replace")
            pattern = OFF_SITE if path.suffix == ".html" else CSS_IMPORT
            offenders += [f"{path.relative_to(built_site)}: {match.group(0)}" for match in pattern.finditer(text)]
    assert not offenders, f"references off the site: {offenders[:10]}"
    assert "fonts.googleapis" not in (built_site / "index.html").read_text(encoding="utf-8")
