"""Deadlines and request ids for the request path, without the system calls of their stdlib forms.

On Python 3.11 `asyncio.timeout` finds its loop and task through `get_running_loop`, whose
fork check asks the kernel for the process id, three times per use; and `secrets.token_hex`
reads the kernel's random source once per id. On the gateway's hot path (one deadline and one
id per request) those system calls cost a tenth of its CPU on a busy machine. Both are kept
here with the loop known in advance and random bytes read in blocks.
"""

import asyncio
import os
from types import TracebackType

ID_BYTES = 16
IDS_PER_READ = 256


class Deadline:
    """`asyncio.timeout_at(when)` on a loop given in advance, with the same semantics: the task
    is cancelled at `when`, and the cancellation leaves the block as TimeoutError."""

    __slots__ = ("_loop", "_when", "_task", "_timer", "_expired")

    def __init__(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._loop = loop
        self._when = when
        self._task: asyncio.Task[object] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._expired = False

    async def __aenter__(self) -> "Deadline":
        self._task = asyncio.current_task(self._loop)
        if self._task is None:
            raise RuntimeError("Deadline must be used inside a task")
        self._timer = self._loop.call_at(self._when, self._expire)
        return self

    def _expire(self) -> None:
        assert self._task is not None
        self._expired = True
        self._task.cancel()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        assert self._timer is not None and self._task is not None
        self._timer.cancel()
        # As asyncio.Timeout: only a cancellation this deadline caused, with none other pending, is a timeout.
        if self._expired and self._task.uncancel() == 0 and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc


class RequestIds:
    """Random 128-bit ids in hex, as `schemas.wire.new_request_id` makes them, from the kernel's
    random source read IDS_PER_READ ids at a time."""

    __slots__ = ("_block", "_used")

    def __init__(self) -> None:
        self._block = b""
        self._used = 0

    def new(self) -> str:
        if self._used >= len(self._block):
            self._block, self._used = os.urandom(ID_BYTES * IDS_PER_READ), 0
        start = self._used
        self._used = start + ID_BYTES
        return self._block[start:start + ID_BYTES].hex()
