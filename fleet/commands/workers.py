"""`fleet workers`, `fleet drain`, `fleet undrain`: see the live workers and take one out of service.

    fleet workers [--model M] [--json]    every worker with a fresh heartbeat
    fleet drain <worker>                  the worker stops taking work (until undrained)
    fleet undrain <worker>                it takes work again

Workers appear through their Redis heartbeats, which expire on their own: a worker missing
from the table has stopped beating (dead, or stopped cleanly).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence
from dataclasses import asdict

from redis.asyncio import Redis

from common.settings import FleetSettings
from fleet.commands.redis_access import with_redis
from common.heartbeats import WorkerInfo, drain, is_drained, list_workers, undrain

HEADERS = ("worker", "model", "role", "device", "state", "lag", "version", "heartbeat")
RIGHT_ALIGNED = frozenset({"lag", "heartbeat"})
EXIT_OK = 0


def state_cell(info: WorkerInfo) -> str:
    text = info.state + (f" ({info.reason})" if info.reason else "")
    return text + (" [drained]" if info.drained else "")


def table_rows(workers: Sequence[WorkerInfo]) -> list[tuple[str, ...]]:
    return [(w.worker, w.model, w.role, w.device, state_cell(w), str(w.lag), w.version, f"{w.age_s:.1f}s ago")
            for w in workers]


def format_table(workers: Sequence[WorkerInfo]) -> str:
    """Columns padded to their widest cell; numbers right-aligned."""
    rows = table_rows(workers)
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(HEADERS)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.rjust(width) if header in RIGHT_ALIGNED else cell.ljust(width)
                         for header, cell, width in zip(HEADERS, cells, widths, strict=True)).rstrip()

    header = line(HEADERS)
    return "\n".join([header, "-" * len(header), *(line(r) for r in rows)])


def as_json(workers: Sequence[WorkerInfo]) -> str:
    return json.dumps([{**asdict(w), "age_s": round(w.age_s, 3)} for w in workers], indent=2)


def main(argv: list[str] | None = None) -> int:
    """`fleet workers`: the live workers as a table or JSON."""
    parser = argparse.ArgumentParser(prog="fleet workers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="only this model's workers")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

    async def show(redis: Redis) -> int:
        workers = await list_workers(redis, args.model)
        if args.json:
            print(as_json(workers))
        elif not workers:
            print("no live workers" + (f" of {args.model}" if args.model else ""))
        else:
            print(format_table(workers))
        return EXIT_OK

    return asyncio.run(with_redis(FleetSettings(), show))


def drain_main(argv: list[str] | None = None) -> int:
    """`fleet drain <worker>`."""
    parser = argparse.ArgumentParser(prog="fleet drain", description="Take a worker out of service until undrained.")
    parser.add_argument("worker", help="worker id, as `fleet workers` shows it")
    args = parser.parse_args(argv)

    async def switch(redis: Redis) -> int:
        already = await is_drained(redis, args.worker)
        await drain(redis, args.worker)
        live = any(w.worker == args.worker for w in await list_workers(redis))
        print(f"{args.worker} {'was already' if already else 'is now'} drained"
              + ("" if live else " (no live worker with this id; the switch applies when it starts)"))
        return EXIT_OK

    return asyncio.run(with_redis(FleetSettings(), switch))


def undrain_main(argv: list[str] | None = None) -> int:
    """`fleet undrain <worker>`."""
    parser = argparse.ArgumentParser(prog="fleet undrain", description="Let a drained worker take work again.")
    parser.add_argument("worker", help="worker id, as `fleet workers` shows it")
    args = parser.parse_args(argv)

    async def switch(redis: Redis) -> int:
        print(f"{args.worker} " + ("takes work again" if await undrain(redis, args.worker) else "was not drained"))
        return EXIT_OK

    return asyncio.run(with_redis(FleetSettings(), switch))


if __name__ == "__main__":
    raise SystemExit(main())
