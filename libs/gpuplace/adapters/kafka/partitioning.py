"""Which partition a record goes to: every record of one cluster to one partition.

Every record of one cluster goes to one partition (cluster_partitioner), and a service's topics are read by
one consumer with the range assignor, which hands each member the same partition numbers of every topic: a
placement worker therefore owns whole clusters, their pods, nodes and placements alike (DESIGN §2), as long
as the topics have the same partition count (topics.check_copartitioned).
"""

from __future__ import annotations

import re
from typing import Protocol

from aiokafka.partitioner import DefaultPartitioner

_CLUSTER_KEY = re.compile(rb"^([a-z0-9](?:[-a-z0-9.]*[a-z0-9])?)/")


class Partitioner(Protocol):
    """aiokafka's partitioner signature (the producer's `partitioner` option): the partition for a record's key,
    from the topic's partitions and those with a leader now. Spelled out because aiokafka ships no types."""

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int: ...


key_partitioner: Partitioner = DefaultPartitioner()
"""Kafka's default partitioner: the whole key hashed (murmur2). Telemetry, read by stateless workers, spreads so."""


def cluster_partitioner(key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
    """The partition of the key's cluster (`cluster/<entity>` keys), hashed as Kafka's default partitioner
    hashes a key, so that one consumer sees a cluster's events in the order they were produced."""
    match = _CLUSTER_KEY.match(key or b"")
    return key_partitioner(match.group(1) if match else key, all_partitions, available)


def partition_of(cluster: str, partitions: int) -> int:
    """The partition every record of `cluster` goes to, on a topic of `partitions` partitions."""
    return cluster_partitioner(f"{cluster}/".encode(), list(range(partitions)), [])


def cluster_of(key: bytes | None) -> str:
    """The cluster a record belongs to, from its `cluster/<entity>` key; 'unknown' when unreadable."""
    match = _CLUSTER_KEY.match(key or b"")
    return match.group(1).decode() if match else "unknown"


__all__ = ["Partitioner", "cluster_of", "cluster_partitioner", "key_partitioner", "partition_of"]
