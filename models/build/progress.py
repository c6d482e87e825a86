"""One line per build step, stamped with seconds since the build started."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO = sys.stdout) -> None:
        self._started = time.monotonic()
        self._stream = stream

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def step(self, message: str) -> None:
        print(f"[{self.elapsed_s:7.1f}s] {message}", file=self._stream, flush=True)
