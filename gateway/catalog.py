"""Which models this gateway serves, kept up to date from the registry's catalogue in Redis.

Without `FLEET_MODELS` a gateway serves what the fleet serves (common/catalog.py): the models
listed in the catalogue (a stable version was set) and those live workers serve, less the retired
ones, so a model imported and made stable is served by every running gateway within one poll
(`catalog_poll_s`, 2 s by default), with no restart. With `FLEET_MODELS`, the list is an
allow-list: those models and no other, accepted (and queued) even before any worker serves them,
as a pipeline producing ahead of its workers expects; a retired one is refused all the same.

A request for a model not served now asks Redis again first (at most once per `poll_s / 4`, one
read shared by every such request): a flood of made-up names costs Redis nothing more. While
Redis does not answer, the last answer stands. Each process says what it serves in its beat
(`fleet:gateway:<host:pid>`), read by `fleet models gateways` and the console.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.catalog import CatalogEntry, GatewayBeat, read_catalog, remove_gateway_beat, write_gateway_beat
from common.heartbeats import list_workers
from common.redis_cluster import REDIS_DOWN, AnyRedis
from gateway.shared_fetch import SharedFetch

log = logging.getLogger(__name__)

MAX_LISTED = 200  # models named in a 404's message


class NotServed(LookupError):
    """A model (or version) this gateway does not serve; the message says why, for a 404."""


class CatalogueUnread(RuntimeError):
    """The catalogue has not been read since the gateway started (Redis has not answered): a 503, not a 404."""


@dataclass(frozen=True)
class Snapshot:
    served: frozenset[str]
    entries: dict[str, CatalogEntry]


class ServedModels:
    def __init__(self, allow_list: list[str] | None, redis: Callable[[], AnyRedis], *, poll_s: float,
                 gateway: str | None = None) -> None:
        self.allow_list = frozenset(allow_list) if allow_list is not None else None
        self._redis = redis
        self.poll_s = poll_s
        self.gateway = gateway or f"{socket.gethostname()}:{os.getpid()}"
        self._now = Snapshot(self.allow_list or frozenset(), {})
        self._fetch: SharedFetch[Snapshot] = SharedFetch(self._read)
        self._attempted = -math.inf  # monotonic time of the last read, answered or not
        self.read_once = False

    @property
    def served(self) -> frozenset[str]:
        return self._now.served

    async def check(self, model: str, version: str | None = None) -> None:
        """NotServed, saying why, unless this gateway serves `model` (at `version`) now; CatalogueUnread
        while it cannot know (the catalogue unread since the start, and not in the allow-list)."""
        # Until a first read has answered, every caller waits on one (the one under way, shared).
        stale = time.monotonic() - self._attempted >= self.poll_s / 4
        if model not in self._now.served and (stale or not self.read_once):
            await self.refresh()
        now = self._now
        entry = now.entries.get(model)
        if entry is not None and entry.retired:
            raise NotServed(entry.why_retired(model, for_callers=True))
        if model not in now.served:
            if not self.read_once and self.allow_list is None:
                raise CatalogueUnread("the model catalogue has not been read from Redis yet; retry")
            raise NotServed(self._unknown(model))
        if version is not None and entry is not None and version in entry.retired_versions:
            raise NotServed(entry.why_retired(model, version, for_callers=True))

    def _unknown(self, model: str) -> str:
        served = sorted(self._now.served)
        listed = ", ".join(served[:MAX_LISTED]) + (f" and {len(served) - MAX_LISTED} more" if len(served) > MAX_LISTED
                                                   else "")
        if self.allow_list is not None:
            return f"unknown model {model[:80]!r}: this gateway serves its allow-list (FLEET_MODELS) only: {listed}"
        return (f"unknown model {model[:80]!r}: no stable version is set for it and no worker serves it "
                f"(fleet models set-stable); this gateway serves {listed or 'nothing yet'}")

    async def refresh(self) -> None:
        """Read the catalogue now (the read under way, if one is); on an outage the last answer stands."""
        self._attempted = time.monotonic()
        try:
            self._now = await self._fetch.refresh()
            self.read_once = True
        except REDIS_DOWN as exc:
            log.warning("the model catalogue was not read from Redis (%s); serving %s as before",
                        type(exc).__name__, sorted(self._now.served))

    async def _read(self) -> Snapshot:
        redis = self._redis()
        entries = await read_catalog(redis)
        retired = {model for model, entry in entries.items() if entry.retired}
        if self.allow_list is not None:
            return Snapshot(self.allow_list - retired, entries)
        listed = {model for model, entry in entries.items() if not entry.retired}
        live = {worker.model for worker in await list_workers(redis) if "." not in worker.model
                and worker.answering}
        return Snapshot(frozenset((listed | live) - retired), entries)

    async def follow(self) -> None:
        """Refresh and publish this gateway's beat every `poll_s` until cancelled."""
        while True:
            try:
                await self.refresh()
                beat = GatewayBeat(self.gateway, tuple(sorted(self.served)),
                                   tuple(sorted(self.allow_list)) if self.allow_list is not None else None)
                await write_gateway_beat(self._redis(), beat, ttl_s=max(self.poll_s * 3, 10.0))
            except REDIS_DOWN:
                pass  # refresh() has said Redis is away
            except Exception:  # a bug here must not freeze the list this gateway serves
                log.exception("following the model catalogue failed; trying again in %.1f s", self.poll_s)
            await asyncio.sleep(self.poll_s)

    async def leave(self) -> None:
        try:
            await remove_gateway_beat(self._redis(), self.gateway)
        except REDIS_DOWN:
            pass  # the beat expires by itself
