"""Clients of Kafka and Redis, built from the shared settings in one place.

Every producer, consumer and admin client the fleet makes takes its connection options
(bootstrap servers, security protocol, SASL credentials, TLS context) from `kafka_options`, and
every Redis client comes from `redis_client`, so how the fleet connects, and with which
credentials, is decided here and nowhere else (tests/unit/test_client_construction.py holds the
rest of the tree to that).
"""

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.helpers import create_ssl_context
from redis.asyncio import Redis
from common.redis_cluster import AnyRedis, FleetRedisCluster
from common.settings import SASL_PROTOCOLS, TLS_PROTOCOLS, FleetSettings


def kafka_options(settings: FleetSettings) -> dict[str, Any]:
    """Connection options of every aiokafka client (producer, consumer, admin)."""
    protocol = settings.kafka_security_protocol
    options: dict[str, Any] = {"bootstrap_servers": settings.kafka_bootstrap, "security_protocol": protocol}
    if protocol in TLS_PROTOCOLS:
        options["ssl_context"] = create_ssl_context(cafile=settings.kafka_ssl_cafile,
                                                    certfile=settings.kafka_ssl_certfile,
                                                    keyfile=settings.kafka_ssl_keyfile)
    if protocol in SASL_PROTOCOLS:
        assert settings.kafka_sasl_password is not None  # the settings refuse SASL without one
        options.update(sasl_mechanism=settings.kafka_sasl_mechanism,
                       sasl_plain_username=settings.kafka_sasl_username,
                       sasl_plain_password=settings.kafka_sasl_password.get_secret_value())
    return options


def new_producer(settings: FleetSettings, *, linger_ms: int, **options: Any) -> AIOKafkaProducer:
    """acks=all and idempotence (unless `options` say otherwise), so a producer retry never
    duplicates a result or a comparison."""
    defaults: dict[str, Any] = {"acks": "all", "enable_idempotence": True, "linger_ms": linger_ms,
                                "max_batch_size": settings.kafka_producer_batch_bytes}
    return AIOKafkaProducer(**kafka_options(settings), **(defaults | options))


def new_consumer(settings: FleetSettings, *topics: str, **options: Any) -> AIOKafkaConsumer:
    """A consumer of `topics` (or of none, to assign partitions later) with these consumer `options`."""
    return AIOKafkaConsumer(*topics, **kafka_options(settings), **options)


def new_admin(settings: FleetSettings, **options: Any) -> AIOKafkaAdminClient:
    return AIOKafkaAdminClient(**kafka_options(settings), **options)


def redis_options(settings: FleetSettings) -> tuple[str, dict[str, Any]]:
    """The URL and keyword options `Redis.from_url` gets: credentials, TLS and timeouts."""
    url = settings.redis_url
    options: dict[str, Any] = {"socket_connect_timeout": settings.redis_connect_timeout_s,
                               "socket_timeout": settings.redis_socket_timeout_s}
    if settings.redis_username is not None:
        options["username"] = settings.redis_username
    if settings.redis_password is not None:
        options["password"] = settings.redis_password.get_secret_value()
    parts = urlsplit(url)
    if settings.redis_tls and parts.scheme == "redis":
        url = urlunsplit(parts._replace(scheme="rediss"))
    if settings.redis_tls_ca_file is not None:
        options["ssl_ca_certs"] = str(settings.redis_tls_ca_file)
    return url, options


def redis_client(settings: FleetSettings, **overrides: Any) -> AnyRedis:
    """A Redis client; `overrides` replace connection options (e.g. a shorter socket_timeout).

    With `redis_cluster` a RedisCluster, which takes the same credentials, TLS and timeouts,
    learns the other nodes from the one in the URL, and follows MOVED after a failover."""
    url, options = redis_options(settings)
    if settings.redis_cluster:
        return FleetRedisCluster.from_url(url, **(options | overrides))
    return Redis.from_url(url, **(options | overrides))
