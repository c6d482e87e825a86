"""`fleet shadow`: run the candidate beside the live version, replay the past, report agreement.

    fleet shadow run minilm-embed [--candidate V] [--sample 0.2] [--burst]
    fleet shadow replay minilm-embed --since 1h [--candidate V] [--sample F]
    fleet shadow replay minilm-embed --start 2026-11-30T10:00 --end 2026-11-30T11:00
    fleet shadow replay minilm-embed --from-offset 1000 --to-offset 2000 --partition 0
    fleet shadow report minilm-embed [--candidate V] [--last 2000]

`run` is a shadow worker in the foreground (group <model>.shadow); SIGTERM or Ctrl-C lets it
finish the batch in hand, commit and leave. Without --candidate it follows the `candidate`
pointer and idles (consuming, committing) while there is none. `replay` compares a past
window without any consumer group. `report` reads the stats hash and the last N comparisons
per partition of fleet.shadow.<model>. Other settings: FLEET_* and FLEET_SHADOW_* env vars.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Sequence

from common.clients import redis_client
from common.logs import configure_logging
from common.settings import FleetSettings
from fleet.arguments import command_parser
from fleet.commands.shadow_report import format_report, summarise
from fleet.exits import Exit
from common.topics import newest_records
from schemas.names import comparisons_topic
from versions import ShadowSnapshot, read_pointers, read_shadow
from schemas.shadow import Comparison
from schemas.wire import WireError
from workers import ReplayWindow, ShadowReplay, ShadowSettings, parse_duration, parse_time, serve_shadow


def _settings(args: argparse.Namespace) -> ShadowSettings:
    overrides: dict[str, object] = {"model": args.model}
    if getattr(args, "candidate", None):
        overrides["shadow_candidate"] = args.candidate
    if getattr(args, "sample", None) is not None:
        overrides["shadow_sample"] = args.sample
    if getattr(args, "from_earliest", False):
        overrides["shadow_start"] = "earliest"
    return ShadowSettings(**overrides)  # type: ignore[arg-type]


async def _run(settings: ShadowSettings, burst: bool) -> int:
    await serve_shadow(settings, burst=burst)
    return Exit.OK


def _window(args: argparse.Namespace) -> ReplayWindow:
    partitions = tuple(args.partition) if args.partition else None
    if args.since:
        return ReplayWindow.since(args.since, partitions=partitions)
    if args.start or args.end:
        return ReplayWindow(start_ms=parse_time(args.start) if args.start else None,
                            end_ms=parse_time(args.end) if args.end else None, partitions=partitions)
    return ReplayWindow(from_offset=args.from_offset, to_offset=args.to_offset, partitions=partitions)


async def _replay(settings: ShadowSettings, window: ReplayWindow) -> int:
    async with ShadowReplay(settings, window) as replay:
        ranges = await replay.ranges()
        covered = ", ".join(f"p{tp.partition} [{first}, {end})" for tp, (first, end) in sorted(ranges.items()))
        print(f"replaying {replay.topic}: {covered or 'nothing in that window'}", flush=True)
        read = await replay.run()
        totals = replay.engine.totals
        candidate = replay.engine.candidate
    print(f"replayed {read} records: {totals.compared} compared, {totals.agreed} agreed with "
          f"{candidate or 'no candidate'}; skipped {dict(totals.skipped)}")
    return Exit.OK if totals.compared else Exit.UNAVAILABLE


async def recent_comparisons(settings: FleetSettings, model: str, last: int) -> list[Comparison]:
    """The last `last` comparisons of every partition of the model's comparisons topic, oldest first."""
    found: list[Comparison] = []
    for record in await newest_records(settings, comparisons_topic(model), last):
        try:
            found.append(Comparison.decode(record.value or b""))
        except WireError:
            continue
    return sorted(found, key=lambda c: c.time_ms)


