"""Redis Cluster of the stack: creating it once with `redis-cli --cluster create`, and reading its
state (CLUSTER NODES, CLUSTER INFO, INFO replication) node by node with redis-py."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
import redis.exceptions
from redis.crc import key_slot

from fleet_dev.stack.proc import Endpoint, StackError
from fleet_dev.stack.readiness import Echo, wait_until

SLOTS = 16384


@dataclass(frozen=True)
class ClusterNode:
    """One line of CLUSTER NODES: a node as some member of the cluster sees it."""

    node_id: str
    at: Endpoint
    flags: frozenset[str]
    master_id: str | None
    connected: bool
    slots: tuple[tuple[int, int], ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def failing(self) -> bool:
        """Marked failed (`fail`) or suspected (`fail?`) by the node that was asked."""
        return bool(self.flags & {"fail", "fail?"})

    def serves(self, slot: int) -> bool:
        return any(first <= slot <= last for first, last in self.slots)

    def slot_ranges(self) -> str:
        return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in self.slots) or "-"


def parse_cluster_nodes(text: str) -> list[ClusterNode]:
    """CLUSTER NODES output, one node a line; slot migration entries ("[...]") are skipped."""
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        address = fields[1].split("@", 1)[0].split(",", 1)[0]
        host, _, port = address.rpartition(":")
        slots = tuple(_slot_range(field) for field in fields[8:] if not field.startswith("["))
        nodes.append(
            ClusterNode(
                node_id=fields[0],
                at=Endpoint(host or "127.0.0.1", int(port)),
                flags=frozenset(fields[2].split(",")),
                master_id=None if fields[3] == "-" else fields[3],
                connected=fields[7] == "connected",
                slots=slots,
            )
        )
    return nodes


def _slot_range(field: str) -> tuple[int, int]:
    first, _, last = field.partition("-")
    return int(first), int(last or first)


def parse_info(text: str) -> dict[str, str]:
    """`key:value` lines of CLUSTER INFO or INFO <section>."""
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def _client(at: Endpoint, timeout_s: float = 2.0) -> aioredis.Redis:
    return aioredis.Redis(host=at.host, port=at.port, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)


async def _text_reply(at: Endpoint, *args: str) -> str:
    # The command name in two words ("CLUSTER", "NODES") escapes redis-py's reply parsing: raw text.
    client = _client(at)
    try:
        reply = await client.execute_command(*args)
    finally:
        await client.aclose()
    return reply.decode() if isinstance(reply, bytes) else str(reply)


async def nodes_seen_by(at: Endpoint) -> list[ClusterNode]:
    return parse_cluster_nodes(await _text_reply(at, "CLUSTER", "NODES"))


async def cluster_info(at: Endpoint) -> dict[str, str]:
    return parse_info(await _text_reply(at, "CLUSTER", "INFO"))


async def replication_info(at: Endpoint) -> dict[str, str]:
    """INFO replication of one node: role (master/slave), master_port, master_link_status, ..."""
    client = _client(at)
    try:
        info = await client.info("replication")
    finally:
        await client.aclose()
    return {str(key): str(value) for key, value in info.items()}


async def create_cluster(nodes: Sequence[Endpoint], replicas_per_master: int, echo: Echo) -> None:
    """Join empty cluster-mode nodes into one cluster (masters first, then their replicas)."""
    redis_cli = shutil.which("redis-cli")
    if redis_cli is None:
        raise StackError("redis-cli not found: install it (apt-get install redis-tools)")
    argv = [redis_cli, "--cluster", "create", *map(str, nodes), "--cluster-replicas", str(replicas_per_master)]
    echo(f"creating the Redis Cluster: {' '.join(argv[1:])} --cluster-yes")
    proc = await asyncio.create_subprocess_exec(
        *argv, "--cluster-yes", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    output, _ = await proc.communicate()
    if proc.returncode != 0:
        raise StackError(f"redis-cli --cluster create failed:\n{output.decode(errors='replace')[-3000:]}")


async def ensure_cluster(nodes: Sequence[Endpoint], replicas_per_master: int, echo: Echo) -> None:
    """Create the cluster unless its nodes already form one (a restart keeps it in each nodes.conf)."""
    infos = await asyncio.gather(*(cluster_info(node) for node in nodes))
    assigned = [int(info.get("cluster_slots_assigned", "0")) for info in infos]
    if all(count == SLOTS for count in assigned):
        return
    known = [int(info.get("cluster_known_nodes", "1")) for info in infos]
    if any(assigned) or any(count > 1 for count in known):
        raise StackError(
            f"the Redis nodes {[str(n) for n in nodes]} form part of a cluster only (slots {assigned}, known nodes "
            f"{known}): `scripts/stack down --wipe` and start again"
        )
    await create_cluster(nodes, replicas_per_master, echo)


async def cluster_problems(nodes: Sequence[Endpoint]) -> list[str]:
    """What keeps the cluster of `nodes` from being whole; empty when every node is up and in sync."""
    problems: list[str] = []
    for node in nodes:
        try:
            info, view, replication = await asyncio.gather(
                cluster_info(node), nodes_seen_by(node), replication_info(node)
            )
        except (OSError, redis.exceptions.RedisError) as exc:
            problems.append(f"{node} does not answer ({exc.__class__.__name__})")
            continue
        if info.get("cluster_state") != "ok":
            problems.append(f"{node}: cluster_state {info.get('cluster_state')}")
        if int(info.get("cluster_known_nodes", "0")) != len(nodes):
            problems.append(f"{node} knows {info.get('cluster_known_nodes')} of {len(nodes)} nodes")
        problems += [f"{node} sees {seen.at} as failing" for seen in view if seen.failing]
        if replication.get("role") == "slave" and replication.get("master_link_status") != "up":
            problems.append(f"{node}: replica whose link to its master is {replication.get('master_link_status')}")
    return problems


async def wait_cluster_whole(nodes: Sequence[Endpoint], timeout_s: float, *, progress: Echo | None = None) -> None:
    """Wait until cluster_problems finds nothing."""

    async def check() -> None:
        problems = await cluster_problems(nodes)
        if problems:
            raise ConnectionError("; ".join(problems[:4]))

    await wait_until(check, f"the redis cluster of {len(nodes)} nodes", timeout_s, progress=progress)


async def wait_cluster_ok(nodes: Sequence[Endpoint], timeout_s: float, *, progress: Echo | None = None) -> None:
    """Wait until each of `nodes` (the ones expected up) says cluster_state:ok."""

    async def check() -> None:
        states = {str(node): (await cluster_info(node)).get("cluster_state") for node in nodes}
        if any(state != "ok" for state in states.values()):
            raise ConnectionError(f"cluster_state {states}")

    await wait_until(check, "redis cluster_state ok", timeout_s, progress=progress)


async def master_of_slot(nodes: Sequence[Endpoint], slot: int) -> Endpoint:
    """The master serving `slot`, as the first answering node sees it (a failing master excluded)."""
    for node in nodes:
        try:
            view = await nodes_seen_by(node)
        except (OSError, redis.exceptions.RedisError):
            continue
        for seen in view:
            if seen.is_master and not seen.failing and seen.serves(slot):
                return seen.at
        raise LookupError(f"no live master serves slot {slot} (as {node} sees it)")
    raise StackError(f"no Redis node of {[str(n) for n in nodes]} answers")


async def master_of_key(nodes: Sequence[Endpoint], key: str | bytes) -> Endpoint:
    """The master serving the hash slot of `key` (hash tags respected)."""
    return await master_of_slot(nodes, key_slot(key.encode() if isinstance(key, str) else key))
