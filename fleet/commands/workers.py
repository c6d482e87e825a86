"""`fleet workers`, `fleet drain`, `fleet undrain`: see the live workers and take one out of service.

    fleet workers [--model M] [--json]    every worker with a fresh heartbeat
    fleet drain <worker>                  the worker stops taking work (until undrained)
    fleet undrain <worker>                it takes work again

Workers appear through their Redis heartbeats, which expire on their own: a worker missing
from the table has stopped beating (dead, or stopped cleanly).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict


from common.redis_cluster import AnyRedis
from common.settings import FleetSettings
from common.heartbeats import WorkerInfo, drain, is_drained, list_workers, undrain
from fleet.arguments import command_parser
from fleet.commands.redis_access import with_redis
from fleet.exits import Exit
from fleet.tables import format_table

HEADERS = ("worker", "model", "role", "device", "state", "lag", "version", "heartbeat")
RIGHT_ALIGNED = ("lag", "heartbeat")


def state_cell(info: WorkerInfo) -> str:
    text = info.state + (f" ({info.reason})" if info.reason else "")
    return text + (" [drained]" if info.drained else "")


def table_rows(workers: Sequence[WorkerInfo]) -> list[tuple[str, ...]]:
    return [(w.worker, w.model, w.role, w.device, state_cell(w), str(w.lag), w.version, f"{w.age_s:.1f}s ago")
            for w in workers]


def workers_table(workers: Sequence[WorkerInfo]) -> str:
    return format_table(HEADERS, table_rows(workers), right=RIGHT_ALIGNED)


def as_json(workers: Sequence[WorkerInfo]) -> str:
    return json.dumps([{**asdict(w), "age_s": round(w.age_s, 3)} for w in workers], indent=2)


def main(argv: list[str] | None = None) -> int:
    """`fleet workers`: the live workers as a table or JSON."""
    parser = command_parser("workers", __doc__)
    parser.add_argument("--model", help="only this model's workers")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    async def show(redis: AnyRedis) -> int:
        workers = await list_workers(redis, args.model)
        if args.json:
            print(as_json(workers))
        elif not workers:
            print("no live workers" + (f" of {args.model}" if args.model else ""))
        else:
            print(workers_table(workers))
        return Exit.OK

    return asyncio.run(with_redis(FleetSettings(), show))


def _on_one_worker(command: str, description: str, argv: list[str] | None,
                   switch: Callable[[AnyRedis, str], Awaitable[str]]) -> int:
    """`fleet <command> <worker>`: runs `switch` against Redis and prints what it says happened."""
    parser = command_parser(command, description)
    parser.add_argument("worker", help="worker id, as `fleet workers` shows it")
    worker = parser.parse_args(argv).worker

    async def run(redis: AnyRedis) -> int:
        print(f"{worker} {await switch(redis, worker)}")
        return Exit.OK

    return asyncio.run(with_redis(FleetSettings(), run))


async def drain_worker(redis: AnyRedis, worker: str) -> str:
    """Drain `worker` (`fleet drain` and the console's button); says what happened."""
    already = await is_drained(redis, worker)
    await drain(redis, worker)
    live = any(w.worker == worker for w in await list_workers(redis))
    return (f"{'was already' if already else 'is now'} drained"
            + ("" if live else " (no live worker with this id; the switch applies when it starts)"))


async def undrain_worker(redis: AnyRedis, worker: str) -> str:
    """Undrain `worker` (`fleet undrain` and the console's button); says what happened."""
    return "takes work again" if await undrain(redis, worker) else "was not drained"


def drain_main(argv: list[str] | None = None) -> int:
    """`fleet drain <worker>`."""
    return _on_one_worker("drain", "Take a worker out of service until undrained.", argv, drain_worker)


def undrain_main(argv: list[str] | None = None) -> int:
    """`fleet undrain <worker>`."""
    return _on_one_worker("undrain", "Let a drained worker take work again.", argv, undrain_worker)


if __name__ == "__main__":
    raise SystemExit(main())
