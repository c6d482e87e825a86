"""The wire's one error: bytes, fields or tensors that are not a valid message of the contract.

Its own module so that the contract's parts (schemas/wire.py, schemas/tensors.py) both raise it
without importing each other; `schemas.wire.WireError` is this class.
"""


class WireError(ValueError):
    """Bytes that are not a valid message of the contract; the message says why, `code` says what kind."""

    def __init__(self, message: str, code: str = "invalid_fields") -> None:
        super().__init__(message)
        self.code = code
