"""Which clusters a placement worker loads when Kafka assigns it partitions."""

import asyncio

from aiokafka.structs import TopicPartition

from gpuplace.adapters.kafka import cluster_partitioner, partition_of
from services.placement.ownership import ClusterOwnership

CLUSTERS = [f"cluster-{i}" for i in range(16)]


class Service:
    def __init__(self) -> None:
        self.reloads, self.loaded = 0, []

    def reload_clusters(self) -> None:
        self.reloads += 1

    async def load(self, cluster: str) -> None:
        self.loaded.append(cluster)


def test_a_cluster_is_owned_by_the_partition_its_records_go_to():
    for cluster in CLUSTERS:
        assert partition_of(cluster, 4) == cluster_partitioner(f"{cluster}/robots/p1".encode(), [0, 1, 2, 3], [])


async def test_an_assignment_forgets_every_cluster_and_loads_the_owned_ones_at_once():
    service = Service()
    ownership = ClusterOwnership(service, CLUSTERS, "pods", partitions=4)
    await ownership.on_partitions_assigned({TopicPartition("pods", 1), TopicPartition("pods", 3),
                                            TopicPartition("nodes", 0)})
    await asyncio.sleep(0)  # the loads run as tasks, not inside the rebalance
    assert service.reloads == 1
    expected = [c for c in CLUSTERS if partition_of(c, 4) in (1, 3)]
    assert expected and sorted(service.loaded) == sorted(expected)


async def test_without_a_known_partition_count_clusters_load_on_their_next_event():
    service = Service()
    ownership = ClusterOwnership(service, CLUSTERS, "pods", partitions=None)
    await ownership.on_partitions_assigned({TopicPartition("pods", 0)})
    await asyncio.sleep(0)
    assert service.reloads == 1 and service.loaded == []
