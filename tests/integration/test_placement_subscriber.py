"""The example subscriber (examples/placement_subscriber) on the real broker: in its own consumer group it receives
every placement of its namespace and nothing of another, reads a placement with a field added by a newer producer,
skips a record that is not a placement without stopping, and `--from-time` starts at that time."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from examples.placement_subscriber.subscriber import Options, _options, build
from gpuplace.adapters.kafka import delete_topics, ensure_topics, make_broker, publish_event, publish_json
from gpuplace.contracts import PlacementEvent, topics
from gpuplace.contracts.events import GpuAssignment
from gpuplace.harness.kafka_users import password_variable
from gpuplace.settings import KafkaSettings

from .conftest import eventually, unique_name

pytestmark = pytest.mark.integration


class NewerPlacement(PlacementEvent):
    """A placement as a later gpuplace might publish it: one optional field more."""

    preemptible: bool = False


def _placement(namespace: str, pod: str, cluster: str) -> PlacementEvent:
    return PlacementEvent(cluster=cluster, kind="bound", namespace=namespace, pod=pod, node="n1", policy="gpuplace",
                          gpus=(GpuAssignment(index=0, memory_mib=9420, share_milli=500),))


def as_the_stacks_subscriber(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example reads GPUPLACE_KAFKA_* (examples/placement_subscriber.kafka_security): on the local stack it
    logs in as `subscriber`, whose ACLs let it read placements in a group of its own and write nothing."""
    password = os.environ.get(password_variable("subscriber"))
    if password and os.environ.get("GPUPLACE_KAFKA_SECURITY_PROTOCOL", "").startswith("SASL_"):
        monkeypatch.setenv("GPUPLACE_KAFKA_USERNAME", "subscriber")
        monkeypatch.setenv("GPUPLACE_KAFKA_PASSWORD", password)


async def test_the_example_subscriber_receives_exactly_its_namespaces_placements(
        kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    suffix, mine, theirs = "." + unique_name("subscriber"), unique_name("team-a"), unique_name("team-b")
    topic = topics.PLACEMENTS + suffix
    clusters = [unique_name("c") for _ in range(4)]  # several clusters: several partitions to read
    now = int(time.time() * 1000)
    kafka = KafkaSettings(kafka_bootstrap=kafka_bootstrap).kafka  # the tests' user, before the subscriber's
    producer = make_broker(kafka)
    received: dict[str, list[PlacementEvent]] = {"earliest": [], "from_time": []}
    apps = []
    try:
        await ensure_topics(kafka, [topic], partitions=3)
        await producer.start()
        earlier = [_placement(ns, f"p{i}", clusters[i % 4]) for i in range(8) for ns in (mine, theirs)]
        for event in earlier:
            await publish_event(producer, event, topic=topic, timestamp_ms=now - 60_000)
        middle = [_placement(ns, f"m{i}", clusters[i % 4]) for i in range(4) for ns in (mine, theirs)]
        for event in middle:  # before the subscribers start, after --from-time: only a seek finds them
            await publish_event(producer, event, topic=topic, timestamp_ms=now - 20_000)
        await publish_json(producer, b'{"kind": "not a placement"}', topic=topic, key=f"{clusters[0]}/x".encode())

        options = _options(["--namespace", mine, "--from-offset", "earliest", "--bootstrap", kafka_bootstrap,
                            "--topic-suffix", suffix])
        assert options == Options(kafka_bootstrap, mine, f"{mine}-placements", "earliest", None, topic)
        half_a_minute_ago = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((now - 30_000) / 1000))
        since = _options(["--namespace", mine, "--group", unique_name("since"), "--from-time", half_a_minute_ago,
                          "--bootstrap", kafka_bootstrap, "--topic-suffix", suffix])
        as_the_stacks_subscriber(monkeypatch)
        for name, opts in (("earliest", options), ("from_time", since)):
            app = build(opts, handle=received[name].append)
            apps.append(app)
            await app.broker.start()

        later = [_placement(ns, f"q{i}", clusters[i % 4]) for i in range(8) for ns in (mine, theirs)]
        newer = NewerPlacement(cluster=clusters[1], kind="unschedulable", namespace=mine, pod="r0",
                               reasons={"V100 nodes": "no GPU with 9420 MiB free"}, preemptible=True)
        for event in [*later, newer]:
            await publish_event(producer, event, topic=topic)

        expected = {e.event_id for e in [*earlier, *middle, *later, newer] if e.namespace == mine}
        expected_since = {e.event_id for e in [*middle, *later, newer] if e.namespace == mine}

        async def all_arrived() -> bool:
            return ({e.event_id for e in received["earliest"]} >= expected
                    and {e.event_id for e in received["from_time"]} >= expected_since)

        await eventually(all_arrived, timeout_s=60, what="the subscribers to receive their namespace's placements")
        await asyncio.sleep(1.0)  # anything extra would have come by now
        assert sorted(e.event_id for e in received["earliest"]) == sorted(expected)  # each once, none of theirs
        assert sorted(e.event_id for e in received["from_time"]) == sorted(expected_since)
        (read_newer,) = [e for e in received["earliest"] if e.pod == "r0"]
        assert read_newer.reasons == {"V100 nodes": "no GPU with 9420 MiB free"}
        assert not hasattr(read_newer, "preemptible")  # a v1 reader: the added field ignored, not an error
    finally:
        for app in apps:
            await app.broker.stop()
        await producer.stop()
        await delete_topics(kafka, [topic])
