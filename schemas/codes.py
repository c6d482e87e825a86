"""The closed lists of the contract: the codes a dead letter or an error result may carry, and
the stages a result's `timings` may name. schemas/README.md documents each; a test compares the
README's tables, these lists and the codes the workers write, so none can change alone."""

from enum import StrEnum


class DeadLetterCode(StrEnum):
    empty = "empty"
    not_msgpack = "not_msgpack"
    not_a_map = "not_a_map"
    schema_version = "schema_version"
    invalid_fields = "invalid_fields"
    invalid_input = "invalid_input"
    invalid_reply_topic = "invalid_reply_topic"
    unreadable = "unreadable"
    result_undeliverable = "result_undeliverable"


class ErrorCode(StrEnum):
    deadline_exceeded = "deadline_exceeded"
    wrong_model = "wrong_model"
    version_unavailable = "version_unavailable"
    invalid_input = "invalid_input"
    invalid_reply_topic = "invalid_reply_topic"
    input_too_long = "input_too_long"
    inference_failed = "inference_failed"
    out_of_memory = "out_of_memory"
    device_failed = "device_failed"
    worker_error = "worker_error"
    cancelled = "cancelled"


class Timing(StrEnum):
    """Keys of a result's `timings` as a worker writes them (milliseconds)."""

    queue_ms = "queue_ms"
    topic_ms = "topic_ms"
    batch_wait_ms = "batch_wait_ms"
    tokenize_ms = "tokenize_ms"
    inference_ms = "inference_ms"
    cache_ms = "cache_ms"
    since_submit_ms = "since_submit_ms"
