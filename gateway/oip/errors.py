"""What goes wrong in an Open Inference Protocol call once it is admitted, said once for REST and
gRPC alike: a kind (which becomes an HTTP status or a gRPC code), a message, and the fleet request
ids the caller may still fetch with GET /v1/results/{id} after a deadline. Admission's refusals
(a key, a quota, the in-flight bound, a body too large) are gateway/refusals.py's, as on /v1."""

from enum import Enum


class Failure(Enum):
    # value: (HTTP status, gRPC status code name)
    bad_input = (400, "INVALID_ARGUMENT")
    not_found = (404, "NOT_FOUND")
    wrong_method = (405, "UNIMPLEMENTED")
    unavailable = (503, "UNAVAILABLE")
    deadline = (504, "DEADLINE_EXCEEDED")

    @property
    def status(self) -> int:
        return self.value[0]

    @property
    def grpc_code(self) -> str:
        return self.value[1]


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

