"""/v1/batches: batch jobs over HTTP (gateway/batch_jobs.py), each under its caller's tenant.

    POST /v1/batches?model=M&name=N       upload a JSONL file (streamed to Kafka as it arrives): the job
    POST /v1/batches/{job}/file           the same file again, after an interrupted upload: resumes it
    GET  /v1/batches                      the tenant's jobs
    GET  /v1/batches/{job}                status and request counts
    GET  /v1/batches/{job}/output         JSONL, one line per answered custom_id
    GET  /v1/batches/{job}/errors         JSONL: line, custom_id, reason
    POST /v1/batches/{job}/cancel         its queued requests are answered `cancelled`, not computed

Another tenant's job answers exactly as an unknown one (404).
"""

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request
from fastapi.responses import StreamingResponse

from gateway.auth import caller_of
from gateway.batch_jobs import BatchError, BatchJobs, JobStatus
from gateway.batch_results import error_line, output_line
from gateway.catalog import CatalogueUnread, NotServed, ServedModels

JobId = Annotated[str, Path(pattern=r"^[0-9a-f]{24}$", description="the job id: 24 hex chars")]
OPEN_TENANT = "anonymous"  # the jobs' tenant while authentication is off
JSONL = "application/jsonl"


def tenant_of(request: Request) -> str:
    return caller_of(request).tenant or OPEN_TENANT


Tenant = Annotated[str, Depends(tenant_of)]


async def lines_of(chunks: AsyncIterator[bytes], max_line_bytes: int, max_bytes: int) -> AsyncIterator[bytes]:
    """The body's lines as they arrive; a line longer than the limit is cut just past it (the job
    then refuses it by its length) and the rest of it dropped, never held whole. A body without a
    Content-Length is counted: past `max_bytes` the upload stops with 413."""
    pending = bytearray()
    skipping = False
    received = 0
    async for chunk in chunks:
        received += len(chunk)
        if received > max_bytes:
            raise BatchError(f"the file is over the limit of {max_bytes} bytes; the lines before it were sent",
                             status=413)
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            if not skipping:
                yield bytes(pending[:end])
            skipping = False
            del pending[:end + 1]
        if not skipping and len(pending) > max_line_bytes:
            yield bytes(pending[:max_line_bytes + 1])
            skipping = True
        if skipping:
            pending.clear()
    if pending and not skipping:
        yield bytes(pending)


def _refused(exc: BatchError) -> HTTPException:
    return HTTPException(exc.status, str(exc))


def batch_routes(jobs: BatchJobs, models: ServedModels) -> APIRouter:
    routes = APIRouter(prefix="/v1/batches", tags=["batches"])

    async def submitted(job: str, tenant: str, request: Request) -> dict[str, Any]:
        status = await jobs.submit(job, tenant, lines_of(request.stream(), jobs.settings.batch_max_line_bytes,
                                                             jobs.settings.batch_max_file_bytes))
        return status.as_json()

    @routes.post("", summary="Upload a JSONL file as a batch job on the model's bulk lane",
                 responses={404: {"description": "unknown model"}, 413: {"description": "over the file limits"},
                            429: {"description": "the tenant keeps the most jobs it may"}})
    async def create(request: Request, tenant: Tenant, model: Annotated[str, Query()],
                     name: Annotated[str, Query(max_length=200)] = "") -> Any:
        await _served(models, model)
        length = request.headers.get("content-length")
        try:
            job = await jobs.create(tenant, model, name=name, size_bytes=int(length) if length and length.isdigit()
                                    else None)
            return await submitted(job.id, tenant, request)
        except BatchError as exc:
            raise _refused(exc) from exc

    @routes.post("/{job}/file", summary="Send the job's file again after an interrupted upload: it resumes")
    async def resume(job: JobId, request: Request, tenant: Tenant) -> Any:
        try:
            return await submitted(job, tenant, request)
        except BatchError as exc:
            raise _refused(exc) from exc

    @routes.get("", summary="The caller's jobs, newest first")
    async def listing(tenant: Tenant) -> Any:
        return {"data": [status.as_json() for status in await jobs.list(tenant)]}

    @routes.get("/{job}", summary="A job's state and request counts")
    async def status(job: JobId, tenant: Tenant) -> Any:
        return (await _status(jobs, job, tenant)).as_json()

    @routes.get("/{job}/output", summary="JSONL: one line per answered custom_id")
    async def output(job: JobId, tenant: Tenant) -> StreamingResponse:
        await _status(jobs, job, tenant)

        return StreamingResponse((output_line(row) async for row in jobs.output(job, tenant)), media_type=JSONL)

    @routes.get("/{job}/errors", summary="JSONL: the lines that failed, with their reason")
    async def errors(job: JobId, tenant: Tenant) -> StreamingResponse:
        await _status(jobs, job, tenant)

        return StreamingResponse((error_line(row) async for row in jobs.errors(job, tenant)), media_type=JSONL)

    @routes.post("/{job}/cancel", summary="Stop the job: its queued requests are answered `cancelled`")
    async def cancel(job: JobId, tenant: Tenant) -> Any:
        try:
            return (await jobs.cancel(job, tenant)).as_json()
        except BatchError as exc:
            raise _refused(exc) from exc

    return routes


async def _served(models: ServedModels, model: str) -> None:
    try:
        await models.check(model)
    except NotServed as exc:
        raise HTTPException(404, str(exc)) from None
    except CatalogueUnread as exc:
        raise HTTPException(503, str(exc), headers={"Retry-After": "1"}) from None


async def _status(jobs: BatchJobs, job: str, tenant: str) -> JobStatus:
    try:
        return await jobs.status(job, tenant)
    except BatchError as exc:
        raise _refused(exc) from exc

