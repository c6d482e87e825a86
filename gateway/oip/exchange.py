"""All the rows of one call published together and awaited together: one fleet request per row,
each expected by the reply waiter before anything is produced, so no reply arrives unseen; the
call ends when every row has its result, or at its deadline with the ids of the rows that have
none yet (their results can still be read with GET /v1/results/{id}).

The replies are awaited as the waiter's futures, under one timer, without a task per row; a
call of one row (the usual one) takes exactly the /v1 route's steps."""

import asyncio

from gateway.client import FleetClient, InferenceTimeout, RequestOptions
from gateway.errors import FleetUnavailable
from gateway.oip.errors import Failure, OipError
from gateway.oip.tasks import Row
from schemas.wire import ReplyTo, Request, Result, now_ms


def build_rows(fleet: FleetClient, model: str, texts: list[Row], timeout_s: float, options: RequestOptions
               ) -> list[Request]:
    reply = ReplyTo(redis=fleet.waiter.waiter_id)
    return [fleet.build_request(model, text, timeout=timeout_s, reply=reply, options=options) for text in texts]


async def exchange_rows(fleet: FleetClient, requests: list[Request]) -> list[Result]:
    """The results of `requests`, in their order. Raises FleetUnavailable, Overloaded (the waiter's
    bound) or OipError(deadline) naming every id without a result."""
    waiter = fleet.waiter
    try:
        replies = [waiter.expect(request.id) for request in requests]
        await _publish_all(fleet, requests)
        left_s = max(requests[0].deadline_ms - now_ms(), 0) / 1000
        if len(replies) == 1:
            try:
                outcomes: list[Result | BaseException | None] = [await waiter.wait(replies[0], left_s)]
            except TimeoutError:
                outcomes = [None]
        else:
            await asyncio.wait(replies, timeout=left_s)
            outcomes = [_outcome(reply) for reply in replies]
        results = [await _result(fleet, request, outcome) for request, outcome in zip(requests, outcomes)]
    finally:
        for request in requests:
            waiter.forget(request.id)
    missing = tuple(request.id for request, result in zip(requests, results) if result is None)
    if missing:
        raise OipError(Failure.deadline, f"no result for {len(missing)} of {len(requests)} rows before the deadline; "
                       "fetch them with GET /v1/results/{id}", missing)
    return [result for result in results if result is not None]


def _outcome(reply: "asyncio.Future[Result]") -> Result | BaseException | None:
    if not reply.done() or reply.cancelled():
        return None
    return reply.exception() or reply.result()


async def _result(fleet: FleetClient, request: Request, outcome: Result | BaseException | None) -> Result | None:
    if isinstance(outcome, Result):
        return outcome
    if outcome is None or isinstance(outcome, TimeoutError):
        return await fleet.result(request.id)  # the reply may have raced the deadline
    if isinstance(outcome, ConnectionError):
        raise FleetUnavailable("redis", f"reply waiter: {outcome}")
    raise outcome


async def _publish_all(fleet: FleetClient, requests: list[Request]) -> None:
    """Every row produced at once (Kafka takes them in one or a few record batches)."""
    try:
        if len(requests) == 1:
            await fleet.publish(requests[0])
            return
        outcomes = await asyncio.gather(*(fleet.publish(request) for request in requests), return_exceptions=True)
    except InferenceTimeout as exc:
        outcomes = [exc]
    for outcome in outcomes:
        if isinstance(outcome, InferenceTimeout):
            raise OipError(Failure.deadline, f"the deadline passed before Kafka acknowledged the rows: {outcome}",
                           tuple(request.id for request in requests))
        if isinstance(outcome, BaseException):
            raise outcome
