"""Gateway API keys: how they look, how they are hashed, and where they are kept.

A key is `fk_<key id>_<secret>`: the key id (12 hex chars) names it in listings and in
`fleet keys revoke`, the secret (256 random bits) is what makes it a credential. Only
sha256(key) is ever stored: in the Redis hash `fleet:apikeys` (field: the hex digest, value:
a JSON `KeyRecord`), or in a mounted keys file of `<sha256 hex> <tenant>` lines. A fast hash is
enough here because the key is random, not a password a person chose: no dictionary to try.

The gateway, the console and `fleet keys` share this module, so they agree on the format and the
storage. Revoking a key also signs out every console session made with it (common/sessions.py).
"""

import hashlib
import json
import re
import secrets
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from common.redis_cluster import AnyRedis
from common.sessions import end_sessions_of
from schemas.names import API_KEYS_KEY

KEY_PREFIX = "fk_"
KEY_ID_HEX = 12
TENANT_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
FILE_KEY_ID_PREFIX = "file:"


class KeyRecord(BaseModel):
    """What the fleet knows about a key: never the key."""

    tenant: str = Field(pattern=TENANT_PATTERN)
    key_id: str = Field(min_length=1, max_length=80)
    created_ms: int = 0
    revoked_ms: int | None = None

    @property
    def active(self) -> bool:
        return self.revoked_ms is None


class IssuedKey(BaseModel):
    """A new key and its record: the only moment the key itself exists outside its holder."""

    key: str
    record: KeyRecord


def key_digest(key: str) -> str:
    """sha256 of the key's UTF-8 bytes, lowercase hex: the same as `printf %s "$KEY" | sha256sum`."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def new_key() -> tuple[str, str]:
    """A fresh (key, key id)."""
    key_id = secrets.token_hex(KEY_ID_HEX // 2)
    return f"{KEY_PREFIX}{key_id}_{secrets.token_urlsafe(32)}", key_id


def valid_tenant(tenant: str) -> bool:
    return re.fullmatch(TENANT_PATTERN, tenant) is not None


def decode_record(raw: bytes | str | None) -> KeyRecord | None:
    """A stored record, or None when there is none or it cannot be read (a broken record lets no one in)."""
    if raw is None:
        return None
    try:
        return KeyRecord.model_validate(json.loads(raw))
    except (ValueError, ValidationError):
        return None


async def create_key(redis: AnyRedis, tenant: str, *, now_ms: int) -> IssuedKey:
    """Make a key for `tenant` and store its hash; the key itself is returned once and kept nowhere."""
    if not valid_tenant(tenant):
        raise ValueError(f"tenant {tenant!r} must match {TENANT_PATTERN}")
    key, key_id = new_key()
    record = KeyRecord(tenant=tenant, key_id=key_id, created_ms=now_ms)
    await redis.hset(API_KEYS_KEY, key_digest(key), record.model_dump_json())
    return IssuedKey(key=key, record=record)


async def find_key(redis: AnyRedis, digest: str) -> KeyRecord | None:
    """The record of the key whose sha256 is `digest`, or None; Redis errors propagate."""
    return decode_record(await redis.hget(API_KEYS_KEY, digest))


async def list_keys(redis: AnyRedis, tenant: str | None = None) -> list[KeyRecord]:
    """Every stored key's record (of one tenant), oldest first."""
    records = [r for raw in (await redis.hgetall(API_KEYS_KEY)).values() if (r := decode_record(raw)) is not None]
    return sorted((r for r in records if tenant is None or r.tenant == tenant), key=lambda r: (r.created_ms, r.key_id))


async def revoke_key(redis: AnyRedis, key_id: str, *, now_ms: int) -> KeyRecord | None:
    """Mark the key with this id revoked (kept, so listings show it) and end every console session
    signed in with it (common/sessions.py); None when no key has that id."""
    for digest, raw in (await redis.hgetall(API_KEYS_KEY)).items():
        record = decode_record(raw)
        if record is not None and record.key_id == key_id:
            if record.active:
                record = record.model_copy(update={"revoked_ms": now_ms})
                await redis.hset(API_KEYS_KEY, digest, record.model_dump_json())
            await end_sessions_of(redis, key_id)
            return record
    return None


class KeysFileError(ValueError):
    pass


def read_keys_file(path: Path) -> dict[str, KeyRecord]:
    """The keys in a mounted file: one `<sha256 hex> <tenant>` per line, `#` comments and blank
    lines allowed. A malformed line is an error naming its number (it never names the content)."""
    keys: dict[str, KeyRecord] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) != 2 or not SHA256_HEX.fullmatch(words[0]) or not valid_tenant(words[1]):
            raise KeysFileError(f"{path}:{number}: expected '<sha256 hex, lowercase> <tenant>'")
        digest, tenant = words
        keys[digest] = KeyRecord(tenant=tenant, key_id=FILE_KEY_ID_PREFIX + digest[:KEY_ID_HEX])
    return keys
