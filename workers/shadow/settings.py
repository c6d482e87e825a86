"""Settings of a shadow process (`FLEET_ROLE=shadow fleet-worker`, `fleet shadow run|replay`).

What it shares with the live worker, which model versions to load and how and its place in a
consumer group, comes from workers/runtime_settings.py; the rest is the shadow's own
(env FLEET_SHADOW_*). None of the batch path's, cache or health settings apply to a shadow.
"""

from typing import Literal

from pydantic import Field

from workers.runtime_settings import ModelMemberSettings, Role


class ShadowSettings(ModelMemberSettings):
    role: Literal[Role.shadow] = Field(Role.shadow, description="FLEET_ROLE=shadow makes `fleet-worker` a shadow")
    shadow_sample: float = Field(1.0, ge=0, le=1, description="Fraction of requests compared, chosen by a "
                                 "hash of the request id (the same id is always in or out)")
    shadow_grace_ms: float = Field(2000.0, ge=0, description="How long after a request reached Kafka the shadow "
                                   "waits for its live result before computing stable itself")
    shadow_candidate: str | None = Field(None, description="Run this version instead of the `candidate` pointer")
    shadow_agree_cosine: float = Field(0.99, ge=-1, le=1, description="Embeddings agree at this cosine or above")
    shadow_pointer_poll_s: float = Field(1.0, gt=0, description="How often the version pointers are re-read")
    shadow_group: str | None = Field(None, description="Consumer group; default <model>.shadow")
    shadow_min_age_ms: float = Field(200.0, ge=0, description="Compare a request only once it is this old: the "
                                     "live result is usually there by then, and the shadow's compute does not "
                                     "land on the same moment as the live worker's")
    shadow_nice: int = Field(10, ge=0, le=19, description="Lower the shadow process's CPU priority by this "
                             "much (nice), so a shadow sharing a host with live workers only takes CPU they leave")
    shadow_start: Literal["latest", "earliest"] = Field("latest", description="Where a group without committed "
                                                        "offsets starts: latest (from now on) or earliest "
                                                        "(the whole retention; use replay for the past)")
