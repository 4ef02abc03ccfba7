"""Redis backend (``redis://``, ``rediss://``, ``redis+sentinel://``, ``redis+cluster://``).

redis-py asyncio with hiredis. Every call is bounded: socket and connect timeouts, a blocking
connection pool whose wait is bounded too, and at most one immediate retry on a broken pooled
connection (the first command after a Redis restart). Redis exceptions become ``StoreError`` here.

Cancellation (a client disconnecting mid-call, or the store's own operation timeout) is safe:
redis-py disconnects a connection whose command was interrupted before it goes back to the pool,
so no later caller can read a reply meant for another (the bug class of CVE-2023-28858/28859).
``tests/state/test_redis.py`` checks it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from proxy.config.store import StoreSettings
from proxy.errors import ConfigError, StoreError
from proxy.state.store.base import IndexEntry

# Compare the stored value by digest, so a CAS sends one copy of the record, not two.
_CAS = """
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '' then
  if current then return 0 end
elseif not current or redis.sha1hex(current) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_DEFAULT_PORT = 6379
_DEFAULT_SENTINEL_PORT = 26379


@dataclass(frozen=True)
class SentinelTarget:
    """``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/db][?...]``.

    The password is the master's; ``?sentinel_password=`` authenticates to the sentinels and
    ``?ssl=true`` uses TLS to the master.
    """

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None
    ssl: bool = False


@dataclass(frozen=True)
class ClusterTarget:
    """``redis+cluster://[[user]:password@]host[:port][,host[:port]...][?ssl=true]``."""

    nodes: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = None
    ssl: bool = False


def _hosts(netloc: str, default_port: int, url: str) -> tuple[tuple[str, int], ...]:
    hosts = []
    for item in filter(None, (part.strip() for part in netloc.split(","))):
        if item.startswith("["):  # [ipv6]:port
            host, _, port = item[1:].partition("]")
            port = port.removeprefix(":")
        else:
            host, _, port = item.partition(":")
        try:
            hosts.append((host, int(port) if port else default_port))
        except ValueError as exc:
            raise ConfigError(f"store.url: bad port in {item!r} of {redact_url(url)}") from exc
    if not hosts:
        raise ConfigError(f"store.url: no host in {redact_url(url)}")
    return tuple(hosts)


def _split_auth(url: str, scheme: str) -> tuple[str | None, str | None, str, str, dict[str, str]]:
    rest = url[len(scheme) :]
    netloc, _, tail = rest.partition("/")
    path, _, query = tail.partition("?")
    if "?" in netloc:  # no path: the query follows the hosts directly
        netloc, _, query = netloc.partition("?")
    username = password = None
    if "@" in netloc:
        auth, _, netloc = netloc.rpartition("@")
        user, has_password, secret = auth.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    params = {k: v[-1] for k, v in parse_qs(query).items()}
    return username, password, netloc, path, params


def _flag(params: dict[str, str], name: str) -> bool:
    return params.get(name, "").lower() in ("1", "true", "yes")


def parse_sentinel_url(url: str) -> SentinelTarget:
    username, password, netloc, path, params = _split_auth(url, "redis+sentinel://")
    parts = [p for p in path.split("/") if p]
    if not parts:
        raise ConfigError(f"store.url: a sentinel URL names the service: {redact_url(url)}")
    try:
        db = int(parts[1]) if len(parts) > 1 else 0
    except ValueError as exc:
        raise ConfigError(f"store.url: the database must be a number in {redact_url(url)}") from exc
    return SentinelTarget(
        sentinels=_hosts(netloc, _DEFAULT_SENTINEL_PORT, url),
        service_name=unquote(parts[0]),
        db=db,
        username=username,
        password=password,
        sentinel_password=params.get("sentinel_password"),
        ssl=_flag(params, "ssl"),
    )


def parse_cluster_url(url: str) -> ClusterTarget:
    username, password, netloc, _, params = _split_auth(url, "redis+cluster://")
    return ClusterTarget(
        nodes=_hosts(netloc, _DEFAULT_PORT, url),
        username=username,
        password=password,
        ssl=_flag(params, "ssl"),
    )


def redact_url(url: str) -> str:
    """The URL without its password, for messages and logs."""
    password = urlsplit(url).password
    return url if password is None else url.replace(f":{password}@", ":***@", 1)


def _connection_options(settings: StoreSettings) -> dict[str, Any]:
    timeout = settings.operation_timeout_seconds
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        # One immediate retry heals a pooled connection that Redis closed (restart, idle
        # timeout); more would only stretch a request past the operation timeout.
        "retry": Retry(NoBackoff(), 1),
    }


def _client(settings: StoreSettings) -> tuple[Any, Sentinel | None]:
    url = settings.url
    options = _connection_options(settings)
    if url.startswith("redis+sentinel://"):
        target = parse_sentinel_url(url)
        sentinel_options = {k: v for k, v in options.items() if k != "retry"}
        if target.sentinel_password:
            sentinel_options["password"] = target.sentinel_password
        sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_options, **options)
        master = sentinel.master_for(
            target.service_name,
            db=target.db,
            username=target.username,
            password=target.password,
            ssl=target.ssl,
            max_connections=settings.max_connections,
        )
        return master, sentinel
    if url.startswith("redis+cluster://"):
        cluster = parse_cluster_url(url)
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in cluster.nodes],
            username=cluster.username,
            password=cluster.password,
            ssl=cluster.ssl,
            max_connections=settings.max_connections,
            **options,
        ), None
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=settings.max_connections,
        timeout=settings.operation_timeout_seconds,  # bounded wait for a free connection
        **options,
    )
    return Redis.from_pool(pool), None


