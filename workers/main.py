"""`fleet-worker` / `python -m workers.main`: run one worker process until SIGTERM."""

import argparse
import asyncio
import logging

from common.credentials import CredentialsRejected
from common.heap import settle_heap
from common.logs import configure_logging
from common.process import ExitCode, arm_watchdog, wait_for_dependencies
from common.startup import StartupTimedOut
from models.backends.flavour import install_refusal
from workers.health.endpoints import health_endpoints
from workers.health.probes import WorkerProbes
from workers.worker import Worker
from workers.settings import Role, WorkerSettings
from workers.shadow.settings import ShadowSettings
from workers.shadow.worker import serve_shadow
from workers.fallback import PrimaryTakeover

log = logging.getLogger(__name__)


async def serve(settings: WorkerSettings, *, burst: bool) -> int:
    await wait_for_dependencies(settings, "worker")
    worker = Worker(settings)
    probes = WorkerProbes(worker)

    def stop() -> None:
        arm_watchdog(settings.shutdown_grace_s)  # an outage may hold delivery: never past the grace period
        worker.request_stop()

    # The health port opens before the model loads: /livez answers while it loads, /readyz says "starting".
    async with health_endpoints(probes, worker.metrics.registry, host=settings.metrics_host,
                                port=settings.metrics_port), worker:
        probes.stop_on_signals(stop)
        if worker.unavailable is not None:
            print(f"worker {worker.worker_id} failed at start: {worker.unavailable}", flush=True)
            return await probes.watch(worker.run())
        print(f"worker {worker.worker_id} ready: model {settings.model} version {worker.backend.manifest.id}", flush=True)
        settle_heap()
        if settings.role is not Role.fallback or burst:
            return await probes.watch(worker.run(burst=burst))
        takeover = asyncio.create_task(PrimaryTakeover(worker, grace_s=settings.takeover_after_s).watch())
        try:
            return await probes.watch(worker.run())
        finally:
            takeover.cancel()
            await asyncio.gather(takeover, return_exceptions=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve one model from its Kafka request topic. Settings: FLEET_* env vars.")
    parser.add_argument("--burst", action="store_true", help="drain the backlog, then exit")
    args = parser.parse_args(argv)
    settings = WorkerSettings()
    configure_logging(json_lines=settings.log_json, level=settings.log_level)
    shadow = ShadowSettings() if settings.role is Role.shadow else None
    member = shadow or settings
    # Before Kafka and Redis: an install that cannot serve the device never will, so no waiting, no
    # `failed` heartbeat, one line and an exit status an orchestrator shows (CrashLoopBackOff).
    refusal = install_refusal(member.device, member.backend, semantic_cache=shadow is None and settings.semantic_cache)
    if refusal is not None:
        log.error("worker cannot start: %s", refusal)
        raise SystemExit(ExitCode.WRONG_INSTALL)
    try:
        if shadow is not None:
            processed = asyncio.run(serve_shadow(shadow, burst=args.burst))
        else:
            processed = asyncio.run(serve(settings, burst=args.burst))
    except CredentialsRejected as exc:
        log.error("worker cannot start: %s", exc)
        raise SystemExit(ExitCode.DEPENDENCIES) from None
    except StartupTimedOut as exc:  # one line, no traceback: an orchestrator's log shows why
        log.error("%s", exc)
        raise SystemExit(ExitCode.DEPENDENCIES) from None
    log.info("worker stopped after %d records", processed)


if __name__ == "__main__":
    main()
