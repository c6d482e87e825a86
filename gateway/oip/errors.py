"""What goes wrong in an Open Inference Protocol call, said once for REST and gRPC alike: a
kind (which becomes an HTTP status or a gRPC code), a message, and the fleet request ids the
caller may still fetch with GET /v1/results/{id} after a deadline."""

from enum import Enum


class Failure(Enum):
    # value: (HTTP status, gRPC status code name)
    bad_input = (400, "INVALID_ARGUMENT")
    unauthenticated = (401, "UNAUTHENTICATED")
    forbidden = (403, "PERMISSION_DENIED")
    not_found = (404, "NOT_FOUND")
    wrong_method = (405, "UNIMPLEMENTED")
    too_large = (413, "RESOURCE_EXHAUSTED")
    quota = (429, "RESOURCE_EXHAUSTED")
    unavailable = (503, "UNAVAILABLE")
    deadline = (504, "DEADLINE_EXCEEDED")

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def grpc_code(self) -> str:
        return self.value[1]


STATUS_FAILURES = {failure.status: failure for failure in Failure}


class OipError(Exception):
    def __init__(self, failure: Failure, message: str, ids: tuple[str, ...] = (), retry_after_s: int | None = None
                 ) -> None:
        super().__init__(message)
        self.failure = failure
        self.message = message
        self.ids = ids
        self.retry_after_s = retry_after_s


def bad_input(message: str) -> OipError:
    return OipError(Failure.bad_input, message)


def failure_of_status(status: int) -> Failure:
    """The failure an admission refusal's status stands for (401, 403, 413, 429, 503)."""
    return STATUS_FAILURES.get(status, Failure.unavailable)
