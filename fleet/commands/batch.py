"""`fleet batch`: batch jobs for pipelines, a JSONL file in, one answer per custom_id out.

    fleet batch submit night.jsonl --model minilm-embed   # prints the job id; run again to resume
    fleet batch status JOB [--watch]                      # done / failed / total, rate, ETA
    fleet batch results JOB -o out.jsonl [--errors errors.jsonl]
    fleet batch cancel JOB                                # its queued requests are not computed
    fleet batch list

A line: {"custom_id": "q-1", "inputs": {"text": "..."}, "params": {}}. Lines go to the model's bulk
lane; results to the job's own topic (`fleet.results.batch.<job>`). A submit that stopped half way
(Ctrl-C, a crash, a broker restart) resumes where it stopped when the same command is run again
with the same file: no line is sent twice. Jobs belong to a tenant (--tenant, default `cli`); the
gateway's /v1/batches shows each API key's tenant its own.
"""

import argparse
import asyncio
import hashlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from fleet.arguments import command_parser
from fleet.exits import Exit
from fleet.tables import format_table
from gateway import BatchError, BatchJobs, BatchSettings, FleetClient, JobState, JobStatus, error_line, output_line
from schemas.names import batch_file_key

BAR_WIDTH = 30


def progress_line(status: JobStatus) -> str:
    """`[#####.....]  52%  done 5,210  failed 12  of 10,000  410/s  ETA 0:00:12  running`"""
    total = status.total
    share = status.answered / total if total else 0.0
    filled = int(share * BAR_WIDTH)
    eta = status.eta_s()
    eta_text = "-" if eta is None else time.strftime("%H:%M:%S", time.gmtime(eta))
    of = f"{total:,}" if total is not None else f"{status.read:,}+ (still reading the file)"
    return (f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share:4.0%}  done {status.done:,}  "
            f"failed {status.failed + status.refused:,}  of {of}  {status.rate_per_s():,.0f}/s  ETA {eta_text}  "
            f"{status.state.value}")


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def lines_of(path: Path) -> Iterator[bytes]:
    with path.open("rb") as file:
        yield from file


async def submit(jobs: BatchJobs, tenant: str, path: Path, model: str) -> int:
    size = path.stat().st_size
    digest = file_digest(path)
    known = batch_file_key(tenant, model, digest)
    job = await jobs.redis.get(known)
    if job is None:
        status = await jobs.create(tenant, model, name=path.name, size_bytes=size)
        await jobs.redis.set(known, status.id, ex=jobs.settings.batch_retention_s)
        print(f"job {status.id}: sending {path} ({size:,} bytes) to {model}'s bulk lane", file=sys.stderr)
    else:
        status = await jobs.status(job.decode(), tenant, collect=False)
        if status.state is not JobState.submitting:
            print(f"job {status.id} has this file already ({status.state.value}); "
                  f"`fleet batch status {status.id}`", file=sys.stderr)
            print(status.id)
            return Exit.OK
        print(f"job {status.id}: resuming after {status.read:,} lines", file=sys.stderr)
    status = await jobs.submit(status.id, tenant, lines_of(path))
    print(f"job {status.id}: {status.total:,} requests read, {status.refused:,} refused "
          f"(`fleet batch results {status.id} --errors FILE` lists them)", file=sys.stderr)
    print(status.id)
    return Exit.OK


async def show_status(jobs: BatchJobs, tenant: str, job: str, watch: bool, as_json: bool) -> int:
    while True:
        status = await jobs.status(job, tenant)
        finished = status.state in (JobState.completed, JobState.cancelled) and status.answered >= (status.total or 0)
        if not watch or finished:
            if watch:
                print(file=sys.stderr)
            print(json.dumps(status.as_json()) if as_json else progress_line(status))
            return Exit.OK
        print("\r" + progress_line(status), end="", file=sys.stderr, flush=True)
        await asyncio.sleep(1.0)


async def write_results(jobs: BatchJobs, tenant: str, job: str, output: Path, errors: Path | None) -> int:
    status = await jobs.status(job, tenant)
    written = 0
    with output.open("w", encoding="utf-8") as out:
        async for row in jobs.output(job, tenant):
            out.write(output_line(row).decode())
            written += 1
    failed = 0
    if errors is not None:
        with errors.open("w", encoding="utf-8") as out:
            async for error in jobs.errors(job, tenant):
                out.write(error_line(error).decode())
                failed += 1
    print(f"{written:,} results to {output}" + (f", {failed:,} errors to {errors}" if errors else "")
          + f"; job {status.state.value}, {status.answered:,} of {status.total if status.total is not None else '?'} answered")
    return Exit.OK


async def list_jobs(jobs: BatchJobs, tenant: str) -> int:
    found = await jobs.list(tenant)
    if not found:
        print(f"no batch jobs of tenant {tenant}")
        return Exit.OK
    rows = [(s.id, s.model, s.state.value, s.name, f"{s.done:,}", f"{s.failed + s.refused:,}",
             "-" if s.total is None else f"{s.total:,}") for s in found]
    print(format_table(("job", "model", "state", "file", "done", "failed", "total"), rows))
    return Exit.OK


async def run(args: argparse.Namespace) -> int:
    async with FleetClient() as client:
        jobs = BatchJobs(client, BatchSettings())
        try:
            if args.action == "submit":
                return await submit(jobs, args.tenant, args.file, args.model)
            if args.action == "status":
                return await show_status(jobs, args.tenant, args.job, args.watch, args.json)
            if args.action == "results":
                return await write_results(jobs, args.tenant, args.job, args.output, args.errors)
            if args.action == "cancel":
                status = await jobs.cancel(args.job, args.tenant)
                print(f"job {status.id} {status.state.value}: {status.answered:,} answered; "
                      "workers answer the rest `cancelled` without computing them")
                return Exit.OK
            return await list_jobs(jobs, args.tenant)
        except BatchError as exc:
            print(f"fleet batch {args.action}: {exc}", file=sys.stderr)
            return Exit.FAILED


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = command_parser("batch", __doc__)
    parser.add_argument("--tenant", default="cli", help="the tenant the jobs belong to (default: cli)")
    actions = parser.add_subparsers(dest="action", required=True)
    sent = actions.add_parser("submit", help="send a JSONL file as a job (run again to resume)")
    sent.add_argument("file", type=Path)
    sent.add_argument("--model", required=True)
    watched = actions.add_parser("status", help="progress of a job")
    watched.add_argument("job")
    watched.add_argument("--watch", action="store_true", help="redraw every second until the job ends")
    watched.add_argument("--json", action="store_true", help="the status as JSON, as GET /v1/batches/JOB answers")
    results = actions.add_parser("results", help="write the answers (one line per custom_id) and the errors")
    results.add_argument("job")
    results.add_argument("-o", "--output", type=Path, required=True)
    results.add_argument("--errors", type=Path, help="write the failed lines here: line, custom_id, reason")
    cancelled = actions.add_parser("cancel", help="stop a job: its queued requests are not computed")
    cancelled.add_argument("job")
    actions.add_parser("list", help="the tenant's jobs")
    args = parser.parse_args(argv)
    if args.action == "submit" and not args.file.is_file():
        parser.error(f"{args.file}: no such file")
    return args


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(run(parse(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