async def build_report(settings: FleetSettings, model: str, candidate: str | None, last: int,
                       *, worst: int = 10, mask: Callable[[str], str] | None = None,
                       collect: list[Comparison] | None = None) -> tuple[str, ShadowSnapshot] | None:
    """The report text and the stats totals, or None when nothing about any candidate is known.
    `mask` rewrites each input excerpt first (the console shows them redacted); `collect`, when
    given, receives the candidate's recent comparisons (masked), oldest first, for plots."""
    redis = redis_client(settings)
    try:
        pointers = await read_pointers(redis, model)
        comparisons = await recent_comparisons(settings, model, last)
        candidate = candidate or pointers.candidate or (comparisons[-1].shadow_version if comparisons else None)
        if candidate is None:
            return None
        totals = await read_shadow(redis, model, candidate)
    finally:
        await redis.aclose()
    mine = [c if mask is None else c.model_copy(update={"input": mask(c.input)})
            for c in comparisons if c.shadow_version == candidate]
    if collect is not None:
        collect.extend(mine)
    stable = pointers.stable or (mine[-1].live_version if mine else None)
    return format_report(model, candidate, stable, totals, summarise(mine, worst=worst), last=last), totals


def _parser() -> argparse.ArgumentParser:
    parser = command_parser("shadow", __doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a shadow worker in the foreground")
    replay = commands.add_parser("replay", help="compare a past time window or offset range")
    report = commands.add_parser("report", help="agreement, latency deltas and the worst disagreements")
    for sub in (run, replay, report):
        sub.add_argument("model")
        sub.add_argument("--candidate", metavar="VERSION", help="version to compare (default: the candidate pointer)")
    for sub in (run, replay):
        sub.add_argument("--sample", type=float, metavar="F", help="fraction of requests compared (0-1)")
    run.add_argument("--burst", action="store_true", help="return once the backlog is drained")
    run.add_argument("--from-earliest", action="store_true",
                     help="a new shadow group starts at the oldest retained request instead of now")
    replay.add_argument("--since", metavar="DURATION", help="the last DURATION: 30m, 1h, 1h30m, 2d")
    replay.add_argument("--start", metavar="ISO_TIME", help="window start (UTC unless a zone is given)")
    replay.add_argument("--end", metavar="ISO_TIME", help="window end, exclusive (default now)")
    replay.add_argument("--from-offset", type=int, metavar="N", help="first offset (inclusive)")
    replay.add_argument("--to-offset", type=int, metavar="M", help="last offset (exclusive)")
    replay.add_argument("--partition", type=int, action="append", metavar="P", help="only this partition (repeatable)")
    report.add_argument("--last", type=int, default=2000, metavar="N", help="recent comparisons per partition")
    report.add_argument("--worst", type=int, default=10, metavar="K", help="how many worst cases to list")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "replay":
        chosen = [bool(args.since), bool(args.start or args.end), args.from_offset is not None or args.to_offset is not None]
        if sum(chosen) != 1:
            parser.error("replay needs exactly one of --since, --start/--end, --from-offset/--to-offset")
        try:
            if args.since:
                parse_duration(args.since)
            window = _window(args)
        except ValueError as exc:
            parser.error(str(exc))
    if getattr(args, "sample", None) is not None and not 0 <= args.sample <= 1:
        parser.error("--sample must be between 0 and 1")
    settings = _settings(args)
    configure_logging(json_lines=settings.log_json, level=settings.log_level)
    if args.command == "run":
        return asyncio.run(_run(settings, args.burst))
    if args.command == "replay":
        return asyncio.run(_replay(settings, window))
    built = asyncio.run(build_report(settings, args.model, args.candidate, args.last, worst=args.worst))
    if built is None:
        print(f"no shadow data for {args.model}: no --candidate given, no candidate pointer, no comparisons")
        return Exit.UNAVAILABLE
    text, totals = built
    print(text)
    return Exit.OK if totals.compared else Exit.UNAVAILABLE


if __name__ == "__main__":
    raise SystemExit(main())
