"""Connection settings every fleet process shares.

Each process builds exactly one settings object (a subclass of `FleetSettings`) from
environment variables prefixed `FLEET_` and passes it down; nothing reads the environment
anywhere else. Passwords are `SecretStr`: their repr is masked, and only common/clients.py
reads them out, to hand them to the Kafka and Redis clients.
"""

import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.lanes import DEFAULT_LANES, Lanes, parsed_lanes

ENV_PREFIX = "FLEET_"

KafkaSecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")


def redacted_url(url: str) -> str:
    """`url` with its password masked, fit for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


class FleetSettings(BaseSettings):
    # A refused setting's error must not echo the input: it holds passwords and credentialed URLs.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True)

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, host:port[,host:port]")
    kafka_security_protocol: KafkaSecurityProtocol = Field("PLAINTEXT", description="PLAINTEXT | SSL | "
                                                           "SASL_PLAINTEXT | SASL_SSL")
    kafka_sasl_mechanism: SaslMechanism | None = Field(None, description="PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512; "
                                                       "required by the SASL protocols")
    kafka_sasl_username: str | None = Field(None, description="SASL user (SASL protocols only)")
    kafka_sasl_password: SecretStr | None = Field(None, description="SASL password (SASL protocols only)")
    kafka_ssl_cafile: Path | None = Field(None, description="CA bundle that signs the brokers' certificates "
                                          "(SSL protocols; default: the system's CAs)")
    kafka_ssl_certfile: Path | None = Field(None, description="Client certificate (PEM) for mutual TLS")
    kafka_ssl_keyfile: Path | None = Field(None, description="Private key (PEM) of kafka_ssl_certfile")
    kafka_producer_batch_bytes: int = Field(
        512 * 1024, ge=16 * 1024, le=1024 * 1024,
        description="Most bytes a producer buffers per partition before a send waits for them to go: a batch of "
        "results is hundreds of KiB, and aiokafka's 16 KiB default costs a broker round trip every ~10 embeddings "
        "(at most 1 MiB, the brokers' default message.max.bytes)")
    topic_replication_factor: int = Field(1, ge=-1, description="Replicas of each topic the fleet creates: 1 "
                                          "suits the single-node stack; use 3 on a real cluster; -1 takes the "
                                          "brokers' default.replication.factor")
    topic_min_insync_replicas: int | None = Field(None, ge=1, description="min.insync.replicas of each topic the "
                                                  "fleet creates (acks=all waits for this many copies); None "
                                                  "keeps the brokers' default")
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis URL for replies and result lookup; "
                           "prefer redis_username/redis_password to credentials inside it")
    redis_username: str | None = Field(None, description="Redis ACL user (default: the `default` user)")
    redis_password: SecretStr | None = Field(None, description="Redis password (AUTH)")
    redis_tls: bool = Field(False, description="Connect to Redis over TLS (as a rediss:// URL does)")
    redis_tls_ca_file: Path | None = Field(None, description="CA bundle that signs Redis's certificate (redis_tls)")
    redis_cluster: bool = Field(False, description="FLEET_REDIS_URL names one node of a Redis Cluster: connect "
                                "with a cluster client (it discovers the other nodes and follows failovers)")
    home: Path = Field(Path(".fleet"), description="Folder for local state: stack data, model registry")
    log_json: bool = Field(False, description="Log JSON lines (one object per line) instead of plain text")
    log_level: str = Field("INFO", description="Python logging level")
    model_dir: Path | None = Field(None, description="Model registry folder; default <home>/models")
    redis_connect_timeout_s: float = Field(2.0, gt=0, description="Redis connect timeout of every Redis client")
    # Longer than the gateway's 1 s blocking XREAD, or every idle read would time out.
    redis_socket_timeout_s: float = Field(5.0, gt=1.0, description="Redis socket (read/write) timeout: a slow "
                                          "Redis fails a call after this instead of holding a batch")
    startup_timeout_s: float = Field(30.0, gt=0, description="Give up (exit non-zero) when Kafka or Redis do not "
                                     "answer within this at start")
    shutdown_grace_s: float = Field(10.0, gt=0, description="After SIGTERM the process ends within this")
    results_topic_pattern: str = Field(r"fleet\.results.*", description="Regex a results topic must match in full: "
                                       "the gateway answers 422 and the worker dead-letters a request naming another")
    lanes: str = Field(DEFAULT_LANES, description="Priority lanes of every model, from the highest down, as "
                       "name=lowest_priority (schemas/lanes.py); each lane is its own request topic. The same on "
                       "the gateway, clients and workers")
    lanes_enabled: bool = Field(True, description="Route requests to their priority's lane and let workers drain "
                                "higher lanes first; off, requests go to the first lane's topic and workers read "
                                "every lane alike (records already on a lane topic are still served)")

    @field_validator("results_topic_pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return pattern

    @field_validator("lanes")
    @classmethod
    def _lanes_parse(cls, lanes: str) -> str:
        return str(Lanes.parse(lanes))  # LaneError is a ValueError: pydantic reports it as the setting's error

    @property
    def lane_plan(self) -> Lanes:
        return parsed_lanes(self.lanes)

    @model_validator(mode="after")
    def _kafka_transport_is_whole(self) -> "FleetSettings":
        protocol = self.kafka_security_protocol
        sasl = {"FLEET_KAFKA_SASL_MECHANISM": self.kafka_sasl_mechanism,
                "FLEET_KAFKA_SASL_USERNAME": self.kafka_sasl_username,
                "FLEET_KAFKA_SASL_PASSWORD": self.kafka_sasl_password}
        if protocol in SASL_PROTOCOLS:
            missing = [name for name, value in sasl.items() if not value]
            if missing:
                raise ValueError(f"FLEET_KAFKA_SECURITY_PROTOCOL={protocol} needs {', '.join(missing)}")
        elif any(sasl.values()):
            given = [name for name, value in sasl.items() if value]
            raise ValueError(f"{', '.join(given)} apply only with FLEET_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT or "
                             f"SASL_SSL, not {protocol}")
        files = {"FLEET_KAFKA_SSL_CAFILE": self.kafka_ssl_cafile, "FLEET_KAFKA_SSL_CERTFILE": self.kafka_ssl_certfile,
                 "FLEET_KAFKA_SSL_KEYFILE": self.kafka_ssl_keyfile}
        if protocol not in TLS_PROTOCOLS and any(files.values()):
            given = [name for name, value in files.items() if value]
            raise ValueError(f"{', '.join(given)} apply only with FLEET_KAFKA_SECURITY_PROTOCOL=SSL or SASL_SSL, "
                             f"not {protocol}")
        if self.kafka_ssl_keyfile and not self.kafka_ssl_certfile:
            raise ValueError("FLEET_KAFKA_SSL_KEYFILE needs FLEET_KAFKA_SSL_CERTFILE")
        _refuse_missing_files({**files, "FLEET_REDIS_TLS_CA_FILE": self.redis_tls_ca_file})
        return self

    @model_validator(mode="after")
    def _redis_credentials_in_one_place(self) -> "FleetSettings":
        parts = urlsplit(self.redis_url)
        if parts.password is not None and self.redis_password is not None:
            raise ValueError(f"the Redis password is given twice: in FLEET_REDIS_URL ({redacted_url(self.redis_url)}) "
                             "and FLEET_REDIS_PASSWORD; keep FLEET_REDIS_PASSWORD only")
        if self.redis_username and self.redis_password is None and parts.password is None:
            raise ValueError("FLEET_REDIS_USERNAME needs FLEET_REDIS_PASSWORD")
        if self.redis_tls_ca_file and not (self.redis_tls or parts.scheme == "rediss"):
            raise ValueError("FLEET_REDIS_TLS_CA_FILE applies only with FLEET_REDIS_TLS=1 (or a rediss:// URL)")
        return self

    @property
    def registry_dir(self) -> Path:
        return self.model_dir if self.model_dir is not None else self.home / "models"

    @property
    def redis_url_redacted(self) -> str:
        return redacted_url(self.redis_url)


def _refuse_missing_files(files: dict[str, Path | None]) -> None:
    for name, path in files.items():
        if path is not None and not path.is_file():
            raise ValueError(f"{name}={path}: no such file")
