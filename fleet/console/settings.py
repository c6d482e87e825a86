"""The console's settings: where it listens, which tenants may use it and with which role."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, SecretStr

from gateway import BatchSettings


class Role(StrEnum):
    read = "read"  # every page, no button
    admin = "admin"  # every page and every action


class ConsoleSettings(BatchSettings):  # the batch page reads and cancels jobs as `fleet batch` does
    console_host: str = Field("127.0.0.1", description="Address the console listens on")
    console_port: int = Field(8090, ge=1, le=65535, description="Port the console listens on")
    console_tenants: str = Field("", description="Operator tenants allowed in, comma-separated `tenant:role` "
                                 "(role admin or read; a bare tenant is read-only), e.g. `ops:admin,oncall:read`. "
                                 "Their keys are the gateway's (`fleet keys create --tenant ops`)")
    console_https: bool = Field(False, description="The console is reached over https (directly or behind a "
                                "proxy): its cookie is marked Secure")
    console_secret: SecretStr | None = Field(None, description="Signs the CSRF tokens; set the same value on "
                                             "every replica behind one address (default: random per process)")
    console_lag_sample_s: float = Field(3.0, gt=0, description="Seconds between the lag samples of the overview")
    console_history_points: int = Field(1200, ge=10, le=100_000, description="Samples kept per consumer group "
                                        "(lag) and per model (throughput, p99, batch size) for the overview's "
                                        "plots (1200 at 3 s: the last hour)")
    console_offline_grace_s: float = Field(300.0, ge=0, description="While Redis is down, a session and key checked "
                                           "within this long stay signed in (no key can be revoked while Redis is "
                                           "down)")
    console_session_idle_s: float = Field(1800.0, ge=10, description="A session with no request for this long is "
                                          "signed out (the overview's own refreshes do not count)")
    console_session_max_s: float = Field(43_200.0, ge=60, description="A session is signed out this long after "
                                         "sign-in, however active")
    console_sessions_per_key: int = Field(10, ge=1, le=1000, description="Sessions one key may hold at once; "
                                          "signing in once more signs the oldest out")
    console_max_in_flight: int = Field(64, ge=1, description="Console requests answered at once; more are 429")

    def tenant_roles(self) -> dict[str, Role]:
        roles: dict[str, Role] = {}
        for item in self.console_tenants.split(","):
            tenant, _, role = item.strip().partition(":")
            if tenant:
                roles[tenant] = Role(role.strip() or Role.read)
        return roles
