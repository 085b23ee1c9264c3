"""Hosts -> frontier shards on a consistent-hash ring (uhashring, virtual nodes).

One host always lives in one shard, so one feeder owns a host's politeness timing, and
resizing from K to K+1 shards moves only about 1/(K+1) of the hosts.
"""

from __future__ import annotations

from functools import lru_cache

from uhashring import HashRing

__all__ = ["shard_of"]

_VNODES = 160


@lru_cache(maxsize=16)
def _ring(shards: int) -> HashRing:
    return HashRing(nodes={str(i): {"instance": i, "vnodes": _VNODES} for i in range(shards)})


@lru_cache(maxsize=65536)
def shard_of(host: str, shards: int) -> int:
    """The shard (0..shards-1) that owns ``host``."""
    if shards <= 1:
        return 0
    return int(_ring(shards).get_node(host.lower()))
