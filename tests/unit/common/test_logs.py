import json
import logging

from common.logs import JsonFormatter


def test_json_lines_carry_the_request_id() -> None:
    record = logging.LogRecord("workers.worker", logging.WARNING, __file__, 1, "commit refused for %s", ("p0",), None)
    record.request_id = "ab" * 16
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "commit refused for p0"
    assert entry["level"] == "warning" and entry["request_id"] == "ab" * 16 and entry["logger"] == "workers.worker"
