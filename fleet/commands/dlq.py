"""`fleet dlq list|show|replay|purge`: the dead letters in fleet.dlq, by model and code.

    fleet dlq list [--model M] [--code C] [--since T] [--until T] [--limit N]
                                                         newest first, with counts per code; T is a
                                                         duration ago (30m, 2h) or a UTC ISO time
    fleet dlq show REF                                   one letter, masked (REF is partition:offset)
    fleet dlq replay REF ... | --code C [--model M] [--again] --reason TEXT
    fleet dlq purge --yes --reason TEXT                  delete every dead letter in the DLQ now

A replay copies a letter's original bytes back to its request topic; it counts only once Kafka
acknowledged the copy. Replaying a code again resumes (what was copied is skipped); `--again`
copies replayed letters once more, and `list` shows how often each was replayed. The console's
Dead letters page calls the same functions (fleet/commands/dlq_store.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from common.redis_cluster import AnyRedis
from common.settings import FleetSettings
from fleet.arguments import command_parser, default_actor
from fleet.commands.dlq_store import (DeadLetterEntry, ReplayMark, counts_by_code, dlq_ends, letter_fields, purge,
                                      read_dead_letters, replay, replay_marks, time_bound)
from fleet.commands.models import format_ms
from fleet.commands.redis_access import with_redis
from fleet.exits import Exit
from fleet.tables import format_pairs, format_table
from schemas.wire import now_ms

LIST_HEADERS = ("ref", "time", "model", "code", "replayed", "reason")


def replayed_cell(mark: ReplayMark | None) -> str:
    if mark is None:
        return "-"
    return f"{mark.count}x" + (" (maybe once more: unacknowledged send)" if mark.pending else "")


def list_rows(entries: Sequence[DeadLetterEntry], marks: dict[str, ReplayMark]) -> list[tuple[str, ...]]:
    return [(e.ref, format_ms(e.letter.time_ms), e.model, e.letter.code, replayed_cell(marks.get(e.ref)),
             e.letter.reason[:80]) for e in entries]


async def _list(settings: FleetSettings, redis: AnyRedis, args: argparse.Namespace) -> int:
    now = now_ms()
    since_ms, until_ms = time_bound(args.since, now), time_bound(args.until, now)
    entries = await read_dead_letters(settings, model=args.model, code=args.code, limit=args.limit,
                                      since_ms=since_ms, until_ms=until_ms)
    if not entries:
        print("no dead letters" + (f" of model {args.model}" if args.model else "")
              + (f" with code {args.code}" if args.code else "")
              + (f" since {format_ms(since_ms)}" if since_ms is not None else "")
              + (f" before {format_ms(until_ms)}" if until_ms is not None else ""))
        return Exit.OK
    marks = await replay_marks(redis, [e.ref for e in entries])
    print(format_table(("model", "code", "count"), [(m, c, str(n)) for m, c, n in counts_by_code(entries)]))
    print()
    print(format_table(LIST_HEADERS, list_rows(entries, marks), right=()))
    return Exit.OK


async def _show(settings: FleetSettings, redis: AnyRedis, args: argparse.Namespace) -> int:
    found = await read_dead_letters(settings, refs=[args.ref], limit=1)
    if not found:
        print(f"no dead letter {args.ref} among the newest in the DLQ; `fleet dlq list` shows them", file=sys.stderr)
        return Exit.FAILED
    mark = (await replay_marks(redis, [args.ref])).get(args.ref)
    print(format_pairs([*letter_fields(found[0]), ("replayed", replayed_cell(mark))]))
    return Exit.OK


async def _replay(settings: FleetSettings, redis: AnyRedis, args: argparse.Namespace) -> int:
    if args.refs:
        entries = await read_dead_letters(settings, refs=args.refs, limit=len(args.refs))
        missing = set(args.refs) - {e.ref for e in entries}
        if missing:
            print(f"not found in the DLQ: {', '.join(sorted(missing))}", file=sys.stderr)
            return Exit.FAILED
    else:
        entries = await read_dead_letters(settings, model=args.model, code=args.code, limit=args.limit)
    report = await replay(settings, redis, entries, args.actor or default_actor(), args.reason, again=args.again)
    for ref, copy in report.replayed:
        print(f"{ref} replayed to {copy}")
    for ref, why in report.skipped:
        print(f"{ref} skipped: {why}", file=sys.stderr)
    print(report.summary())
    refused = [why for _, why in report.skipped if not why.startswith("already replayed")]
    return Exit.FAILED if refused else Exit.OK


async def _purge(settings: FleetSettings, redis: AnyRedis, args: argparse.Namespace) -> int:
    if not args.yes:
        print("purge deletes every dead letter now in the DLQ; add --yes to do it", file=sys.stderr)
        return Exit.FAILED
    firsts = await purge(settings, redis, await dlq_ends(settings), args.actor or default_actor(), args.reason)
    print("purged: the DLQ now starts at " + (", ".join(f"{p}:{o}" for p, o in sorted(firsts.items())) or "-"))
    return Exit.OK


def _parser() -> argparse.ArgumentParser:
    parser = command_parser("dlq", __doc__)
    actions = parser.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", help="newest dead letters and counts per code")
    show = actions.add_parser("show", help="one dead letter, masked")
    show.add_argument("ref", help="partition:offset, as `fleet dlq list` shows it")
    again = actions.add_parser("replay", help="copy dead letters back to their request topic")
    again.add_argument("refs", nargs="*", metavar="REF")
    again.add_argument("--again", action="store_true", help="copy letters that were replayed before once more")
    removing = actions.add_parser("purge", help="delete every dead letter now in the DLQ")
    removing.add_argument("--yes", action="store_true")
    for bound, meaning in (("--since", "from"), ("--until", "before")):
        listing.add_argument(bound, metavar="T", help=f"only letters dead-lettered {meaning} T: a duration ago "
                             "(30m, 2h, 1d) or an ISO time, UTC unless it names a zone")
    for sub in (listing, again):
        sub.add_argument("--model")
        sub.add_argument("--code")
        sub.add_argument("--limit", type=int, default=200)
    for sub in (again, removing):
        sub.add_argument("--reason", required=True, help="why, for the audit log")
        sub.add_argument("--actor", default=None, help="who to log; default $USER@host")
    return parser


HANDLERS = {"list": _list, "show": _show, "replay": _replay, "purge": _purge}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.action == "replay" and not args.refs and not args.code:
        _parser().error("replay needs REFs or --code")
    settings = FleetSettings()
    try:
        return asyncio.run(with_redis(settings, lambda redis: HANDLERS[args.action](settings, redis, args)))
    except ValueError as exc:
        print(f"fleet dlq {args.action}: {exc}", file=sys.stderr)
        return Exit.FAILED


if __name__ == "__main__":
    raise SystemExit(main())
