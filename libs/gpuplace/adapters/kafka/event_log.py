"""Read a cluster's event log out of Kafka, and publish one back (`gpuplace export`, `gpuplace import`).

Reading: a cluster's records are on one partition of each topic (cluster_partitioner), so only that partition is
read, except on the topics whose records are spread by their whole key (event_log.SPREAD_BY_KEY: telemetry),
where every partition is; either way only records whose key is `<cluster>/...` are kept. Each partition is read
from the first offset at or after `start_ms` (offsets_for_times) up to its end offset when the export began: an
export never waits for records to come, and what arrives meanwhile is left for the next one. The records are held
in memory for the merge: a day of a 2,000-pod cluster's events is tens of MB.

Writing: the records are published in the log's order to `<topic><suffix>` with their key and their original
timestamp (a time range of the imported log selects the same records), through publish_json, by the partitioner
their producer used, so each cluster's records land on the one partition its consumers expect, whatever the
target topics' partition count. Missing topics are created first (ensure_topics), as `gpuplace topics` would.
Keeping the timestamps means the target topics' retention.ms applies to them: a log older than it is deleted by
the broker's next retention check, so a postmortem of old logs sets retention.ms=-1 on those topics.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from gpuplace.adapters.event_log import SPREAD_BY_KEY, ClusterNotInLog, LogRecord, merge, of_record
from gpuplace.adapters.kafka.connection import Kafka, client_options, make_broker, reaching, start_broker
from gpuplace.adapters.kafka.partitioning import partition_of
from gpuplace.adapters.kafka.producer import publish_json
from gpuplace.adapters.kafka.topics import admin_client, ensure_topics

Progress = Callable[[str], None]
_STALL_S = 30.0  # a partition that yields nothing for this long while short of its end offset is an error


@dataclass
class Exported:
    """What an export read: the records in log order, and what it left out and why."""

    records: list[LogRecord]
    absent_topics: list[str] = field(default_factory=list)
    not_json: int = 0  # records of the cluster whose value is not a JSON object (their dead letters are kept)
    # "topic[partition]" -> its first offset, for partitions read from the log's beginning whose first records
    # Kafka's retention (retention.ms) already deleted: the log read is not the whole story
    trimmed: dict[str, int] = field(default_factory=dict)

    def trimmed_note(self) -> str | None:
        """One line saying which partitions lost their beginning to Kafka's retention; None when none did."""
        if not self.trimmed:
            return None
        where = ", ".join(f"{tp} from offset {offset}" for tp, offset in sorted(self.trimmed.items()))
        return (f"the log no longer starts at its beginning: Kafka's retention deleted the earliest records of "
                f"{where}; what they held (nodes, pods, decisions before the first record read) is missing, so a "
                "state rebuilt from this log may differ from the one placement had")


async def read_cluster_log(kafka: Kafka, *, cluster: str, topic_names: Sequence[str], suffix: str = "",
                           start_ms: int | None = None, end_ms: int | None = None, progress: Progress | None = None,
                           progress_every: int = 10_000) -> Exported:
    """The records of `cluster` on `topic_names` (contract names; read as name + suffix) with a timestamp in
    [start_ms, end_ms), in the log's order (event_log.merge)."""
    wanted, absent = await _partitions_of(kafka, cluster, topic_names, suffix)
    exported = Exported([], absent)
    if not wanted:
        return exported
    consumer = await _started_consumer(kafka)
    try:
        starts = await _start_offsets(consumer, list(wanted), start_ms)
        if start_ms is None:
            exported.trimmed = {f"{tp.topic}[{tp.partition}]": starts[tp] for tp in wanted if starts[tp] > 0}
        ends = await consumer.end_offsets(list(wanted))
        todo = {tp for tp in wanted if starts[tp] < ends[tp]}
        consumer.assign(list(todo))
        for tp in todo:
            consumer.seek(tp, starts[tp])
        collector = _Collector(wanted, f"{cluster}/".encode(), start_ms, end_ms, exported, progress, progress_every,
                               by_partition={tp: [] for tp in todo})
        await _read_to_ends(consumer, todo, ends, collector)
        exported.records = list(merge(collector.by_partition.values()))
        return exported
    finally:
        await consumer.stop()


