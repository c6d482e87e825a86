"""`fleet-gateway --workers N`: N gateway processes serving one port.

The parent binds the port, forks N children before any event loop or thread exists, and
supervises them: each child serves the shared socket with its own Kafka producer, Redis clients
and reply stream (its waiter id is its own), so a reply always reaches the process whose caller
waits for it. SIGTERM and SIGINT are passed on to every child; when one child ends, the others
are stopped and the parent exits with the first child's code, so the orchestrator restarts a
whole gateway rather than running a part of one.

Metrics: the children write to prometheus_client's multiprocess files (PROMETHEUS_MULTIPROC_DIR,
made by the parent before prometheus_client is imported), and `/metrics` of any child sums all
of them. Per-tenant quotas are kept per process, so each child takes 1/N of every tenant's
rate, burst and waits.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable
from types import FrameType

from gateway.settings import GatewaySettings, TenantQuota

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Set by the parent on the process it re-executes: the metrics folder is its to delete.
OWNED_ENV = "FLEET_GATEWAY_OWNS_METRICS_DIR"


def ensure_multiprocess_metrics(argv: list[str]) -> None:
    """Re-execute this process with PROMETHEUS_MULTIPROC_DIR set, unless it is set already:
    prometheus_client picks its value store when first imported, so it must be set before that."""
    if os.environ.get(MULTIPROC_ENV):
        return
    folder = tempfile.mkdtemp(prefix="fleet-gateway-metrics-")
    env = {**os.environ, MULTIPROC_ENV: folder, OWNED_ENV: "1"}
    os.execve(sys.executable, [sys.executable, "-m", "gateway.main", *argv], env)


def share_of(settings: GatewaySettings, processes: int) -> GatewaySettings:
    """The settings one of `processes` children serves with: 1/N of every tenant's quota."""
    if processes == 1:
        return settings

    def part(quota: TenantQuota) -> TenantQuota:
        return TenantQuota(rps=quota.rps / processes if quota.rps is not None else None,
                           burst=math.ceil(quota.burst / processes) if quota.burst is not None else None,
                           max_waits=math.ceil(quota.max_waits / processes) if quota.max_waits is not None else None)

    return settings.model_copy(update={
        "tenant_rps": settings.tenant_rps / processes,
        "tenant_burst": math.ceil(settings.tenant_burst / processes),
        "tenant_max_waits": math.ceil(settings.tenant_max_waits / processes),
        "tenant_quotas": {tenant: part(quota) for tenant, quota in settings.tenant_quotas.items()},
    })


def run_processes(processes: int, serve_one: Callable[[], int]) -> int:
    """Fork `processes` children running `serve_one()` (its return is the child's exit code) and
    supervise them until they have all ended; the parent's exit code is the first child's."""
    children: list[int] = []
    for _ in range(processes):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = serve_one()
            finally:
                os._exit(code)
        children.append(pid)
    try:
        return _supervise(children)
    finally:
        _remove_owned_metrics_dir()


def _supervise(children: list[int]) -> int:
    alive = set(children)
    asked: list[int] = []  # the signal that asked the gateway to stop, once one did

    def pass_on(signum: int, _frame: FrameType | None) -> None:
        asked.append(signum)
        for pid in alive:
            _signal(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, pass_on)
    first_code: int | None = None
    while alive:
        pid, status = os.waitpid(-1, 0)
        if pid not in alive:
            continue
        alive.discard(pid)
        if first_code is None:
            first_code = _exit_code(os.waitstatus_to_exitcode(status), asked)
            for other in alive:  # one child down ends the gateway: no half-sized gateway keeps serving
                _signal(other, signal.SIGTERM)
    return first_code or 0


def _exit_code(code: int, asked: list[int]) -> int:
    """A child's exit as the parent reports it: ended by the signal that was passed on to it (uvicorn
    re-raises it after its graceful shutdown) is a clean stop; another signal is 128 + its number."""
    if code >= 0:
        return code
    return 0 if -code in asked else 128 - code


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _remove_owned_metrics_dir() -> None:
    folder = os.environ.get(MULTIPROC_ENV)
    if folder and os.environ.get(OWNED_ENV) == "1":
        shutil.rmtree(folder, ignore_errors=True)
