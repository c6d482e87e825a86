"""What a manifest records about how a version was made: the code commit it was built from.

Recorded, never compared: a build is skipped or redone by what went into the model (source,
data, hyperparameters), not by which commit happened to run it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
_GIT_TIMEOUT_S = 10.0


def code_commit(repo: Path = REPO_ROOT) -> str | None:
    """`git rev-parse HEAD` of `repo`, with "-dirty" when the tree differs from it; None without git.

    Untracked (not ignored) files count as dirty: new, uncommitted build code is exactly
    what would make the commit alone lie about what produced a version.
    """
    head = _git(repo, "rev-parse", "HEAD")
    if head is None:
        return None
    status = _git(repo, "status", "--porcelain", "--untracked-files=normal")
    return f"{head}-dirty" if status else head


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None
