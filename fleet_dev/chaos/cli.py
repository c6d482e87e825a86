"""`scripts/chaos`: prove the fleet survives crashes, outages and garbage.

Brings up its OWN stack (under <home>/chaos, Kafka 127.0.0.1:19092, Redis 127.0.0.1:16379: never
the developer's), two workers and a gateway as real processes, and drives a steady load through
HTTP, the Python client and a Kafka pipeline while, one scenario at a time, it

    worker-kill    SIGKILLs a worker (and starts it again, as an orchestrator would)
    lanes-kill     the same, while the worker serves an interactive backlog with its bulk lane paused
    kafka-restart  restarts the Kafka broker
    redis-restart  restarts Redis
    redis-pause    pauses Redis for 45 s (SIGSTOP/SIGCONT; --quick: 10 s)
    flood          floods 10,000 malformed records (--quick: 2,000) between valid requests
    http           sends 2,000 malformed HTTP requests (--quick: 500) to the gateway
    batch          runs a batch job (10,000 lines; --quick 2,000) through a worker SIGKILL, a Kafka restart
                   and a worker SIGSTOPped past its session: every line once in the job's output

and prints a table per scenario: requests sent, accepted, answered, lost, duplicated, dead letters
(by code, below the table), HTTP 5xx (all, and those answered to malformed input), worker restarts
and unplanned exits, the gateway's recovery time and the time until throughput is back. Everything
it started is stopped and wiped at the end, on Ctrl-C and on errors too.

    scripts/chaos --quick                     # every scenario in under 3 minutes (CI)
    scripts/chaos --scenario redis-pause      # one scenario
    scripts/chaos --json chaos.json           # also write the results as JSON
    scripts/chaos --cluster                   # 3 Kafka nodes and a Redis Cluster: SIGKILL the busiest Kafka
                                              # leader, then a Redis master; restart each, check it rejoined

Exit status 1 when a scenario loses an accepted request, a worker exits on its own (on malformed
input or in an outage), the gateway answers malformed input with a 5xx, the gateway is not back
within 5 s of Redis returning, or a killed Kafka node does not rejoin. An API key for the gateway:
FLEET_CHAOS_API_KEY, or --api-key-command CMD (run against the chaos stack, its last output line is the key).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import os
import platform
import shutil
import signal
import socket
import sys
import traceback
from pathlib import Path

from common.settings import FleetSettings
from fleet_dev.arguments import script_parser
from fleet_dev.chaos import report as tables
from fleet_dev.chaos.cluster import CLUSTER_BROKERS, cluster_scenarios
from fleet_dev.chaos.malformed import new_seed
from fleet_dev.chaos.own_stack import DEFAULT_KAFKA_PORT, DEFAULT_REDIS_PORT, ChaosStack, Ports
from fleet_dev.chaos.processes import Fleet
from fleet_dev.chaos.report import ScenarioReport
from fleet_dev.chaos.runner import Options, fleet_under_test, run_scenario
from fleet.ports import free_port
from fleet_dev.chaos.scenarios import SCENARIOS, Scenario, Sizes
from fleet.exits import Exit

MODEL = "minilm-embed"
RESULTS_TOPIC = "fleet.results.chaos"


def echo(line: str) -> None:
    print(line, flush=True)


async def chaos(stack: ChaosStack, fleet: Fleet, options: Options, scenarios: list[Scenario],
                reports: list[ScenarioReport]) -> None:
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        async with fleet_under_test(stack, options, fleet, echo) as run:
            for scenario in scenarios:
                reports.append(await run_scenario(run, scenario, echo))
    finally:
        echo("[teardown] stopping the workers and the gateway")
        await fleet.stop()


def context(options: Options, stack: ChaosStack) -> dict[str, object]:
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": f"{socket.gethostname()}, {platform.machine()}, {os.cpu_count()} CPUs, "
                       f"Python {platform.python_version()}, {platform.platform(terse=True)}",
            "command": " ".join(["scripts/chaos", *sys.argv[1:]]), "seed": options.seed,
            "sizes": options.sizes.__dict__, "kafka": stack.bootstrap, "redis": stack.redis_url}


def print_results(reports: list[ScenarioReport]) -> list[str]:
    echo("\n" + tables.scenario_table(reports))
    if any(report.dead_letters for report in reports):
        echo("\n" + tables.dead_letter_table(reports))
    echo("")
    for report in reports:
        for line in tables.details(report):
            echo(line)
    every = [reason for report in reports for reason in tables.failures(report)]
    echo("\nverdict: " + ("PASS" if not every else "FAIL"))
    for reason in every:
        echo(f"  - {reason}")
    return every


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, Options, list[Scenario], Ports]:
    parser = script_parser("chaos", __doc__)
    parser.add_argument("--quick", action="store_true", help="smaller scenarios: all of them in under 3 minutes")
    parser.add_argument("--scenario", action="append", choices=[s.name for s in SCENARIOS], metavar="NAME",
                        help=f"run only this one (repeatable): {', '.join(s.name for s in SCENARIOS)}")
    parser.add_argument("--cluster", action="store_true", help=f"{CLUSTER_BROKERS} Kafka nodes and a Redis Cluster; "
                        "SIGKILL the Kafka node leading most request partitions, then the Redis master of the load "
                        "client's replies; restart each and check it rejoined")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    parser.add_argument("--exactly-once", default=DEFAULT_EXACTLY_ONCE, metavar="LANES",
                        help="the workers' FLEET_EXACTLY_ONCE (e.g. bulk: batch jobs and the load's HTTP and client "
                             "calls deliver in Kafka transactions, and the batch scenario checks a read_committed "
                             f"reader; off: at least once); default {DEFAULT_EXACTLY_ONCE}")
    parser.add_argument("--kafka-port", type=int, default=DEFAULT_KAFKA_PORT, help="first Kafka port of the chaos "
                        "stack (the controller takes the next one)")
    parser.add_argument("--redis-port", type=int, default=DEFAULT_REDIS_PORT, help="Redis port of the chaos stack")
    parser.add_argument("--seed", type=int, default=None, help="seed of the malformed inputs (default: random)")
    parser.add_argument("--api-key-command", metavar="CMD", help="shell command that prints a gateway API key "
                        "(runs with the chaos stack's FLEET_* environment)")
    args = parser.parse_args(argv)
    sizes = Sizes.quick() if args.quick else Sizes()
    options = Options(MODEL, RESULTS_TOPIC, sizes, args.seed if args.seed is not None else new_seed(),
                      api_key=os.environ.get("FLEET_CHAOS_API_KEY") or None, api_key_command=args.api_key_command)
    if args.cluster:
        scenarios = list(cluster_scenarios())
    else:
        scenarios = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    return args, options, scenarios, Ports(args.kafka_port, args.redis_port)


# On in the default run, and so in CI's, since the batch scenario with transactions earned a clean record
# (docs/how-to/batch-jobs.md has it); `--exactly-once off` runs the workers at least once.
DEFAULT_EXACTLY_ONCE = "bulk"


def main(argv: list[str] | None = None) -> int:
    args, options, scenarios, ports = parse(argv)
    # The harness's own clients retry through the outages it causes; their connection errors are expected.
    logging.basicConfig(level=logging.WARNING, format="    (load client) %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    cluster = bool(args.cluster)
    stack = ChaosStack(FleetSettings(), ports, brokers=CLUSTER_BROKERS if cluster else 1, redis_cluster=cluster,
                       echo=echo)
    logs = stack.home / "fleet-logs"
    shutil.rmtree(logs, ignore_errors=True)
    fleet = Fleet.planned(stack.env(), logs, model=options.model, gateway_port=free_port(),
                          exactly_once=args.exactly_once)
    reports: list[ScenarioReport] = []
    status = Exit.OK
    try:
        asyncio.run(chaos(stack, fleet, options, scenarios, reports))
    except (KeyboardInterrupt, asyncio.CancelledError):
        if os.environ.get("FLEET_CHAOS_TRACEBACK"):
            traceback.print_exc()
        echo("chaos: interrupted")
        status = Exit.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - whatever broke, the stack still comes down and the rows so far print
        if os.environ.get("FLEET_CHAOS_TRACEBACK"):
            traceback.print_exc()
        echo(f"chaos: stopped by {type(exc).__name__}: {exc}")
        status = Exit.UNAVAILABLE
    finally:
        for process in fleet.processes:
            process.stop()
        echo(f"[teardown] stopping and wiping the chaos stack under {stack.home}")
        stack.down()
    failed = print_results(reports) if reports else []
    if args.json is not None:
        tables.write_json(args.json, reports, context(options, stack))
        echo(f"results written to {args.json}")
    echo(f"fleet logs: {logs}")
    if status is not Exit.OK:
        return status
    return Exit.FAILED if failed else Exit.OK


if __name__ == "__main__":
    raise SystemExit(main())
