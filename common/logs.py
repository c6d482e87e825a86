"""Logging set-up shared by every fleet process: plain text for people, JSON lines for machines.

Log calls that concern one request pass `extra={"request_id": ...}`; the JSON formatter
keeps it as a field so logs can be joined with traces and results. Nothing is logged per
request at INFO on the hot path.
"""

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

CORRELATION_FIELDS = ("request_id", "worker", "model", "version")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in CORRELATION_FIELDS:
            if (value := getattr(record, field, None)) is not None:
                entry[field] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(*, json_lines: bool, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_lines:
        formatter: logging.Formatter = JsonFormatter()
        formatter.converter = time.gmtime
    else:
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    handler.setFormatter(formatter)
    handler.addFilter(RepeatFilter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


class RepeatFilter(logging.Filter):
    """Client libraries (aiokafka, redis) log every failed connection attempt during an outage:
    thousands of lines a minute. Their warnings and errors pass once per message template and
    interval; the next one that passes says how many were held back."""

    LIBRARIES = ("aiokafka", "kafka", "redis")

    def __init__(self, interval_s: float = 10.0, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._clock = clock
        self._last_at: dict[tuple[str, str], float] = {}
        self._held: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith(self.LIBRARIES):
            return True
        key = (record.name, str(record.msg)[:80])
        now = self._clock()
        last = self._last_at.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last_at[key] = now
        held = self._held.pop(key, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like this in the last {now - (last or now):.0f} s)"
        if len(self._last_at) > 1000:  # many distinct templates: forget the oldest half
            for stale in sorted(self._last_at, key=self._last_at.__getitem__)[:500]:
                self._last_at.pop(stale, None)
        return True


class LogThrottle:
    """At most one log line per key (a dependency, say "redis") per interval.

    During an outage every attempt fails; logging each would bury everything else. The first
    failure is logged at once, later ones within `interval_s` are only counted, and the next line
    logged for that key says how many were held back.
    """

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._clock = clock
        self._last_at: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def log(self, level: int, key: str, message: str, *args: object) -> bool:
        """Log `message % args` unless a line for `key` went out less than `interval_s` ago; True if logged."""
        now = self._clock()
        last = self._last_at.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        held = self._held.pop(key, 0)
        if held:
            message += " (%d more like this in the last %.0f s)"
            args = (*args, held, now - last if last is not None else 0.0)
        self._last_at[key] = now
        self.logger.log(level, message, *args)
        return True

    def held(self, key: str) -> int:
        """Lines counted but not yet logged for `key`."""
        return self._held.get(key, 0)

    def reset(self, key: str) -> int:
        """Forget `key` (its dependency answers again): the next failure is logged at once. Returns the lines held back."""
        self._last_at.pop(key, None)
        return self._held.pop(key, 0)
