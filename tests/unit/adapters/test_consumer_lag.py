"""A subscriber's lag counts from the next record its handler has to handle, not from where the fetcher is: records
fetched but not handled yet are lag (what a slow handler leaves). Against a consumer that answers as aiokafka's
does (assignment, highwater, position); the real one is read by tests/integration/test_metrics_e2e.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from aiokafka.structs import TopicPartition

from gpuplace.adapters.kafka import ConsumerLag

PODS0, PODS1, NODES0 = TopicPartition("pods", 0), TopicPartition("pods", 1), TopicPartition("nodes", 0)


@dataclass
class Consumer:
    assigned: set[TopicPartition]
    high: dict[TopicPartition, int | None]
    fetched: dict[TopicPartition, int] = field(default_factory=dict)  # the fetcher's position

    def assignment(self) -> set[TopicPartition]:
        return set(self.assigned)

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.high.get(tp)

    async def position(self, tp: TopicPartition) -> int:
        return self.fetched[tp]


class Listener:
    def __init__(self) -> None:
        self.heard: list[str] = []

    async def on_partitions_revoked(self, revoked: object) -> None:
        self.heard.append("revoked")

    def on_partitions_assigned(self, assigned: object) -> None:  # a plain method, as aiokafka allows
        self.heard.append("assigned")


async def test_lag_is_highwater_less_the_next_record_to_handle_and_a_lost_partition_is_forgotten():
    inner = Listener()
    lag = ConsumerLag(inner)
    assert await lag.lags() == {}  # not started: no consumer yet
    consumer = Consumer({PODS0, PODS1, NODES0}, {PODS0: 120, PODS1: 40, NODES0: None}, {PODS0: 120, PODS1: 35})
    lag.subscriber = SimpleNamespace(consumer=consumer)
    # nothing handled yet: from the position it resumed at; no highwater (nothing fetched): not reported
    assert await lag.lags() == {("pods", 0): 0, ("pods", 1): 5}

    lag.handled(SimpleNamespace(topic="pods", partition=0, offset=99))  # fetched up to 120, handled up to 99
    assert (await lag.lags())[("pods", 0)] == 20

    await lag.on_partitions_revoked({PODS0})
    await lag.on_partitions_assigned({PODS0})
    assert inner.heard == ["revoked", "assigned"]  # the caller's listener still hears both
    consumer.fetched[PODS0] = 110  # its next owner moved it on; back here, it resumes from the commit
    assert (await lag.lags())[("pods", 0)] == 10

    lag.handled(SimpleNamespace(body=b"{}"))  # the in-memory test broker's records: no partition, ignored
