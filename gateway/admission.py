"""One admission for every entry point: whether a request may go on to its route, decided in one
place and in one order, whichever protocol it came by.

The steps, in this order; the first that fails is the answer (its kind, HTTP status and gRPC code
are in gateway/refusals.py):

  1. authentication  the key: `Authorization: Bearer` or `X-API-Key` (gRPC: the same metadata), or
                     the console's session (common/sessions.py), which names the key it signed in
                     with. None, two, too long, unknown or revoked, or a session ended or expired:
                     `unauthenticated`. Redis cannot say: `unavailable` (never let in unverified;
                     keys verified lately ride out a short outage, gateway/auth.py `OutageGrace`).
  2. tenant          the key's tenant may use this door: a metrics tenant's key only /metrics and
                     /metrics only theirs; the console only its operator tenants: else `forbidden`.
  3. quota           the tenant's rate and requests in flight (gateway/quotas.py): `over_quota`.
  4. in flight       the process's bound on requests in flight (gateway/limits.py): `busy`.
  5. body            the door's body limit, on the declared length and then on what is read (a
                     gRPC message: its size): `too_large`.
  6. rows            a call that carries N rows (a /v2 or gRPC infer of N texts) holds N of the
                     tenant's quota once its body is read and parsed; admission took one: `over_quota`.

Why this order: nothing is spent on a caller before it is known (no quota token, no in-flight
place, no body read for an unknown key); a tenant over its own budget is told so before the
process's bound is spent on it, so one tenant's flood is refused by its quota and leaves places
for the others; the body is read last, by admitted requests only. Quota and in-flight are held
until the request is answered (`Pass.release`).

Each entry point only translates: /v1 (gateway/fast_routes.py and, for the routes FastAPI
serves, gateway/http_admission.py), /v2 REST (gateway/oip/rest.py), gRPC
(gateway/oip/grpc_server.py) and the console (fleet/console/admission.py) each read the
credentials from their protocol, call `Admission.admit*`, and write a `Refusal` back in their own
form, with its kind. A door (`Door`) says what differs between entry points: which tenants, whether
the request is metered (quota and in-flight), and the body limit.
"""

from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from prometheus_client import Counter
from starlette.types import Receive

from common.auth_keys import key_digest
from common.redis_cluster import REDIS_DOWN
from common.sessions import Session, SessionStore, SessionsUnavailable
from gateway.auth import ANONYMOUS, MAX_KEY_CHARS, AmbiguousKey, Caller, KeyDirectory, presented_key
from gateway.errors import FleetUnavailable
from gateway.limits import InFlight, declared_length, over_limit, read_body
from gateway.metrics import Children
from gateway.quotas import QuotaBook
from gateway.refusals import Kind, Refusal

HEADER_HINT = "an API key is required: 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"


@dataclass(frozen=True, slots=True)
class Door:
    """What one entry point admits: its name, its body limit, whether the tenant's quota and the
    in-flight bound apply, and which tenants it lets in (None: every tenant but the reserved ones)."""

    name: str
    max_body_bytes: int
    metered: bool = True
    tenants: frozenset[str] | None = None
    not_for: str = "tenant {tenant} may not use this"  # why another tenant is refused here
    key_hint: str = HEADER_HINT  # what a caller without a key is told
    # The route reads the body as a stream (a batch file): admission checks its declared length only.
    streams_body: bool = False


class Pass:
    """An admitted request: who it is, and what it holds (a quota place, an in-flight place) until
    `release()`, which its entry point calls once it is answered, whatever happened."""

    __slots__ = ("caller", "session", "_door", "_quotas", "_tenant", "_rows", "_in_flight")

    def __init__(self, caller: Caller, door: Door, quotas: QuotaBook | None, in_flight: InFlight | None) -> None:
        self.caller = caller
        self.session: Session | None = None  # the console session it came with
        self._door = door
        self._quotas = quotas
        self._tenant = caller.tenant if quotas is not None else None  # set while it holds quota
        self._rows = 1
        self._in_flight = in_flight

    async def body(self, receive: Receive, headers: list[tuple[bytes, bytes]]) -> bytes | Refusal | None:
        """Step 5 over ASGI: the whole body within the door's limit; None when the client went away.
        A streaming door's body is left to its route (b"" here) once its declared length fits."""
        if self._door.streams_body:
            declared = declared_length(headers)
            if declared is not None and declared.isdigit() and int(declared) > self._door.max_body_bytes:
                return over_limit(self._door.max_body_bytes, int(declared))
            return b""
        return await read_body(receive, declared_length(headers), self._door.max_body_bytes)

    def size(self, size: int) -> Refusal | None:
        """Step 5 for a body received whole (a gRPC message): its size against the door's limit."""
        limit = self._door.max_body_bytes
        return over_limit(limit, size) if size > limit else None

    def rows(self, rows: int) -> Refusal | None:
        """Step 6: the call carries `rows` rows, each one of its tenant's requests; all held or the refusal."""
        if self._tenant is None or self._quotas is None or rows <= self._rows:
            return None
        if (refusal := self._quotas.enter(self._tenant, rows - self._rows)) is not None:
            return refusal
        self._rows = rows
        return None

    def release(self) -> None:
        if self._in_flight is not None:
            self._in_flight.leave()
            self._in_flight = None
        if self._tenant is not None and self._quotas is not None:
            self._quotas.leave(self._tenant, self._rows)
            self._tenant = None


