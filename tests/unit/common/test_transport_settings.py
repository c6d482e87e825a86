"""Transport settings: SASL/TLS combinations refused at settings time, the options every client
gets from them, and passwords that never show in a repr, a dump or a CLI message."""

import ssl
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError
from redis.exceptions import AuthenticationError, ConnectionError as RedisConnectionError

from common.clients import kafka_options, redis_options
from common.settings import FleetSettings, redacted_url
from common.topics import TopicCreationFailed, _raise_refusals
from fleet.commands.redis_access import with_redis
from fleet.unreachable import run_command

SASL = {"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_mechanism": "SCRAM-SHA-512",
        "kafka_sasl_username": "fleet", "kafka_sasl_password": "kafka-sekrit"}


@pytest.mark.parametrize("missing", ["kafka_sasl_mechanism", "kafka_sasl_username", "kafka_sasl_password"])
def test_a_sasl_protocol_needs_mechanism_and_credentials(missing: str) -> None:
    given = {name: value for name, value in SASL.items() if name != missing}
    with pytest.raises(ValidationError, match=f"needs FLEET_{missing.upper()}"):
        FleetSettings(**given)


def test_sasl_credentials_without_a_sasl_protocol_are_refused() -> None:
    with pytest.raises(ValidationError, match="apply only with FLEET_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT"):
        FleetSettings(kafka_sasl_username="fleet", kafka_sasl_password="x")


def test_tls_files_need_a_tls_protocol_and_must_exist(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read at settings time")
    with pytest.raises(ValidationError, match="apply only with FLEET_KAFKA_SECURITY_PROTOCOL=SSL"):
        FleetSettings(kafka_ssl_cafile=ca)
    with pytest.raises(ValidationError, match="no such file"):
        FleetSettings(kafka_security_protocol="SSL", kafka_ssl_cafile=tmp_path / "absent.pem")
    with pytest.raises(ValidationError, match="KEYFILE needs FLEET_KAFKA_SSL_CERTFILE"):
        FleetSettings(kafka_security_protocol="SSL", kafka_ssl_keyfile=ca)
    with pytest.raises(ValidationError, match="FLEET_REDIS_TLS_CA_FILE applies only with FLEET_REDIS_TLS"):
        FleetSettings(redis_tls_ca_file=ca)


def test_the_redis_password_in_one_place_and_never_in_the_error() -> None:
    with pytest.raises(ValidationError, match="given twice") as refused:
        FleetSettings(redis_url="redis://fleet:url-sekrit@127.0.0.1:6379/0", redis_password="x")
    assert "url-sekrit" not in str(refused.value)
    with pytest.raises(ValidationError) as refused:  # a refusal for another reason must not echo the input either
        FleetSettings(redis_url="redis://:s3@h/0", kafka_sasl_password="k3", kafka_sasl_username="u")
    assert "s3" not in str(refused.value) and "k3" not in str(refused.value)
    with pytest.raises(ValidationError, match="FLEET_REDIS_USERNAME needs FLEET_REDIS_PASSWORD"):
        FleetSettings(redis_username="fleet")


def test_passwords_are_masked_in_repr_and_dumps() -> None:
    settings = FleetSettings(**SASL, redis_username="fleet", redis_password="redis-sekrit")
    for text in (repr(settings), str(settings), settings.model_dump_json()):
        assert "kafka-sekrit" not in text and "redis-sekrit" not in text
    assert isinstance(settings.kafka_sasl_password, SecretStr)


def test_plaintext_kafka_options_carry_no_credentials() -> None:
    assert kafka_options(FleetSettings(kafka_bootstrap="h:1")) == {"bootstrap_servers": "h:1",
                                                                   "security_protocol": "PLAINTEXT"}


def test_sasl_ssl_kafka_options_carry_credentials_and_a_tls_context() -> None:
    options = kafka_options(FleetSettings(**{**SASL, "kafka_security_protocol": "SASL_SSL"}))
    assert options["security_protocol"] == "SASL_SSL" and options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "fleet" and options["sasl_plain_password"] == "kafka-sekrit"
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert options["ssl_context"].verify_mode is ssl.CERT_REQUIRED


def test_redis_options_carry_the_acl_user_timeouts_and_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    url, options = redis_options(FleetSettings(redis_username="fleet", redis_password="redis-sekrit",
                                               redis_tls=True, redis_tls_ca_file=ca, redis_connect_timeout_s=1.5))
    assert url == "rediss://127.0.0.1:6379/0"
    assert options == {"username": "fleet", "password": "redis-sekrit", "ssl_ca_certs": str(ca),
                       "socket_connect_timeout": 1.5, "socket_timeout": 5.0}
    plain_url, plain = redis_options(FleetSettings())
    assert plain_url == "redis://127.0.0.1:6379/0" and "password" not in plain and "ssl_ca_certs" not in plain


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://fleet:sekrit@127.0.0.1:6379/0", "redis://fleet:***@127.0.0.1:6379/0"),
    ("rediss://:sekrit@cache:6380", "rediss://:***@cache:6380"),
    ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
    ("redis://fleet@127.0.0.1/0", "redis://fleet@127.0.0.1/0"),
])
def test_redacted_url_masks_only_the_password(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


def test_cli_messages_never_print_the_redis_password(monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FLEET_REDIS_URL", "redis://fleet:url-sekrit@127.0.0.1:1/0")
    monkeypatch.delenv("FLEET_REDIS_PASSWORD", raising=False)

    def refused() -> int:
        raise RedisConnectionError("Connection refused")

    assert run_command("demo", refused) != 0
    said = capsys.readouterr().err
    assert "127.0.0.1:1" in said and "url-sekrit" not in said


async def test_with_redis_says_where_without_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    settings = FleetSettings(redis_url="redis://127.0.0.1:1/0", redis_username="fleet", redis_password="redis-sekrit",
                             redis_connect_timeout_s=0.2)

    async def ping(redis: object) -> int:
        await redis.ping()  # type: ignore[attr-defined]
        return 0

    assert await with_redis(settings, ping) != 0
    said = capsys.readouterr().err
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in said and "redis-sekrit" not in said


def test_topic_creation_refusals_are_raised_and_already_existing_is_not() -> None:
    _raise_refusals([("fleet.a", 0, None), ("fleet.b", 36, "exists")])
    with pytest.raises(TopicCreationFailed, match=r"fleet.c: error 38 \(Replication factor: 3 larger"):
        _raise_refusals([("fleet.c", 38, "Replication factor: 3 larger than available brokers: 1.")])


def test_durability_defaults_suit_the_single_node_stack() -> None:
    settings = FleetSettings()
    assert settings.topic_replication_factor == 1 and settings.topic_min_insync_replicas is None
    with pytest.raises(ValidationError):
        FleetSettings(topic_replication_factor=-2)


def test_a_refused_redis_password_is_not_called_unreachable(capsys: pytest.CaptureFixture[str]) -> None:
    def refused() -> int:
        raise AuthenticationError("invalid username-password pair or user is disabled.")

    assert run_command("keys", refused) != 0
    said = capsys.readouterr().err
    assert "refused authentication" in said and "FLEET_REDIS_PASSWORD" in said and "cannot reach" not in said
