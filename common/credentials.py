"""Telling a refused credential from an outage, before a process starts serving.

An outage is waited out (invariant 8), but a wrong password never heals: a process that met one
would retry forever and fail at its first request instead of at start. So every process checks
its credentials once, first thing: Kafka and Redis each get one connection that authenticates,
and a refusal raises `CredentialsRejected` naming the server and the user, never the password.
A server that does not answer passes the check: the usual waiting handles it.
"""

import asyncio
import logging
import ssl

from aiokafka.conn import create_conn
from aiokafka.errors import (
    AuthenticationFailedError,
    IllegalSaslStateError,
    KafkaError,
    SaslAuthenticationFailed,
    UnsupportedSaslMechanismError,
)
from redis.exceptions import AuthenticationError, RedisError

from common.clients import kafka_options, redis_client
from common.settings import SASL_PROTOCOLS, TLS_PROTOCOLS, FleetSettings

log = logging.getLogger(__name__)

KAFKA_REFUSALS = (SaslAuthenticationFailed, AuthenticationFailedError, UnsupportedSaslMechanismError,
                  IllegalSaslStateError, ssl.SSLCertVerificationError)
PROBE_TIMEOUT_S = 5.0


class CredentialsRejected(RuntimeError):
    """Kafka or Redis refused this process's credentials: waiting will not help."""


async def verify_credentials(settings: FleetSettings) -> None:
    """Raise CredentialsRejected when Kafka or Redis refuses to authenticate this process."""
    await asyncio.gather(verify_kafka_credentials(settings), verify_redis_credentials(settings))


async def verify_kafka_credentials(settings: FleetSettings) -> None:
    if settings.kafka_security_protocol == "PLAINTEXT":
        return  # nothing to refuse
    options = kafka_options(settings)
    options.pop("bootstrap_servers")
    user = settings.kafka_sasl_username or "(TLS client)"
    for address in settings.kafka_bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                connection = await create_conn(host.strip("[]"), int(port), request_timeout_ms=int(PROBE_TIMEOUT_S * 1000),
                                               **options)
        except KAFKA_REFUSALS as exc:
            raise CredentialsRejected(
                f"Kafka at {address.strip()} refused authentication of user {user} "
                f"({settings.kafka_security_protocol}, {settings.kafka_sasl_mechanism or 'no SASL'}): "
                f"{type(exc).__name__}: {exc}; check {_kafka_credential_names(settings)}") from None
        except (OSError, TimeoutError, KafkaError) as exc:
            log.debug("credentials not checked at %s: %s", address, exc)
            continue
        connection.close()
        return


def _kafka_credential_names(settings: FleetSettings) -> str:
    names = []
    if settings.kafka_security_protocol in SASL_PROTOCOLS:
        names.append("FLEET_KAFKA_SASL_USERNAME / FLEET_KAFKA_SASL_PASSWORD")
    if settings.kafka_security_protocol in TLS_PROTOCOLS:
        names.append("FLEET_KAFKA_SSL_CAFILE / CERTFILE / KEYFILE")
    return " and ".join(names)


async def verify_redis_credentials(settings: FleetSettings) -> None:
    client = redis_client(settings, socket_timeout=PROBE_TIMEOUT_S)
    try:
        await client.ping()
    except AuthenticationError as exc:
        user = settings.redis_username or "default"
        raise CredentialsRejected(
            f"Redis at {settings.redis_url_redacted} refused authentication of user {user}: {exc}; check "
            f"FLEET_REDIS_USERNAME / FLEET_REDIS_PASSWORD") from None
    except (RedisError, OSError) as exc:
        log.debug("Redis credentials not checked: %s", exc)
    finally:
        await client.aclose()
