"""Settings of the gateway process and of the Python client for services."""

from typing import Any

from pydantic import Field

from common.settings import FleetSettings


class ClientSettings(FleetSettings):
    default_timeout_s: float = Field(10.0, gt=0, description="Deadline of a request when the caller names none")
    partitions: int = Field(4, ge=1, description="Partitions of a request topic when the client creates it")


class GatewaySettings(ClientSettings):
    host: str = "127.0.0.1"
    port: int = 8080
    models: list[str] = Field(["minilm-embed"], description="Models the gateway accepts; others are 404")
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Larger request bodies are 413")
    max_text_chars: int = Field(8192, ge=1, description="Longer texts are 422")
    rule_fallbacks: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Per model, a safe answer "
                                                      "(outputs) given when no worker of any kind is alive and the "
                                                      "deadline is near, marked degraded")
    rule_fallback_enabled: bool = Field(True, description="Switch the rule-based answers off without removing them")
    rule_fallback_margin: float = Field(0.1, gt=0, lt=1, description="Answer from the rule when this fraction of "
                                        "the deadline is left and nothing is alive")
