"""Signing in to the console: a key admitted once at the console's door (gateway/admission.py), then
a server-side session in its place (fleet/console/access.py), on a Redis in memory and a clock the
test moves. The cookie holds a random token, never the key; a session ends idle, at its absolute
expiry, on its own sign-out, or with its key."""

import asyncio
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from common.auth_keys import IssuedKey, create_key, decode_record, key_digest
from fleet.console.access import COOKIE, MAX_FORM_BYTES, ConsoleAccess, Operator
from fleet.console.app import create_app
from fleet.console.settings import ConsoleSettings, Role
from gateway.refusals import Kind, Refusal
from schemas.names import API_KEYS_KEY
from tests.unit.common.memory_redis import MemoryRedis
from tests.unit.common.test_sessions import Clock

IDLE_S, MAX_S = 60.0, 600.0
SETTINGS = ConsoleSettings(console_tenants="ops:admin,watch:read", console_secret="s1",
                           console_session_idle_s=IDLE_S, console_session_max_s=MAX_S)


class Console:
    def __init__(self, settings: ConsoleSettings = SETTINGS) -> None:
        self.clock = Clock()
        self.redis = MemoryRedis(self.clock)
        self.access = ConsoleAccess(settings, self.redis, self.clock)  # type: ignore[arg-type]

    def key(self, tenant: str) -> IssuedKey:
        return asyncio.run(create_key(self.redis, tenant, now_ms=1))  # type: ignore[arg-type]

    def sign_in(self, key: str) -> str:
        signed_in = asyncio.run(self.access.sign_in(key))
        assert not isinstance(signed_in, Refusal), signed_in
        return signed_in[0]

    def refusal(self, key: str) -> Kind:
        refused = asyncio.run(self.access.sign_in(key))
        assert isinstance(refused, Refusal)
        return refused.kind

    def operator(self, token: str | None, *, activity: bool = True) -> Operator | Kind:
        admitted = asyncio.run(self.access.admit(token, activity=activity))
        if isinstance(admitted, Refusal):
            return admitted.kind
        admitted.release()
        return self.access.operator(admitted)


def test_a_key_signs_in_once_and_its_session_stands_for_it_with_the_tenants_role() -> None:
    console = Console()
    issued = console.key("ops")
    token = console.sign_in(issued.key)
    assert token != issued.key and issued.key not in token
    operator = console.operator(token)
    assert isinstance(operator, Operator)
    assert (operator.tenant, operator.key_id, operator.role) == ("ops", issued.record.key_id, Role.admin)
    assert console.operator(issued.key) is Kind.unauthenticated  # the key is no session
    assert console.operator(None) is Kind.unauthenticated


def test_sign_in_refuses_as_admission_does_everywhere() -> None:
    console = Console()
    assert console.refusal("fk_000000000000_unknown") is Kind.unauthenticated
    assert console.refusal("") is Kind.unauthenticated
    assert console.refusal(console.key("customers").key) is Kind.forbidden  # not an operator tenant
    operator_key = console.key("ops").key
    console.redis.down = True
    assert console.refusal(operator_key) is Kind.unavailable  # never signed in unverified


def test_only_activity_keeps_a_session_from_its_idle_expiry_and_nothing_past_its_absolute_one() -> None:
    console = Console()
    token = console.sign_in(console.key("ops").key)
    console.clock.now += IDLE_S - 1
    assert isinstance(console.operator(token), Operator)
    console.clock.now += IDLE_S - 1
    assert isinstance(console.operator(token, activity=False), Operator)  # the overview refreshing itself
    console.clock.now += 1
    assert console.operator(token) is Kind.unauthenticated
    token = console.sign_in(console.key("ops").key)
    signed_in_at = console.clock.now
    while console.clock.now + IDLE_S / 2 < signed_in_at + MAX_S:
        console.clock.now += IDLE_S / 2
        assert isinstance(console.operator(token), Operator)
    console.clock.now = signed_in_at + MAX_S
    assert console.operator(token) is Kind.unauthenticated


