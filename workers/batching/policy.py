"""Micro-batch sizing from the backlog the worker can see and a maximum delay (seed §2.2).

`BatchPolicy` is pure: given what is in hand, how much is still waiting on the assigned
partitions and how old the oldest record is, it says "go now" or "wait up to t ms for more".
`BatchCollector` (collector.py) feeds it from an aiokafka consumer.

- adaptive: a full batch goes at once; while the model has no room for another batch (it holds
  as many as it runs at once, so sending now would only queue behind them) it keeps collecting;
  while it runs a batch and has room for another, the batch fills up to the delay; while more records are
  visibly waiting it fetches them, up to the delay; otherwise it never waits for records that
  are not there. Light traffic goes out at once at batch-1 latency; under load the batches
  fill while the model works.
- fixed: the classic rule, wait until the batch is full or the oldest record has waited
  max_queue_delay.
With room in the model, no record waits longer than max_queue_delay counted from its Kafka
timestamp, so time already spent in the topic counts.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from workers.settings import BatchPolicyName

IDLE_POLL_MS = 200


BUSY_POLL_MS = 2.0
MAX_BUSY_WAIT_S = 1.0  # re-check stop requests and health at least this often


@dataclass(frozen=True)
class BatchView:
    in_hand: int
    backlog: int
    oldest_age_ms: float
    model_busy: bool = False  # it holds as many batches as it runs at once
    model_working: bool = False  # it holds at least one batch


@dataclass(frozen=True)
class Decision:
    dispatch: bool
    wait_ms: float = 0.0
    until_model_has_room: bool = False  # wait for a running batch to finish, then take what has arrived


class BatchPolicy:
    def __init__(self, max_batch_size: int, max_queue_delay_ms: float, policy: BatchPolicyName,
                 preferred_batch_sizes: Sequence[int] = ()) -> None:
        self._max_batch_size = max_batch_size
        self.max_queue_delay_ms = max_queue_delay_ms
        self.policy = policy
        self.preferred = frozenset(size for size in preferred_batch_sizes if 0 < size <= max_batch_size)

    @property
    def max_batch_size(self) -> int:
        """Records the next batch may take; `BatchSizing` alone changes it (through `resize`)."""
        return self._max_batch_size

    def resize(self, max_batch_size: int) -> None:
        self._max_batch_size = max(1, max_batch_size)

    def decide(self, view: BatchView) -> Decision:
        if view.in_hand == 0:
            return Decision(dispatch=False, wait_ms=IDLE_POLL_MS)
        if view.in_hand >= self.max_batch_size or view.in_hand in self.preferred:
            return Decision(dispatch=True)
        adaptive = self.policy is BatchPolicyName.adaptive
        if adaptive and view.model_busy:
            # Sent now, the batch would only queue behind the ones running; it leaves the
            # moment the model has room, bigger and no later.
            return Decision(dispatch=False, wait_ms=BUSY_POLL_MS, until_model_has_room=True)
        left_ms = self.max_queue_delay_ms - view.oldest_age_ms
        if left_ms <= 0:
            return Decision(dispatch=True)
        if not adaptive or view.backlog > 0 or view.model_working:
            return Decision(dispatch=False, wait_ms=left_ms)
        return Decision(dispatch=True)  # nothing visible to wait for, and the model idle
