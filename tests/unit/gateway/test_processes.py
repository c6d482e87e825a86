"""`--workers N`: each process takes 1/N of every tenant's quota, and the parent reports its
children's ends the way an operator reads them."""

import signal

from gateway.processes import _exit_code, share_of
from gateway.settings import GatewaySettings, TenantQuota


def test_each_process_takes_its_share_of_every_quota() -> None:
    settings = GatewaySettings(tenant_rps=300, tenant_burst=7, tenant_max_waits=10,
                               tenant_quotas={"big": TenantQuota(rps=90, burst=None, max_waits=5)})
    share = share_of(settings, 3)
    assert (share.tenant_rps, share.tenant_burst, share.tenant_max_waits) == (100, 3, 4)  # bursts and waits round up
    assert share.tenant_quotas["big"] == TenantQuota(rps=30, burst=None, max_waits=2)
    assert share_of(settings, 1) is settings


def test_a_child_ended_by_the_passed_on_signal_is_a_clean_stop() -> None:
    assert _exit_code(-signal.SIGTERM, [signal.SIGTERM]) == 0
    assert _exit_code(-signal.SIGKILL, [signal.SIGTERM]) == 128 + signal.SIGKILL
    assert _exit_code(-signal.SIGTERM, []) == 128 + signal.SIGTERM
    assert _exit_code(3, []) == 3
