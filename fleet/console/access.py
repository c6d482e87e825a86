"""Who may use the console: the gateway's one admission (gateway/admission.py) at the console's
door, with a server-side session (common/sessions.py) in place of a key on every request.

Signing in presents an operator tenant's key once, in the login form; admission checks it as the
gateway checks any key (unknown or revoked: unauthenticated; another tenant: forbidden; Redis
away: unavailable). The browser is then given a random session token in an HttpOnly,
SameSite=Strict cookie (Secure behind https); the key itself is kept nowhere. Every later request
presents the token: the session must not have ended (signed out, idle or absolute expiry, its key
revoked), and the key it was made with is checked again, so a key revoked by any means signs its
sessions out at their next request.

A change also carries a CSRF token: an HMAC of the session's id, worthless without the cookie and
worthless once the session ends; it needs no store.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.auth_keys import key_digest
from common.redis_cluster import REDIS_DOWN, AnyRedis
from common.sessions import SessionPolicy, SessionStore
from fleet.console.settings import ConsoleSettings, Role
from gateway import Admission, Door, InFlight, KeyDirectory, Kind, Pass, Refusal

COOKIE = "fleet_console_session"
MAX_FORM_BYTES = 64 * 1024  # the console's body limit: a form, never a payload
LOOKUP_TIMEOUT_S = 2.0
RETRY_AFTER_S = 1


@dataclass(frozen=True)
class Operator:
    tenant: str
    key_id: str
    role: Role
    session_id: str
    redis_down: bool = False  # admitted on an earlier check because Redis does not answer now

    @property
    def admin(self) -> bool:
        return self.role is Role.admin

    @property
    def actor(self) -> str:
        """Who the audit logs name for a change made from the console."""
        return f"console:{self.tenant}/{self.key_id}"


class ConsoleAccess:
    """The console's door into admission, its sessions and its CSRF tokens."""

    def __init__(self, settings: ConsoleSettings, redis: AnyRedis, clock: Callable[[], float] = time.time) -> None:
        self.roles = settings.tenant_roles()
        secret = settings.console_secret.get_secret_value() if settings.console_secret else secrets.token_hex(32)
        self._secret = secret.encode()
        # Every request asks Redis (no cache): a revoked key is refused at its very next request.
        directory = KeyDirectory(lambda: redis, cache_s=0.0, lookup_timeout_s=LOOKUP_TIMEOUT_S,
                                 outage_grace_s=settings.console_offline_grace_s)
        self.admission = Admission(directory, in_flight=InFlight(settings.console_max_in_flight, RETRY_AFTER_S),
                                   retry_after_s=RETRY_AFTER_S)
        self.door = Door("console", MAX_FORM_BYTES, tenants=frozenset(self.roles),
                         not_for="tenant {tenant} is not an operator tenant of this console (FLEET_CONSOLE_TENANTS)",
                         key_hint="sign in with the key of an operator tenant")
        self.sessions = SessionStore(redis, SessionPolicy(
            idle_s=settings.console_session_idle_s, absolute_s=settings.console_session_max_s,
            max_per_key=settings.console_sessions_per_key, outage_grace_s=settings.console_offline_grace_s), clock)

    async def sign_in(self, key: str) -> tuple[str, str, str] | Refusal:
        """(the new session's token, its tenant, its key id) for this key, or why not: the key is
        admitted at the console's door as any request is."""
        admitted = await self.admission.admit_key(self.door, key)
        if isinstance(admitted, Refusal):
            return admitted
        try:
            tenant, key_id = admitted.caller.tenant or "", admitted.caller.key_id or ""
            return await self.sessions.start(key_digest(key), key_id), tenant, key_id
        except REDIS_DOWN as exc:
            return Refusal(Kind.unavailable, f"redis unavailable: no session can be started ({type(exc).__name__})",
                           RETRY_AFTER_S, (("dependency", "redis"),))
        finally:
            admitted.release()

    async def admit(self, token: str | None, *, activity: bool) -> Pass | Refusal:
        """The request that presents this session token; `activity` False for the pages' own refreshes,
        which keep no idle session alive."""
        return await self.admission.admit_session(self.door, self.sessions, token, touch=activity)

    def operator(self, admitted: Pass) -> Operator:
        session, tenant = admitted.session, admitted.caller.tenant
        if session is None or tenant is None:
            raise ValueError("an operator is admitted by a session")
        return Operator(tenant, session.key_id, self.roles[tenant], session.id, redis_down=session.remembered)

    def csrf_token(self, operator: Operator) -> str:
        return hmac.new(self._secret, operator.session_id.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, operator: Operator, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(self.csrf_token(operator), token)
