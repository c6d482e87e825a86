"""Connection settings every fleet process shares.

Each process builds exactly one settings object (a subclass of `FleetSettings`) from
environment variables prefixed `FLEET_` and passes it down; nothing reads the environment
anywhere else.
"""

import re
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "FLEET_"


class FleetSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    kafka_bootstrap: str = Field("127.0.0.1:9092", description="Kafka bootstrap servers, host:port[,host:port]")
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="Redis URL for replies and result lookup")
    home: Path = Field(Path(".fleet"), description="Folder for local state: stack data, model registry")
    log_json: bool = Field(False, description="Log JSON lines (one object per line) instead of plain text")
    log_level: str = Field("INFO", description="Python logging level")
    model_dir: Path | None = Field(None, description="Model registry folder; default <home>/models")
    redis_connect_timeout_s: float = Field(2.0, gt=0, description="Redis connect timeout of every Redis client")
    # Longer than the gateway's 1 s blocking XREAD, or every idle read would time out.
    redis_socket_timeout_s: float = Field(5.0, gt=1.0, description="Redis socket (read/write) timeout: a slow "
                                          "Redis fails a call after this instead of holding a batch")
    startup_timeout_s: float = Field(30.0, gt=0, description="Give up (exit non-zero) when Kafka or Redis do not "
                                     "answer within this at start")
    shutdown_grace_s: float = Field(10.0, gt=0, description="After SIGTERM the process ends within this")
    results_topic_pattern: str = Field(r"fleet\.results.*", description="Regex a results topic must match in full: "
                                       "the gateway answers 422 and the worker dead-letters a request naming another")

    @field_validator("results_topic_pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from exc
        return pattern

    @property
    def registry_dir(self) -> Path:
        return self.model_dir if self.model_dir is not None else self.home / "models"
