"""One line per build step, stamped with seconds since the build started; progress inside a long
step; and the time each stage took, for the summary table at the end."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

# A step that runs longer than this says how far it got, at least this often.
PROGRESS_EVERY_S = 10.0


class Progress:
    def __init__(self, stream: TextIO = sys.stdout, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self._stream = stream
        self.stages: list[tuple[str, float]] = []

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    def step(self, message: str) -> None:
        print(f"[{self.elapsed_s:7.1f}s] {message}", file=self._stream, flush=True)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage of the build under `name` (the summary table lists them), failed or not."""
        started = self._clock()
        try:
            yield
        finally:
            self.stages.append((name, self._clock() - started))

    def every(self, interval_s: float = PROGRESS_EVERY_S, what: str = "done") -> Callable[[int, int], None]:
        """A callback `(done, total)` for a long loop: a line with the time spent and left, at most
        once per `interval_s`, and one when a loop that printed any ends."""
        started = self._clock()
        last = started

        def report(done: int, total: int) -> None:
            nonlocal last
            now = self._clock()
            finished_after_a_line = done >= total and last != started
            if now - last < interval_s and not finished_after_a_line:
                return
            last = now
            spent = now - started
            left = spent / done * (total - done) if done else 0.0
            self.step(f"  {what} {done}/{total} ({done / total:.0%}), {spent:.0f} s so far, about {left:.0f} s left")

        return report