@contextmanager
def _mapped(what: str) -> Iterator[None]:
    """The one place redis-py's exceptions become ours. RuntimeError too: uvloop raises it for a
    write to a transport Redis has just reset ("unable to perform operation on <TCPTransport
    closed=True>"), and redis-py lets it through (found by tests/faults, reset mode)."""
    try:
        yield
    except (RedisError, OSError, RuntimeError) as exc:
        raise StoreError(f"{what}: {exc}") from exc


class RedisBackend:
    def __init__(
        self, client: Any, *, name: str = "redis", sentinel: Sentinel | None = None
    ) -> None:
        self.name = name
        self._client = client
        self._sentinel = sentinel
        self._cas = client.register_script(_CAS)
        self._release = client.register_script(_RELEASE)

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> RedisBackend:
        client, sentinel = _client(settings)
        return cls(client, name=settings.url.partition("://")[0], sentinel=sentinel)

    async def get(
        self, key: str, *, ttl_ms: int | None = None, touch: IndexEntry | None = None
    ) -> bytes | None:
        with _mapped("redis GET failed"):
            # The client is one of three redis-py classes (plain, cluster, sentinel master), whose
            # commands redis-py types as Any: each read is typed where it lands.
            value: bytes | None
            if touch is None:
                if ttl_ms is None:
                    value = await self._client.get(key)
                else:
                    value = await self._client.getex(key, px=ttl_ms)  # read + TTL refresh: one trip
                return value
            # Still one trip: the index's score moves with the read (XX: never adds a member, so
            # a miss leaves no trace), and the index lives as long as its newest record.
            pipe = self._client.pipeline(transaction=False)
            pipe.getex(key, px=ttl_ms) if ttl_ms is not None else pipe.get(key)
            pipe.zadd(touch.index, {touch.member: touch.score}, xx=True)
            pipe.pexpire(touch.index, touch.ttl_ms)
            value, _, _ = await pipe.execute()
            return value

    async def get_many(self, keys: list[str]) -> list[tuple[bytes | None, int | None]]:
        if not keys:
            return []
        with _mapped("redis GET failed"):
            pipe = self._client.pipeline(transaction=False)
            for key in keys:
                pipe.get(key)
                pipe.pttl(key)
            replies = await pipe.execute()
        return [
            (value, None if ttl < 0 else int(ttl))
            for value, ttl in zip(replies[::2], replies[1::2], strict=True)
        ]

    async def index_add(self, entry: IndexEntry) -> None:
        with _mapped("redis ZADD failed"):
            pipe = self._client.pipeline(transaction=False)
            pipe.zadd(entry.index, {entry.member: entry.score})
            if entry.limit:
                pipe.zremrangebyrank(entry.index, 0, -(entry.limit + 1))
            pipe.pexpire(entry.index, entry.ttl_ms)
            await pipe.execute()

    async def index_page(
        self, index: str, *, before: float | None, limit: int
    ) -> list[tuple[str, float]]:
        highest = "+inf" if before is None else f"({before!r}"  # "(": strictly below
        with _mapped("redis ZREVRANGEBYSCORE failed"):
            pairs = await self._client.zrevrangebyscore(
                index, highest, "-inf", start=0, num=limit, withscores=True
            )
        return [(m.decode() if isinstance(m, bytes) else m, float(s)) for m, s in pairs]

    async def index_remove(self, index: str, members: list[str]) -> None:
        if members:
            with _mapped("redis ZREM failed"):
                await self._client.zrem(index, *members)

    async def compare_and_set(
        self, key: str, expected: bytes | None, value: bytes, *, ttl_ms: int
    ) -> bool:
        digest = "" if expected is None else hashlib.sha1(expected).hexdigest()
        with _mapped("redis compare-and-set failed"):
            return bool(await self._cas(keys=[key], args=[digest, value, ttl_ms]))

    async def delete(self, key: str) -> bool:
        with _mapped("redis DEL failed"):
            return bool(await self._client.delete(key))

    async def acquire(self, key: str, token: str, *, ttl_ms: int) -> bool:
        with _mapped("redis SET NX failed"):
            return bool(await self._client.set(key, token, nx=True, px=ttl_ms))

    async def release(self, key: str, token: str) -> bool:
        with _mapped("redis lock release failed"):
            return bool(await self._release(keys=[key], args=[token]))

    async def set_forever(self, key: str, value: bytes, *, only_if_absent: bool) -> bytes:
        with _mapped("redis SET failed"):
            await self._client.set(key, value, nx=only_if_absent)
            stored: bytes | None = await self._client.get(key)
        if stored is None:  # deleted between the two calls: the next call creates it again
            raise StoreError(f"redis lost {key} right after SET NX")
        return stored

    async def scan(self, prefix: str, *, limit: int) -> list[str]:
        keys: list[str] = []
        with _mapped("redis SCAN failed"):
            async for key in self._client.scan_iter(match=f"{prefix}*", count=1000):
                keys.append(key.decode() if isinstance(key, bytes) else key)
                if len(keys) >= limit:
                    break
        return keys

    async def ttl_ms(self, key: str) -> int | None:
        with _mapped("redis PTTL failed"):
            remaining = await self._client.pttl(key)
        return None if remaining < 0 else int(remaining)

    async def ping(self) -> None:
        with _mapped("redis PING failed"):
            await self._client.ping()

    async def aclose(self) -> None:
        with _mapped("closing the redis client failed"):
            await self._client.aclose()
            if self._sentinel is not None:
                for client in self._sentinel.sentinels:
                    await client.aclose()
