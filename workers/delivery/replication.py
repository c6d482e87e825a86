"""Waiting for a batch's Redis writes to reach a replica before its offsets may be committed.

Redis replicates in the background: a master that acknowledged a write and died before passing
it on takes that write with it, while the worker has committed the batch, so the result would be
missing for good. With `redis_wait_replicas` set, delivery asks every master it wrote to `WAIT`
until that many replicas hold the writes. A master that dies meanwhile fails the WAIT, which the
delivery treats as an outage: it writes the batch again, to the replica that took over. A master
whose replicas do not answer in time (a shard mid-failover has none yet) is logged and not waited
for longer: the results are written, only not yet copied.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from common.logs import LogThrottle
from common.redis_cluster import AnyRedis

log = logging.getLogger(__name__)


@dataclass
class Replication:
    replicas: int = 0  # 0: do not wait
    timeout_ms: int = 200
    unreplicated: int = field(default=0, compare=False)  # WAITs that timed out short of `replicas`
    _log: LogThrottle = field(default_factory=lambda: LogThrottle(log), compare=False, repr=False)

    async def acknowledged(self, redis: AnyRedis, keys: Sequence[str]) -> None:
        """Return once every master holding `keys` has them on `replicas` replicas, or its wait timed out;
        a master that does not answer raises (the caller writes again)."""
        if self.replicas == 0 or not keys:
            return
        if isinstance(redis, RedisCluster):
            masters = {node.name: node for node in map(redis.get_node_from_key, keys)}
            counts = await asyncio.gather(*(redis.execute_command("WAIT", self.replicas, self.timeout_ms,
                                                                  target_nodes=node) for node in masters.values()))
            short = [name for name, count in zip(masters, counts, strict=True) if int(count) < self.replicas]
        else:
            assert isinstance(redis, Redis)
            short = [] if int(await redis.execute_command("WAIT", self.replicas, self.timeout_ms)) >= self.replicas \
                else ["redis"]
        if short:
            self.unreplicated += 1
            self._log.log(logging.WARNING, "unreplicated", "results written to %s without %d replica(s) within %d ms "
                          "(a shard mid-failover?); delivered, not yet copied", ", ".join(short), self.replicas,
                          self.timeout_ms)
