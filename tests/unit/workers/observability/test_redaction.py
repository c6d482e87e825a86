import pytest

from workers.observability.redaction import Redactor

REDACT = Redactor.with_defaults()


@pytest.mark.parametrize(("text", "expected"), [
    ("mail me at jane.doe+test@example.co.uk please", "mail me at <email> please"),
    ("card 4111 1111 1111 1111 was charged", "card <card> was charged"),
    ("card 4111-1111-1111-1111", "card <card>"),
    ("call +49 30 1234567 now", "call <phone> now"),
    ("call (555) 123-4567", "call <phone>"),
    ("order 4411 is late", "order 4411 is late"),
    ("7 am or 7 pm", "7 am or 7 pm"),
])
def test_default_rules(text: str, expected: str) -> None:
    assert REDACT(text) == expected


def test_extra_patterns_from_settings() -> None:
    redact = Redactor.with_defaults([r"ACME-\d+"])
    assert redact("ticket ACME-123 for bob@x.io") == "ticket <redacted> for <email>"
