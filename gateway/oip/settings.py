"""The gateway's settings for the Open Inference Protocol (FLEET_* env vars, as every setting)."""

from pydantic import Field

from common.settings import FleetSettings

DEFAULT_TASKS = {"minilm-embed": "embedding", "faq-intent": "classification"}


class OipSettings(FleetSettings):
    grpc_port: int | None = Field(None, ge=1, le=65535, description="Serve inference.GRPCInferenceService (KServe v2 "
                                  "gRPC) on this port; unset (the default): no gRPC listener. Several gateway "
                                  "processes share the port (SO_REUSEPORT)")
    grpc_max_message_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024, description="Largest gRPC "
                                        "message received or sent; larger ones are RESOURCE_EXHAUSTED")
    grpc_max_streams: int = Field(100, ge=1, le=10_000, description="Concurrent gRPC streams per connection")
    grpc_max_concurrent_rpcs: int = Field(1000, ge=1, description="gRPC calls served at once; more are "
                                          "RESOURCE_EXHAUSTED at once")
    oip_max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, le=64 * 1024 * 1024, description="Larger /v2 infer "
                                    "bodies are 413")
    oip_max_rows: int = Field(256, ge=1, le=10_000, description="Most elements (request rows) in one /v2 or gRPC "
                              "infer call; more are 400. Each row takes one of the tenant's quota tokens")
    model_tasks: dict[str, str] = Field(default_factory=lambda: dict(DEFAULT_TASKS), description="The task of each "
                                        "model the Open Inference Protocol serves (embedding or classification), "
                                        "until the workers publish model cards; a model not listed has no task "
                                        "until a worker writes its card (its calls are 503 meanwhile)")
