"""Where the repository is, for tests that read its files (compose/, schemas/README.md, data sets)."""

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
