"""A Redis in memory, for the few commands the console's sessions and the API keys use, with keys
that expire on a clock the test moves (no sleeps). `down` makes every command fail as a Redis
that does not answer."""

from collections.abc import Callable

from redis.exceptions import ConnectionError as RedisConnectionError

Value = bytes | dict[bytes, bytes] | dict[bytes, float]


def _b(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


class MemoryRedis:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._data: dict[bytes, Value] = {}
        self._expires: dict[bytes, float] = {}
        self.down = False

    def _live(self, name: str | bytes) -> bytes:
        if self.down:
            raise RedisConnectionError("Redis is down in this test")
        key = _b(name)
        if key in self._expires and self._expires[key] <= self._clock():
            self._data.pop(key, None)
            del self._expires[key]
        return key

    def keys_alive(self) -> list[bytes]:
        return sorted(key for key in list(self._data) if self._live(key) in self._data)

    async def get(self, name: str) -> bytes | None:
        value = self._data.get(self._live(name))
        return value if isinstance(value, bytes) else None

    async def set(self, name: str, value: str | bytes, px: int | None = None, xx: bool = False) -> bool:
        key = self._live(name)
        if xx and key not in self._data:
            return False
        self._data[key] = _b(value)
        self._expires.pop(key, None)
        if px is not None:
            self._expires[key] = self._clock() + px / 1000
        return True

    async def delete(self, *names: str) -> int:
        gone = 0
        for name in names:
            key = self._live(name)
            gone += self._data.pop(key, None) is not None
            self._expires.pop(key, None)
        return gone

    async def pexpire(self, name: str, ms: int) -> bool:
        key = self._live(name)
        if key not in self._data:
            return False
        self._expires[key] = self._clock() + ms / 1000
        return True

    async def zadd(self, name: str, mapping: dict[str, float]) -> int:
        scores = self._data.setdefault(self._live(name), {})
        assert isinstance(scores, dict)
        added = sum(_b(member) not in scores for member in mapping)
        scores.update({_b(member): score for member, score in mapping.items()})  # type: ignore[misc]
        return added

    async def zrange(self, name: str, start: int, end: int) -> list[bytes]:
        scores = self._data.get(self._live(name), {})
        assert isinstance(scores, dict)
        ordered = [member for member, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]))]
        stop = len(ordered) + end + 1 if end < 0 else end + 1
        return ordered[start:max(stop, 0)]

    async def zrem(self, name: str, *members: str) -> int:
        scores = self._data.get(self._live(name), {})
        assert isinstance(scores, dict)
        return sum(scores.pop(_b(member), None) is not None for member in members)

    async def hset(self, name: str, key: str, value: str | bytes) -> int:
        fields = self._data.setdefault(self._live(name), {})
        assert isinstance(fields, dict)
        new = _b(key) not in fields
        fields[_b(key)] = _b(value)  # type: ignore[assignment]
        return int(new)

    async def hget(self, name: str, key: str) -> bytes | None:
        fields = self._data.get(self._live(name), {})
        assert isinstance(fields, dict)
        value = fields.get(_b(key))
        return value if isinstance(value, bytes) else None

    async def hgetall(self, name: str) -> dict[bytes, bytes]:
        fields = self._data.get(self._live(name), {})
        assert isinstance(fields, dict)
        return {k: v for k, v in fields.items() if isinstance(v, bytes)}
