"""Handler wiring on FastStream's in-memory broker: typed events in, malformed records dead-lettered."""

import base64
import json

from faststream.kafka import TestKafkaBroker

from gpuplace.adapters.kafka import Route, cluster_partitioner, make_broker, subscribe
from gpuplace.cli.services import asyncapi_document
from gpuplace.contracts import topics
from gpuplace.contracts.events import GpuTelemetry, NodeEvent, PodEvent
from tests.builders import node_event, pod_event


async def test_valid_events_reach_the_handler_and_bad_ones_the_dead_letter_topic():
    broker = make_broker("127.0.0.1:9092")
    handled, letters = [], []

    async def handler(event: GpuTelemetry) -> None:
        handled.append(event)

    subscribe(broker, [Route(topics.TELEMETRY, GpuTelemetry, handler)], group_id="g", consumer="telemetry-ingest")

    @broker.subscriber(topics.DEADLETTER)
    async def collect(body: dict) -> None:
        letters.append(body)

    good = GpuTelemetry(cluster="east", node="n1", gpu_index=0, memory_total_mib=16384, memory_used_mib=100)
    bad = b'{"cluster": "east", "node": "n1", "gpu_index": 0, "memory_total_mib": 10, "memory_used_mib": 20}'
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(good.model_dump_json(by_alias=True).encode(), topic=topics.TELEMETRY,
                                  key=good.kafka_key())
        await test_broker.publish(bad, topic=topics.TELEMETRY, key=b"east/n1/0")
    assert [e.event_id for e in handled] == [good.event_id]
    assert len(letters) == 1
    letter = letters[0]
    assert letter["cluster"] == "east" and letter["consumer"] == "telemetry-ingest"
    assert "memory_used_mib exceeds memory_total_mib" in letter["reason"]
    assert base64.b64decode(letter["original_value_b64"]) == bad


def test_the_asyncapi_document_describes_every_topic():
    doc = asyncapi_document()
    addresses = {channel["address"] for channel in doc["channels"].values()}
    assert addresses == set(topics.ALL_TOPICS)
    assert "PodEvent" in json.dumps(doc["components"]["schemas"])


async def test_one_consumer_hands_each_topics_records_to_its_own_handler():
    broker = make_broker("127.0.0.1:9092")
    seen = []

    async def on_pod(event: PodEvent) -> None:
        seen.append(("pod", event.name))

    async def on_node(event: NodeEvent) -> None:
        seen.append(("node", event.name))

    subscribe(broker, [Route(topics.PODS, PodEvent, on_pod), Route(topics.NODES, NodeEvent, on_node)],
              group_id="g", consumer="placement")
    pod, node = pod_event("p1"), node_event("n1")
    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(pod.model_dump_json(by_alias=True).encode(), topic=topics.PODS, key=pod.kafka_key())
        await test_broker.publish(node.model_dump_json(by_alias=True).encode(), topic=topics.NODES,
                                  key=node.kafka_key())
    assert seen == [("pod", "p1"), ("node", "n1")]


def test_every_record_of_a_cluster_goes_to_one_partition():
    partitions = list(range(8))
    for cluster in ("east", "west", "eu-central-1.prod"):
        chosen = {cluster_partitioner(f"{cluster}/{entity}".encode(), partitions, partitions)
                  for entity in ("n1", "robots/p1", "n7/3", "x" * 40)}
        assert len(chosen) == 1
    spread = {cluster_partitioner(f"c{i}/n1".encode(), partitions, partitions) for i in range(64)}
    assert len(spread) == len(partitions)  # clusters still spread over the partitions



async def test_records_a_route_does_not_want_are_skipped_unread_and_not_dead_lettered():
    """Placement reads its placements topic for SLO violations only (services/placement/app.may_close_a_gpu):
    its own decided and bound events are skipped before parsing, even one that would not validate."""
    from gpuplace.contracts.events import PlacementEvent
    from services.placement.app import may_close_a_gpu

    broker = make_broker("127.0.0.1:9092")
    handled, letters = [], []

    async def handler(event: PlacementEvent) -> None:
        handled.append(event.kind)

    subscribe(broker, [Route(topics.PLACEMENTS, PlacementEvent, handler, wants=may_close_a_gpu)], group_id="g",
              consumer="placement")

    @broker.subscriber(topics.DEADLETTER)
    async def collect(body: dict) -> None:
        letters.append(body)

    async with TestKafkaBroker(broker) as test_broker:
        await test_broker.publish(b'{"kind": "decided", "not": "a placement event"}', topic=topics.PLACEMENTS,
                                  key=b"east/robots/p1")
        await test_broker.publish(b'{"kind": "slo_violation", "truncated', topic=topics.PLACEMENTS,
                                  key=b"east/robots/p1")
        await test_broker.publish(b'{"cluster": "east", "kin', topic=topics.PLACEMENTS, key=b"east/robots/p2")
        await test_broker.publish(b'{"kind": "decidedx", "cluster": "east"}', topic=topics.PLACEMENTS,
                                  key=b"east/robots/p3")
    assert handled == []
    # the malformed violation, the record cut before its kind and the kind the contract lacks: all parsed, refused
    assert [letter["consumer"] for letter in letters] == ["placement"] * 3