class Admission:
    """Steps 1 to 4 (the body and rows are `Pass`'s). `directory` None: authentication is switched
    off, every caller is anonymous and only the in-flight bound applies. `reserved` tenants (the
    metrics tenants) pass only a door that names them; `reserved_for` says where they belong."""

    def __init__(self, directory: KeyDirectory | None, *, quotas: QuotaBook | None = None,
                 in_flight: InFlight | None = None, reserved: frozenset[str] = frozenset(),
                 reserved_for: str = "", retry_after_s: int = 1, failures: Counter | None = None,
                 unavailable: Counter | None = None) -> None:
        self.directory = directory
        self._quotas = quotas
        self._in_flight = in_flight
        self._reserved = reserved
        self._reserved_for = reserved_for
        self._retry_after_s = retry_after_s
        self._failures: Callable[[str], Counter] | None = Children(failures) if failures is not None else None
        self._unavailable: Callable[[str], Counter] | None = (Children(unavailable) if unavailable is not None
                                                               else None)

    async def admit(self, door: Door, headers: list[tuple[bytes, bytes]]) -> Pass | Refusal:
        """The request whose (lower-case) headers these are, at `door`: let in, or the first refusal."""
        if self.directory is None:
            return self._let_in(door, ANONYMOUS)
        try:
            key = presented_key(headers)
        except AmbiguousKey as exc:
            return self._unauthenticated("invalid", f"send one API key: {exc}")
        return await self.admit_key(door, key)

    async def admit_key(self, door: Door, key: str | None) -> Pass | Refusal:
        """As `admit`, for a key that came another way (the console's sign-in form)."""
        if not key:
            return self._unauthenticated("missing", door.key_hint)
        if len(key) > MAX_KEY_CHARS:
            return self._unauthenticated("invalid", "unknown or revoked API key")
        return await self.admit_digest(door, key_digest(key))

    async def admit_digest(self, door: Door, digest: str) -> Pass | Refusal:
        """As `admit`, for the key whose sha256 this is (a console session holds the digest, never the key)."""
        if self.directory is None:
            return self._let_in(door, ANONYMOUS)
        try:
            record = await self.directory.lookup_digest(digest)
        except FleetUnavailable as exc:
            if self._unavailable is not None:
                self._unavailable(exc.dependency).inc()
            return Refusal(Kind.unavailable, str(exc), self._retry_after_s, (("dependency", exc.dependency),))
        if record is None or not record.active:
            return self._unauthenticated("invalid", "unknown or revoked API key")
        return self._let_in(door, Caller(tenant=record.tenant, key_id=record.key_id))

    async def admit_session(self, door: Door, sessions: SessionStore, token: str | None, *,
                            touch: bool = True) -> Pass | Refusal:
        """As `admit`, for the console: the session its cookie names stands for the key it signed in with
        (step 1 reads it first, then checks that key as any other). A key found unknown or revoked
        ends every session of it. `touch`: this request counts as activity (see common/sessions.py)."""
        if not token:
            return self._unauthenticated("missing", door.key_hint)
        try:
            session = await sessions.find(token, touch=touch)
        except SessionsUnavailable as exc:
            if self._unavailable is not None:
                self._unavailable("redis").inc()
            return Refusal(Kind.unavailable, str(FleetUnavailable("redis", str(exc))), self._retry_after_s,
                           (("dependency", "redis"),))
        if session is None:
            return self._unauthenticated("invalid", "the session has ended (signed out, expired or its key "
                                                    "revoked): sign in again")
        admitted = await self.admit_digest(door, session.digest)
        if isinstance(admitted, Refusal):
            if admitted.kind is Kind.unauthenticated:
                with suppress(*REDIS_DOWN):  # refused either way; the sessions end with their TTL at worst
                    await sessions.end_all(session.key_id)
            return admitted
        admitted.session = session
        return admitted

    def _let_in(self, door: Door, caller: Caller) -> Pass | Refusal:
        tenant = caller.tenant
        if tenant is not None and (tenant not in door.tenants if door.tenants is not None
                                   else tenant in self._reserved):
            why = door.not_for.format(tenant=tenant) if door.tenants is not None else self._reserved_for
            return self._forbidden(why)
        if not door.metered:
            return Pass(caller, door, None, None)
        quotas = self._quotas if tenant is not None else None
        if quotas is not None and tenant is not None and (refusal := quotas.enter(tenant)) is not None:
            return refusal
        in_flight = self._in_flight
        if in_flight is not None and (refusal := in_flight.enter()) is not None:
            if quotas is not None and tenant is not None:
                quotas.leave(tenant)
            return refusal
        return Pass(caller, door, quotas, in_flight)

    def _unauthenticated(self, reason: str, detail: str) -> Refusal:
        if self._failures is not None:
            self._failures(reason).inc()
        return Refusal(Kind.unauthenticated, detail)

    def _forbidden(self, detail: str) -> Refusal:
        if self._failures is not None:
            self._failures("forbidden").inc()
        return Refusal(Kind.forbidden, detail)
