"""`gpuplace export` and `gpuplace import` on the real broker: a cluster's events of a time range, in the log's order,
and nothing else; imported under another suffix (other partition count) and exported again, the same log; a file
with a bad line publishes nothing; a cluster the topics do not hold is one line saying which they do."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

import pytest

from gpuplace.adapters.kafka import delete_topics, ensure_topics, list_topics, make_broker, publish_event, publish_json
from gpuplace.contracts import topics
from gpuplace.contracts.envelope import Envelope
from gpuplace.contracts.events import GpuTelemetry, PlacementEvent
from tests.builders import node_event, pod_event

from .conftest import unique_name

pytestmark = pytest.mark.integration


async def _gpuplace(bootstrap: str, *args: str, suffix: str = "") -> tuple[int, str, str]:
    env = {**os.environ, "GPUPLACE_KAFKA_BOOTSTRAP": bootstrap, "GPUPLACE_TOPIC_SUFFIX": suffix}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuplace.cli.app", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    return process.returncode or 0, out.decode(), err.decode()


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_export_orders_a_clusters_range_and_import_reproduces_it(kafka_bootstrap: str, tmp_path: Path) -> None:
    cluster, other = unique_name("evlog"), unique_name("evlog-other")
    suffix_a, suffix_b = "." + unique_name("evlog-a"), "." + unique_name("evlog-b")
    names = [t + s for s in (suffix_a, suffix_b) for t in topics.ALL_TOPICS]
    t0 = int(time.time() * 1000) - 60_000
    broker, spread = make_broker(kafka_bootstrap), make_broker(kafka_bootstrap, by_cluster=False)

    def pod(name: str, on: str = cluster) -> Envelope:
        return pod_event(name, cluster=on)

    def node(name: str) -> Envelope:
        return node_event(name, cluster=cluster)

    def placed(name: str) -> Envelope:
        return PlacementEvent(cluster=cluster, kind="decided", namespace="robots", pod=name, node="n1",
                              policy="gpuplace")

    def gpu(index: int) -> Envelope:
        return GpuTelemetry(cluster=cluster, node="n1", gpu_index=index, memory_total_mib=16384, memory_used_mib=10)

    # (topic, event, ms after t0), in publish order; the range exported is [t0+2000, t0+9000)
    sent = [
        (topics.PODS, pod("p0"), 1000),  # before the range
        (topics.PODS, pod("p1"), 2000),
        (topics.PODS, pod("o1", other), 2000),  # another cluster, at every step below too
        *[(topics.TELEMETRY, gpu(i), 2500 + 10 * i) for i in range(4)],  # spread over partitions by whole key
        (topics.PLACEMENTS, placed("p1"), 3000),
        (topics.PODS, pod("p2"), 4000),
        (topics.PLACEMENTS, pod("o2", other), 4000),
        (topics.PLACEMENTS, placed("p2"), 5000),
        (topics.NODES, node("n2"), 6000),  # published before p3, same time: pods sort first (topic order)
        (topics.PODS, pod("p3"), 6000),
        (topics.NODES, node("n3"), 6800),
        (topics.PODS, pod("p5"), 7000),
        (topics.PODS, pod("p6"), 6500),  # after p5 on its partition, though earlier by its clock: stays after
        (topics.PODS, pod("p4"), 9000),  # the range's end is exclusive
    ]
    expected = ["p1", "gpu0", "gpu1", "gpu2", "gpu3", "placed p1", "p2", "placed p2", "p3", "n2", "n3", "p5", "p6"]

    def label(line: dict) -> str:
        event = line["event"]
        return {"gpuplace.pods.v1": lambda: event["name"], "gpuplace.nodes.v1": lambda: event["name"],
                "gpuplace.telemetry.v1": lambda: f"gpu{event['gpu_index']}",
                "gpuplace.placements.v1": lambda: f"placed {event['pod']}"}[line["topic"]]()

    try:
        await ensure_topics(kafka_bootstrap, [t + suffix_a for t in topics.ALL_TOPICS], partitions=3)
        await broker.start()
        await spread.start()
        for topic, event, at in sent:
            await publish_event(spread if topic == topics.TELEMETRY else broker, event, topic=topic + suffix_a,
                                timestamp_ms=t0 + at)
        await publish_json(broker, b"not json", topic=topics.PODS + suffix_a, key=f"{cluster}/robots/x".encode(),
                           timestamp_ms=t0 + 3500)  # a poison record: left out, and said so

        first, again = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
        window = ("--from", str(t0 + 2000), "--to", str(t0 + 9000))
        rc, _, err = await _gpuplace(kafka_bootstrap, "export", "--cluster", cluster, *window, "-o", str(first),
                                     "--progress-every", "5", suffix=suffix_a)
        assert rc == 0, err
        exported = _lines(first)
        assert [label(line) for line in exported] == expected
        assert "left out 1 record(s) that are not JSON" in err and "read 5 records" in err
        by_id = {event.event_id: (event, at) for _, event, at in sent}
        for line in exported:
            event, at = by_id[line["event"]["event_id"]]
            assert line["timestamp"] == t0 + at  # the record's own timestamp, as published
            assert line["event"] == json.loads(event.model_dump_json(by_alias=True))
            assert line["key"] == event.kafka_key().decode() and line["schema"] == 1
            assert line["topic"] in topics.ALL_TOPICS  # the contract's name, without the stack's suffix
        assert [line["timestamp"] for line in exported][-3:] == [t0 + 6800, t0 + 7000, t0 + 6500]

        only = tmp_path / "pods.jsonl"
        rc, _, err = await _gpuplace(kafka_bootstrap, "export", "--cluster", cluster, *window, "--topics", "pods",
                                     "-o", str(only), suffix=suffix_a)
        assert rc == 0, err
        assert [label(line) for line in _lines(only)] == ["p1", "p2", "p3", "p5", "p6"]

        rc, _, err = await _gpuplace(kafka_bootstrap, "import", str(first), "--topic-suffix", suffix_b,
                                     "--partitions", "2")
        assert rc == 0, err
        assert f"published {len(expected)} record(s)" in err
        rc, _, err = await _gpuplace(kafka_bootstrap, "export", "--cluster", cluster, *window, "-o", str(again),
                                     suffix=suffix_b)
        assert rc == 0, err

        def content(lines: list[dict]) -> list[tuple]:
            return [(x["topic"], x["key"], x["timestamp"], x["schema"], x["event"]) for x in lines]

        assert content(_lines(again)) == content(exported)
    finally:
        await broker.stop()
        await spread.stop()
        await delete_topics(kafka_bootstrap, names)


async def test_a_file_with_a_bad_line_publishes_nothing(kafka_bootstrap: str, tmp_path: Path) -> None:
    suffix = "." + unique_name("evlog-bad")
    good = {"topic": topics.PODS, "partition": 0, "offset": 0, "timestamp": 1, "key": "east/robots/p",
            "schema": 1, "event": json.loads(pod_event("p").model_dump_json(by_alias=True))}
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "timestamp": "yesterday"}) + "\n")
    try:
        rc, _, err = await _gpuplace(kafka_bootstrap, "import", str(path), "--topic-suffix", suffix)
        assert rc == 1
        assert err.strip() == (f"gpuplace: error: {path}: line 2: 'timestamp' must be an integer, not str; "
                               "nothing was published")
        assert not {t + suffix for t in topics.ALL_TOPICS} & await list_topics(kafka_bootstrap)
    finally:
        await delete_topics(kafka_bootstrap, [t + suffix for t in topics.ALL_TOPICS])


async def test_export_and_replay_say_when_kafkas_retention_deleted_the_logs_beginning(kafka_bootstrap: str,
                                                                                      tmp_path: Path) -> None:
    """What replay needs is the log from its beginning; a partition whose first records retention deleted (here
    deleted by hand, as retention.ms would) makes export and replay say so, naming the partition and offset."""
    from aiokafka.admin import RecordsToDelete
    from aiokafka.structs import TopicPartition

    from gpuplace.adapters.kafka import admin_client, partition_of

    cluster, suffix = unique_name("trimmed"), "." + unique_name("trimmed")
    names = [t + suffix for t in topics.ALL_TOPICS]
    broker = make_broker(kafka_bootstrap)
    try:
        await ensure_topics(kafka_bootstrap, names, partitions=2)
        await broker.start()
        await publish_event(broker, node_event("n1", cluster=cluster), topic=topics.NODES + suffix)
        for name in ("p0", "p1", "p2"):
            await publish_event(broker, pod_event(name, cluster=cluster), topic=topics.PODS + suffix)
        pods = TopicPartition(topics.PODS + suffix, partition_of(cluster, 2))
        async with admin_client(kafka_bootstrap) as admin:
            await admin.delete_records({pods: RecordsToDelete(before_offset=2)})  # p0 and p1 gone

        rc, _, err = await _gpuplace(kafka_bootstrap, "export", "--cluster", cluster, "-o", str(tmp_path / "l.jsonl"),
                                     suffix=suffix)
        assert rc == 0, err
        assert f"Kafka's retention deleted the earliest records of {pods.topic}[{pods.partition}] from offset 2" in err
        assert [json.loads(x)["event"].get("name") for x in (tmp_path / "l.jsonl").read_text().splitlines()] == \
            ["n1", "p2"]
        rc, _, err = await _gpuplace(kafka_bootstrap, "replay", "--cluster", cluster, "--source", "kafka", "--json",
                                     suffix=suffix)
        assert rc == 0, err
        assert "gpuplace replay: warning: the log no longer starts at its beginning" in err and \
            f"{pods.topic}[{pods.partition}] from offset 2" in err
        rc, _, err = await _gpuplace(kafka_bootstrap, "export", "--cluster", cluster, "--from", "0", "-o",
                                     str(tmp_path / "r.jsonl"), suffix=suffix)
        assert rc == 0 and "retention" not in err  # a range asked for from a time: not the log's beginning
    finally:
        await broker.stop()
        await delete_topics(kafka_bootstrap, names)


async def test_a_cluster_the_log_does_not_hold_is_one_line_naming_the_clusters_it_does(kafka_bootstrap: str,
                                                                                      tmp_path: Path) -> None:
    """A typo in --cluster (or a suffix no topic has) used to end in aiokafka's CancelledError traceback, or in an
    empty export that looked like success; now export and replay say which clusters the topics hold."""
    cluster, other = unique_name("evlog-east"), unique_name("evlog-west")
    suffix = "." + unique_name("evlog-typo")
    names = [t + suffix for t in topics.ALL_TOPICS]
    broker = make_broker(kafka_bootstrap)
    try:
        await ensure_topics(kafka_bootstrap, names, partitions=3)
        await broker.start()
        for on in (cluster, other):
            await publish_event(broker, pod_event("p0", cluster=on), topic=topics.PODS + suffix)
            await publish_event(broker, node_event("n0", cluster=on), topic=topics.NODES + suffix)
        out = tmp_path / "typo.jsonl"
        for command in (["export", "-o", str(out)], ["replay"]):
            rc, _, err = await _gpuplace(kafka_bootstrap, *command, "--cluster", cluster + "x", suffix=suffix)
            assert rc == 1 and err.count("\n") == 1, err
            assert f"no records of cluster '{cluster}x' found on " in err, err
            assert f"clusters with records there: {', '.join(sorted([cluster, other]))}" in err, err
        assert not out.exists()
        rc, _, err = await _gpuplace(kafka_bootstrap, "export", "--cluster", cluster, "-o", "-",
                                     suffix="." + unique_name("evlog-none"))
        assert rc == 1 and err.count("\n") == 1 and "none of the topics" in err and "exists" in err, err
        rc, _, err = await _gpuplace(kafka_bootstrap, "export", "--cluster", cluster, "-o", str(out), suffix=suffix)
        assert rc == 0 and len(_lines(out)) == 2, err  # the cluster's own pod and node
    finally:
        await broker.stop()
        await delete_topics(kafka_bootstrap, names)
