"""`fleet-gateway` / `python -m gateway.main`: serve the HTTP gateway with uvicorn.

Start-up fails fast and loud: the port is bound before anything else (a taken port ends the
process at once), Kafka and Redis must answer within `startup_timeout_s`, and either failure
exits non-zero with one clear line. Once serving, SIGTERM ends the process within
`shutdown_grace_s`, whatever Kafka and Redis do meanwhile.
"""

import argparse
import asyncio
import logging
import socket
import sys
import time
from collections.abc import Coroutine
from types import FrameType
from typing import Any

import uvicorn

from common.auth_keys import KeysFileError
from common.credentials import CredentialsRejected
from common.heap import settle_heap
from common.logs import LogThrottle, configure_logging
from common.process import ExitCode, arm_watchdog
from common.startup import StartupTimedOut, waited
from gateway.app import create_app, gateway_client
from gateway.client import FleetClient
from gateway.http_protocol import guarded_protocol
from gateway.processes import ensure_multiprocess_metrics, run_processes, share_of
from gateway.settings import GatewaySettings

log = logging.getLogger("gateway")

EXIT_CANNOT_BIND = ExitCode.CANNOT_BIND
EXIT_DEPENDENCIES = ExitCode.DEPENDENCIES
EXIT_BAD_KEYS_FILE = 5


def bind(host: str, port: int) -> socket.socket:
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError:
        listener.close()
        raise
    listener.listen(2048)
    listener.set_inheritable(True)
    return listener


async def start_within(client: FleetClient, settings: GatewaySettings) -> None:
    """Start the client (Kafka: its producer) and see Redis answer, waiting out an outage of either
    for up to `startup_timeout_s` in all (one log line every few seconds naming it), then
    StartupTimedOut. Refused credentials are raised at once: waiting does not heal them."""
    timeout_s = settings.startup_timeout_s
    deadline = time.monotonic() + timeout_s
    await waited("gateway", f"Kafka at {settings.kafka_bootstrap}", client.start, timeout_s, deadline=deadline)
    try:
        await waited("gateway", f"Redis at {settings.redis_url_redacted}", client.redis.ping, timeout_s,
                     deadline=deadline)
    except BaseException:
        await client.stop()
        raise


class GracefulServer(uvicorn.Server):
    """uvicorn's server, plus a watchdog: once told to exit, the process is gone within the grace period."""

    def __init__(self, config: uvicorn.Config, grace_s: float) -> None:
        super().__init__(config)
        self._grace_s = grace_s

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if not self.should_exit:
            arm_watchdog(self._grace_s)
        super().handle_exit(sig, frame)


async def serve(settings: GatewaySettings, listener: socket.socket) -> int:
    client = gateway_client(settings)
    try:
        app = create_app(settings, client=client)
    except (OSError, KeysFileError) as exc:
        log.error("gateway cannot start: API keys file unusable: %s", exc)
        return EXIT_BAD_KEYS_FILE
    try:
        await start_within(client, settings)
    except CredentialsRejected as exc:
        log.error("gateway cannot start: %s", exc)
        return EXIT_DEPENDENCIES
    except StartupTimedOut as exc:
        log.error("%s", exc)
        return EXIT_DEPENDENCIES
    settle_heap()
    # uvicorn drains connections for part of the grace period; the app's shutdown gets the rest.
    # No access log: a line per request cost more than the fast path's own work; /metrics counts them.
    # The port is open to the world before any key is checked: headers and time are bounded (gateway/http_protocol.py).
    protocol = guarded_protocol(max_header_bytes=settings.max_header_bytes,
                                read_timeout_s=settings.request_read_timeout_s, throttle=LogThrottle(log))
    config = uvicorn.Config(app, http=protocol, timeout_keep_alive=settings.idle_timeout_s, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=max(int(settings.shutdown_grace_s / 2), 1))
    log.info("gateway listening on %s:%d", settings.host, settings.port)
    await GracefulServer(config, settings.shutdown_grace_s).serve(sockets=[listener])
    return 0


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    settings = GatewaySettings()
    workers = args.workers if args.workers is not None else settings.gateway_workers
    if workers > 1:
        ensure_multiprocess_metrics(sys.argv[1:] if argv is None else argv)
    configure_logging(json_lines=settings.log_json, level=settings.log_level)
    try:
        listener = bind(settings.host, settings.port)
    except OSError as exc:
        log.error("gateway cannot listen on %s:%d: %s", settings.host, settings.port, exc)
        sys.exit(EXIT_CANNOT_BIND)
    if workers == 1:
        sys.exit(run_loop(serve(settings, listener)))
    log.info("gateway starting %d processes on %s:%d", workers, settings.host, settings.port)
    share = share_of(settings, workers)
    sys.exit(run_processes(workers, lambda: run_loop(serve(share, listener))))


def run_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run the gateway on uvloop where it is installed (uvicorn[standard] brings it on Linux): its
    transports and timers are C, where asyncio's selector loop spent a fifth of the gateway's CPU
    writing to sockets. Elsewhere, the standard loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)



def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fleet-gateway", description="Serve the HTTP gateway. Settings: FLEET_* "
                                     "env vars (see gateway/settings.py).")
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="processes serving the port, each with its own reply stream (default: "
                        "FLEET_GATEWAY_WORKERS, else 1)")
    args = parser.parse_args(argv)
    if args.workers is not None and not 1 <= args.workers <= 64:
        parser.error("--workers must be between 1 and 64")
    return args


if __name__ == "__main__":
    main()
