"""What admission says when it turns a request away: one vocabulary for every protocol.

A refusal has a kind, and each kind is one HTTP status and one gRPC status code, whichever entry
point the request came through (/v1, /v2 REST, gRPC, the console):

  kind             HTTP  gRPC                when
  unauthenticated  401   UNAUTHENTICATED     no key, two keys, an unknown or revoked key, no session
  unavailable      503   UNAVAILABLE         Redis cannot say whether the key is good (Retry-After)
  forbidden        403   PERMISSION_DENIED   the key's tenant may not use this door (/metrics, the console)
  over_quota       429   RESOURCE_EXHAUSTED  the tenant is over its rate or its requests in flight (Retry-After)
  busy             429   RESOURCE_EXHAUSTED  the process has its bound of requests in flight (Retry-After)
  too_large        413   RESOURCE_EXHAUSTED  the body (a gRPC message) is over the door's limit

The kind travels with the answer, so a client tells the two 429s apart without reading prose:
the `fleet-refusal` header (HTTP) or trailing metadata (gRPC), and `"refusal"` in JSON bodies.
gateway/admission.py decides; each entry point only writes the refusal in its protocol.
"""

from dataclasses import dataclass
from enum import Enum

KIND_HEADER = "fleet-refusal"


class Kind(Enum):
    # value: (name, HTTP status, gRPC status code name); the name keeps the two 429s apart
    unauthenticated = ("unauthenticated", 401, "UNAUTHENTICATED")
    unavailable = ("unavailable", 503, "UNAVAILABLE")
    forbidden = ("forbidden", 403, "PERMISSION_DENIED")
    over_quota = ("over_quota", 429, "RESOURCE_EXHAUSTED")
    busy = ("busy", 429, "RESOURCE_EXHAUSTED")
    too_large = ("too_large", 413, "RESOURCE_EXHAUSTED")

    def __init__(self, _: str, status: int, grpc_code: str) -> None:
        self.status = status
        self.grpc_code = grpc_code


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request turned away by admission, before any route ran."""

    kind: Kind
    detail: str
    retry_after_s: int | None = None
    # Said beside the detail, e.g. (("quota", "rate"),) or (("dependency", "redis"),)
    facts: tuple[tuple[str, str], ...] = ()

    @property
    def status(self) -> int:
        return self.kind.status

    def content(self, message_field: str = "detail") -> dict[str, object]:
        """The JSON body: the detail under `message_field` (/v1 says "detail", /v2 "error"), the kind, the facts."""
        return {message_field: self.detail, "refusal": self.kind.name, **dict(self.facts)}

    def http_headers(self) -> list[tuple[bytes, bytes]]:
        headers = [(KIND_HEADER.encode(), self.kind.name.encode())]
        if self.retry_after_s is not None:
            headers.append((b"retry-after", str(self.retry_after_s).encode()))
        if self.kind is Kind.unauthenticated:
            headers.append((b"www-authenticate", b"Bearer"))
        return headers

    def grpc_metadata(self) -> tuple[tuple[str, str], ...]:
        """The trailing metadata of the gRPC answer: the kind, and Retry-After as the HTTP answer has it."""
        metadata: tuple[tuple[str, str], ...] = ((KIND_HEADER, self.kind.name),)
        if self.retry_after_s is not None:
            metadata += (("retry-after", str(self.retry_after_s)),)
        return metadata


class Refused(Exception):
    """A refusal raised where code raises rather than returns (the protocol layers, the console)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.detail)
        self.refusal = refusal
