"""Load generators of the benchmark, end to end through the fleet (client -> Kafka -> worker
-> Redis reply) with one shared FleetClient.

- closed loop: C callers each send a request, await its reply, send the next; after a
  warm-up, the replies that arrive within the window give throughput at saturation.
- open loop: requests leave on a seeded Poisson schedule whatever the replies do; each
  latency counts from the request's scheduled send time, so a client or fleet that falls
  behind shows up in the latency instead of silently lowering the rate.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gateway.client import FleetClient
from schemas.wire import Result, Status

REQUEST_TIMEOUT_S = 30.0
OPEN_LOOP_GRACE_S = 15.0


@dataclass
class PhaseSamples:
    """What one measured phase got back; only replies inside the window are counted."""

    window_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    stage_ms: dict[str, list[float]] = field(default_factory=dict)  # the results' per-stage timings
    batch_sizes: list[int] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    cache_tiers: Counter[str] = field(default_factory=Counter)
    workers: Counter[str] = field(default_factory=Counter)
    sent: int = 0
    # Open loop only: how late the client sent requests behind their schedule, and when the
    # last reply came (seconds from the start): replies after the schedule stretch the window.
    send_lag_ms: list[float] = field(default_factory=list)
    last_reply_s: float = 0.0

    @property
    def completed(self) -> int:
        return len(self.latencies_ms)

    def record(self, outcome: Result | Exception, latency_ms: float) -> None:
        """One reply, or the exception that stood in for it (a timeout, a broken connection)."""
        if isinstance(outcome, Exception):
            self.errors[type(outcome).__name__] += 1
            return
        result = outcome
        if result.status is not Status.ok:
            self.errors[result.status.value if result.error is None else result.error.code] += 1
            return
        self.latencies_ms.append(latency_ms)
        self.batch_sizes.append(result.batch_size)
        for stage, milliseconds in result.timings.items():
            self.stage_ms.setdefault(stage, []).append(milliseconds)
        self.cache_tiers[result.cache.value] += 1
        self.workers[result.worker or "?"] += 1


class TextCycle:
    """Hands out the workload's texts in order, round and round (one event loop: no locking)."""

    def __init__(self, texts: Sequence[str]) -> None:
        if not texts:
            raise ValueError("the workload is empty")
        self._texts = texts
        self._next = 0

    def take(self) -> str:
        text = self._texts[self._next % len(self._texts)]
        self._next += 1
        return text


async def _send(client: FleetClient, model: str, text: str) -> Result | Exception:
    try:
        return await client.infer(model, text, timeout=REQUEST_TIMEOUT_S)
    except Exception as exc:  # a timeout or a broken connection is a data point, not a crash
        return exc


async def mark_window_edges(start: float, end: float, at_edge: Callable[[], None]) -> None:
    """Call `at_edge` when the measured window opens and when it closes (perf_counter times)."""
    for edge in (start, end):
        await asyncio.sleep(max(edge - time.perf_counter(), 0))
        at_edge()


async def closed_loop(client: FleetClient, model: str, texts: TextCycle, *, callers: int, warmup_s: float,
                      duration_s: float, at_window_edges: Callable[[], None] = lambda: None) -> PhaseSamples:
    """`callers` back-to-back callers for warmup_s + duration_s; counts replies inside the window.
    `at_window_edges` runs when the window opens and when it closes (e.g. to read CPU counters)."""
    samples = PhaseSamples(window_s=duration_s)
    window_start = time.perf_counter() + warmup_s
    window_end = window_start + duration_s

    async def caller() -> None:
        while (sent_at := time.perf_counter()) < window_end:
            outcome = await _send(client, model, texts.take())
            done_at = time.perf_counter()
            if not window_start <= done_at <= window_end:
                continue
            samples.sent += 1
            samples.record(outcome, (done_at - sent_at) * 1000)

    await asyncio.gather(mark_window_edges(window_start, window_end, at_window_edges),
                         *(caller() for _ in range(callers)))
    return samples


async def open_loop(client: FleetClient, model: str, texts: TextCycle, *, schedule_s: Sequence[float],
                    duration_s: float) -> PhaseSamples:
    """Send one request at each offset of `schedule_s`, then wait for the stragglers."""
    samples = PhaseSamples(window_s=duration_s)
    in_flight: list[asyncio.Task[None]] = []

    started = time.perf_counter()

    async def one(text: str, due_at: float) -> None:
        outcome = await _send(client, model, text)
        done_at = time.perf_counter()
        samples.last_reply_s = max(samples.last_reply_s, done_at - started)
        samples.record(outcome, (done_at - due_at) * 1000)

    for offset in schedule_s:
        due_at = started + offset
        if (wait_s := due_at - time.perf_counter()) > 0:
            await asyncio.sleep(wait_s)
        samples.send_lag_ms.append(max(time.perf_counter() - due_at, 0.0) * 1000)
        in_flight.append(asyncio.create_task(one(texts.take(), due_at)))
        samples.sent += 1
    _, late = await asyncio.wait(in_flight, timeout=REQUEST_TIMEOUT_S + OPEN_LOOP_GRACE_S) if in_flight else ((), ())
    for task in late:
        task.cancel()
    if late:
        samples.errors["unanswered"] += len(late)
    samples.window_s = max(duration_s, samples.last_reply_s)
    return samples
