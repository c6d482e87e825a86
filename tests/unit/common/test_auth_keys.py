"""API keys and tenant quotas, the pure logic: key format and hashing, the keys file, header
parsing, the token bucket, per-tenant overrides, auth on by default."""

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from common.auth_keys import (KEY_PREFIX, KeysFileError, decode_record, key_digest, new_key, read_keys_file,
                              valid_tenant)
from gateway.auth import AmbiguousKey, KeysFile, presented_key
from gateway.quotas import TokenBucket
from gateway.settings import GatewaySettings, TenantQuota

DIGEST = "a" * 64


def test_a_key_names_its_id_and_carries_256_random_bits() -> None:
    key, key_id = new_key()
    assert key.startswith(f"{KEY_PREFIX}{key_id}_") and len(key_id) == 12
    secret = key.removeprefix(f"{KEY_PREFIX}{key_id}_")
    assert len(secret) >= 43, "32 random bytes, base64url"
    assert new_key()[0] != key


def test_the_digest_is_what_sha256sum_prints_for_the_key() -> None:
    key, _ = new_key()
    printed = subprocess.run(["sha256sum"], input=key.encode(), capture_output=True, check=True).stdout.split()[0]
    assert key_digest(key) == printed.decode() == hashlib.sha256(key.encode()).hexdigest()


@pytest.mark.parametrize(("tenant", "ok"), [("acme", True), ("a.b-c_9", True), ("Acme", False), ("", False),
                                            ("-acme", False), ("a" * 65, False), ("a b", False)])
def test_tenant_names(tenant: str, ok: bool) -> None:
    assert valid_tenant(tenant) is ok


@pytest.mark.parametrize("raw", [None, b"", b"not json", b"[]", b'{"tenant": "acme"}', b'{"tenant": "A", "key_id": "x"}'])
def test_an_unreadable_record_lets_no_one_in(raw: bytes | None) -> None:
    assert decode_record(raw) is None


def test_a_keys_file_maps_digests_to_tenants(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"# operators' keys\n\n{DIGEST} acme   # the first\n{'b' * 64}\tglobex\n")
    keys = read_keys_file(path)
    assert {d: r.tenant for d, r in keys.items()} == {DIGEST: "acme", "b" * 64: "globex"}
    assert keys[DIGEST].key_id == "file:aaaaaaaaaaaa" and keys[DIGEST].active


@pytest.mark.parametrize("line", [f"{DIGEST}", f"{DIGEST} acme extra", f"{DIGEST.upper()} acme", "fk_secret acme",
                                  f"{DIGEST} Not-A-Tenant"])
def test_a_malformed_keys_file_line_is_named_by_number_never_quoted(tmp_path: Path, line: str) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"{'c' * 64} ok\n{line}\n")
    with pytest.raises(KeysFileError) as refused:
        read_keys_file(path)
    assert f"{path}:2:" in str(refused.value) and line.split()[0] not in str(refused.value)


def test_a_changed_keys_file_is_reread_and_a_broken_one_admits_no_one(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"{DIGEST} acme\n")
    now = [0.0]
    keys = KeysFile(path, every_s=0.5, clock=lambda: now[0])
    assert keys.get(DIGEST) is not None
    path.write_text(f"{'b' * 64} acme\n")
    os.utime(path, ns=(1, 1))
    assert keys.get(DIGEST) is not None, "not re-read before every_s has passed"
    now[0] = 0.6
    assert keys.get(DIGEST) is None and keys.get("b" * 64) is not None
    path.write_text("garbage\n")
    os.utime(path, ns=(2, 2))
    now[0] = 1.2
    assert keys.get("b" * 64) is None


@pytest.mark.parametrize(("headers", "key"), [
    ([(b"authorization", b"Bearer fk_1")], "fk_1"),
    ([(b"authorization", b"bearer   fk_1 ")], "fk_1"),
    ([(b"x-api-key", b"fk_2")], "fk_2"),
    ([(b"x-api-key", b"fk_2"), (b"authorization", b"Bearer fk_1")], "fk_1"),
    ([(b"authorization", b"Basic dXNlcjpwdw==")], None),
    ([(b"authorization", b"Bearer ")], None),
    ([(b"x-api-key", b"  ")], None),
    ([], None),
])
def test_the_key_comes_from_a_bearer_token_or_x_api_key(headers: list[tuple[bytes, bytes]], key: str | None) -> None:
    assert presented_key(headers) == key


def test_a_token_bucket_allows_its_burst_then_its_rate() -> None:
    bucket = TokenBucket(rate=2.0, burst=3, now=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5), "the next token is half a second away at 2 per second"
    assert bucket.take(0.5) == 0.0
    assert bucket.take(0.5) > 0
    assert [bucket.take(100.0) for _ in range(4)][:3] == [0.0, 0.0, 0.0], "refills up to the burst, no further"


def test_tenant_overrides_replace_only_what_they_name() -> None:
    settings = GatewaySettings(tenant_rps=100, tenant_burst=10, tenant_max_waits=5,
                               tenant_quotas={"acme": TenantQuota(rps=1, max_waits=2)})
    assert settings.quota_of("acme") == TenantQuota(rps=1, burst=10, max_waits=2)
    assert settings.quota_of("globex") == TenantQuota(rps=100, burst=10, max_waits=5)


def test_auth_is_on_unless_switched_off_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    for environment in ("development", "test", "local", "production"):
        monkeypatch.setenv("FLEET_ENV", environment)
        assert GatewaySettings().auth_required is True
    monkeypatch.setenv("FLEET_AUTH_REQUIRED", "false")
    assert GatewaySettings().auth_required is False
    monkeypatch.setenv("FLEET_TENANT_QUOTAS", '{"acme": {"rps": 5}}')
    assert GatewaySettings().quota_of("acme").rps == 5


@pytest.mark.parametrize("headers", [
    [(b"authorization", b"Bearer k1"), (b"authorization", b"Bearer k2")],
    [(b"x-api-key", b"k1"), (b"x-api-key", b"k1")],
], ids=["two Authorization", "two X-API-Key"])
def test_two_credentials_are_refused_not_resolved(headers: list[tuple[bytes, bytes]]) -> None:
    """A proxy in front might pick the other one: the gateway does not guess."""
    with pytest.raises(AmbiguousKey):
        presented_key(headers)
