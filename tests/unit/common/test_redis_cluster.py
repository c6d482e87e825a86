"""Redis Cluster support without a server: the slot arithmetic the multi-key operations split by,
the client FLEET_REDIS_CLUSTER selects, and what counts as a cluster outage.
(The same code against a real Redis Cluster: tests/integration/fleet_dev/stack/test_fleet_on_redis_cluster.py.)"""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError, SlotNotCoveredError

from common.clients import redis_client
from common.redis_cluster import group_by_slot, multi_key_pipeline, single_slot, slot_of
from common.settings import FleetSettings
from schemas.names import reply_stream, result_key, versions_audit_stream, versions_key
from workers.delivery.patience import is_outage


def test_slots_are_the_redis_cluster_crc16() -> None:
    # The reference values of the Redis Cluster specification (CRC16-XMODEM mod 16384).
    assert slot_of("123456789") == 0x31C3 % 16384 == 12739
    assert slot_of("foo") == slot_of(b"foo") == 12182
    assert slot_of("{user1000}.following") == slot_of("{user1000}.followers")  # hash tags respected
    assert slot_of("{}x") != slot_of("{}y")  # an empty tag hashes the whole key


def test_group_by_slot_keeps_every_position_in_order() -> None:
    keys = ["{a}1", "{b}1", "{a}2", "{b}1", "{c}1"]
    groups = group_by_slot(keys)
    assert groups == {slot_of("a"): [0, 2], slot_of("b"): [1, 3], slot_of("c"): [4]}
    assert sorted(p for positions in groups.values() for p in positions) == list(range(len(keys)))
    assert group_by_slot([]) == {}


def test_the_wire_contract_keys_spread_over_slots() -> None:
    # Why the cluster path exists: a batch's result keys, a reply stream and the version pointers
    # with their audit stream do not share a slot, so no single script or MULTI may span them.
    batch = [result_key(f"req-{i}") for i in range(32)] + [reply_stream("gateway-1")]
    assert not single_slot(batch) and len(group_by_slot(batch)) > 16
    assert not single_slot([versions_key("minilm-embed"), versions_audit_stream("minilm-embed")])
    assert single_slot([result_key("one")]) and single_slot([])


async def test_the_cluster_setting_selects_a_cluster_client_with_the_same_credentials() -> None:
    settings = FleetSettings(redis_url="redis://127.0.0.1:27379/0", redis_cluster=True, redis_username="fleet",
                             redis_password="sekrit", redis_socket_timeout_s=3.5)
    cluster = redis_client(settings)
    plain = redis_client(settings.model_copy(update={"redis_cluster": False}))
    try:
        assert isinstance(cluster, RedisCluster) and isinstance(plain, Redis)
        options = cluster.get_connection_kwargs()
        assert (options["username"], options["password"], options["socket_timeout"]) == ("fleet", "sekrit", 3.5)
        assert options["socket_connect_timeout"] == settings.redis_connect_timeout_s
        assert [(node.host, node.port) for node in cluster.nodes_manager.startup_nodes.values()] == \
            [("127.0.0.1", 27379)]
        assert multi_key_pipeline(cluster)._transaction is False  # a cluster refuses MULTI across slots
        assert multi_key_pipeline(plain).is_transaction is True
    finally:
        await cluster.aclose()
        await plain.aclose()


def test_the_cluster_setting_reads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_REDIS_CLUSTER", "true")
    assert FleetSettings().redis_cluster is True
    monkeypatch.setenv("FLEET_REDIS_CLUSTER", "maybe")
    with pytest.raises(ValidationError):
        FleetSettings()


def test_a_slot_without_a_master_is_an_outage_to_wait_out() -> None:
    assert is_outage(SlotNotCoveredError("slot 3 not covered")) and is_outage(RedisConnectionError("gone"))


async def test_a_cluster_nobody_answers_is_a_connection_error_as_on_a_plain_redis() -> None:
    # redis-py's cluster client raises a bare RedisClusterException here (RedisClusterUnreachableError in
    # redis-py 8.2), which `except RedisError` misses.
    client = redis_client(FleetSettings(redis_url="redis://127.0.0.1:1/0", redis_cluster=True,
                                        redis_connect_timeout_s=0.5))
    try:
        with pytest.raises(RedisConnectionError, match="127.0.0.1:1"):
            await client.ping()
    finally:
        await client.aclose()


async def test_a_connection_closed_under_a_command_is_a_connection_error(monkeypatch: pytest.MonkeyPatch) -> None:
    async def closed_under_us(self: ClusterPipeline, *args: object, **kwargs: object) -> list[object]:
        # What redis-py does on a connection just closed: before 8.2 an AttributeError on `writelines`, which
        # FleetRedisCluster turns into a ConnectionError; in 8.2 a ConnectionError of its own.
        await Connection()._send_packed_command([b"PING\r\n"])
        return []

    async def a_bug(self: ClusterPipeline, *args: object, **kwargs: object) -> list[object]:
        raise AttributeError("not redis-py's connection")

    client = redis_client(FleetSettings(redis_url="redis://127.0.0.1:1/0", redis_cluster=True))
    try:
        monkeypatch.setattr(ClusterPipeline, "execute", closed_under_us)
        closed = "closed under a command.*writelines|closed by the server before write"  # before 8.2 | 8.2
        with pytest.raises(RedisConnectionError, match=closed):
            await client.pipeline().execute()
        monkeypatch.setattr(ClusterPipeline, "execute", a_bug)
        with pytest.raises(AttributeError, match="not redis-py's"):
            await client.pipeline().execute()
    finally:
        await client.aclose()
