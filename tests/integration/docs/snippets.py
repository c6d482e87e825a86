"""The ```sh and ```python snippets of the docs pages a reader follows step by step, read from the
Markdown. A snippet that cannot run here says so right above its fence, with its reason:

    <!-- not-run: needs a Kubernetes cluster; tests/unit/test_k8s_manifests.py checks the manifests -->
"""

import re
from dataclasses import dataclass
from pathlib import Path

from tests.paths import REPO_ROOT

DOCS = REPO_ROOT / "docs"
RUNNABLE = {"sh": "sh", "bash": "sh", "python": "python"}
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Snippet:
    page: str
    line: int
    language: str
    code: str
    not_run: str | None  # the reason, when it is marked

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def walkthrough_pages() -> list[Path]:
    """Getting started and every how-to page: where a reader copies commands."""
    return [DOCS / "getting-started.md", *sorted((DOCS / "how-to").glob("*.md"))]


def snippets_of(path: Path) -> list[Snippet]:
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        language = RUNNABLE.get(match.group(1))
        if language is None:
            continue
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        if marker is not None and not marker.group(1):
            raise ValueError(f"{path}: a not-run marker without its reason")
        found.append(Snippet(page=path.relative_to(DOCS).as_posix(), line=text.count("\n", 0, match.start()) + 1,
                             language=language, code=match.group(2), not_run=marker.group(1) if marker else None))
    return found


def all_snippets() -> list[Snippet]:
    return [snippet for page in walkthrough_pages() for snippet in snippets_of(page)]
