"""Detached server processes of the local stack, tracked by pid files.

`down` stops only what `up` started: a pid counts as ours only while the pid file names it
and its command line still carries the markers we started it with (a recycled pid of some
other program is never signalled).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from fleet.pids import command_line, pid_alive

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost"})
KILLED_EXIT_WAIT_S = 10.0  # after SIGKILL only the kernel is left to wait for


class StackError(RuntimeError):
    """The stack could not do what was asked; the message says why and what to look at."""


@dataclass(frozen=True)
class Endpoint:
    """Where a local server listens: always loopback."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def loopback_endpoint(host: str, port: int, what: str) -> Endpoint:
    """The local stack serves 127.0.0.1 only: refuse any other host in the settings."""
    if host not in LOOPBACK_NAMES:
        raise StackError(f"{what} names host {host!r}; the local stack listens on 127.0.0.1 only")
    if not 0 < port < 65536:
        raise StackError(f"{what} names port {port}, not a TCP port")
    return Endpoint("127.0.0.1", port)


@dataclass(frozen=True)
class Managed:
    """One server process: its pid file, its log file and strings found in its command line."""

    name: str
    pid_file: Path
    log_file: Path
    markers: tuple[str, ...]

    def pid(self) -> int | None:
        """The pid of our running process, or None (a stale pid file is removed)."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        cmdline = command_line(pid) if pid_alive(pid) else ""
        if cmdline and all(marker in cmdline for marker in self.markers):
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def start(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str] | None = None) -> int:
        """Start detached and write the pid file; returns the server's pid.

        The server runs in its own session with its output appended to the log file, and it is
        not our child: a shell starts it in the background and exits, so the server outlives us,
        and no Popen of a still running server is left behind (Python warns about those).
        """
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        shim = 'log=$1; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
        launched = subprocess.run(
            ["/bin/sh", "-c", shim, "sh", str(self.log_file), *argv],
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            start_new_session=True,
            check=False,
            timeout=30,
        )
        if launched.returncode != 0 or not launched.stdout.strip().isdigit():
            raise StackError(f"could not start {self.name}: {launched.stderr.strip() or launched.stdout.strip()}")
        pid = int(launched.stdout.strip())
        self.pid_file.write_text(f"{pid}\n")
        return pid

    def kill(self) -> int | None:
        """SIGKILL at once (a crash, as the chaos tests want it); returns the pid killed, or None."""
        pid = self.pid()
        if pid is None:
            return None
        _signal(pid, signal.SIGKILL)
        _wait_gone(pid, KILLED_EXIT_WAIT_S)
        self.pid_file.unlink(missing_ok=True)
        return pid

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM, wait up to `timeout_s`, then SIGKILL. Returns the pid stopped, or None."""
        pid = self.pid()
        if pid is None:
            return None
        _signal(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout_s):
            _signal(pid, signal.SIGKILL)
            _wait_gone(pid, KILLED_EXIT_WAIT_S)
        self.pid_file.unlink(missing_ok=True)
        return pid

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return f"(no log at {self.log_file})"
        return "\n".join(text.splitlines()[-lines:])


def stop_all(processes: Sequence[Managed], timeout_s: float) -> list[int | None]:
    """Stop several servers at once: SIGTERM to all, then SIGKILL whoever outlives `timeout_s`.

    Kafka nodes of one quorum must go together: a node stopped after its peers waits in vain
    for a controller to hear its controlled shutdown.
    """
    pids = [proc.pid() for proc in processes]
    for pid in pids:
        if pid is not None:
            _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc, pid in zip(processes, pids, strict=True):
        if pid is None:
            continue
        if not _wait_gone(pid, max(deadline - time.monotonic(), 0.1)):
            _signal(pid, signal.SIGKILL)
            _wait_gone(pid, KILLED_EXIT_WAIT_S)
        proc.pid_file.unlink(missing_ok=True)
    return pids


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _wait_gone(pid: int, timeout_s: float) -> bool:
    """Whether `pid` exits within `timeout_s`."""
    waiting = Retrying(stop=stop_after_delay(timeout_s), wait=wait_fixed(0.2), retry=retry_if_result(bool))
    try:
        waiting(pid_alive, pid)
    except RetryError:
        return False
    return True
