"""Redis of the local stack: Debian's `redis-server`, loopback only, no persistence, bounded memory."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from fleet.stack.proc import Endpoint, StackError, loopback_endpoint

DEFAULT_PORT = 6379


def parse_redis_url(url: str) -> Endpoint:
    """Where the local Redis listens, from `redis_url` (redis://host[:port][/db])."""
    parts = urlsplit(url)
    if parts.scheme != "redis":
        raise StackError(f"redis_url {url!r}: the local stack serves plain redis:// URLs only")
    try:
        port = parts.port
    except ValueError as exc:
        raise StackError(f"redis_url {url!r}: {exc}") from exc
    return loopback_endpoint(parts.hostname or "", port or DEFAULT_PORT, "redis_url")


def redis_argv(server: str, endpoint: Endpoint, data_dir: Path, maxmemory: str, policy: str) -> list[str]:
    """A foreground redis-server: loopback, no RDB snapshots, no AOF, bounded memory, logs to stdout."""
    return [
        server,
        "--bind", endpoint.host,
        "--port", str(endpoint.port),
        "--protected-mode", "yes",
        "--daemonize", "no",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(data_dir),
        "--maxmemory", maxmemory,
        "--maxmemory-policy", policy,
        "--logfile", "",
    ]  # fmt: skip


def ensure_redis_server(echo: Callable[[str], None]) -> str:
    """The path of `redis-server`, installed with apt-get when it is not on PATH."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    apt = shutil.which("apt-get")
    if apt is None:
        raise StackError("redis-server not found and apt-get is not available: install Redis 7 yourself")
    prefix = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["update", "-q"], ["install", "-y", "-q", "--no-install-recommends", "redis-server"]):
        echo(f"redis-server not found: apt-get {step[0]} ...")
        result = subprocess.run([*prefix, apt, *step], env=env, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
            raise StackError(f"apt-get {step[0]} failed (needs root or passwordless sudo):\n{tail}")
    found = shutil.which("redis-server")
    if found is None and Path("/usr/bin/redis-server").is_file():
        found = "/usr/bin/redis-server"  # PATH without /usr/bin
    if found is None:
        raise StackError("apt-get installed redis-server but it is not on PATH")
    echo(f"  installed {found}")
    return found
