"""Redis of the local stack: Debian's `redis-server`, loopback only, bounded memory, AOF persistence.

Every node appends to an AOF fsynced once a second (a crash loses at most a second of results
not yet read; requests never, they stay in Kafka until delivered) and takes no RDB snapshots.
A Redis Cluster node adds cluster mode with its own nodes.conf in its data dir, which is how a
restarted node finds its cluster again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from fleet_dev.stack.proc import Endpoint, StackError, loopback_endpoint

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
    """A foreground redis-server: loopback, AOF (fsync every second), no RDB, bounded memory, logs to stdout."""
    return [
        server,
        "--bind", endpoint.host,
        "--port", str(endpoint.port),
        "--protected-mode", "yes",
        "--daemonize", "no",
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--dir", str(data_dir),
        "--maxmemory", maxmemory,
        "--maxmemory-policy", policy,
        "--logfile", "",
    ]  # fmt: skip


def redis_cluster_argv(
    server: str, endpoint: Endpoint, data_dir: Path, maxmemory: str, policy: str, node_timeout_ms: int
) -> list[str]:
    """A Redis Cluster node: the single node's settings plus cluster mode (nodes.conf in `data_dir`)."""
    cluster = [
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", str(node_timeout_ms),
    ]  # fmt: skip
    return [*redis_argv(server, endpoint, data_dir, maxmemory, policy), *cluster]


def process_markers(endpoint: Endpoint, cluster: bool) -> tuple[str, ...]:
    """What a running redis-server shows in its process title ("redis-server 127.0.0.1:6379 [cluster]")."""
    return ("redis-server", str(endpoint), "[cluster]") if cluster else ("redis-server", str(endpoint.port))


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
