"""The README is the front door: short, names the two commands, and every link in it leads somewhere."""

import re

from tests.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")
MAX_LINES = 150


def test_the_readme_is_short_and_names_the_two_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES
    assert "scripts/demo" in text and "scripts/test" in text


def test_every_link_in_the_readme_resolves() -> None:
    targets = LINK.findall(README.read_text(encoding="utf-8"))
    assert len(targets) >= 10, "the README sends each kind of reader somewhere"
    missing = []
    for target in targets:
        assert not target.startswith(("http://", "https://")), f"{target}: the README links into the repository only"
        path, _, anchor = target.partition("#")
        resolved = (README.parent / path).resolve()
        if not resolved.exists():
            missing.append(target)
        elif anchor:
            headings = {slug(line) for line in resolved.read_text(encoding="utf-8").splitlines() if line.startswith("#")}
            if anchor not in headings:
                missing.append(target)
    assert not missing, f"README links that lead nowhere: {missing}"


def slug(heading: str) -> str:
    """GitHub's and MkDocs' anchor for a Markdown heading (for the plain headings used here)."""
    words = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower())
    return words.replace(" ", "-")