async def _partitions_of(kafka: Kafka, cluster: str, topic_names: Sequence[str],
                         suffix: str) -> tuple[dict[TopicPartition, str], list[str]]:
    """The partitions that hold `cluster`'s records (each with its contract's topic name), and the topics absent."""
    counts = await _partition_counts(kafka, [name + suffix for name in topic_names])
    wanted: dict[TopicPartition, str] = {}  # partition -> the contract's topic name
    absent = []
    for name in topic_names:
        real = name + suffix
        count = counts.get(real, 0)
        if not count:
            absent.append(real)
            continue
        chosen = list(range(count)) if name in SPREAD_BY_KEY else [partition_of(cluster, count)]
        wanted.update({TopicPartition(real, p): name for p in chosen})
    return wanted, absent


@dataclass
class _Collector:
    """Keeps the records of one cluster (keys starting with `prefix`) in [start_ms, end_ms), by partition, and
    counts what it reads for `progress`."""

    wanted: dict[TopicPartition, str]
    prefix: bytes
    start_ms: int | None
    end_ms: int | None
    exported: Exported
    progress: Progress | None
    progress_every: int
    by_partition: dict[TopicPartition, list[LogRecord]]
    read: int = 0

    def take(self, tp: TopicPartition, messages: Sequence[Any], end: int) -> None:
        for message in messages:
            if message.offset >= end:
                break
            self.read += 1
            if self.progress and self.read % self.progress_every == 0:
                self.progress(f"read {self.read} records ({tp.topic}[{tp.partition}] at offset {message.offset})")
            if not (message.key or b"").startswith(self.prefix):
                continue
            if (self.start_ms is not None and message.timestamp < self.start_ms) or (
                    self.end_ms is not None and message.timestamp >= self.end_ms):
                continue
            record = of_record(self.wanted[tp], tp.partition, message.offset, message.timestamp, message.key,
                               message.value)
            if record is None:
                self.exported.not_json += 1
            else:
                self.by_partition[tp].append(record)


async def _read_to_ends(consumer: AIOKafkaConsumer, todo: set[TopicPartition], ends: dict[TopicPartition, int],
                        collector: _Collector) -> None:
    """Read every partition of `todo` up to its end offset; a partition that yields nothing for _STALL_S short of
    it is an error."""
    loop = asyncio.get_running_loop()
    last_progress = loop.time()
    while todo:
        batches = await consumer.getmany(*todo, timeout_ms=1000)
        if batches:
            last_progress = loop.time()
        elif loop.time() - last_progress > _STALL_S:
            raise TimeoutError(f"reading {sorted(map(str, todo))} stalled for {_STALL_S:.0f} s short of "
                               "their end offsets")
        for tp, messages in batches.items():
            collector.take(tp, messages, ends[tp])
        for tp in list(todo):
            if await consumer.position(tp) >= ends[tp]:
                todo.discard(tp)
                consumer.pause(tp)


async def read_known_cluster_log(kafka: Kafka, *, cluster: str, topic_names: Sequence[str], suffix: str = "",
                                 **options: Any) -> Exported:
    """read_cluster_log, refusing a cluster the topics hold no record of (a typo, or the wrong topic suffix) with
    ClusterNotInLog, which names the clusters they do hold. A known cluster with no record in the time range is
    no error: its export is empty."""
    exported = await read_cluster_log(kafka, cluster=cluster, topic_names=topic_names, suffix=suffix, **options)
    if exported.records or exported.not_json:
        return exported
    present = await clusters_in_log(kafka, [name + suffix for name in topic_names])
    if cluster not in present:
        raise ClusterNotInLog(cluster, [name + suffix for name in topic_names], exported.absent_topics, present)
    return exported


