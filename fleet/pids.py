"""Local processes by pid, as Linux's /proc shows them: whether one runs, and its command line.

`fleet scale` finds the workers it started with these; the local stack of the source tree
(fleet_dev/stack/proc.py) uses the same two to stop only what it started.
"""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped: PID 1 of a container may never reap) is gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def command_line(pid: int) -> str:
    """The process's arguments joined by spaces; empty when unreadable (or before its exec)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
