"""What a dead letter may carry when it leaves the worker: text masked, raw bytes only when allowed.

A dead letter is read by whoever can read `fleet.dlq`, which is usually a wider circle than the
callers whose requests it holds. So by default it carries a *masked view* of the record: the
msgpack map decoded, every text value run through the same redaction as debug traces (e-mails,
phones, card numbers and the operator's patterns), bytes replaced by their length. The original
bytes travel only when `FLEET_DLQ_KEEP_ORIGINAL=true` says the DLQ is as trusted as the request
topics (e.g. to replay dead letters byte for byte). The reason is masked as well: a validation
message can quote the input.

The view is bounded in depth, entries and characters, and in bytes as a whole (MAX_VIEW_BYTES),
so a hostile record cannot make its own dead letter too large to produce. Bounds on depth and
entries alone were not enough: 52 KB of empty lists nested past MAX_DEPTH became a 1.2 MB view
(each 1-byte list a 23-character marker), the DLQ refused the letter, and the worker stopped on
that record at every restart.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack

from schemas.wire import DeadLetter
from workers.observability.redaction import Redactor

MAX_DEPTH = 6
MAX_ENTRIES = 256  # per map or list; the rest is summarised
MAX_TEXT_CHARS = 1024
MAX_KEY_CHARS = 64
MAX_VIEW_BYTES = 64 * 1024  # about the view's packed size; what comes after is left out
CUT = f"<cut: the view stops at {MAX_VIEW_BYTES // 1024} KiB>"
REQUEST_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class DeadLetterPolicy:
    keep_original: bool = False
    redact: Callable[[str], str] = field(default_factory=lambda: Redactor.with_defaults(max_chars=MAX_TEXT_CHARS))

    def outgoing(self, letter: DeadLetter) -> DeadLetter:
        """The letter as it may be produced to the DLQ."""
        update: dict[str, Any] = {"reason": self.redact(letter.reason), "masked": self.masked_view(letter.original)}
        if not self.keep_original:
            update["original"] = None
        return letter.model_copy(update=update)

    def masked_view(self, raw: bytes | None) -> dict[str, Any] | None:
        """The record's map with every text masked, or None when the bytes are not a msgpack map."""
        if not raw:
            return None
        try:
            data = msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except Exception:  # garbage is said to be garbage by the letter's reason; there is nothing to show
            return None
        if not isinstance(data, dict):
            return None
        masked = self._mask(data, MAX_DEPTH, _Budget(MAX_VIEW_BYTES))
        assert isinstance(masked, dict)
        request_id = data.get("id")
        if isinstance(request_id, str) and REQUEST_ID.fullmatch(request_id):
            # A random 128-bit id is no one's data and is what an operator looks the request up by;
            # its hex digits can read as a phone number to the redaction patterns.
            masked["id"] = request_id
        return masked

    def _mask(self, value: Any, depth: int, budget: "_Budget") -> Any:
        if isinstance(value, str):
            return budget.spent(self.redact(value[:MAX_TEXT_CHARS]))
        if isinstance(value, bytes):
            return budget.spent(f"<{len(value)} bytes>")
        if value is None or isinstance(value, bool | int | float):
            budget.left -= 9
            return value
        if depth <= 0:
            return budget.spent(f"<{type(value).__name__} nested too deep>")
        if isinstance(value, dict):
            return self._mask_map(value, depth, budget)
        if isinstance(value, list | tuple):
            masked_items = []
            for item in value[:MAX_ENTRIES]:
                if budget.left <= 0:
                    masked_items.append(CUT)
                    return masked_items
                masked_items.append(self._mask(item, depth - 1, budget))
            if len(value) > MAX_ENTRIES:
                masked_items.append(f"<{len(value) - MAX_ENTRIES} more items>")
            return masked_items
        return budget.spent(f"<{type(value).__name__}>")

    def _mask_map(self, value: dict[Any, Any], depth: int, budget: "_Budget") -> dict[str, Any]:
        items = list(value.items())
        masked: dict[str, Any] = {}
        for key, item in items[:MAX_ENTRIES]:
            if budget.left <= 0:
                masked["<cut>"] = CUT
                return masked
            masked[budget.spent(self.redact(str(key)[:MAX_KEY_CHARS]))] = self._mask(item, depth - 1, budget)
        if len(items) > MAX_ENTRIES:
            masked["<more>"] = f"{len(items) - MAX_ENTRIES} more entries"
        return masked


@dataclass
class _Budget:
    """Bytes the view may still take, counted as it is built (a text's length plus its header)."""

    left: int

    def spent(self, text: str) -> str:
        self.left -= len(text) + 5
        return text