async def clusters_in_log(kafka: Kafka, names: Sequence[str], *, tail: int = 1000) -> list[str]:
    """The clusters (the `<cluster>/` of the keys) of the last `tail` records of each partition of the existing
    topics of `names`: every cluster that published lately, read in one bounded pass however long the log."""
    counts = await _partition_counts(kafka, list(names))
    partitions = [TopicPartition(topic, p) for topic, count in counts.items() for p in range(count)]
    if not partitions:
        return []
    consumer = await _started_consumer(kafka)
    try:
        begins, ends = await consumer.beginning_offsets(partitions), await consumer.end_offsets(partitions)
        todo = {tp for tp in partitions if ends[tp] > begins[tp]}
        consumer.assign(list(todo))
        for tp in todo:
            consumer.seek(tp, max(begins[tp], ends[tp] - tail))
        found: set[str] = set()
        while todo:
            batches = await consumer.getmany(*todo, timeout_ms=1000)
            found.update(m.key.split(b"/", 1)[0].decode("utf-8", "replace") for messages in batches.values()
                         for m in messages if m.key and b"/" in m.key)
            todo = {tp for tp in todo if await consumer.position(tp) < ends[tp]}
        return sorted(found)
    finally:
        await consumer.stop()


async def _started_consumer(kafka: Kafka) -> AIOKafkaConsumer:
    """A group-less consumer, started. The pause after start lets aiokafka's group-less coordinator start its
    task: a consumer stopped before that task's first step re-raised the task's CancelledError from stop()."""
    consumer = AIOKafkaConsumer(**client_options(kafka), enable_auto_commit=False, auto_offset_reset="earliest")
    async with reaching(kafka):
        await consumer.start()
    await asyncio.sleep(0)
    return consumer


async def _partition_counts(kafka: Kafka, names: list[str]) -> dict[str, int]:
    """Each existing topic of `names` -> its partition count (the count partition_of hashes over)."""
    async with admin_client(kafka) as admin:
        present = [n for n in names if n in set(await admin.list_topics())]
        described = await admin.describe_topics(present) if present else []
    return {t["topic"]: len(t["partitions"]) for t in described if t["error_code"] == 0}


async def _start_offsets(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                         start_ms: int | None) -> dict[TopicPartition, int]:
    """Where each partition's range begins: its first offset at or after `start_ms` (its end when none is)."""
    if start_ms is None:
        return dict(await consumer.beginning_offsets(tps))
    found = await consumer.offsets_for_times(dict.fromkeys(tps, start_ms))
    ends = await consumer.end_offsets(tps)
    return {tp: found[tp].offset if found.get(tp) is not None else ends[tp] for tp in tps}


async def publish_log(kafka: Kafka, records: Sequence[LogRecord], *, suffix: str = "", partitions: int = 4,
                      replication_factor: int = 1, progress: Progress | None = None,
                      progress_every: int = 10_000) -> int:
    """Publish `records` in order to their topics + `suffix` (module docstring); returns how many were sent."""
    names = sorted({r.topic + suffix for r in records})
    if not names:
        return 0
    await ensure_topics(kafka, names, partitions=partitions, replication_factor=replication_factor)
    keyed, spread = make_broker(kafka, client_id="gpuplace-import"), make_broker(
        kafka, client_id="gpuplace-import-spread", by_cluster=False)
    await start_broker(keyed, kafka)
    try:
        await start_broker(spread, kafka)
        try:
            pending = []
            for sent, record in enumerate(records, 1):
                broker = spread if record.topic in SPREAD_BY_KEY else keyed
                pending.append(await publish_json(broker, record.body(), topic=record.topic + suffix,
                                                  key=record.key_bytes(), timestamp_ms=record.timestamp,
                                                  no_confirm=True))
                if len(pending) >= 1000:
                    await asyncio.gather(*pending)
                    pending.clear()
                if progress and sent % progress_every == 0:
                    progress(f"published {sent} of {len(records)} records")
            await asyncio.gather(*pending)
        finally:
            await spread.stop()
    finally:
        await keyed.stop()
    return len(records)


__all__ = ["Exported", "clusters_in_log", "read_cluster_log", "read_known_cluster_log", "publish_log"]
