"""Who may use the console: an operator tenant's key, kept in an HttpOnly cookie, checked on
every request (so a revoked key stops working at its next request), and a CSRF token on every
change.

The cookie holds the key itself, as the gateway's callers hold theirs; it is HttpOnly (no script
reads it), SameSite=Strict (no other site's page sends it) and Secure behind https. The CSRF
token is an HMAC of the key's digest, so it is worthless without the cookie and needs no store.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from redis.exceptions import RedisError

from common.auth_keys import find_key, key_digest
from common.redis_cluster import AnyRedis
from fleet.console.settings import ConsoleSettings, Role

COOKIE = "fleet_console_key"
MAX_KEY_CHARS = 200


@dataclass(frozen=True)
class Operator:
    tenant: str
    key_id: str
    role: Role
    digest: str
    redis_down: bool = False  # admitted on an earlier check because Redis does not answer now

    @property
    def admin(self) -> bool:
        return self.role is Role.admin

    @property
    def actor(self) -> str:
        """Who the audit logs name for a change made from the console."""
        return f"console:{self.tenant}/{self.key_id}"


class Refused(Exception):
    """Not signed in; the message says why, in words fit for the login page."""


class Gate:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.roles = settings.tenant_roles()
        secret = settings.console_secret.get_secret_value() if settings.console_secret else secrets.token_hex(32)
        self._secret = secret.encode()
        self._grace_s = settings.console_offline_grace_s
        self._checked: dict[str, tuple[Operator, float]] = {}  # digest -> last good check; bounded below

    def csrf_token(self, operator: Operator) -> str:
        return hmac.new(self._secret, operator.digest.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, operator: Operator, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.csrf_token(operator), token)

    async def admit(self, redis: AnyRedis, key: str | None) -> Operator:
        """The operator whose key this is, or Refused."""
        if not key or len(key) > MAX_KEY_CHARS:
            raise Refused("sign in with the key of an operator tenant")
        digest = key_digest(key)
        try:
            record = await find_key(redis, digest)
        except (RedisError, OSError) as exc:
            return self._offline(digest, exc)
        if record is None or not record.active:
            self._checked.pop(digest, None)
            raise Refused("this key is unknown or revoked")
        role = self.roles.get(record.tenant)
        if role is None:
            raise Refused(f"tenant {record.tenant} is not an operator tenant of this console (FLEET_CONSOLE_TENANTS)")
        operator = Operator(record.tenant, record.key_id, role, digest)
        if len(self._checked) >= 1000:
            self._checked.clear()
        self._checked[digest] = (operator, time.monotonic())
        return operator

    def _offline(self, digest: str, exc: BaseException) -> Operator:
        known = self._checked.get(digest)
        if known is not None and time.monotonic() - known[1] <= self._grace_s:
            operator, _ = known
            return Operator(operator.tenant, operator.key_id, operator.role, digest, redis_down=True)
        raise Refused(f"Redis does not answer ({type(exc).__name__}), so no key can be checked; "
                      "try again when it is back") from exc
