"""`up --secure`: the same single-node stack, with Kafka behind SASL/SCRAM and Redis behind an ACL user.

    Kafka  SASL_PLAINTEXT listener, SCRAM-SHA-512, user `fleet` created at format time
           (StorageTool format --add-scram); the broker talks to itself over that listener as
           the same user, and the KRaft controller listener stays PLAINTEXT on loopback.
    Redis  ACL user `fleet` with every key, channel and command; the `default` user is off, so
           a client without credentials gets nothing.

The passwords are made at the first `up --secure` and kept in <home>/stack/secure.env (mode
600), a file of `export FLEET_...` lines a shell sources; later `up`s reuse them, so a stack
restarted on its old data still accepts them. They reach the servers through files of mode 600
(server.properties, redis-secure.conf), never through a log: `up` prints the file's path, not
its contents. (The one exception is the storage format's command line, which lives a second.)
"""

from __future__ import annotations

import os
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

from pydantic import SecretStr

from common.settings import FleetSettings
from fleet_dev.stack.proc import StackError

USER = "fleet"
MECHANISM = "SCRAM-SHA-512"
PROTOCOL = "SASL_PLAINTEXT"
LISTENER = "SASL_PLAINTEXT"
SECURE_MARK = ".fleet-secure"  # in a Kafka data dir formatted with the SCRAM user
PRIVATE = 0o600


@dataclass(frozen=True)
class Credentials:
    kafka_password: SecretStr
    redis_password: SecretStr

    @classmethod
    def new(cls) -> Credentials:
        # Hex only: the SCRAM spec `[name=...,password=...]` and the JAAS line take it unquoted.
        return cls(SecretStr(secrets.token_hex(24)), SecretStr(secrets.token_hex(24)))

    def env(self, settings: FleetSettings) -> dict[str, str]:
        """The FLEET_* variables a process of the fleet needs to reach the secure stack."""
        return {
            "FLEET_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
            "FLEET_KAFKA_SECURITY_PROTOCOL": PROTOCOL,
            "FLEET_KAFKA_SASL_MECHANISM": MECHANISM,
            "FLEET_KAFKA_SASL_USERNAME": USER,
            "FLEET_KAFKA_SASL_PASSWORD": self.kafka_password.get_secret_value(),
            "FLEET_REDIS_URL": settings.redis_url,
            "FLEET_REDIS_USERNAME": USER,
            "FLEET_REDIS_PASSWORD": self.redis_password.get_secret_value(),
        }

    def client_settings(self, settings: FleetSettings) -> FleetSettings:
        """`settings` as a client of the secure stack."""
        return settings.model_copy(update={
            "kafka_security_protocol": PROTOCOL, "kafka_sasl_mechanism": MECHANISM, "kafka_sasl_username": USER,
            "kafka_sasl_password": self.kafka_password, "redis_username": USER,
            "redis_password": self.redis_password})


def credentials_file(stack_root: Path) -> Path:
    return stack_root / "secure.env"


def ensure_credentials(stack_root: Path, settings: FleetSettings) -> Credentials:
    """The stack's credentials: those in secure.env, else new ones written there (mode 600)."""
    path = credentials_file(stack_root)
    found = load_credentials(path)
    credentials = found if found is not None else Credentials.new()
    write_private(path, "".join(f"export {name}={shlex.quote(value)}\n"
                                for name, value in credentials.env(settings).items()))
    return credentials


def load_credentials(path: Path) -> Credentials | None:
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    values = {}
    for line in lines:
        name, sep, value = line.removeprefix("export ").partition("=")
        if sep:
            values[name.strip()] = shlex.split(value)[0] if value.strip() else ""
    try:
        return Credentials(SecretStr(values["FLEET_KAFKA_SASL_PASSWORD"]), SecretStr(values["FLEET_REDIS_PASSWORD"]))
    except KeyError as exc:
        raise StackError(f"{path} lacks {exc.args[0]}; delete it and `up --secure` again") from None


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only from the first byte on."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE), "w") as out:
        out.write(text)
    partial.replace(path)


def kafka_listener_properties(credentials: Credentials) -> dict[str, str]:
    """What a secure node's server.properties changes: the SASL listener, its mechanism and the broker's own login."""
    password = credentials.kafka_password.get_secret_value()
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{USER}" password="{password}";'
    return {
        "listener.security.protocol.map": f"{LISTENER}:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": LISTENER,
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config": jaas,
    }


def scram_format_args(credentials: Credentials) -> list[str]:
    """StorageTool arguments that create the SCRAM user in the new cluster's metadata."""
    password = credentials.kafka_password.get_secret_value()
    return ["--add-scram", f"{MECHANISM}=[name={USER},password={password}]"]


def redis_acl_config(credentials: Credentials) -> str:
    """redis.conf lines: the fleet's ACL user with everything, the passwordless default user off."""
    password = credentials.redis_password.get_secret_value()
    return f"user default off\nuser {USER} on >{password} ~* &* +@all\n"
