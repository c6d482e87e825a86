"""Logging set-up shared by every fleet process: plain text for people, JSON lines for machines.

Log calls that concern one request pass `extra={"request_id": ...}`; the JSON formatter
keeps it as a field so logs can be joined with traces and results. Nothing is logged per
request at INFO on the hot path.
"""

import json
import logging
import sys
import time
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
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