def test_a_key_revoked_any_way_signs_out_every_session_of_it() -> None:
    console = Console()
    issued = console.key("ops")
    tokens = [console.sign_in(issued.key) for _ in range(2)]
    # Revoked by hand in Redis, not by revoke_key (which ends the sessions itself): the next request finds out.
    record = decode_record(asyncio.run(console.redis.hget(API_KEYS_KEY, key_digest(issued.key))))
    assert record is not None
    asyncio.run(console.redis.hset(API_KEYS_KEY, key_digest(issued.key),
                                   record.model_copy(update={"revoked_ms": 2}).model_dump_json()))
    assert console.operator(tokens[0]) is Kind.unauthenticated
    assert asyncio.run(console.access.sessions.find(tokens[1])) is None  # ended too, not only refused


def test_a_csrf_token_belongs_to_one_session_and_one_secret() -> None:
    console = Console()
    issued = console.key("ops")
    first, second = (console.operator(console.sign_in(issued.key)) for _ in range(2))
    assert isinstance(first, Operator) and isinstance(second, Operator)
    access = console.access
    assert access.csrf_ok(first, access.csrf_token(first))
    assert not access.csrf_ok(second, access.csrf_token(first))  # the same key, another session
    assert not access.csrf_ok(first, None) and not access.csrf_ok(first, "")
    other = ConsoleAccess(ConsoleSettings(console_tenants="ops:admin", console_secret="s2"),
                          console.redis)  # type: ignore[arg-type]
    assert not other.csrf_ok(first, access.csrf_token(first))


@pytest.fixture
def browser() -> Iterator[tuple[TestClient, Console]]:
    console = Console()
    with TestClient(create_app(SETTINGS, sample_lag=False), follow_redirects=False) as client:
        client.app.state.console.access = console.access  # type: ignore[attr-defined]
        yield client, console


def test_the_cookie_holds_a_session_token_and_sign_out_ends_that_session(
        browser: tuple[TestClient, Console]) -> None:
    client, console = browser
    issued = console.key("ops")
    signed_in = client.post("/login", data={"key": issued.key})
    assert signed_in.status_code == 303
    cookie = signed_in.headers["set-cookie"]
    token = client.cookies[COOKIE]
    assert issued.key not in cookie and isinstance(console.operator(token), Operator)
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and f"Max-Age={int(MAX_S)}" in cookie
    assert client.get("/no-such-page").status_code == 404  # admitted, then routed
    assert client.post("/logout").status_code == 303
    assert console.operator(token) is Kind.unauthenticated  # ended on the server, not only forgotten here
    client.cookies.set(COOKIE, token)
    refused = client.get("/no-such-page")
    assert refused.status_code == 303 and refused.headers["location"].startswith("/login")


def test_the_consoles_refusals_are_admissions_said_for_a_browser(browser: tuple[TestClient, Console]) -> None:
    client, console = browser
    assert client.post("/login", data={"key": console.key("customers").key}).status_code == 403
    assert client.post("/login", data={"key": "x" * (MAX_FORM_BYTES + 1)}).status_code == 413
    assert client.post("/login", data={"key": console.key("watch").key}).status_code == 303
    assert client.post("/workers/w1/drain", data={"csrf": "x" * (MAX_FORM_BYTES + 1)}).status_code == 413
    assert client.post("/workers/w1/drain", data={}, headers={"hx-request": "true"}).status_code == 403  # CSRF
    console.redis.down = True
    assert client.get("/no-such-page").status_code == 404  # read a moment ago: a short outage is ridden out
    console.clock.now += SETTINGS.console_offline_grace_s + 1
    outage = client.get("/no-such-page")
    assert outage.status_code == 503 and "Redis does not answer" in outage.text and outage.headers["retry-after"]
