"""`fleet debug on|off|status|tail`: switch per-request debug traces on for a bounded time.

    fleet debug on minilm-embed --minutes 5          # every request of the model, for 5 minutes
    fleet debug on minilm-embed --tenant acme        # one tenant only
    fleet debug tail                                 # follow fleet.trace live
The switch is a Redis key with a TTL: it turns itself off when its time is up.
"""

import argparse
import asyncio
import json


from common.redis_cluster import AnyRedis
from common.clients import new_consumer
from common.settings import FleetSettings
from fleet.arguments import command_parser
from fleet.commands.redis_access import with_redis
from fleet.exits import Exit
from schemas.names import TRACE_TOPIC, debug_key
from schemas.wire import TraceRecord, WireError, now_ms


async def switch_on(redis: AnyRedis, model: str, seconds: float, tenant: str | None = None) -> int:
    """Trace `model` (or one tenant) for `seconds`; returns when it ends, epoch ms."""
    until = now_ms() + int(seconds * 1000)
    await redis.set(debug_key(model, tenant), str(until), px=max(int(seconds * 1000), 1))
    return until


async def switch_off(redis: AnyRedis, model: str, tenant: str | None = None) -> bool:
    return bool(await redis.delete(debug_key(model, tenant)))


async def remaining_s(redis: AnyRedis, model: str, tenant: str | None = None) -> float | None:
    ttl_ms = await redis.pttl(debug_key(model, tenant))
    return ttl_ms / 1000 if ttl_ms > 0 else None


def render(trace: TraceRecord) -> str:
    stages = " ".join(f"{k.removesuffix('_ms')}={v:.1f}" for k, v in trace.timings.items())
    return (f"{trace.id} {trace.model} {trace.version} {trace.status.value} batch={trace.batch_size} "
            f"tenant={trace.tenant or '-'} [{stages}] input={json.dumps(trace.input, ensure_ascii=False)} "
            f"({trace.reason})")


async def tail(settings: FleetSettings, model: str | None, count: int | None, from_beginning: bool) -> None:
    consumer = new_consumer(settings, TRACE_TOPIC, enable_auto_commit=False,
                            auto_offset_reset="earliest" if from_beginning else "latest")
    await consumer.start()
    shown = 0
    try:
        async for record in consumer:
            try:
                trace = TraceRecord.decode(record.value or b"")
            except WireError as exc:
                print(f"(offset {record.offset}: not a trace record: {exc})", flush=True)
                continue
            if model is None or trace.model == model:
                print(render(trace), flush=True)
                shown += 1
                if count is not None and shown >= count:
                    return
    finally:
        await consumer.stop()


async def switch(redis: AnyRedis, args: argparse.Namespace) -> int:
    """`on`, `off` or `status` of the model's (or tenant's) debug switch."""
    if args.action == "on":
        seconds = args.seconds if args.seconds is not None else args.minutes * 60
        await switch_on(redis, args.model, seconds, args.tenant)
        who = f"tenant {args.tenant} of {args.model}" if args.tenant else args.model
        print(f"debug traces on for {who} for {seconds:g} s; follow them with `fleet debug tail`")
    elif args.action == "off":
        print("switched off" if await switch_off(redis, args.model, args.tenant) else "was not on")
    else:
        left = await remaining_s(redis, args.model, args.tenant)
        print(f"on, {left:.0f} s left" if left is not None else "off")
    return Exit.OK


def main(argv: list[str] | None = None) -> int:
    parser = command_parser("debug", __doc__)
    actions = parser.add_subparsers(dest="action", required=True)
    for name, text in (("on", "trace the model's requests for a while"), ("off", "stop tracing now"),
                       ("status", "is tracing on, and for how much longer")):
        action = actions.add_parser(name, help=text)
        action.add_argument("model")
        action.add_argument("--tenant")
        if name == "on":
            action.add_argument("--minutes", type=float, default=5.0)
            action.add_argument("--seconds", type=float, help="overrides --minutes")
    follow = actions.add_parser("tail", help="print traces as they arrive")
    follow.add_argument("--model")
    follow.add_argument("--count", type=int, help="stop after this many")
    follow.add_argument("--from-beginning", action="store_true")
    args = parser.parse_args(argv)
    settings = FleetSettings()
    if args.action == "tail":
        asyncio.run(tail(settings, args.model, args.count, args.from_beginning))
        return Exit.OK
    return asyncio.run(with_redis(settings, lambda redis: switch(redis, args)))


if __name__ == "__main__":
    raise SystemExit(main())
