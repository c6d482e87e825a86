"""MkDocs hook: the Reference pages that the code can write are generated at build time, so a
setting, a flag or a metric added anywhere appears without anyone editing a page.

settings.md, cli.md, metrics.md and http-api.md (with openapi.json) are added to the site as
generated files; nothing is written into docs/."""

import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

HOOKS = Path(__file__).resolve().parent
ROOT = HOOKS.parent.parent
for path in (str(ROOT), str(HOOKS)):
    if path not in sys.path:
        sys.path.insert(0, path)

from cli_ref import cli_page  # noqa: E402
from metrics_ref import metrics_page  # noqa: E402
from openapi_ref import http_api_page  # noqa: E402
from settings_ref import settings_page  # noqa: E402


def generated_pages(root: Path = ROOT) -> dict[str, str]:
    """Path under docs/ -> content, for every generated file."""
    api_page, api_document = http_api_page()
    return {
        "reference/settings.md": settings_page(root),
        "reference/cli.md": cli_page(root),
        "reference/metrics.md": metrics_page(root),
        "reference/http-api.md": api_page,
        "reference/openapi.json": api_document,
    }


def on_files(files: Files, config: Any) -> Files:
    for uri, content in generated_pages().items():
        files.append(File.generated(config, uri, content=content))
    return files
