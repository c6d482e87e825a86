"""The compute stage: at most `depth` batches in the model at once, batches out in the order they
came however long each took, a failing batch answered rather than raised, the model's activity
(pending batches, oldest running batch) kept for the batching policy and the health watchdog."""

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest

from workers import pipeline as stage
from workers.pipeline import ComputeStage, ModelActivity


@dataclass
class Batch:
    name: str
    seconds: float
    needs_model: bool = True
    records: tuple[()] = ()


class Model:
    """Stands in for compute(): sleeps as a device would, counts how many batches run at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = self.most = 0

    def __call__(self, batch: Batch) -> str:
        if batch.name == "broken":
            raise RuntimeError("device said no")
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(batch.seconds)
        with self.lock:
            self.running -= 1
        return batch.name


async def run_stage(batches: list[Batch], depth: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], Model]:
    model = Model()
    monkeypatch.setattr(stage, "compute", model)
    monkeypatch.setattr(stage, "failed", lambda batch, exc: f"failed {batch.name}: {exc}")
    activity, seen = ModelActivity(), []
    activity.handed(len(batches))
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    out: asyncio.Queue[Any] = asyncio.Queue()
    for batch in [*batches, None]:
        inbox.put_nowait(batch)
    await asyncio.wait_for(ComputeStage(activity, depth, seen.append).run(inbox, out), 10)
    emitted = [out.get_nowait() for _ in range(out.qsize())]
    assert emitted[-1] is None and emitted[:-1] == seen
    assert activity.pending == 0 and activity.has_room.is_set() and activity.busy_since is None
    return seen, model


async def test_two_in_flight_overlap_and_leave_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = [Batch("slow", 0.2), Batch("quick", 0.01), Batch("middle", 0.05), Batch("last", 0.01)]
    seen, model = await run_stage(batches, 2, monkeypatch)
    assert seen == ["slow", "quick", "middle", "last"]
    assert model.most == 2


async def test_one_in_flight_and_a_failure_is_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, model = await run_stage([Batch("a", 0.02), Batch("broken", 0), Batch("b", 0.02)], 1, monkeypatch)
    assert seen == ["a", "failed broken: device said no", "b"]
    assert model.most == 1


def test_a_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ComputeStage(ModelActivity(), 0, lambda _: None)


def test_the_model_has_room_until_it_holds_as_many_batches_as_it_runs_at_once() -> None:
    activity = ModelActivity()
    activity.resize(2)
    activity.handed()
    assert activity.has_room.is_set(), "one batch of two: the next runs beside it, it does not queue"
    activity.handed()
    assert not activity.has_room.is_set()
    activity.finished(activity.started())
    assert activity.has_room.is_set()
    activity.resize(1)
    assert not activity.has_room.is_set(), "a smaller model capacity takes the room away at once"
